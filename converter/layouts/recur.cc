// The recur layout: the reference exporter's config (models/configs/README.md,
// models/reference/export.py) and tensor names.
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "converter/layouts/layout_converter.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

// One mixer config (`where` names it in messages: "mixer" or "mixer[2]"):
// its "type" picks the mixer (converter/mixers/), which reads the rest.
Status ParseMixer(const KeyReader& r, const json& mixer, const std::string& where,
                  MixerDescription* out) {
  const std::vector<std::string>& names = MixerConfigNames();
  std::size_t index = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(mixer, "type", where, names, &index));
  const MixerType* type = FindMixerTypeByConfigName(names[index]);
  std::unique_ptr<MixerParams> params;
  RECUR_RETURN_IF_ERROR(
      type->converter->Parse(MixerConfig{r, mixer, where, names[index]}, &params));
  *out = MixerDescription(type, std::move(params));
  return Status::Ok();
}

// The optional "token_shift": {"segments": [[width, shift], ...], "ffn"}
// (docs/attention-math.md §13), for every block.
Status ParseTokenShift(const KeyReader& r, const json& root, const ModelDescription& d,
                       TokenShiftDescription* out) {
  auto it = root.find("token_shift");
  if (it == root.end()) return Status::Ok();
  if (!it->is_object()) return r.Invalid("token_shift", "must be a JSON object");
  RECUR_RETURN_IF_ERROR(r.OnlyKeys(*it, "token_shift", {"segments", "ffn"}));
  if (d.norm_placement != NormPlacement::kPre) {
    return r.Invalid("token_shift",
                     "needs norm_placement \"pre\" (it shifts the normalised "
                     "inputs of the mixer and the FFN)");
  }
  auto segments = it->find("segments");
  if (segments == it->end()) return r.Missing("token_shift.segments");
  if (!segments->is_array() || segments->empty()) {
    return r.Invalid("token_shift.segments", "must be a non-empty list of [width, shift] pairs");
  }
  TokenShiftDescription shift;
  uint64_t covered = 0;
  for (std::size_t i = 0; i < segments->size(); ++i) {
    const json& s = (*segments)[i];
    const std::string at = "token_shift.segments[" + std::to_string(i) + "]";
    if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() || !s[1].is_number_integer()) {
      return r.Invalid(at, "must be a pair [width, shift] of integers");
    }
    if (s[0].get<int64_t>() < 1 || s[0].get<int64_t>() > int64_t{d.d_model}) {
      return r.Invalid(at, "has width " + s[0].dump() + ": must be in [1, d_model]");
    }
    const int64_t by = s[1].get<int64_t>();
    if (by < -1 || by > 1)
      return r.Invalid(at, "shifts by " + s[1].dump() + ": must be -1, 0 or 1");
    covered += s[0].get<uint64_t>();
    shift.segments.emplace_back(s[0].get<uint32_t>(), static_cast<int32_t>(by));
  }
  if (covered > d.d_model) {
    return r.Invalid("token_shift.segments", "cover " + std::to_string(covered) +
                                                 " features, more than d_model (" +
                                                 std::to_string(d.d_model) + ")");
  }
  for (std::size_t i = 0; i < shift.segments.size(); ++i) {
    if (shift.segments[i].second == -1 && !d.blocks.empty() && d.blocks[0].mixer.causal()) {
      return r.Invalid("token_shift.segments[" + std::to_string(i) + "]",
                       "takes the next position (shift -1), which a causal model has not seen: "
                       "only encoders (causal false) shift by -1");
    }
  }
  RECUR_RETURN_IF_ERROR(r.Bool(*it, "ffn", "token_shift", &shift.ffn, /*required=*/false));
  *out = std::move(shift);
  return Status::Ok();
}

// "norm" (optional, default layer_norm): {"type": "layer_norm" | "rms_norm"}
// or {"type": "scale_norm", "scale": "l2" | "rms"}, the kind of every norm.
Status ParseNorm(const KeyReader& r, const json& root, NormKind* out) {
  auto it = root.find("norm");
  if (it == root.end()) return Status::Ok();
  if (!it->is_object()) return r.Invalid("norm", "must be a JSON object");
  static const char* const kTypes[] = {"layer_norm", "rms_norm", "scale_norm"};
  std::size_t type = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(*it, "type", "norm", kTypes, &type));
  if (type != 2) {
    RECUR_RETURN_IF_ERROR(r.OnlyKeys(*it, "norm", {"type"}));
    *out = type == 0 ? NormKind::kLayerNorm : NormKind::kRmsNorm;
    return Status::Ok();
  }
  RECUR_RETURN_IF_ERROR(r.OnlyKeys(*it, "norm", {"type", "scale"}));
  static const char* const kScales[] = {"l2", "rms"};
  std::size_t scale = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(*it, "scale", "norm", kScales, &scale));
  *out = scale == 0 ? NormKind::kScaleNorm : NormKind::kScaleNormRms;
  return Status::Ok();
}

