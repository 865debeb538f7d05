// Linformer: config keys, tensors, schema table, inspect.
// The runtime is runtime/mixers/linformer.cc.
#include "converter/mixers/linformer.h"

#include <string>

#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {


class LinformerConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<LinformerParams>();
    RECUR_RETURN_IF_ERROR(c.Heads(&p->heads, &p->dk, &p->dv));
    RECUR_RETURN_IF_ERROR(
        c.OnlyKeys({"type", "heads", "dk", "causal", "dv", "seq_len", "proj_dim", "sharing"}));
    RECUR_RETURN_IF_ERROR(c.UInt("seq_len", 1, &p->seq_len));
    RECUR_RETURN_IF_ERROR(c.UInt("proj_dim", 1, &p->proj_dim));
    static const char* const kSharing[] = {"none", "headwise", "kv", "layerwise"};
    std::size_t sharing = 0;
    RECUR_RETURN_IF_ERROR(c.Choice("sharing", kSharing, &sharing, false));
    p->sharing = static_cast<LinformerSharing>(sharing);
    RECUR_RETURN_IF_ERROR(c.Causal(&p->causal));
    if (p->causal) {
      return c.Invalid("causal", "must be false: linformer mixes the whole sequence "
                                 "and has no recurrent form");
    }
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const LinformerParams&>(params);
    out->AddAttentionProjections(int64_t{p.heads} * p.dk, int64_t{p.heads} * p.dv);
    // E and F: [k, n], or [heads, k, n] when each head has its own.
    std::vector<int64_t> shape = {p.proj_dim, p.seq_len};
    if (p.sharing == LinformerSharing::kNone) shape.insert(shape.begin(), p.heads);
    out->Add("E", shape);
    if (p.sharing == LinformerSharing::kNone || p.sharing == LinformerSharing::kHeadwise) {
      out->Add("F", shape);
    }
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const LinformerParams&>(params);
    auto q = w->Dense("query");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto o = w->Dense("out");
    return fb::CreateLinformer(w->fbb(), p.heads, p.dk, p.dv, p.seq_len, p.proj_dim, q, k, v, o,
                               w->Ref("E"), w->Ref("F"))
        .Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* lf = static_cast<const fb::Linformer*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = lf->heads();
    mixer["dk"] = lf->dk();
    mixer["dv"] = lf->dv();
    mixer["seq_len"] = lf->seq_len();
    mixer["proj_dim"] = lf->proj_dim();
    mixer["causal"] = false;
    mixer["query"] = refs.Dense(lf->query());
    mixer["key"] = refs.Dense(lf->key());
    mixer["value"] = refs.Dense(lf->value());
    mixer["out"] = refs.Dense(lf->out());
    mixer["state_bytes"] = 0;  // an encoder keeps no state
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "dk", "dv", "seq_len", "proj_dim"}) + InspectEncoderNote(m);
  }
};

}  // namespace

const MixerConverter& LinformerConverter() {
  static const LinformerConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
