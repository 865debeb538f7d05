// Gated DeltaNet: config keys, tensors, schema table, inspect.
// The math is docs/attention-math.md §18; the runtime is runtime/mixers/gated_deltanet.cc.
#include "converter/mixers/gated_deltanet.h"

#include <string>
#include <vector>

#include "converter/json_util.h"
#include "converter/mixers/mixer_converter.h"
#include "converter/mixers/short_conv.h"

namespace recur::impl::converter {
namespace {

class GatedDeltaNetConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<GatedDeltaNetParams>();
    RECUR_RETURN_IF_ERROR(c.OnlyKeys({"type", "heads", "v_heads", "head_k_dim", "head_v_dim",
                                      "conv_size", "gate", "norm_eps", "beta_scale"}));
    RECUR_RETURN_IF_ERROR(c.UInt("heads", 1, &p->heads));
    p->v_heads = p->heads;
    RECUR_RETURN_IF_ERROR(c.UInt("v_heads", 1, &p->v_heads, false));
    if (p->v_heads % p->heads != 0) {
      return c.Invalid("v_heads", "(" + std::to_string(p->v_heads) +
                                      ") must be a multiple of heads (" +
                                      std::to_string(p->heads) + ")");
    }
    RECUR_RETURN_IF_ERROR(c.UInt("head_k_dim", 1, &p->head_k_dim));
    RECUR_RETURN_IF_ERROR(c.UInt("head_v_dim", 1, &p->head_v_dim));
    RECUR_RETURN_IF_ERROR(c.UInt("conv_size", 0, &p->conv_size, false));
    if (p->conv_size > 64) return c.Invalid("conv_size", "must be at most 64");
    RECUR_RETURN_IF_ERROR(c.reader.Bool(c.object, "gate", c.where, &p->gate, false));
    RECUR_RETURN_IF_ERROR(c.PositiveFloat("norm_eps", &p->norm_eps, false));
    RECUR_RETURN_IF_ERROR(c.PositiveFloat("beta_scale", &p->beta_scale, false));
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const GatedDeltaNetParams&>(params);
    const int64_t q = p.key_width(), v = p.value_width(), hv = p.v_heads, d = out->d_model();
    out->Add("query.weight", {q, d});
    out->Add("key.weight", {q, d});
    out->Add("value.weight", {v, d});
    out->Add("decay.weight", {hv, d});
    out->Add("beta.weight", {hv, d});
    if (p.gate) out->Add("gate.weight", {v, d});
    out->Add("out.weight", {d, v});
    out->Add("a_log", {hv});
    out->Add("dt_bias", {hv});
    AddShortConvTensors(out, q, q, v, p.conv_size, p.head_v_dim);
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const GatedDeltaNetParams&>(params);
    auto q = w->Dense("query");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto decay = w->Dense("decay");
    auto beta = w->Dense("beta");
    flatbuffers::Offset<fb::Dense> gate;
    if (p.gate) gate = w->Dense("gate");
    auto o = w->Dense("out");
    fb::GatedDeltaNetBuilder b(w->fbb());
    b.add_heads(p.heads);
    b.add_v_heads(p.v_heads);
    b.add_head_k_dim(p.head_k_dim);
    b.add_head_v_dim(p.head_v_dim);
    b.add_query(q);
    b.add_key(k);
    b.add_value(v);
    b.add_decay(decay);
    b.add_beta(beta);
    if (p.gate) b.add_gate(gate);
    b.add_out(o);
    b.add_a_log(w->Ref("a_log"));
    b.add_dt_bias(w->Ref("dt_bias"));
    WriteShortConvFields(&b, w, p.conv_size);
    b.add_norm_eps(p.norm_eps);
    b.add_beta_scale(p.beta_scale);
    return b.Finish().Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* t = static_cast<const fb::GatedDeltaNet*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = t->heads();
    mixer["v_heads"] = t->v_heads();
    mixer["head_k_dim"] = t->head_k_dim();
    mixer["head_v_dim"] = t->head_v_dim();
    mixer["conv_size"] = t->conv_size();
    mixer["gate"] = t->gate() != nullptr;
    mixer["norm_eps"] = FloatForJson(t->norm_eps());
    mixer["beta_scale"] = FloatForJson(t->beta_scale());
    mixer["causal"] = true;
    for (const auto& [name, dense] :
         {std::pair{"query", t->query()}, {"key", t->key()}, {"value", t->value()},
          {"decay", t->decay()}, {"beta", t->beta()}, {"gate", t->gate()}, {"out", t->out()}}) {
      mixer[name] = refs.Dense(dense);
    }
    mixer["a_log"] = refs.Ref(t->a_log());
    mixer["dt_bias"] = refs.Ref(t->dt_bias());
    DescribeShortConvFields(t, refs, &mixer);
    // S (HV, dv, dk) and the convolutions' last conv_size − 1 inputs.
    const uint64_t q = uint64_t{t->heads()} * t->head_k_dim(),
                   v = uint64_t{t->v_heads()} * t->head_v_dim();
    const uint64_t carried = t->conv_size() == 0 ? 0 : (t->conv_size() - 1) * (2 * q + v);
    mixer["state_bytes"] = 4 * (v * t->head_k_dim() + carried);
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "v_heads", "head_k_dim", "head_v_dim", "conv_size"}) +
           (m["gate"].get<bool>() ? " gated" : "");
  }

  uint32_t FormatVersion(const MixerParams&) const override { return 5; }

  std::vector<std::string> QuantizableWeights() const override {
    return {"query", "key", "value", "gate", "out"};
  }
};

}  // namespace

const MixerConverter& GatedDeltaNetConverter() {
  static const GatedDeltaNetConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