// "positions" (optional): {"type": "sinusoid", "base": 10000 (optional, > 0),
// "scale": "none" (optional) | "learned", "freq": "base" (optional) |
// "stored"}, fixed sinusoidal positions over an even d_model.
Status ParsePositions(const KeyReader& r, const json& root, InputDescription* in,
                      uint32_t d_model) {
  auto it = root.find("positions");
  if (it == root.end()) return Status::Ok();
  if (!it->is_object()) return r.Invalid("positions", "must be a JSON object");
  static const char* const kTypes[] = {"sinusoid"};
  std::size_t type = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(*it, "type", "positions", kTypes, &type));
  RECUR_RETURN_IF_ERROR(r.OnlyKeys(*it, "positions", {"type", "base", "scale", "freq"}));
  auto base = it->find("base");
  if (base != it->end()) {
    if (!base->is_number() || !std::isfinite(base->get<double>()) || base->get<double>() <= 0) {
      return r.Invalid("positions.base", "must be a positive number");
    }
    in->sinusoid_base = base->get<double>();
  }
  static const char* const kScales[] = {"none", "learned"};
  std::size_t scale = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(*it, "scale", "positions", kScales, &scale, /*required=*/false));
  static const char* const kFreqs[] = {"base", "stored"};
  std::size_t freq = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(*it, "freq", "positions", kFreqs, &freq, /*required=*/false));
  if (d_model % 2 != 0) {
    return r.Invalid("positions",
                     "(sinusoid) needs an even d_model, got " + std::to_string(d_model));
  }
  in->sinusoid = true;
  in->sinusoid_scale = scale == 1;
  in->sinusoid_freq = freq == 1;
  return Status::Ok();
}

class RecurLayoutConverter final : public LayoutConverter {
 public:
  // Any of its required top-level keys (detection asks the other layouts
  // first; a config none recognises is read as this one).
  bool Recognizes(const json& root) const override {
    for (const char* key : {"d_model", "n_layers", "norm_placement", "layer_norm_eps", "input",
                            "max_positions", "mixer", "ffn", "final_norm", "head"}) {
      if (root.contains(key)) return true;
    }
    return false;
  }

