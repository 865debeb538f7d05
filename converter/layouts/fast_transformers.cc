// The fast-transformers layout: a TransformerEncoder or RecurrentEncoder of
// the library, as its builders make it, with the builder's keyword arguments
// as the config and the model's state_dict names (models/configs/README.md,
// "fast-transformers layout").
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "converter/layouts/layout_converter.h"
#include "converter/mixers/aft.h"
#include "converter/mixers/linear_attention.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

// The builder's keyword arguments, mapped onto a ModelDescription:
//   d_model = n_heads·value_dimensions, dk = query_dimensions,
//   dv = value_dimensions, post-norm, LayerNorm eps 1e-5, dense feature input
//   of width d_model without projection, elu+1 linear attention with eps
//   1e-6, FFN linear1/linear2 with `activation` (builder default "relu"),
//   final norm = final_normalization (default true), no head.
// The dimensions are required: n_heads and query_dimensions cannot be told
// apart from the weight shapes, so builder defaults are not guessed.
Status ParseBuilderArguments(const KeyReader& r, const json& root, ModelDescription* d) {
  uint32_t n_layers = 0, n_heads = 0, dq = 0, dv = 0, d_ff = 0;
  RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "n_layers", &n_layers));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "n_heads", "", 1, &n_heads));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "query_dimensions", "", 1, &dq));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "value_dimensions", "", 1, &dv));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "feed_forward_dimensions", "", 1, &d_ff));
  RECUR_RETURN_IF_ERROR(
      r.OnlyKeys(root, "",
                 {"layout", "notes", "input_description", "output_description", "n_layers",
                  "n_heads", "query_dimensions", "value_dimensions", "feed_forward_dimensions",
                  "activation", "final_normalization", "attention_type", "max_sequence_length",
                  "aft_parameterization", "feature_map"}));
  static const char* const kActivations[] = {"relu", "gelu"};
  std::size_t act = 0;  // builder default: relu
  RECUR_RETURN_IF_ERROR(r.Choice(root, "activation", "", kActivations, &act, /*required=*/false));
  bool final_norm = true;
  RECUR_RETURN_IF_ERROR(r.Bool(root, "final_normalization", "", &final_norm, /*required=*/false));
  static const char* const kAttention[] = {"linear", "causal-linear", "aft-full"};
  std::size_t attention = 1;  // default: causal-linear
  RECUR_RETURN_IF_ERROR(
      r.Choice(root, "attention_type", "", kAttention, &attention, /*required=*/false));
  const bool aft_full = attention == 2;
  if (!aft_full) {
    for (const char* key : {"max_sequence_length", "aft_parameterization"}) {
      if (root.contains(key)) return r.Invalid(key, "applies only to attention_type \"aft-full\"");
    }
  }

  const uint64_t d_model = static_cast<uint64_t>(n_heads) * dv;
  if (d_model > std::numeric_limits<uint32_t>::max())
    return r.Error("n_heads·value_dimensions = " + std::to_string(d_model) + " is too large");

  d->d_model = static_cast<uint32_t>(d_model);
  d->norm_placement = NormPlacement::kPost;
  d->layer_norm_eps = 1e-5f;
  d->input = InputDescription{};
  d->input.kind = InputKind::kFeatures;
  d->input.feature_width = d->d_model;
  d->input.projection = false;
  d->input.max_positions = 0;
  LinearAttentionParams la;
  la.heads = n_heads;
  la.dk = dq;
  la.dv = dv;
  la.feature_map = FeatureMap::kEluPlusOne;
  // "feature_map": {"type": "favor", "n_dims": m, "softmax_temp": t, "stabilize": false}
  // (absent: elu+1). The library's Favor; its stabilize option subtracts a
  // sequence-wide max, which has no recurrent form.
  if (auto fm = root.find("feature_map"); fm != root.end()) {
    if (!fm->is_object()) return r.Invalid("feature_map", "must be a JSON object");
    static const char* const kMaps[] = {"favor"};
    std::size_t type = 0;
    RECUR_RETURN_IF_ERROR(r.Choice(*fm, "type", "feature_map", kMaps, &type));
    la.feature_map = FeatureMap::kFavorHyperbolic;
    RECUR_RETURN_IF_ERROR(r.UInt(*fm, "n_dims", "feature_map", 2, &la.favor_features));
    la.softmax_temp = 1.0f / std::sqrt(static_cast<float>(dq));
    if (auto t = fm->find("softmax_temp"); t != fm->end() && !t->is_null()) {
      RECUR_RETURN_IF_ERROR(r.PositiveFloat(*fm, "softmax_temp", "feature_map", &la.softmax_temp));
    }
    bool stabilize = false;
    RECUR_RETURN_IF_ERROR(r.Bool(*fm, "stabilize", "feature_map", &stabilize, false));
    if (stabilize) {
      return r.Invalid("feature_map.stabilize",
                       "must be false: the stabilised Favor subtracts a maximum over the whole "
                       "sequence, which has no recurrent form");
    }
    for (const auto& [key, value] : fm->items()) {
      if (key != "type" && key != "n_dims" && key != "softmax_temp" && key != "stabilize") {
        return r.Invalid("feature_map." + key, "is not a Favor option this converter knows");
      }
    }
  }
  la.eps = 1e-6f;
  la.causal = attention == 1;  // "causal-linear"; "linear" is the encoder
  BlockDescription block;
  block.mixer = MixerDescription(FindMixerType(fb::Mixer::LinearAttention),
                                 std::make_unique<LinearAttentionParams>(la));
  // "aft-full" (AFTFullAttention): logits k·(u vᵀ) over all positions. The
  // library registers it only as a non-causal attention (a causal mask would
  // multiply keys by −∞), so it maps onto the aft_full encoder.
  if (aft_full) {
    if (dq != dv) {
      return r.Invalid("value_dimensions",
                       "must equal query_dimensions for attention_type "
                       "\"aft-full\" (AFT is element-wise)");
    }
    if (root.contains("feature_map")) {
      return r.Invalid("feature_map", "applies only to linear attention");
    }
    auto af = std::make_unique<AftFullParams>();
    af->heads = n_heads;
    af->dk = dq;
    af->max_length = 1024;  // the library's defaults
    af->bias_rank = 64;
    if (root.contains("max_sequence_length")) {
      RECUR_RETURN_IF_ERROR(r.UInt(root, "max_sequence_length", "", 1, &af->max_length));
    }
    if (af->max_length > 65536) return r.Invalid("max_sequence_length", "must be at most 65536");
    if (root.contains("aft_parameterization")) {
      RECUR_RETURN_IF_ERROR(r.UInt(root, "aft_parameterization", "", 1, &af->bias_rank));
    }
    af->multiply = true;
    af->causal = false;
    block.mixer = MixerDescription(FindMixerType(fb::Mixer::AftFull), std::move(af));
  }
  block.d_ff = d_ff;
  block.activation = act == 0 ? Activation::kRelu : Activation::kGelu;
  d->blocks.assign(n_layers, block);
  d->final_norm = final_norm;
  d->has_head = false;
  return ParseMetadata(r, root, &d->metadata);
}

