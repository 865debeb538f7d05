// The linformer layout: `Linformer` and `LinformerLM` of the linformer
// library (PyPI `linformer`), with the constructor's keyword arguments as the
// config and the model's state_dict names (docs/layouts.md, "linformer").
//
//   {"layout": "linformer", "class": "LinformerLM", "num_tokens": 256, "dim": 64,
//    "seq_len": 512, "depth": 2, "k": 64, "heads": 4, "dim_head": null,
//    "one_kv_head": false, "share_kv": false, "reversible": false, "dropout": 0.0}
//
// The library's blocks are pre-norm (LayerNorm, eps 1e-5): x + attn(norm(x)),
// then x + ff(norm(x)), FeedForward = w2(gelu(w1(x))) with w1 [4·dim, dim];
// no final norm. Attention: q, k, v without bias, softmax(q K'ᵀ/√dim_head)
// V' per head with K' = proj_kᵀ K over the first N ≤ seq_len positions: the
// recur linformer mixer with E = proj_kᵀ, F = proj_vᵀ shared by the heads.
#include "converter/mixers/linformer.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/layouts/layout_converter.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

struct LinformerOptions : LayoutOptions {
  bool lm = false;  // LinformerLM: everything under "linformer."
  bool one_kv_head = false;
  bool share_kv = false;
  bool reversible = false;  // ReversibleSequence: net.blocks.<i>.f.net / .g.net
  uint32_t heads = 0;
  uint32_t dim_head = 0;
};

const char* const kLinformerClasses[] = {"Linformer", "LinformerLM"};

Status ParseLinformer(const KeyReader& r, const json& root, ModelDescription* d) {
  std::size_t cls = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(root, "class", "", kLinformerClasses, &cls));
  auto options = std::make_shared<LinformerOptions>();
  options->lm = cls == 1;
  RECUR_RETURN_IF_ERROR(
      r.OnlyKeys(root, "",
                 {"layout", "class", "notes", "input_description", "output_description",
                  "num_tokens", "dim", "seq_len", "depth", "k", "heads", "dim_head", "one_kv_head",
                  "share_kv", "reversible", "dropout"}));
  if (!options->lm && root.contains("num_tokens")) {
    return r.Invalid("num_tokens", "applies only to class LinformerLM");
  }
  uint32_t dim = 0, seq_len = 0, depth = 0, k = 256, heads = 8;
  RECUR_RETURN_IF_ERROR(r.UInt(root, "dim", "", 1, &dim));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "seq_len", "", 1, &seq_len));
  RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "depth", &depth));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "k", "", 1, &k, /*required=*/false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "heads", "", 1, &heads, /*required=*/false));
  if (dim % heads != 0) {
    return r.Invalid("heads",
                     "must divide dim (" + std::to_string(dim) + "), as the library asserts");
  }
  uint32_t dim_head = dim / heads;
  if (KeyReader::Given(root, "dim_head")) {
    RECUR_RETURN_IF_ERROR(r.UInt(root, "dim_head", "", 1, &dim_head));
  }
  RECUR_RETURN_IF_ERROR(r.Bool(root, "one_kv_head", "", &options->one_kv_head, false));
  RECUR_RETURN_IF_ERROR(r.Bool(root, "share_kv", "", &options->share_kv, false));
  RECUR_RETURN_IF_ERROR(r.Bool(root, "reversible", "", &options->reversible, false));
  double dropout = 0;  // training only: the converted model is the eval() forward
  RECUR_RETURN_IF_ERROR(r.NumberIn(root, "dropout", "", 0.0, 1.0, &dropout, false));
  options->heads = heads;
  options->dim_head = dim_head;

  d->d_model = dim;
  d->norm_placement = NormPlacement::kPre;
  d->layer_norm_eps = 1e-5f;
  d->input = InputDescription{};
  if (options->lm) {
    d->input.kind = InputKind::kTokens;
    RECUR_RETURN_IF_ERROR(r.UInt(root, "num_tokens", "", 1, &d->input.vocab_size));
    d->input.max_positions = seq_len;  // pos_emb: nn.Embedding(seq_len, dim)
    d->has_head = true;
    d->head.out = d->input.vocab_size;
    d->head.activation = HeadActivation::kNone;
  } else {
    d->input.kind = InputKind::kFeatures;
    d->input.feature_width = dim;
    d->has_head = false;
  }
  auto mixer = std::make_unique<LinformerParams>();
  mixer->heads = heads;
  mixer->dk = dim_head;
  mixer->dv = dim_head;
  mixer->seq_len = seq_len;
  mixer->proj_dim = k;
  mixer->sharing = options->share_kv ? LinformerSharing::kKeyValue : LinformerSharing::kHeadwise;
  BlockDescription block;
  block.mixer = MixerDescription(FindMixerType(fb::Mixer::Linformer), std::move(mixer));
  block.d_ff = 4 * dim;  // FeedForward(dim): mult 4, no GLU
  block.activation = Activation::kGelu;
  d->blocks.assign(depth, block);
  d->final_norm = false;
  d->reversible = options->reversible;  // two streams of x, summed at the end
  d->layout_options = options;
  return ParseMetadata(r, root, &d->metadata);
}

