#include "converter/config.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "converter/file_util.h"
#include "converter/json_util.h"

namespace recur::converter {
namespace {

using nlohmann::json;

// Reads typed keys out of JSON objects with messages that name the key by
// its dotted path ("mixer.heads") and the config by its file name.
// Far above any real model (96 blocks for GPT-3), low enough that a typo
// cannot make the converter allocate gigabytes of block descriptions.
constexpr uint32_t kMaxLayers = 4096;

class KeyReader {
 public:
  explicit KeyReader(std::string source) : source_(std::move(source)) {}

  Status Error(const std::string& what) const {
    return Status(StatusCode::kInvalidArgument, source_ + ": " + what);
  }
  Status Missing(const std::string& path) const {
    return Error("missing key \"" + path + "\"");
  }
  Status Invalid(const std::string& path, const std::string& what) const {
    return Error("\"" + path + "\" " + what);
  }

  static std::string Join(const std::string& prefix, const char* key) {
    return prefix.empty() ? std::string(key) : prefix + "." + key;
  }

  // Refuses a key of `obj` that is not in `known`: a typo ("casual",
  // "activaton") would otherwise leave its default in place silently. The
  // PyTorch reference refuses the same configs.
  Status OnlyKeys(const json& obj, const std::string& prefix,
                  std::initializer_list<const char*> known) const {
    for (const auto& item : obj.items()) {
      bool ok = false;
      for (const char* k : known) ok = ok || item.key() == k;
      if (!ok) {
        std::string list;
        for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
        return Invalid(Join(prefix, item.key().c_str()), "is not a known key (known: " + list + ")");
      }
    }
    return Status::Ok();
  }

  // A required object member.
  Status Object(const json& obj, const char* key, const std::string& prefix, const json** out) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return Missing(path);
    if (!it->is_object()) return Invalid(path, "must be a JSON object");
    *out = &*it;
    return Status::Ok();
  }

  // An integer in [min, UINT32_MAX]; `required` false: absent leaves *out.
  Status UInt(const json& obj, const char* key, const std::string& prefix, uint32_t min,
              uint32_t* out, bool required = true) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Missing(path) : Status::Ok();
    const char* kind = min > 0 ? "must be a positive integer" : "must be a non-negative integer";
    if (!it->is_number_integer()) return Invalid(path, kind);
    if (it->is_number_unsigned()) {
      uint64_t v = it->get<uint64_t>();
      if (v < min) return Invalid(path, kind);
      if (v > std::numeric_limits<uint32_t>::max())
        return Invalid(path, "is too large (at most 4294967295)");
      *out = static_cast<uint32_t>(v);
      return Status::Ok();
    }
    int64_t v = it->get<int64_t>();
    if (v < static_cast<int64_t>(min)) return Invalid(path, kind);
    if (v > static_cast<int64_t>(std::numeric_limits<uint32_t>::max()))
      return Invalid(path, "is too large (at most 4294967295)");
    *out = static_cast<uint32_t>(v);
    return Status::Ok();
  }

