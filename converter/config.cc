#include "converter/config.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "converter/file_util.h"
#include "converter/json_util.h"
#include "converter/key_reader.h"
#include "converter/mixers/aft.h"
#include "converter/mixers/linear_attention.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

// Far above any real model (96 blocks for GPT-3), low enough that a typo
// cannot make the converter allocate gigabytes of block descriptions.
constexpr uint32_t kMaxLayers = 4096;

Status ParseMetadata(const KeyReader& r, const json& root, MetadataDescription* meta) {
  RECUR_RETURN_IF_ERROR(r.OptionalString(root, "notes", &meta->notes));
  RECUR_RETURN_IF_ERROR(r.OptionalString(root, "input_description", &meta->input_description));
  RECUR_RETURN_IF_ERROR(r.OptionalString(root, "output_description", &meta->output_description));
  return Status::Ok();
}

// One mixer config (`where` names it in messages: "mixer" or "mixer[2]"):
// its "type" picks the mixer (converter/mixers/), which reads the rest.
Status ParseMixer(const KeyReader& r, const json& mixer, const std::string& where,
                  MixerDescription* out) {
  const std::vector<std::string>& names = MixerConfigNames();
  std::size_t index = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(mixer, "type", where, names, &index));
  const MixerType* type = FindMixerTypeByConfigName(names[index]);
  std::unique_ptr<MixerParams> params;
  RECUR_RETURN_IF_ERROR(type->converter->Parse(MixerConfig{r, mixer, where, names[index]}, &params));
  *out = MixerDescription(type, std::move(params));
  return Status::Ok();
}

// The recur layout (models/configs/README.md): every key required.
Status RecurConfigToDescription(const KeyReader& r, const json& root, ModelDescription* d) {
  RECUR_RETURN_IF_ERROR(r.UInt(root, "d_model", "", 1, &d->d_model));
  uint32_t n_layers = 0;
  RECUR_RETURN_IF_ERROR(r.UInt(root, "n_layers", "", 1, &n_layers));
  if (n_layers > kMaxLayers) {
    return r.Invalid("n_layers", "must be at most " + std::to_string(kMaxLayers));
  }

  static const char* const kPlacements[] = {"pre", "post"};
  std::size_t placement = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(root, "norm_placement", "", kPlacements, &placement));
  d->norm_placement = placement == 0 ? NormPlacement::kPre : NormPlacement::kPost;
  RECUR_RETURN_IF_ERROR(r.PositiveFloat(root, "layer_norm_eps", "", &d->layer_norm_eps));

  const json* input = nullptr;
  RECUR_RETURN_IF_ERROR(r.Object(root, "input", "", &input));
  static const char* const kKinds[] = {"tokens", "features"};
  std::size_t kind = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(*input, "kind", "input", kKinds, &kind));
  RECUR_RETURN_IF_ERROR(kind == 0 ? r.OnlyKeys(*input, "input", {"kind", "vocab_size"})
                                  : r.OnlyKeys(*input, "input",
                                               {"kind", "feature_width", "projection"}));
  if (kind == 0) {
    d->input.kind = InputKind::kTokens;
    RECUR_RETURN_IF_ERROR(r.UInt(*input, "vocab_size", "input", 1, &d->input.vocab_size));
  } else {
    d->input.kind = InputKind::kFeatures;
    RECUR_RETURN_IF_ERROR(r.UInt(*input, "feature_width", "input", 1, &d->input.feature_width));
    RECUR_RETURN_IF_ERROR(r.Bool(*input, "projection", "input", &d->input.projection));
    if (!d->input.projection && d->input.feature_width != d->d_model) {
      return r.Invalid("input.feature_width",
                       "is " + std::to_string(d->input.feature_width) + ", but without a projection it must equal "
                       "d_model (" + std::to_string(d->d_model) + ")");
    }
  }
  RECUR_RETURN_IF_ERROR(r.UInt(root, "max_positions", "", 0, &d->input.max_positions));

  // "mixer": one config for every block, or a list with one per block (a
  // mixed model, e.g. sliding windows early and linear attention later).
  auto mixer_it = root.find("mixer");
  if (mixer_it == root.end()) return r.Missing("mixer");
  std::vector<BlockDescription> blocks(n_layers);
  if (mixer_it->is_array()) {
    if (mixer_it->size() != n_layers) {
      return r.Invalid("mixer", "has " + std::to_string(mixer_it->size()) +
                                    " entries, expected one per block (n_layers = " +
                                    std::to_string(n_layers) + ")");
    }
    for (uint32_t i = 0; i < n_layers; ++i) {
      const std::string where = "mixer[" + std::to_string(i) + "]";
      if (!(*mixer_it)[i].is_object()) return r.Invalid(where, "must be a JSON object");
      RECUR_RETURN_IF_ERROR(ParseMixer(r, (*mixer_it)[i], where, &blocks[i].mixer));
      if (blocks[i].mixer.causal() != blocks[0].mixer.causal()) {
        return r.Invalid(where + ".causal", "differs from mixer[0]: a model's blocks are all "
                                            "causal or all non-causal");
      }
    }
  } else {
    if (!mixer_it->is_object()) return r.Invalid("mixer", "must be a JSON object or a list of them");
    RECUR_RETURN_IF_ERROR(ParseMixer(r, *mixer_it, "mixer", &blocks[0].mixer));
    for (uint32_t i = 1; i < n_layers; ++i) blocks[i] = blocks[0];
  }

  const json* ffn = nullptr;
  RECUR_RETURN_IF_ERROR(r.Object(root, "ffn", "", &ffn));
  RECUR_RETURN_IF_ERROR(r.OnlyKeys(*ffn, "ffn", {"d_ff", "activation"}));
  uint32_t d_ff = 0;
  RECUR_RETURN_IF_ERROR(r.UInt(*ffn, "d_ff", "ffn", 1, &d_ff));
  static const char* const kActivations[] = {"relu", "gelu"};
  std::size_t act = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(*ffn, "activation", "ffn", kActivations, &act));
  for (BlockDescription& block : blocks) {
    block.d_ff = d_ff;
    block.activation = act == 0 ? Activation::kRelu : Activation::kGelu;
  }
  d->blocks = std::move(blocks);

  RECUR_RETURN_IF_ERROR(r.Bool(root, "final_norm", "", &d->final_norm));

  auto head = root.find("head");
  if (head == root.end()) return r.Missing("head");
  if (head->is_null()) {
    d->has_head = false;
  } else if (head->is_object()) {
    d->has_head = true;
    RECUR_RETURN_IF_ERROR(r.OnlyKeys(*head, "head", {"out", "activation"}));
    RECUR_RETURN_IF_ERROR(r.UInt(*head, "out", "head", 1, &d->head.out));
    static const char* const kHeadActs[] = {"none", "softmax", "log_softmax"};
    std::size_t ha = 0;
    RECUR_RETURN_IF_ERROR(r.Choice(*head, "activation", "head", kHeadActs, &ha));
    d->head.activation = ha == 0   ? HeadActivation::kNone
                         : ha == 1 ? HeadActivation::kSoftmax
                                   : HeadActivation::kLogSoftmax;
  } else {
    return r.Invalid("head", "must be a JSON object or null");
  }
  // Last, so that a config of the other layout is told by its missing keys.
  RECUR_RETURN_IF_ERROR(r.OnlyKeys(root, "", {"layout", "notes", "input_description",
                                              "output_description", "d_model", "n_layers",
                                              "norm_placement", "layer_norm_eps", "input",
                                              "max_positions", "mixer", "ffn", "final_norm",
                                              "head"}));
  return ParseMetadata(r, root, &d->metadata);
}

