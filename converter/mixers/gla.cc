// Gated linear attention: config keys, tensors, schema table, inspect.
// The math is docs/attention-math.md §19; the runtime is runtime/mixers/gla.cc.
#include "converter/mixers/gla.h"

#include <cmath>
#include <string>
#include <vector>

#include "converter/json_util.h"
#include "converter/mixers/mixer_converter.h"
#include "converter/mixers/short_conv.h"

namespace recur::impl::converter {
namespace {

class GlaConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<GlaParams>();
    RECUR_RETURN_IF_ERROR(c.OnlyKeys({"type", "heads", "kv_heads", "head_k_dim", "head_v_dim",
                                      "gate_rank", "conv_size", "gate", "norm_eps",
                                      "gate_logit_normalizer", "clamp_min"}));
    RECUR_RETURN_IF_ERROR(c.UInt("heads", 1, &p->heads));
    p->kv_heads = p->heads;
    RECUR_RETURN_IF_ERROR(c.UInt("kv_heads", 1, &p->kv_heads, false));
    if (p->heads % p->kv_heads != 0) {
      return c.Invalid("kv_heads", "(" + std::to_string(p->kv_heads) + ") must divide heads (" +
                                       std::to_string(p->heads) + ")");
    }
    RECUR_RETURN_IF_ERROR(c.UInt("head_k_dim", 1, &p->head_k_dim));
    RECUR_RETURN_IF_ERROR(c.UInt("head_v_dim", 1, &p->head_v_dim));
    RECUR_RETURN_IF_ERROR(c.UInt("gate_rank", 1, &p->gate_rank, false));
    RECUR_RETURN_IF_ERROR(c.UInt("conv_size", 0, &p->conv_size, false));
    if (p->conv_size > 64) return c.Invalid("conv_size", "must be at most 64");
    RECUR_RETURN_IF_ERROR(c.reader.Bool(c.object, "gate", c.where, &p->gate, false));
    RECUR_RETURN_IF_ERROR(c.PositiveFloat("norm_eps", &p->norm_eps, false));
    RECUR_RETURN_IF_ERROR(
        c.PositiveFloat("gate_logit_normalizer", &p->gate_logit_normalizer, false));
    RECUR_RETURN_IF_ERROR(c.reader.FiniteFloat(c.object, "clamp_min", c.where, &p->clamp_min,
                                               false));
    if (p->clamp_min > 0.0f) return c.Invalid("clamp_min", "must be at most 0 (a log decay)");
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const GlaParams&>(params);
    const int64_t q = p.query_width(), k = p.key_width(), v = p.value_width(),
                  o = p.out_width(), d = out->d_model();
    out->Add("query.weight", {q, d});
    out->Add("key.weight", {k, d});
    out->Add("value.weight", {v, d});
    out->Add("gate_down.weight", {p.gate_rank, d});
    out->Add("gate_up.weight", {k, p.gate_rank});
    out->Add("gate_up.bias", {k});
    if (p.gate) out->Add("gate.weight", {o, d});
    out->Add("out.weight", {d, o});
    AddShortConvTensors(out, q, k, v, p.conv_size, p.head_v_dim);
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const GlaParams&>(params);
    auto q = w->Dense("query");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto gate_down = w->Dense("gate_down");
    auto gate_up = w->Dense("gate_up");
    flatbuffers::Offset<fb::Dense> gate;
    if (p.gate) gate = w->Dense("gate");
    auto o = w->Dense("out");
    fb::GlaBuilder b(w->fbb());
    b.add_heads(p.heads);
    b.add_kv_heads(p.kv_heads);
    b.add_head_k_dim(p.head_k_dim);
    b.add_head_v_dim(p.head_v_dim);
    b.add_query(q);
    b.add_key(k);
    b.add_value(v);
    b.add_gate_down(gate_down);
    b.add_gate_up(gate_up);
    if (p.gate) b.add_gate(gate);
    b.add_out(o);
    WriteShortConvFields(&b, w, p.conv_size);
    b.add_norm_eps(p.norm_eps);
    b.add_gate_logit_normalizer(p.gate_logit_normalizer);
    b.add_clamp_min(p.clamp_min);
    return b.Finish().Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* t = static_cast<const fb::Gla*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = t->heads();
    mixer["kv_heads"] = t->kv_heads();
    mixer["head_k_dim"] = t->head_k_dim();
    mixer["head_v_dim"] = t->head_v_dim();
    mixer["conv_size"] = t->conv_size();
    mixer["gate"] = t->gate() != nullptr;
    mixer["norm_eps"] = FloatForJson(t->norm_eps());
    mixer["gate_logit_normalizer"] = FloatForJson(t->gate_logit_normalizer());
    if (std::isfinite(t->clamp_min())) mixer["clamp_min"] = FloatForJson(t->clamp_min());
    mixer["causal"] = true;
    for (const auto& [name, dense] :
         {std::pair{"query", t->query()}, {"key", t->key()}, {"value", t->value()},
          {"gate_down", t->gate_down()}, {"gate_up", t->gate_up()}, {"gate", t->gate()},
          {"out", t->out()}}) {
      mixer[name] = refs.Dense(dense);
    }
    DescribeShortConvFields(t, refs, &mixer);
    // S (H, dv, dk) and the convolutions' last conv_size − 1 inputs.
    const uint64_t dk = t->head_k_dim(), dv = t->head_v_dim();
    const uint64_t carried = t->conv_size() == 0 ? 0
                                                 : (t->conv_size() - 1) *
                                                       (uint64_t{t->heads()} * dk +
                                                        uint64_t{t->kv_heads()} * (dk + dv));
    mixer["state_bytes"] = 4 * (uint64_t{t->heads()} * dv * dk + carried);
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "kv_heads", "head_k_dim", "head_v_dim", "conv_size"}) +
           (m["gate"].get<bool>() ? " gated" : "");
  }

  uint32_t FormatVersion(const MixerParams&) const override { return 5; }

  std::vector<std::string> QuantizableWeights() const override {
    return {"query", "key", "value", "gate", "out"};
  }
  std::vector<std::string> SourceTypedWeights() const override {
    return {"gate_down", "gate_up"};
  }
};

}  // namespace

const MixerConverter& GlaConverter() {
  static const GlaConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
