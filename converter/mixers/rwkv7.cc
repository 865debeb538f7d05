// RWKV-7's time mix: config keys, tensors, schema table, inspect.
// The math is docs/attention-math.md §16; the runtime is runtime/mixers/rwkv7.cc.
#include "converter/mixers/rwkv7.h"

#include <string>
#include <vector>

#include "converter/json_util.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

// The six token-mix rows of recur.fbs Rwkv7.token_mix, in order.
constexpr int64_t kMixes = 6;

class Rwkv7ConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<Rwkv7Params>();
    RECUR_RETURN_IF_ERROR(c.OnlyKeys({"type", "heads", "head_size", "decay_rank", "rate_rank",
                                      "value_rank", "gate_rank", "group_norm_eps", "decay_scale"}));
    RECUR_RETURN_IF_ERROR(c.UInt("heads", 1, &p->heads));
    RECUR_RETURN_IF_ERROR(c.UInt("head_size", 1, &p->head_size));
    RECUR_RETURN_IF_ERROR(c.UInt("decay_rank", 1, &p->decay_rank));
    RECUR_RETURN_IF_ERROR(c.UInt("rate_rank", 1, &p->rate_rank));
    RECUR_RETURN_IF_ERROR(c.UInt("value_rank", 1, &p->value_rank));
    RECUR_RETURN_IF_ERROR(c.UInt("gate_rank", 1, &p->gate_rank));
    RECUR_RETURN_IF_ERROR(c.PositiveFloat("group_norm_eps", &p->group_norm_eps, false));
    RECUR_RETURN_IF_ERROR(c.PositiveFloat("decay_scale", &p->decay_scale, false));
    *out = std::move(p);
    return Status::Ok();
  }

  void Place(MixerParams* params, bool first) const override {
    // The first RWKV-7 block's v is the v₀ the later ones mix in.
    if (first) static_cast<Rwkv7Params*>(params)->value_rank = 0;
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const Rwkv7Params&>(params);
    const int64_t a = p.width(), d = out->d_model();
    out->Add("token_mix", {kMixes, d});
    for (const char* name : {"receptance", "key", "value"})
      out->Add(std::string(name) + ".weight", {a, d});
    out->Add("out.weight", {d, a});
    auto low_rank = [&](const std::string& name, int64_t rank, bool bias) {
      out->Add(name + "_down.weight", {rank, d});
      out->Add(name + "_up.weight", {a, rank});
      if (bias) out->Add(name + "_up.bias", {a});
    };
    low_rank("decay", p.decay_rank, true);
    low_rank("rate", p.rate_rank, true);
    if (p.value_rank != 0) low_rank("value", p.value_rank, true);
    low_rank("gate", p.gate_rank, false);
    for (const char* name :
         {"key_norm", "key_rate", "bonus", "group_norm.weight", "group_norm.bias"}) {
      out->Add(name, {a});
    }
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const Rwkv7Params&>(params);
    auto r = w->Dense("receptance");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto o = w->Dense("out");
    auto decay_down = w->Dense("decay_down");
    auto decay_up = w->Dense("decay_up");
    auto rate_down = w->Dense("rate_down");
    auto rate_up = w->Dense("rate_up");
    auto gate_down = w->Dense("gate_down");
    auto gate_up = w->Dense("gate_up");
    flatbuffers::Offset<fb::Dense> value_down, value_up;
    if (p.value_rank != 0) {
      value_down = w->Dense("value_down");
      value_up = w->Dense("value_up");
    }
    fb::Rwkv7Builder b(w->fbb());
    b.add_heads(p.heads);
    b.add_head_size(p.head_size);
    b.add_token_mix(w->Ref("token_mix"));
    b.add_receptance(r);
    b.add_key(k);
    b.add_value(v);
    b.add_out(o);
    b.add_decay_down(decay_down);
    b.add_decay_up(decay_up);
    b.add_rate_down(rate_down);
    b.add_rate_up(rate_up);
    b.add_gate_down(gate_down);
    b.add_gate_up(gate_up);
    if (p.value_rank != 0) {
      b.add_value_down(value_down);
      b.add_value_up(value_up);
    }
    b.add_key_norm(w->Ref("key_norm"));
    b.add_key_rate(w->Ref("key_rate"));
    b.add_bonus(w->Ref("bonus"));
    b.add_group_norm_weight(w->Ref("group_norm.weight"));
    b.add_group_norm_bias(w->Ref("group_norm.bias"));
    b.add_group_norm_eps(p.group_norm_eps);
    b.add_decay_scale(p.decay_scale);
    return b.Finish().Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* t = static_cast<const fb::Rwkv7*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = t->heads();
    mixer["head_size"] = t->head_size();
    mixer["value_residual"] = t->value_down() != nullptr;
    mixer["group_norm_eps"] = FloatForJson(t->group_norm_eps());
    mixer["decay_scale"] = FloatForJson(t->decay_scale());
    mixer["causal"] = true;
    mixer["token_mix"] = refs.Ref(t->token_mix());
    mixer["receptance"] = refs.Dense(t->receptance());
    mixer["key"] = refs.Dense(t->key());
    mixer["value"] = refs.Dense(t->value());
    mixer["out"] = refs.Dense(t->out());
    for (const auto& [name, dense] : {std::pair{"decay_down", t->decay_down()},
                                      {"decay_up", t->decay_up()},
                                      {"rate_down", t->rate_down()},
                                      {"rate_up", t->rate_up()},
                                      {"gate_down", t->gate_down()},
                                      {"gate_up", t->gate_up()},
                                      {"value_down", t->value_down()},
                                      {"value_up", t->value_up()}}) {
      mixer[name] = refs.Dense(dense);
    }
    mixer["key_norm"] = refs.Ref(t->key_norm());
    mixer["key_rate"] = refs.Ref(t->key_rate());
    mixer["bonus"] = refs.Ref(t->bonus());
    mixer["group_norm_weight"] = refs.Ref(t->group_norm_weight());
    mixer["group_norm_bias"] = refs.Ref(t->group_norm_bias());
    // S (H, N, N) and x₋₁ (C); the FFN's token mix is the block's.
    mixer["state_bytes"] =
        4 * (uint64_t{refs.d_model()} + uint64_t{t->heads()} * t->head_size() * t->head_size());
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "head_size"}) +
           (m["value_residual"].get<bool>() ? " value_residual" : " (provides v0)");
  }

  uint32_t FormatVersion(const MixerParams&) const override { return 4; }

  std::vector<std::string> QuantizableWeights() const override {
    return {"receptance", "key", "value", "out"};
  }
  std::vector<std::string> SourceTypedWeights() const override {
    return {"decay_down", "decay_up", "rate_down", "rate_up",
            "value_down", "value_up", "gate_down", "gate_up"};
  }
};

}  // namespace

const MixerConverter& Rwkv7Converter() {
  static const Rwkv7ConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