  // A finite number > 0.
  Status PositiveFloat(const json& obj, const char* key, const std::string& prefix, float* out,
                       bool required = true) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Missing(path) : Status::Ok();
    if (!it->is_number()) return Invalid(path, "must be a positive number");
    double v = it->get<double>();
    if (!std::isfinite(v) || v <= 0 || static_cast<float>(v) <= 0.0f ||
        !std::isfinite(static_cast<float>(v)))
      return Invalid(path, "must be a positive number");
    *out = static_cast<float>(v);
    return Status::Ok();
  }

  Status Bool(const json& obj, const char* key, const std::string& prefix, bool* out,
              bool required = true) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Missing(path) : Status::Ok();
    if (!it->is_boolean()) return Invalid(path, "must be true or false");
    *out = it->get<bool>();
    return Status::Ok();
  }

  // A string out of `choices`; *index gets its position.
  template <std::size_t N>
  Status Choice(const json& obj, const char* key, const std::string& prefix,
                const char* const (&choices)[N], std::size_t* index, bool required = true) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Missing(path) : Status::Ok();
    std::string list;
    for (std::size_t i = 0; i < N; ++i) {
      if (i) list += ", ";
      list += std::string("\"") + choices[i] + "\"";
    }
    if (!it->is_string()) return Invalid(path, "must be one of " + list);
    const std::string value = it->get<std::string>();
    for (std::size_t i = 0; i < N; ++i) {
      if (value == choices[i]) {
        *index = i;
        return Status::Ok();
      }
    }
    return Invalid(path, "must be one of " + list + " (got \"" + value + "\")");
  }

  // An optional string (absent or null: left as is).
  Status OptionalString(const json& obj, const char* key, std::string* out) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Status::Ok();
    if (!it->is_string()) return Invalid(key, "must be a string");
    *out = it->get<std::string>();
    return Status::Ok();
  }

 private:
  std::string source_;
};

Status ParseMetadata(const KeyReader& r, const json& root, MetadataDescription* meta) {
  RECUR_RETURN_IF_ERROR(r.OptionalString(root, "notes", &meta->notes));
  RECUR_RETURN_IF_ERROR(r.OptionalString(root, "input_description", &meta->input_description));
  RECUR_RETURN_IF_ERROR(r.OptionalString(root, "output_description", &meta->output_description));
  return Status::Ok();
}

