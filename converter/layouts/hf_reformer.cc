// The hf-reformer layout: a Hugging Face transformers `ReformerModel` or
// `ReformerModelWithLMHead`, with its config.json (as `save_pretrained` writes
// it; recognised by "model_type": "reformer") and its state_dict names
// (docs/layouts.md, "Hugging Face Reformer").
//
// Reversible blocks whose streams are concatenated at the end: per layer
// y1 = x1 + attn(LayerNorm(x2)), y2 = x2 + ffn(LayerNorm(y1)), then
// LayerNorm([x1 | x2]) over 2·hidden_size and, for the LM, a 2·hidden_size
// head. "lsh" layers are recur's reformer mixer in its transformers form
// (rotations drawn as torch.randn after torch.manual_seed(hash_seed), as the
// library draws them at every forward), "local" layers the block_local mixer;
// both pad sequences past the shortest chunk to the chunks' least common
// multiple, as ReformerModel does. Axial positions are the learned table the
// library builds from its two factors.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "converter/layouts/hf_config.h"
#include "converter/layouts/layout_converter.h"
#include "converter/mixers/block_local.h"
#include "converter/mixers/mixer_converter.h"
#include "converter/mixers/reformer.h"
#include "converter/torch_random.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

struct ReformerOptions : LayoutOptions {
  bool lm_head = false;  // ReformerModelWithLMHead: names under "reformer.", lm_head.*
  bool axial = true;
  uint32_t axial_rows = 64, axial_columns = 64;  // axial_pos_shape
  uint32_t axial_dims[2] = {64, 192};            // axial_pos_embds_dim
  uint32_t max_position_embeddings = 4096;
  uint64_t hash_seed = 0;
};

// A list of exactly two positive integers.
Status ReadPair(const KeyReader& r, const json& root, const char* key, uint32_t* first,
                uint32_t* second) {
  auto it = root.find(key);
  if (it == root.end()) return Status::Ok();
  if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number_unsigned() ||
      !(*it)[1].is_number_unsigned() || (*it)[0].get<uint64_t>() == 0 ||
      (*it)[1].get<uint64_t>() == 0 || (*it)[0].get<uint64_t>() > (1u << 20) ||
      (*it)[1].get<uint64_t>() > (1u << 20)) {
    return r.Invalid(key,
                     "must be a list of two positive integers (recur reads two-factor axial "
                     "positions, transformers' only eval form)");
  }
  *first = (*it)[0].get<uint32_t>();
  *second = (*it)[1].get<uint32_t>();
  return Status::Ok();
}