// The fast-transformers layout: the builder's keyword arguments. This is the
// one place where that layout is mapped onto a ModelDescription:
//   d_model = n_heads·value_dimensions, dk = query_dimensions,
//   dv = value_dimensions, post-norm, LayerNorm eps 1e-5, dense feature input
//   of width d_model without projection, elu+1 linear attention with eps
//   1e-6, FFN linear1/linear2 with `activation` (builder default "relu"),
//   final norm = final_normalization (default true), no head.
// The dimensions are required: n_heads and query_dimensions cannot be told
// apart from the weight shapes, so builder defaults are not guessed.
Status FastTransformersConfigToDescription(const KeyReader& r, const json& root,
                                           ModelDescription* d) {
  uint32_t n_layers = 0, n_heads = 0, dq = 0, dv = 0, d_ff = 0;
  RECUR_RETURN_IF_ERROR(r.UInt(root, "n_layers", "", 1, &n_layers));
  if (n_layers > kMaxLayers) {
    return r.Invalid("n_layers", "must be at most " + std::to_string(kMaxLayers));
  }
  RECUR_RETURN_IF_ERROR(r.UInt(root, "n_heads", "", 1, &n_heads));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "query_dimensions", "", 1, &dq));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "value_dimensions", "", 1, &dv));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "feed_forward_dimensions", "", 1, &d_ff));
  RECUR_RETURN_IF_ERROR(r.OnlyKeys(
      root, "", {"layout", "notes", "input_description", "output_description", "n_layers",
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
      return r.Invalid("value_dimensions", "must equal query_dimensions for attention_type "
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

Result<ImportedConfig> ParseConfigImpl(const std::string& text, Layout layout,
                                       const std::string& source_name) {
  KeyReader r(source_name);
  json root;
  DuplicateKey duplicate;
  try {
    root = ParseJson(text.begin(), text.end(), &duplicate);
  } catch (const std::exception& e) {
    return r.Error("not valid JSON: " + JsonWhat(e));
  }
  if (!duplicate.key.empty()) {
    return r.Error("the key \"" + duplicate.key + "\" appears twice in one object" +
                   (duplicate.top_level ? " (at the top level)" : ""));
  }
  if (!root.is_object()) return r.Error("the top level must be a JSON object");

  Layout declared = Layout::kAuto;
  auto layout_it = root.find("layout");
  if (layout_it != root.end()) {
    if (!layout_it->is_string() || !ParseLayout(layout_it->get<std::string>(), &declared) ||
        declared == Layout::kAuto) {
      return r.Invalid("layout", "must be \"recur\" or \"fast-transformers\"");
    }
  }
  if (layout == Layout::kAuto) {
    if (declared != Layout::kAuto) {
      layout = declared;
    } else if (root.contains("query_dimensions") && !root.contains("d_model")) {
      layout = Layout::kFastTransformers;
    } else {
      layout = Layout::kRecur;
    }
  } else if (declared != Layout::kAuto && declared != layout) {
    return r.Error(std::string("\"layout\" is \"") + LayoutName(declared) + "\", but layout " +
                   LayoutName(layout) + " was requested");
  }

  ImportedConfig out;
  out.layout = layout;
  Status s = layout == Layout::kFastTransformers
                 ? FastTransformersConfigToDescription(r, root, &out.desc)
                 : RecurConfigToDescription(r, root, &out.desc);
  if (!s.ok()) return s;
  return out;
}

void AddLinear(std::vector<ExpectedTensor>* out, const std::string& name, const std::string& source,
               int64_t rows, int64_t cols) {
  out->push_back({name + ".weight", source + ".weight", {rows, cols}});
  out->push_back({name + ".bias", source + ".bias", {rows}});
}

}  // namespace

bool ParseLayout(const std::string& name, Layout* out) {
  if (name == "recur") {
    *out = Layout::kRecur;
  } else if (name == "fast-transformers" || name == "fast_transformers") {
    *out = Layout::kFastTransformers;
  } else if (name == "auto") {
    *out = Layout::kAuto;
  } else {
    return false;
  }
  return true;
}

Result<ImportedConfig> ParseConfig(const std::string& json_text, Layout layout,
                                   const std::string& source_name) {
  try {
    return ParseConfigImpl(json_text, layout, source_name);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, source_name + ": " + e.what());
  }
}

Result<ImportedConfig> ReadConfigFile(const std::string& path, Layout layout) {
  auto text = ReadFileText(path);
  if (!text.ok()) return text.status();
  return ParseConfig(*text, layout, BaseName(path));
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelDescription& d, Layout layout) {
  const bool ft = layout == Layout::kFastTransformers;
  const int64_t dm = d.d_model;
  std::vector<ExpectedTensor> out;
  if (d.input.kind == InputKind::kTokens) {
    out.push_back({"input.embedding", "input.embedding", {d.input.vocab_size, dm}});
  } else if (d.input.projection) {
    AddLinear(&out, "input.projection", "input.projection", dm, d.input.feature_width);
  }
  if (d.input.max_positions > 0)
    out.push_back({"input.positions", "input.positions", {d.input.max_positions, dm}});

  for (std::size_t i = 0; i < d.blocks.size(); ++i) {
    const BlockDescription& b = d.blocks[i];
    const std::string p = "blocks." + std::to_string(i) + ".";
    const std::string s = ft ? "layers." + std::to_string(i) + "." : p;
    out.push_back({p + "norm1.weight", s + "norm1.weight", {dm}});
    out.push_back({p + "norm1.bias", s + "norm1.bias", {dm}});
    if (b.mixer.type()) {  // none only in a hand-made description, which the writer refuses
      MixerTensors mixer(p + "mixer.", ft ? s + "attention." : s + "mixer.", layout, dm, &out);
      b.mixer.type()->converter->AddTensors(b.mixer.params(), &mixer);
    }
    out.push_back({p + "norm2.weight", s + "norm2.weight", {dm}});
    out.push_back({p + "norm2.bias", s + "norm2.bias", {dm}});
    const std::string f = ft ? s : s + "ffn.";
    AddLinear(&out, p + "ffn.linear1", f + "linear1", b.d_ff, dm);
    AddLinear(&out, p + "ffn.linear2", f + "linear2", dm, b.d_ff);
  }
  if (d.final_norm) {
    const std::string s = ft ? "norm" : "final_norm";
    out.push_back({"final_norm.weight", s + ".weight", {dm}});
    out.push_back({"final_norm.bias", s + ".bias", {dm}});
  }
  if (d.has_head) AddLinear(&out, "head", "head", d.head.out, dm);
  return out;
}

const char* LayoutName(Layout layout) {
  switch (layout) {
    case Layout::kRecur: return "recur";
    case Layout::kFastTransformers: return "fast-transformers";
    case Layout::kAuto: break;
  }
  return "auto";
}

const char* InputKindName(InputKind kind) {
  return kind == InputKind::kTokens ? "tokens" : "features";
}

const char* NormPlacementName(NormPlacement p) { return p == NormPlacement::kPre ? "pre" : "post"; }

const char* ActivationName(Activation a) { return a == Activation::kRelu ? "relu" : "gelu"; }

const char* HeadActivationName(HeadActivation a) {
  switch (a) {
    case HeadActivation::kNone: return "none";
    case HeadActivation::kSoftmax: return "softmax";
    case HeadActivation::kLogSoftmax: return "log_softmax";
  }
  return "?";
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace recur::impl::converter