  // models/configs/README.md: every key required but "norm", "positions", "residual"
  // and the metadata.
  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    RECUR_RETURN_IF_ERROR(r.UInt(root, "d_model", "", 1, &d->d_model));
    uint32_t n_layers = 0;
    RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "n_layers", &n_layers));

    static const char* const kPlacements[] = {"pre", "post"};
    std::size_t placement = 0;
    RECUR_RETURN_IF_ERROR(r.Choice(root, "norm_placement", "", kPlacements, &placement));
    d->norm_placement = placement == 0 ? NormPlacement::kPre : NormPlacement::kPost;
    RECUR_RETURN_IF_ERROR(r.PositiveFloat(root, "layer_norm_eps", "", &d->layer_norm_eps));
    RECUR_RETURN_IF_ERROR(ParseNorm(r, root, &d->norm));

    const json* input = nullptr;
    RECUR_RETURN_IF_ERROR(r.Object(root, "input", "", &input));
    static const char* const kKinds[] = {"tokens", "features"};
    std::size_t kind = 0;
    RECUR_RETURN_IF_ERROR(r.Choice(*input, "kind", "input", kKinds, &kind));
    RECUR_RETURN_IF_ERROR(
        kind == 0 ? r.OnlyKeys(*input, "input", {"kind", "vocab_size", "norm"})
                  : r.OnlyKeys(*input, "input", {"kind", "feature_width", "projection", "norm"}));
    RECUR_RETURN_IF_ERROR(r.Bool(*input, "norm", "input", &d->input.norm, /*required=*/false));
    if (kind == 0) {
      d->input.kind = InputKind::kTokens;
      RECUR_RETURN_IF_ERROR(r.UInt(*input, "vocab_size", "input", 1, &d->input.vocab_size));
    } else {
      d->input.kind = InputKind::kFeatures;
      RECUR_RETURN_IF_ERROR(r.UInt(*input, "feature_width", "input", 1, &d->input.feature_width));
      RECUR_RETURN_IF_ERROR(r.Bool(*input, "projection", "input", &d->input.projection));
      if (!d->input.projection && d->input.feature_width != d->d_model) {
        return r.Invalid("input.feature_width", "is " + std::to_string(d->input.feature_width) +
                                                    ", but without a projection it must equal "
                                                    "d_model (" +
                                                    std::to_string(d->d_model) + ")");
      }
    }
    RECUR_RETURN_IF_ERROR(r.UInt(root, "max_positions", "", 0, &d->input.max_positions));
    RECUR_RETURN_IF_ERROR(ParsePositions(r, root, &d->input, d->d_model));

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
          return r.Invalid(where + ".causal",
                           "differs from mixer[0]: a model's blocks are all "
                           "causal or all non-causal");
        }
      }
    } else {
      if (!mixer_it->is_object())
        return r.Invalid("mixer", "must be a JSON object or a list of them");
      RECUR_RETURN_IF_ERROR(ParseMixer(r, *mixer_it, "mixer", &blocks[0].mixer));
      for (uint32_t i = 1; i < n_layers; ++i) blocks[i] = blocks[0];
    }

    for (uint32_t i = 0; i < n_layers; ++i) {
      bool first = true;
      for (uint32_t j = 0; j < i && first; ++j) first = blocks[j].mixer.type() != blocks[i].mixer.type();
      blocks[i].mixer.type()->converter->Place(blocks[i].mixer.mutable_params(), first);
    }

    // "ffn": null: blocks without a feed-forward (d_ff 0, and no norm2).
    auto ffn_it = root.find("ffn");
    if (ffn_it == root.end()) return r.Missing("ffn");
    if (!ffn_it->is_null()) {
      const json* ffn = nullptr;
      RECUR_RETURN_IF_ERROR(r.Object(root, "ffn", "", &ffn));
      RECUR_RETURN_IF_ERROR(r.OnlyKeys(*ffn, "ffn", {"d_ff", "activation", "glu", "token_mix"}));
      uint32_t d_ff = 0;
      RECUR_RETURN_IF_ERROR(r.UInt(*ffn, "d_ff", "ffn", 1, &d_ff));
      static const char* const kActivations[] = {"relu", "gelu", "relu_squared", "silu"};
      static const Activation kActivationOf[] = {Activation::kRelu, Activation::kGelu,
                                                 Activation::kReluSquared, Activation::kSilu};
      std::size_t act = 0;
      RECUR_RETURN_IF_ERROR(r.Choice(*ffn, "activation", "ffn", kActivations, &act));
      bool glu = false, token_mix = false;
      RECUR_RETURN_IF_ERROR(r.Bool(*ffn, "glu", "ffn", &glu, /*required=*/false));
      RECUR_RETURN_IF_ERROR(r.Bool(*ffn, "token_mix", "ffn", &token_mix, /*required=*/false));
      if (token_mix && d->norm_placement != NormPlacement::kPre) {
        return r.Invalid("ffn.token_mix", "needs norm_placement \"pre\" (it mixes norm2's "
                                          "outputs of consecutive positions)");
      }
      for (BlockDescription& block : blocks) {
        block.d_ff = d_ff;
        block.activation = kActivationOf[act];
        block.glu = glu;
        block.token_mix = token_mix;
      }
    }
    d->blocks = std::move(blocks);
    TokenShiftDescription token_shift;
    RECUR_RETURN_IF_ERROR(ParseTokenShift(r, root, *d, &token_shift));
    for (BlockDescription& block : d->blocks) block.token_shift = token_shift;

    // "residual" (optional): "standard", "reversible" (two streams, summed at
    // the end) or "reversible_concat" (concatenated at the end).
    static const char* const kResiduals[] = {"standard", "reversible", "reversible_concat"};
    std::size_t residual = 0;
    RECUR_RETURN_IF_ERROR(
        r.Choice(root, "residual", "", kResiduals, &residual, /*required=*/false));
    d->reversible = residual != 0;
    d->concat_streams = residual == 2;
    if (d->reversible && d->norm_placement != NormPlacement::kPre) {
      return r.Invalid("residual",
                       "\"reversible\" needs norm_placement \"pre\": its blocks add "
                       "mixer(norm1(x2)) to x1 and ffn(norm2(y1)) to x2, a pre-norm pairing "
                       "with no post-norm form");
    }
    if (d->reversible && d->blocks[0].d_ff == 0) {
      return r.Invalid("residual",
                       "\"reversible\" needs a feed-forward (\"ffn\" is null): "
                       "y2 = x2 + ffn(norm2(y1))");
    }

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
    RECUR_RETURN_IF_ERROR(r.OnlyKeys(
        root, "",
        {"layout", "notes", "input_description", "output_description", "d_model", "n_layers",
         "norm_placement", "layer_norm_eps", "norm", "input", "max_positions", "positions", "mixer",
         "ffn", "residual", "final_norm", "head", "token_shift", "tokenizer"}));
    // A vocabulary file beside the config (converter/vocab_file.h): read by
    // the converter, which knows where the config is.
    RECUR_RETURN_IF_ERROR(r.OptionalString(root, "tokenizer", &d->tokenizer_file));
    if (root.contains("tokenizer") && d->tokenizer_file.empty()) {
      return r.Invalid("tokenizer",
                       "must name a vocabulary file (relative to the config's folder)");
    }
    return ParseMetadata(r, root, &d->metadata);
  }

  // Recur names are the source names.
  void MapTensors(const ModelDescription&, std::vector<ExpectedTensor>*) const override {}
};

}  // namespace

const LayoutConverter& RecurLayout() {
  static const RecurLayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