Status ParseReformer(const KeyReader& r, const json& root, ModelDescription* d) {
  // The keys that decide the model (the class's defaults apply to absent ones), then
  // recur's own; and the class's keys that change no output.
  RECUR_RETURN_IF_ERROR(
      CheckTransformersKeys(r, root,
                            {"layout",
                             "notes",
                             "input_description",
                             "output_description",
                             "architectures",
                             "attention_head_size",
                             "attn_layers",
                             "axial_pos_embds",
                             "axial_pos_embds_dim",
                             "axial_pos_shape",
                             "feed_forward_size",
                             "hash_seed",
                             "hidden_act",
                             "hidden_size",
                             "is_decoder",
                             "layer_norm_eps",
                             "local_attn_chunk_length",
                             "local_num_chunks_after",
                             "local_num_chunks_before",
                             "lsh_attn_chunk_length",
                             "lsh_num_chunks_after",
                             "lsh_num_chunks_before",
                             "max_position_embeddings",
                             "num_attention_heads",
                             "num_buckets",
                             "num_hashes",
                             "num_hidden_layers",
                             "pruned_heads",
                             "vocab_size"},
                            {"add_cross_attention", "axial_norm_std", "chunk_size_lm_head",
                             "classifier_dropout", "local_attention_probs_dropout_prob",
                             "lsh_attention_probs_dropout_prob", "pad_token_id", "use_cache"},
                            "ReformerConfig"));
  if (auto type = root.find("model_type"); type != root.end() && *type != "reformer") {
    return r.Invalid("model_type", "must be \"reformer\"");
  }
  auto o = std::make_shared<ReformerOptions>();
  bool decoder = false;
  RECUR_RETURN_IF_ERROR(r.Bool(root, "is_decoder", "", &decoder, false));
  if (auto a = root.find("architectures"); a != root.end() && !a->is_null()) {
    const bool model = a->is_array() && a->size() == 1 && (*a)[0] == "ReformerModel";
    o->lm_head = a->is_array() && a->size() == 1 && (*a)[0] == "ReformerModelWithLMHead";
    if (!model && !o->lm_head) {
      return r.Invalid("architectures",
                       "must be [\"ReformerModel\"] or [\"ReformerModelWithLMHead\"]: the other "
                       "task heads (masked LM, classification, question answering) have no "
                       "recur form");
    }
  }
  if (o->lm_head && !decoder) {
    return r.Invalid("is_decoder",
                     "must be true for ReformerModelWithLMHead (transformers requires it)");
  }
  if (auto p = root.find("pruned_heads"); p != root.end() && !(p->is_object() && p->empty())) {
    return r.Invalid("pruned_heads", "must be empty: pruned attention heads are not supported");
  }

  // attn_layers: the blocks, one "lsh" or "local" each.
  std::vector<bool> lsh = {false, true, false, true, false, true};
  if (auto a = root.find("attn_layers"); a != root.end()) {
    if (!a->is_array() || a->empty() || a->size() > kMaxLayers) {
      return r.Invalid("attn_layers", "must be a non-empty list of \"lsh\" and \"local\"");
    }
    lsh.clear();
    for (const json& t : *a) {
      if (t != "lsh" && t != "local") {
        return r.Invalid("attn_layers", "entries must be \"lsh\" or \"local\"");
      }
      lsh.push_back(t == "lsh");
    }
  }
  if (auto n = root.find("num_hidden_layers"); n != root.end()) {
    uint32_t layers = 0;
    RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "num_hidden_layers", &layers));
    if (layers != lsh.size()) {
      return r.Invalid("num_hidden_layers",
                       "must equal the length of attn_layers (" + std::to_string(lsh.size()) + ")");
    }
  }
  const bool any_lsh = std::count(lsh.begin(), lsh.end(), true) > 0;
  const bool any_local = std::count(lsh.begin(), lsh.end(), false) > 0;

  uint32_t hidden = 256, heads = 12, head_size = 64, ff = 512, vocab = 320;
  uint32_t lsh_chunk = 64, lsh_before = 1, lsh_after = 0, local_chunk = 64, local_before = 1,
           local_after = 0, hashes = 1, buckets = 0;
  RECUR_RETURN_IF_ERROR(r.UInt(root, "hidden_size", "", 1, &hidden, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "num_attention_heads", "", 1, &heads, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "attention_head_size", "", 1, &head_size, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "feed_forward_size", "", 1, &ff, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "vocab_size", "", 1, &vocab, false));
  RECUR_RETURN_IF_ERROR(
      r.UInt(root, "max_position_embeddings", "", 1, &o->max_position_embeddings, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "lsh_attn_chunk_length", "", 1, &lsh_chunk, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "lsh_num_chunks_before", "", 0, &lsh_before, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "lsh_num_chunks_after", "", 0, &lsh_after, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "local_attn_chunk_length", "", 1, &local_chunk, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "local_num_chunks_before", "", 0, &local_before, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "local_num_chunks_after", "", 0, &local_after, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "num_hashes", "", 1, &hashes, false));
  d->layer_norm_eps = 1e-12f;
  if (root.contains("layer_norm_eps")) {
    RECUR_RETURN_IF_ERROR(r.PositiveFloat(root, "layer_norm_eps", "", &d->layer_norm_eps));
  }
  static const char* const kActivations[] = {"relu", "gelu"};
  std::size_t act = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(root, "hidden_act", "", kActivations, &act, false));
  if (any_lsh) {
    auto b = root.find("num_buckets");
    if (b == root.end() || b->is_null()) {
      return r.Invalid("num_buckets",
                       "must be set for LSH layers: transformers picks it from the first "
                       "sequence's length when it is null, so the model depends on its input");
    }
    if (!b->is_number_unsigned()) {
      return r.Invalid("num_buckets",
                       "must be an even integer (a list of factors, factorised hashing, is not "
                       "supported)");
    }
    RECUR_RETURN_IF_ERROR(r.UInt(root, "num_buckets", "", 2, &buckets));
    if (buckets % 2 != 0) return r.Invalid("num_buckets", "must be even");
    auto s = root.find("hash_seed");
    if (s == root.end() || s->is_null()) {
      return r.Invalid("hash_seed",
                       "must be set for LSH layers: without it transformers draws new random "
                       "rotations at every forward, so its outputs are not a function of the "
                       "weights");
    }
    if (!s->is_number_unsigned()) {
      return r.Invalid("hash_seed", "must be a non-negative integer");
    }
    o->hash_seed = s->get<uint64_t>();
  }
  RECUR_RETURN_IF_ERROR(r.Bool(root, "axial_pos_embds", "", &o->axial, false));
  if (o->axial) {
    RECUR_RETURN_IF_ERROR(ReadPair(r, root, "axial_pos_shape", &o->axial_rows, &o->axial_columns));
    RECUR_RETURN_IF_ERROR(
        ReadPair(r, root, "axial_pos_embds_dim", &o->axial_dims[0], &o->axial_dims[1]));
    if (o->axial_dims[0] + o->axial_dims[1] != hidden) {
      return r.Invalid("axial_pos_embds_dim", "must sum to hidden_size (" + std::to_string(hidden) +
                                                  "), as transformers requires");
    }
  }

  // ReformerModel pads a sequence longer than the shortest chunk to a
  // multiple of the chunks' least common multiple.
  uint32_t pad_multiple = 0, pad_above = 0;
  if (any_lsh && any_local) {
    pad_multiple = std::lcm(lsh_chunk, local_chunk);
    pad_above = std::min(lsh_chunk, local_chunk);
  } else {
    pad_multiple = pad_above = any_lsh ? lsh_chunk : local_chunk;
  }
  const uint32_t table = o->axial ? o->axial_rows * o->axial_columns : o->max_position_embeddings;

  d->d_model = hidden;
  d->norm_placement = NormPlacement::kPre;
  d->reversible = true;
  d->concat_streams = true;
  d->input = InputDescription{};
  d->input.kind = InputKind::kTokens;
  d->input.vocab_size = vocab;
  d->input.max_positions = std::min(table, o->max_position_embeddings);
  d->blocks.resize(lsh.size());
  for (std::size_t i = 0; i < lsh.size(); ++i) {
    if (lsh[i]) {
      auto m = std::make_unique<ReformerParams>();
      m->heads = heads;
      m->dk = m->dv = head_size;
      m->n_buckets = buckets;
      m->chunk = lsh_chunk;
      m->rounds = hashes;
      m->transformers = true;
      m->chunks_before = lsh_before;
      m->chunks_after = lsh_after;
      m->causal_mask = decoder;
      m->pad_multiple = pad_multiple;
      m->pad_above = pad_above;
      d->blocks[i].mixer = MixerDescription(FindMixerType(fb::Mixer::Reformer), std::move(m));
    } else {
      auto m = std::make_unique<BlockLocalParams>();
      m->heads = heads;
      m->dk = m->dv = head_size;
      m->chunk = local_chunk;
      m->chunks_before = local_before;
      m->chunks_after = local_after;
      m->mask = decoder;
      // The step form exists for a causal mask with no chunk after and at most one before.
      m->causal = decoder && local_after == 0 && local_before <= 1;
      m->pad_multiple = pad_multiple;
      m->pad_above = pad_above;
      d->blocks[i].mixer = MixerDescription(FindMixerType(fb::Mixer::BlockLocal), std::move(m));
    }
    d->blocks[i].d_ff = ff;
    d->blocks[i].activation = act == 0 ? Activation::kRelu : Activation::kGelu;
  }
  d->final_norm = true;
  d->has_head = o->lm_head;
  if (o->lm_head) {
    d->head.out = vocab;
    d->head.activation = HeadActivation::kNone;
  }
  d->layout_options = o;
  return ParseMetadata(r, root, &d->metadata);
}