// The library's name of a block tensor (rest: the name after "blocks.<i>.").
// An AttentionLayer holds {query,key,value,out}_projection and the inner
// attention's own parameters under inner_attention.
std::string BlockSourceName(const std::string& rest) {
  static const std::string kMixer = "mixer.";
  if (rest.compare(0, kMixer.size(), kMixer) == 0) {
    const std::string name = rest.substr(kMixer.size());
    for (const char* projection : {"query", "key", "value", "out"}) {
      const std::string p = std::string(projection) + ".";
      if (name.compare(0, p.size(), p) == 0) {
        return "attention." + std::string(projection) + "_projection." + name.substr(p.size());
      }
    }
    return "attention.inner_attention." + name;
  }
  static const std::string kFfn = "ffn.";
  if (rest.compare(0, kFfn.size(), kFfn) == 0) return rest.substr(kFfn.size());  // linear1, linear2
  return rest;                                                                   // norm1, norm2
}

class FastTransformersLayoutConverter final : public LayoutConverter {
 public:
  std::vector<std::string> Aliases() const override { return {"fast_transformers"}; }

  // The builder's keywords without recur's own d_model.
  bool Recognizes(const json& root) const override {
    return root.contains("query_dimensions") && !root.contains("d_model");
  }

  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    return ParseBuilderArguments(r, root, d);
  }

  void MapTensors(const ModelDescription&, std::vector<ExpectedTensor>* tensors) const override {
    for (ExpectedTensor& t : *tensors) {
      uint32_t block = 0;
      std::string rest;
      if (SplitBlockName(t.name, &block, &rest)) {
        t.source_name = "layers." + std::to_string(block) + "." + BlockSourceName(rest);
      } else if (t.name.compare(0, 11, "final_norm.") == 0) {
        t.source_name = "norm." + t.name.substr(11);
      }
    }
  }
};

}  // namespace

const LayoutConverter& FastTransformersLayout() {
  static const FastTransformersLayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