// blocks.<i>.<rest> in the library's names, under block i's wrappers `s`.
void MapBlockTensor(const LinformerOptions& o, const Sublayers& s, const std::string& rest,
                    ExpectedTensor* t) {
  const std::string& attn = s.attn;
  const std::string& ff = s.ff;
  if (rest.compare(0, 6, "norm1.") == 0) {
    t->source_name = attn + "norm." + rest.substr(6);
  } else if (rest.compare(0, 6, "norm2.") == 0) {
    t->source_name = ff + "norm." + rest.substr(6);
  } else if (rest.compare(0, 12, "ffn.linear1.") == 0) {
    t->source_name = ff + "fn.w1." + rest.substr(12);
  } else if (rest.compare(0, 12, "ffn.linear2.") == 0) {
    t->source_name = ff + "fn.w2." + rest.substr(12);
  } else if (rest == "mixer.query.weight") {
    t->source_name = attn + "fn.to_q.weight";
  } else if (rest == "mixer.key.weight" || rest == "mixer.value.weight") {
    const bool key = rest == "mixer.key.weight" || o.share_kv;  // share_kv: values are the keys
    t->source_name = attn + (key ? "fn.to_k.weight" : "fn.to_v.weight");
    if (o.one_kv_head) {  // one head of keys and values that every head reads
      t->transform = SourceTransform::kRows;
      t->source_shape = {o.dim_head, t->shape[1]};
      t->repeat = o.heads;
    }
  } else if (rest == "mixer.query.bias" || rest == "mixer.key.bias" || rest == "mixer.value.bias") {
    MakeZeros(t);  // nn.Linear(bias=False)
  } else if (rest.compare(0, 10, "mixer.out.") == 0) {
    t->source_name = attn + "fn.to_out." + rest.substr(10);
  } else if (rest == "mixer.E" || rest == "mixer.F") {  // proj_k, proj_v: [seq_len, k]
    t->source_name = attn + (rest == "mixer.E" ? "fn.proj_k" : "fn.proj_v");
    t->transform = SourceTransform::kTranspose;
    t->source_shape = {t->shape[1], t->shape[0]};
  }
}

class LinformerLayoutConverter final : public LayoutConverter {
 public:
  bool Recognizes(const json& root) const override {
    return ClassIsOneOf(root, kLinformerClasses);
  }

  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    return ParseLinformer(r, root, d);
  }

  void MapTensors(const ModelDescription& desc,
                  std::vector<ExpectedTensor>* tensors) const override {
    const auto& o = static_cast<const LinformerOptions&>(*desc.layout_options);
    const std::string net = o.lm ? "linformer.net." : "net.";
    for (ExpectedTensor& t : *tensors) {
      uint32_t block = 0;
      std::string rest;
      if (SplitBlockName(t.name, &block, &rest)) {
        MapBlockTensor(o, LucidrainsSublayers(net, block, o.reversible), rest, &t);
      } else if (t.name == "input.embedding") {
        t.source_name = "token_emb.weight";
      } else if (t.name == "input.positions") {
        t.source_name = "pos_emb.weight";
      } else if (t.name.compare(0, 5, "head.") == 0) {
        t.source_name = "to_logits." + t.name.substr(5);
      }
    }
  }
};

}  // namespace

const LayoutConverter& LinformerLayout() {
  static const LinformerLayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