// blocks.<i>.<rest> in transformers' names (`layer`: "<net>encoder.layers.<i>.").
std::string ReformerSourceName(const std::string& layer, const std::string& rest) {
  return RenamedSource(layer, rest,
                       {{"norm1.", "attention.layer_norm."},
                        {"norm2.", "feed_forward.layer_norm."},
                        {"ffn.linear1.", "feed_forward.dense.dense."},
                        {"ffn.linear2.", "feed_forward.output.dense."},
                        {"mixer.out.", "attention.output.dense."},
                        {"mixer.", "attention.self_attention."}});
}

class HfReformerLayoutConverter final : public LayoutConverter {
 public:
  bool Recognizes(const json& root) const override {
    auto type = root.find("model_type");
    return type != root.end() && *type == "reformer";
  }

  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    return ParseReformer(r, root, d);
  }

  void MapTensors(const ModelDescription& desc,
                  std::vector<ExpectedTensor>* tensors) const override {
    const auto& o = static_cast<const ReformerOptions&>(*desc.layout_options);
    const std::string net = o.lm_head ? "reformer." : "";
    for (ExpectedTensor& t : *tensors) {
      uint32_t block = 0;
      std::string rest;
      if (SplitBlockName(t.name, &block, &rest)) {
        const bool bias = rest.size() > 5 && rest.compare(rest.size() - 5, 5, ".bias") == 0;
        if (rest.compare(0, 6, "mixer.") == 0 && bias) {
          MakeZeros(&t);  // transformers' attention projections have no bias
        } else if (rest == "mixer.rotations") {
          // torch.manual_seed(hash_seed); torch.randn(heads, dk, rounds, n_buckets/2).
          t.source_name.clear();
          t.transform = SourceTransform::kComputed;
          std::size_t count = 1;
          for (int64_t s : t.shape) count *= static_cast<std::size_t>(s);
          const uint64_t seed = o.hash_seed;
          t.compute = [seed, count](const std::vector<std::vector<float>>&) {
            return TorchRandnFloat(seed, count);
          };
        } else if (rest == "mixer.query.weight" && IsLsh(desc, block)) {
          t.source_name = net + "encoder.layers." + std::to_string(block) +
                          ".attention.self_attention.query_key.weight";
        } else {
          t.source_name =
              ReformerSourceName(net + "encoder.layers." + std::to_string(block) + ".", rest);
        }
      } else if (t.name == "input.embedding") {
        t.source_name = net + "embeddings.word_embeddings.weight";
      } else if (t.name == "input.positions") {
        if (!o.axial) {
          t.source_name = net + "embeddings.position_embeddings.embedding.weight";
          continue;
        }
        // Row p = i·columns + j: [weights.0[i] | weights.1[j]] (AxialPositionEmbeddings).
        t.source_name.clear();
        t.transform = SourceTransform::kComputed;
        const std::string w = net + "embeddings.position_embeddings.weights.";
        const int64_t rows = o.axial_rows, cols = o.axial_columns, d0 = o.axial_dims[0],
                      d1 = o.axial_dims[1], n = t.shape[0];
        t.inputs = {{w + "0", {rows, 1, d0}}, {w + "1", {1, cols, d1}}};
        t.compute = [n, cols, d0, d1](const std::vector<std::vector<float>>& in) {
          std::vector<float> out(static_cast<std::size_t>(n * (d0 + d1)));
          for (int64_t p = 0; p < n; ++p) {
            float* row = out.data() + p * (d0 + d1);
            std::copy_n(in[0].data() + (p / cols) * d0, d0, row);
            std::copy_n(in[1].data() + (p % cols) * d1, d1, row + d0);
          }
          return out;
        };
      } else if (t.name.compare(0, 11, "final_norm.") == 0) {
        t.source_name = net + "encoder.layer_norm." + t.name.substr(11);
      } else if (t.name == "head.weight") {
        t.source_name = "lm_head.decoder.weight";
      } else if (t.name == "head.bias") {
        t.source_name = "lm_head.bias";
      }
    }
    // The same tensor under the decoder's name (tied to lm_head.bias).
    if (o.lm_head) {
      tensors->push_back(IgnoredSource("lm_head.decoder.bias", {desc.head.out}));
    }
  }

 private:
  static bool IsLsh(const ModelDescription& desc, uint32_t block) {
    return desc.blocks[block].mixer.type() == FindMixerType(fb::Mixer::Reformer);
  }
};

}  // namespace

const LayoutConverter& HfReformerLayout() {
  static const HfReformerLayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
