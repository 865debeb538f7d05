// Reformer: config keys, tensors, schema table, inspect.
// The runtime is runtime/mixers/reformer.cc.
#include "converter/mixers/reformer.h"

#include <string>

#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

constexpr const char* kForms[] = {"paper", "transformers"};
constexpr uint32_t kMaxWindowChunks = 64;  // chunks_before + chunks_after + 1

class ReformerConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<ReformerParams>();
    RECUR_RETURN_IF_ERROR(c.Heads(&p->heads, &p->dk, &p->dv));
    RECUR_RETURN_IF_ERROR(
        c.OnlyKeys({"type", "heads", "dk", "causal", "dv", "n_buckets", "chunk", "rounds", "form",
                    "chunks_before", "chunks_after", "causal_mask", "pad_multiple", "pad_above"}));
    RECUR_RETURN_IF_ERROR(c.UInt("n_buckets", 2, &p->n_buckets));
    if (p->n_buckets % 2 != 0 || p->n_buckets > 65536) {
      return c.Invalid("n_buckets", "must be even and at most 65536");
    }
    RECUR_RETURN_IF_ERROR(c.UInt("chunk", 1, &p->chunk));
    if (p->chunk > 65536) return c.Invalid("chunk", "must be at most 65536");
    RECUR_RETURN_IF_ERROR(c.UInt("rounds", 1, &p->rounds));
    if (p->rounds > 64) return c.Invalid("rounds", "must be at most 64");
    std::size_t form = 0;
    RECUR_RETURN_IF_ERROR(c.Choice("form", kForms, &form, false));
    p->transformers = form == 1;
    if (!p->transformers) {
      for (const char* key :
           {"chunks_before", "chunks_after", "causal_mask", "pad_multiple", "pad_above"}) {
        if (c.object.contains(key)) {
          return c.Invalid(key, "applies only to \"form\": \"transformers\"");
        }
      }
    } else {
      RECUR_RETURN_IF_ERROR(c.UInt("chunks_before", 0, &p->chunks_before, false));
      RECUR_RETURN_IF_ERROR(c.UInt("chunks_after", 0, &p->chunks_after, false));
      if (uint64_t{p->chunks_before} + p->chunks_after + 1 > kMaxWindowChunks) {
        return c.Invalid("chunks_after",
                         "with chunks_before makes a window of more than 64 "
                         "chunks (chunks_before + chunks_after + 1)");
      }
      RECUR_RETURN_IF_ERROR(
          c.reader.Bool(c.object, "causal_mask", c.where, &p->causal_mask, false));
      p->pad_multiple = p->pad_above = p->chunk;
      RECUR_RETURN_IF_ERROR(c.UInt("pad_multiple", 1, &p->pad_multiple, false));
      if (p->pad_multiple % p->chunk != 0 || p->pad_multiple > 65536) {
        return c.Invalid("pad_multiple", "must be a multiple of chunk (" +
                                             std::to_string(p->chunk) + ") and at most 65536");
      }
      RECUR_RETURN_IF_ERROR(c.UInt("pad_above", 0, &p->pad_above, false));
      if (p->pad_above > p->chunk) {
        return c.Invalid("pad_above", "must be at most chunk (" + std::to_string(p->chunk) + ")");
      }
    }
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
    // Random rotations per round: [rounds, dk, n_buckets / 2]; transformers'
    // per head: [heads, dk, rounds, n_buckets / 2].
    if (p.transformers) {
      out->Add("rotations", {p.heads, p.dk, p.rounds, p.n_buckets / 2});
    } else {
      out->Add("rotations", {p.rounds, p.dk, p.n_buckets / 2});
    }
  }

  uint32_t FormatVersion(const MixerParams& params) const override {
    return static_cast<const ReformerParams&>(params).transformers ? 2 : 1;
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
    return fb::CreateReformer(
               w->fbb(), p.heads, p.dk, p.dv, p.n_buckets, p.chunk, p.rounds, q, v, o,
               w->Ref("rotations"),
               p.transformers ? fb::ReformerForm::Transformers : fb::ReformerForm::Paper,
               p.chunks_before, p.chunks_after, p.causal_mask, p.pad_multiple, p.pad_above)
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
    const bool transformers = rf->form() == fb::ReformerForm::Transformers;
    mixer["form"] = transformers                            ? "transformers"
                    : rf->form() == fb::ReformerForm::Paper ? "paper"
                                                            : "invalid";
    if (transformers) {
      mixer["chunks_before"] = rf->chunks_before();
      mixer["chunks_after"] = rf->chunks_after();
      mixer["causal_mask"] = rf->causal_mask();
      mixer["pad_multiple"] = rf->pad_multiple();
      mixer["pad_above"] = rf->pad_above();
    }
    mixer["causal"] = false;
    mixer["query"] = refs.Dense(rf->query());
    mixer["value"] = refs.Dense(rf->value());
    mixer["out"] = refs.Dense(rf->out());
    mixer["rotations"] = rf->rotations();
    mixer["state_bytes"] = 0;  // an encoder keeps no state
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    std::string text = InspectFields(m, {"heads", "dk", "dv", "n_buckets", "chunk", "rounds"});
    if (m.value("form", "") != "paper") {
      text += InspectFields(m, {"form"});
      if (m.contains("causal_mask")) {
        text += InspectFields(m, {"chunks_before", "chunks_after"}) +
                " causal_mask=" + (m["causal_mask"].get<bool>() ? "true" : "false") +
                InspectFields(m, {"pad_multiple", "pad_above"});
      }
    }
    return text + InspectEncoderNote(m);
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
