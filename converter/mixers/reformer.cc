// Reformer: config keys, tensors, schema table, inspect.
// The runtime is runtime/mixers/reformer.cc.
#include "converter/mixers/reformer.h"

#include <string>

#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {


class ReformerConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<ReformerParams>();
    RECUR_RETURN_IF_ERROR(c.Heads(&p->heads, &p->dk, &p->dv));
    RECUR_RETURN_IF_ERROR(
        c.OnlyKeys({"type", "heads", "dk", "causal", "dv", "n_buckets", "chunk", "rounds"}));
    RECUR_RETURN_IF_ERROR(c.UInt("n_buckets", 2, &p->n_buckets));
    if (p->n_buckets % 2 != 0 || p->n_buckets > 65536) {
      return c.Invalid("n_buckets", "must be even and at most 65536");
    }
    RECUR_RETURN_IF_ERROR(c.UInt("chunk", 1, &p->chunk));
    if (p->chunk > 65536) return c.Invalid("chunk", "must be at most 65536");
    RECUR_RETURN_IF_ERROR(c.UInt("rounds", 1, &p->rounds));
    if (p->rounds > 64) return c.Invalid("rounds", "must be at most 64");
    RECUR_RETURN_IF_ERROR(c.Causal(&p->causal));
    if (p->causal) {
      return c.Invalid("causal", "must be false: reformer sorts the whole sequence "
                                 "by hash and has no recurrent form");
    }
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const ReformerParams&>(params);
    out->AddAttentionProjections(int64_t{p.heads} * p.dk, int64_t{p.heads} * p.dv,
                                 /*with_key=*/false);  // shared QK
    // Random rotations per round: [rounds, dk, n_buckets / 2].
    out->Add("rotations", {p.rounds, p.dk, p.n_buckets / 2});
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const ReformerParams&>(params);
    auto q = w->Dense("query");
    // An unreferenced Dense of two −1 references: the table has no key, but
    // converted files have always carried this one, so their bytes stay put.
    w->Dense("key");
    auto v = w->Dense("value");
    auto o = w->Dense("out");
    return fb::CreateReformer(w->fbb(), p.heads, p.dk, p.dv, p.n_buckets, p.chunk, p.rounds, q,
                              v, o, w->Ref("rotations"))
        .Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* rf = static_cast<const fb::Reformer*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = rf->heads();
    mixer["dk"] = rf->dk();
    mixer["dv"] = rf->dv();
    mixer["n_buckets"] = rf->n_buckets();
    mixer["chunk"] = rf->chunk();
    mixer["rounds"] = rf->rounds();
    mixer["causal"] = false;
    mixer["query"] = refs.Dense(rf->query());
    mixer["value"] = refs.Dense(rf->value());
    mixer["out"] = refs.Dense(rf->out());
    mixer["rotations"] = rf->rotations();
    mixer["state_bytes"] = 0;  // an encoder keeps no state
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "dk", "dv", "n_buckets", "chunk", "rounds"}) +
           InspectEncoderNote(m);
  }

  std::vector<std::string> QuantizableWeights() const override {
    return {"query", "value", "out"};
  }
};

}  // namespace

const MixerConverter& ReformerConverter() {
  static const ReformerConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
