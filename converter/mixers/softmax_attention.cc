// Softmax attention: config keys, tensors, schema table, inspect.
// The runtime is runtime/mixers/softmax_attention.cc.
#include "converter/mixers/softmax_attention.h"

#include <string>

#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {


class SoftmaxAttentionConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<SoftmaxAttentionParams>();
    RECUR_RETURN_IF_ERROR(c.Heads(&p->heads, &p->dk, &p->dv));
    RECUR_RETURN_IF_ERROR(c.OnlyKeys({"type", "heads", "dk", "causal", "dv", "rotary"}));
    RECUR_RETURN_IF_ERROR(c.Causal(&p->causal));
    RECUR_RETURN_IF_ERROR(c.Rotary(p->dk, "dk", &p->rotary));
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const SoftmaxAttentionParams&>(params);
    out->AddAttentionProjections(int64_t{p.heads} * p.dk, int64_t{p.heads} * p.dv);
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const SoftmaxAttentionParams&>(params);
    auto q = w->Dense("query");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto o = w->Dense("out");
    auto rotary = w->Rotary(p.rotary);
    return fb::CreateSoftmaxAttention(w->fbb(), p.heads, p.dk, p.dv, q, k, v, o, p.causal, rotary)
        .Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* sa = static_cast<const fb::SoftmaxAttention*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = sa->heads();
    mixer["dk"] = sa->dk();
    mixer["dv"] = sa->dv();
    mixer["causal"] = sa->causal();
    DescribeRotary(sa->rotary(), refs, &mixer);
    mixer["query"] = refs.Dense(sa->query());
    mixer["key"] = refs.Dense(sa->key());
    mixer["value"] = refs.Dense(sa->value());
    mixer["out"] = refs.Dense(sa->out());
    // The KV cache: K and V of every position so far, bounded by a session's max_context.
    mixer["state_bytes"] = 0;
    mixer["state_bytes_per_position"] =
        sa->causal() ? 4 * uint64_t{sa->heads()} * (sa->dk() + sa->dv()) : 0;
    mixer["state_grows_with_length"] = sa->causal();
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "dk", "dv"}) + InspectRotary(m) + InspectEncoderNote(m);
  }
};

}  // namespace

const MixerConverter& SoftmaxAttentionConverter() {
  static const SoftmaxAttentionConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