// The recur layout (models/configs/README.md): every key required.
// One mixer config (`where` names it in messages: "mixer" or "mixer[2]") into
// block->mixer and block->linear_attention (the attention's shape and options).
Status ParseMixer(const KeyReader& r, const json& mixer, const std::string& where,
                  BlockDescription* out) {
  BlockDescription& block = *out;
  static const char* const kMixers[] = {"linear_attention", "softmax_attention",
                                        "sliding_window",   "aft_simple",
                                        "flash",            "linformer",
                                        "aft_local",        "aft_conv",
                                        "aft_full",         "gau",
                                        "reformer"};
  static const MixerType kMixerTypes[] = {
      MixerType::kLinearAttention, MixerType::kSoftmaxAttention, MixerType::kSlidingWindow,
      MixerType::kAftSimple,       MixerType::kFlash,            MixerType::kLinformer,
      MixerType::kAftLocal,        MixerType::kAftConv,          MixerType::kAftFull,
      MixerType::kGau,             MixerType::kReformer};
  std::size_t mixer_type = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(mixer, "type", where, kMixers, &mixer_type));
  block.mixer = kMixerTypes[mixer_type];
  LinearAttentionDescription& la = block.linear_attention;
  const bool flash = block.mixer == MixerType::kFlash;
  const bool gau = block.mixer == MixerType::kGau;
  const bool gated = flash || gau;  // no heads: one head of expansion_dim / qk_dim
  if (!gated) {
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "heads", where, 1, &la.heads));
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "dk", where, 1, &la.dk));
  }
  const bool aft = block.mixer == MixerType::kAftSimple || block.mixer == MixerType::kAftLocal ||
                   block.mixer == MixerType::kAftConv || block.mixer == MixerType::kAftFull;
  if (aft) {
    la.dv = la.dk;  // query, key and value are all D = heads·dk wide
  } else if (!gated) {
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "dv", where, 1, &la.dv));
  }
  // The keys each mixer type takes (besides type, causal and, but for
  // FLASH, heads and dk).
  auto only_keys = [&](std::initializer_list<const char*> extra) -> Status {
    for (const auto& [key, value] : mixer.items()) {
      bool known = key == "type" || key == "causal" || (!gated && (key == "heads" || key == "dk"));
      for (const char* k : extra) known = known || key == k;
      if (!known) {
        std::string list = gated ? "type, causal" : "type, heads, dk, causal";
        for (const char* k : extra) list += std::string(", ") + k;
        return r.Invalid(where + "." + key, std::string("does not apply to ") + kMixers[mixer_type] +
                                             " (its keys: " + list + ")");
      }
    }
    return Status::Ok();
  };
  if (block.mixer == MixerType::kSoftmaxAttention || block.mixer == MixerType::kAftSimple) {
    // softmax(q·kᵀ/√dk) or AFT-simple: no feature map, no eps.
    RECUR_RETURN_IF_ERROR(block.mixer == MixerType::kAftSimple ? only_keys({})
                                                                : only_keys({"dv"}));
    RECUR_RETURN_IF_ERROR(r.Bool(mixer, "causal", where, &la.causal, /*required=*/false));
  } else if (block.mixer == MixerType::kAftLocal || block.mixer == MixerType::kAftConv) {
    RECUR_RETURN_IF_ERROR(only_keys({"window"}));
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "window", where, 1, &la.window));
    if (la.window > 65536) return r.Invalid(where + ".window", "must be at most 65536");
    RECUR_RETURN_IF_ERROR(r.Bool(mixer, "causal", where, &la.causal, /*required=*/false));
  } else if (block.mixer == MixerType::kAftFull) {
    RECUR_RETURN_IF_ERROR(only_keys({"max_length", "bias_rank", "bias_form"}));
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "max_length", where, 1, &la.max_length));
    if (la.max_length > 65536) return r.Invalid(where + ".max_length", "must be at most 65536");
    if (auto rank = mixer.find("bias_rank"); rank != mixer.end() && !rank->is_null()) {
      RECUR_RETURN_IF_ERROR(r.UInt(mixer, "bias_rank", where, 1, &la.bias_rank));
    }
    static const char* const kForms[] = {"add", "multiply"};
    std::size_t form = 0;
    RECUR_RETURN_IF_ERROR(r.Choice(mixer, "bias_form", where, kForms, &form, false));
    la.multiply = form == 1;
    RECUR_RETURN_IF_ERROR(r.Bool(mixer, "causal", where, &la.causal, /*required=*/false));
  } else if (block.mixer == MixerType::kLinformer) {
    RECUR_RETURN_IF_ERROR(only_keys({"dv", "seq_len", "proj_dim", "sharing"}));
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "seq_len", where, 1, &la.seq_len));
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "proj_dim", where, 1, &la.proj_dim));
    static const char* const kSharing[] = {"none", "headwise", "kv", "layerwise"};
    std::size_t sharing = 0;
    RECUR_RETURN_IF_ERROR(r.Choice(mixer, "sharing", where, kSharing, &sharing, false));
    la.sharing = static_cast<LinformerSharing>(sharing);
    la.causal = false;  // encoder only
    RECUR_RETURN_IF_ERROR(r.Bool(mixer, "causal", where, &la.causal, /*required=*/false));
    if (la.causal) {
      return r.Invalid(where + ".causal", "must be false: linformer mixes the whole sequence "
                                          "and has no recurrent form");
    }
  } else if (block.mixer == MixerType::kReformer) {
    RECUR_RETURN_IF_ERROR(only_keys({"dv", "n_buckets", "chunk", "rounds"}));
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "n_buckets", where, 2, &la.n_buckets));
    if (la.n_buckets % 2 != 0 || la.n_buckets > 65536) {
      return r.Invalid(where + ".n_buckets", "must be even and at most 65536");
    }
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "chunk", where, 1, &la.chunk));
    if (la.chunk > 65536) return r.Invalid(where + ".chunk", "must be at most 65536");
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "rounds", where, 1, &la.rounds));
    if (la.rounds > 64) return r.Invalid(where + ".rounds", "must be at most 64");
    la.causal = false;  // encoder only
    RECUR_RETURN_IF_ERROR(r.Bool(mixer, "causal", where, &la.causal, /*required=*/false));
    if (la.causal) {
      return r.Invalid(where + ".causal", "must be false: reformer sorts the whole sequence "
                                          "by hash and has no recurrent form");
    }
  } else if (gated) {
    // FLASH: chunk C, scale default 1/C; GAU: max_length T, scale default 1/T.
    const char* length_key = flash ? "chunk" : "max_length";
    RECUR_RETURN_IF_ERROR(only_keys({"expansion_dim", "qk_dim", length_key, "scale"}));
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "expansion_dim", where, 1, &la.expansion_dim));
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "qk_dim", where, 1, &la.qk_dim));
    uint32_t& length = flash ? la.chunk : la.max_length;
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, length_key, where, 1, &length));
    if (length > 65536) return r.Invalid(where + "." + length_key, "must be at most 65536");
    la.scale = 1.0f / static_cast<float>(length);
    if (auto sc = mixer.find("scale"); sc != mixer.end()) {
      // > 0 as in the reference (mixers.py); checked after narrowing to float.
      if (!sc->is_number() || !(sc->get<float>() > 0.0f) || !std::isfinite(sc->get<float>())) {
        return r.Invalid(where + ".scale", "must be a finite positive number");
      }
      la.scale = sc->get<float>();
    }
    RECUR_RETURN_IF_ERROR(r.Bool(mixer, "causal", where, &la.causal, /*required=*/false));
  } else if (block.mixer == MixerType::kSlidingWindow) {
    RECUR_RETURN_IF_ERROR(only_keys({"dv", "window", "dilation", "global_tokens"}));
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "window", where, 1, &la.window));
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "global_tokens", where, 0, &la.global_tokens, false));
    if (auto d = mixer.find("dilation"); d != mixer.end()) {
      if (d->is_array()) {
        if (d->size() != la.heads) {
          return r.Invalid(where + ".dilation", "has " + std::to_string(d->size()) +
                                                 " entries, expected one per head (" +
                                                 std::to_string(la.heads) + ")");
        }
        for (const auto& v : *d) {
          if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 65536) {
            return r.Invalid(where + ".dilation", "entries must be integers in [1, 65536]");
          }
          la.dilation.push_back(v.get<uint32_t>());
        }
      } else {
        uint32_t all = 1;
        RECUR_RETURN_IF_ERROR(r.UInt(mixer, "dilation", where, 1, &all));
        if (all > 65536) return r.Invalid(where + ".dilation", "must be at most 65536");
        la.dilation.assign(la.heads, all);
      }
    }
    RECUR_RETURN_IF_ERROR(r.Bool(mixer, "causal", where, &la.causal, /*required=*/false));
  } else {
  RECUR_RETURN_IF_ERROR(
      only_keys({"dv", "feature_map", "n_features", "favor_layout", "softmax_temp", "eps"}));
  static const char* const kFeatureMaps[] = {"elu_plus_one", "relu", "poly2", "favor"};
  std::size_t fm = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(mixer, "feature_map", where, kFeatureMaps, &fm));
  la.feature_map = fm == 0 ? FeatureMap::kEluPlusOne : fm == 1 ? FeatureMap::kRelu
                   : fm == 2 ? FeatureMap::kPoly2 : FeatureMap::kFavor;
  if (fm == 3) {
    RECUR_RETURN_IF_ERROR(r.UInt(mixer, "n_features", where, 1, &la.favor_features));
    static const char* const kFavorLayouts[] = {"performer", "fast_transformers"};
    std::size_t favor_layout = 0;
    RECUR_RETURN_IF_ERROR(
        r.Choice(mixer, "favor_layout", where, kFavorLayouts, &favor_layout, false));
    if (favor_layout == 1) la.feature_map = FeatureMap::kFavorHyperbolic;
    if (la.feature_map == FeatureMap::kFavorHyperbolic && la.favor_features < 2) {
      return r.Invalid(where + ".n_features", "must be >= 2 for the fast_transformers layout");
    }
    la.softmax_temp = 1.0f / std::sqrt(static_cast<float>(la.dk));
    RECUR_RETURN_IF_ERROR(r.PositiveFloat(mixer, "softmax_temp", where, &la.softmax_temp, false));
  } else {
    for (const char* key : {"n_features", "favor_layout", "softmax_temp"}) {
      if (mixer.contains(key)) {
        return r.Invalid(where + "." + key, "applies only to feature_map \"favor\"");
      }
    }
  }
  RECUR_RETURN_IF_ERROR(r.PositiveFloat(mixer, "eps", where, &la.eps));
  RECUR_RETURN_IF_ERROR(r.Bool(mixer, "causal", where, &la.causal, /*required=*/false));
  }

  return Status::Ok();
}

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
      RECUR_RETURN_IF_ERROR(ParseMixer(r, (*mixer_it)[i], where, &blocks[i]));
      if (blocks[i].linear_attention.causal != blocks[0].linear_attention.causal) {
        return r.Invalid(where + ".causal", "differs from mixer[0]: a model's blocks are all "
                                            "causal or all non-causal");
      }
    }
  } else {
    if (!mixer_it->is_object()) return r.Invalid("mixer", "must be a JSON object or a list of them");
    RECUR_RETURN_IF_ERROR(ParseMixer(r, *mixer_it, "mixer", &blocks[0]));
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
  BlockDescription block;
  block.mixer = MixerType::kLinearAttention;
  block.linear_attention.heads = n_heads;
  block.linear_attention.dk = dq;
  block.linear_attention.dv = dv;
  block.linear_attention.feature_map = FeatureMap::kEluPlusOne;
  // "feature_map": {"type": "favor", "n_dims": m, "softmax_temp": t, "stabilize": false}
  // (absent: elu+1). The library's Favor; its stabilize option subtracts a
  // sequence-wide max, which has no recurrent form.
  if (auto fm = root.find("feature_map"); fm != root.end()) {
    if (!fm->is_object()) return r.Invalid("feature_map", "must be a JSON object");
    static const char* const kMaps[] = {"favor"};
    std::size_t type = 0;
    RECUR_RETURN_IF_ERROR(r.Choice(*fm, "type", "feature_map", kMaps, &type));
    LinearAttentionDescription& la = block.linear_attention;
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
  block.linear_attention.eps = 1e-6f;
  block.linear_attention.causal = attention == 1;  // "causal-linear"; "linear" is the encoder
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
    LinearAttentionDescription& af = block.linear_attention;
    block.mixer = MixerType::kAftFull;
    af.max_length = 1024;  // the library's defaults
    af.bias_rank = 64;
    if (root.contains("max_sequence_length")) {
      RECUR_RETURN_IF_ERROR(r.UInt(root, "max_sequence_length", "", 1, &af.max_length));
    }
    if (af.max_length > 65536) return r.Invalid("max_sequence_length", "must be at most 65536");
    if (root.contains("aft_parameterization")) {
      RECUR_RETURN_IF_ERROR(r.UInt(root, "aft_parameterization", "", 1, &af.bias_rank));
    }
    af.multiply = true;
    af.causal = false;
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
    const int64_t hk = static_cast<int64_t>(b.linear_attention.heads) * b.linear_attention.dk;
    const int64_t hv = static_cast<int64_t>(b.linear_attention.heads) * b.linear_attention.dv;
    out.push_back({p + "norm1.weight", s + "norm1.weight", {dm}});
    out.push_back({p + "norm1.bias", s + "norm1.bias", {dm}});
    const std::string m = ft ? s + "attention." : s + "mixer.";
    const char* proj = ft ? "_projection" : "";
    if (b.mixer == MixerType::kFlash || b.mixer == MixerType::kGau) {
      const LinearAttentionDescription& fl = b.linear_attention;
      const bool flash = b.mixer == MixerType::kFlash;
      const int64_t e = fl.expansion_dim, qs = fl.qk_dim;
      const int64_t rows = flash ? 4 : 2, c = flash ? fl.chunk : fl.max_length;
      AddLinear(&out, p + "mixer.u_proj", m + "u_proj", e, dm);
      AddLinear(&out, p + "mixer.v_proj", m + "v_proj", e, dm);
      AddLinear(&out, p + "mixer.z_proj", m + "z_proj", qs, dm);
      AddLinear(&out, p + "mixer.out", m + "out", dm, e);
      out.push_back({p + "mixer.qk_gamma", m + "qk_gamma", {rows, qs}});
      out.push_back({p + "mixer.qk_beta", m + "qk_beta", {rows, qs}});
      out.push_back({p + "mixer.rel_bias", m + "rel_bias", {fl.causal ? c : 2 * c - 1}});
    } else {
    AddLinear(&out, p + "mixer.query", m + "query" + proj, hk, dm);
    if (b.mixer != MixerType::kReformer) {  // shared QK: no key projection
      AddLinear(&out, p + "mixer.key", m + "key" + proj, hk, dm);
    }
    AddLinear(&out, p + "mixer.value", m + "value" + proj, hv, dm);
    AddLinear(&out, p + "mixer.out", m + "out" + proj, dm, hv);
    }
    if (b.mixer == MixerType::kAftLocal || b.mixer == MixerType::kAftConv) {
      const LinearAttentionDescription& al = b.linear_attention;
      const int64_t offsets = al.causal ? int64_t{al.window} : 2 * int64_t{al.window} - 1;
      if (b.mixer == MixerType::kAftLocal) {
        out.push_back({p + "mixer.pos_bias", m + "pos_bias", {offsets}});
      } else {
        out.push_back({p + "mixer.conv_kernel", m + "conv_kernel", {al.heads, offsets}});
      }
    }
    if (b.mixer == MixerType::kAftFull) {
      const LinearAttentionDescription& af = b.linear_attention;
      const int64_t T = af.max_length;
      if (af.bias_rank == 0) {
        out.push_back({p + "mixer.pos_bias", m + "pos_bias", {T, T}});
      } else {
        const std::string src = ft ? m + "inner_attention." : m;
        out.push_back({p + "mixer.u", src + "u", {T, af.bias_rank}});
        out.push_back({p + "mixer.v", src + "v", {T, af.bias_rank}});
      }
    }
    if (b.mixer == MixerType::kReformer) {
      const LinearAttentionDescription& rf = b.linear_attention;
      out.push_back({p + "mixer.rotations", m + "rotations",
                     {rf.rounds, rf.dk, rf.n_buckets / 2}});
    }
    if (b.mixer == MixerType::kLinformer) {
      const LinearAttentionDescription& lf = b.linear_attention;
      std::vector<int64_t> shape = {lf.proj_dim, lf.seq_len};
      if (lf.sharing == LinformerSharing::kNone) shape.insert(shape.begin(), lf.heads);
      out.push_back({p + "mixer.E", m + "E", shape});
      if (lf.sharing == LinformerSharing::kNone || lf.sharing == LinformerSharing::kHeadwise) {
        out.push_back({p + "mixer.F", m + "F", shape});
      }
    }
    if (b.mixer == MixerType::kLinearAttention && b.linear_attention.favor()) {  // ω
      const std::string omega = ft ? m + "inner_attention.feature_map.omega" : m + "feature_map.omega";
      out.push_back({p + "mixer.feature_map.omega", omega,
                     {b.linear_attention.dk, b.linear_attention.OmegaColumns()}});
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

const char* FeatureMapName(FeatureMap f) {
  switch (f) {
    case FeatureMap::kEluPlusOne: return "elu_plus_one";
    case FeatureMap::kRelu: return "relu";
    case FeatureMap::kPoly2: return "poly2";
    case FeatureMap::kFavor: return "favor";
    case FeatureMap::kFavorHyperbolic: return "favor (fast-transformers)";
  }
  return "?";
}

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

}  // namespace recur::converter
