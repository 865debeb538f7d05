// Block-local attention (Hugging Face Reformer's LocalSelfAttention): config
// keys, tensors, schema table, inspect. The runtime is
// runtime/mixers/block_local.cc.
#include "converter/mixers/block_local.h"

#include <string>

#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

// The runtime's bounds (runtime/mixers/block_local.cc).
constexpr uint32_t kMaxChunk = 1u << 16;
constexpr uint32_t kMaxChunksAround = 256;
constexpr uint32_t kMaxPadMultiple = 1u << 24;

class BlockLocalConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<BlockLocalParams>();
    RECUR_RETURN_IF_ERROR(c.Heads(&p->heads, &p->dk, &p->dv));
    RECUR_RETURN_IF_ERROR(c.OnlyKeys({"type", "heads", "dk", "causal", "dv", "chunk",
                                      "chunks_before", "chunks_after", "pad_multiple",
                                      "pad_above"}));
    RECUR_RETURN_IF_ERROR(c.UInt("chunk", 1, &p->chunk));
    if (p->chunk > kMaxChunk) {
      return c.Invalid("chunk", "must be at most " + std::to_string(kMaxChunk));
    }
    RECUR_RETURN_IF_ERROR(c.UInt("chunks_before", 0, &p->chunks_before, false));
    RECUR_RETURN_IF_ERROR(c.UInt("chunks_after", 0, &p->chunks_after, false));
    for (const auto& [key, value] :
         {std::pair{"chunks_before", p->chunks_before}, {"chunks_after", p->chunks_after}}) {
      if (value > kMaxChunksAround) {
        return c.Invalid(key, "must be at most " + std::to_string(kMaxChunksAround));
      }
    }
    p->pad_multiple = p->chunk;
    p->pad_above = p->chunk;
    RECUR_RETURN_IF_ERROR(c.UInt("pad_multiple", 1, &p->pad_multiple, false));
    if (p->pad_multiple % p->chunk != 0 || p->pad_multiple > kMaxPadMultiple) {
      return c.Invalid("pad_multiple", "must be a multiple of chunk (" + std::to_string(p->chunk) +
                                           ") up to " + std::to_string(kMaxPadMultiple));
    }
    RECUR_RETURN_IF_ERROR(c.UInt("pad_above", 0, &p->pad_above, false));
    if (p->pad_above > p->chunk) {
      return c.Invalid("pad_above", "must be at most chunk (" + std::to_string(p->chunk) + ")");
    }
    RECUR_RETURN_IF_ERROR(c.Causal(&p->mask));
    p->causal = p->mask && p->chunks_after == 0 && p->chunks_before <= 1;
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const BlockLocalParams&>(params);
    out->AddAttentionProjections(int64_t{p.heads} * p.dk, int64_t{p.heads} * p.dv);
  }

  uint32_t FormatVersion(const MixerParams& /*params*/) const override { return 2; }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const BlockLocalParams&>(params);
    auto q = w->Dense("query");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto o = w->Dense("out");
    return fb::CreateBlockLocal(w->fbb(), p.heads, p.dk, p.dv, q, k, v, o, p.chunk,
                                p.chunks_before, p.chunks_after, p.mask, p.pad_multiple,
                                p.pad_above)
        .Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* bl = static_cast<const fb::BlockLocal*>(table);
    OrderedJson& mixer = *out;
    const bool step = bl->causal() && bl->chunks_after() == 0 && bl->chunks_before() <= 1;
    mixer["heads"] = bl->heads();
    mixer["dk"] = bl->dk();
    mixer["dv"] = bl->dv();
    mixer["chunk"] = bl->chunk();
    mixer["chunks_before"] = bl->chunks_before();
    mixer["chunks_after"] = bl->chunks_after();
    mixer["pad_multiple"] = bl->pad_multiple();
    mixer["pad_above"] = bl->pad_above();
    mixer["causal_mask"] = bl->causal();
    // Whether the mixer has the step form (an encoder otherwise).
    mixer["causal"] = step;
    mixer["query"] = refs.Dense(bl->query());
    mixer["key"] = refs.Dense(bl->key());
    mixer["value"] = refs.Dense(bl->value());
    mixer["out"] = refs.Dense(bl->out());
    // A ring of the last (chunks_before + 1)·chunk positions' K and V.
    const uint64_t ring = (uint64_t{bl->chunks_before()} + 1) * bl->chunk();
    mixer["state_bytes"] = step ? 4 * uint64_t{bl->heads()} * ring * (bl->dk() + bl->dv()) : 0;
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "dk", "dv", "chunk", "chunks_before", "chunks_after",
                             "pad_multiple", "pad_above"}) +
           (m["causal_mask"].get<bool>() && !m["causal"].get<bool>()
                ? " causal_mask (encoder: no step form with chunks after or > 1 before)"
                : InspectEncoderNote(m));
  }
};

}  // namespace

const MixerConverter& BlockLocalConverter() {
  static const BlockLocalConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
