// Linear attention: config keys, tensors, schema table, inspect.
// The math is docs/attention-math.md §3; the runtime is runtime/mixers/linear_attention.cc.
#include "converter/mixers/linear_attention.h"

#include <cmath>
#include <string>

#include "converter/json_util.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {


fb::FeatureMap ToFb(FeatureMap f) {
  switch (f) {
    case FeatureMap::kEluPlusOne: return fb::FeatureMap::EluPlusOne;
    case FeatureMap::kRelu: return fb::FeatureMap::Relu;
    case FeatureMap::kPoly2: return fb::FeatureMap::Poly2;
    case FeatureMap::kFavor: return fb::FeatureMap::Favor;
    case FeatureMap::kFavorHyperbolic: return fb::FeatureMap::FavorHyperbolic;
    case FeatureMap::kFavorStabilized:
      return fb::FeatureMap::FavorStabilized;
    case FeatureMap::kGeneralizedRelu:
      return fb::FeatureMap::GeneralizedRelu;
    case FeatureMap::kRandomFourier: return fb::FeatureMap::RandomFourier;
    case FeatureMap::kSmoothedRandomFourier: return fb::FeatureMap::SmoothedRandomFourier;
  }
  return fb::FeatureMap::EluPlusOne;
}

const char* InspectName(fb::FeatureMap f) {
  switch (f) {
    case fb::FeatureMap::EluPlusOne: return "elu_plus_one";
    case fb::FeatureMap::Relu: return "relu";
    case fb::FeatureMap::Poly2: return "poly2";
    case fb::FeatureMap::Favor: return "favor";
    case fb::FeatureMap::FavorHyperbolic: return "favor_hyperbolic";
    case fb::FeatureMap::FavorStabilized:
      return "favor_stabilized";
    case fb::FeatureMap::GeneralizedRelu:
      return "generalized_relu";
    case fb::FeatureMap::RandomFourier: return "random_fourier";
    case fb::FeatureMap::SmoothedRandomFourier: return "smoothed_random_fourier";
  }
  return "unknown";
}

// Features per head C (runtime/schema/recur.fbs, FeatureMap).
uint64_t FeatureWidth(const fb::LinearAttention* la) {
  switch (la->feature_map()) {
    case fb::FeatureMap::Poly2: return uint64_t{la->dk()} * la->dk();
    case fb::FeatureMap::Favor:
    case fb::FeatureMap::FavorStabilized:
    case fb::FeatureMap::GeneralizedRelu:
      return la->favor_features();
    case fb::FeatureMap::FavorHyperbolic:
    case fb::FeatureMap::RandomFourier: return 2 * uint64_t{la->favor_features() / 2};
    case fb::FeatureMap::SmoothedRandomFourier: return 2 * uint64_t{la->favor_features() / 2} + 1;
    default: return la->dk();
  }
}

class LinearAttentionConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<LinearAttentionParams>();
    RECUR_RETURN_IF_ERROR(c.Heads(&p->heads, &p->dk, &p->dv));
    RECUR_RETURN_IF_ERROR(
        c.OnlyKeys({"type", "heads", "dk", "causal", "dv", "feature_map", "n_features",
                    "favor_layout", "softmax_temp", "eps", "feature_eps", "eps_per_feature",
                    "smoothing", "rotary"}));
    static const char* const kFeatureMaps[] = {
        "elu_plus_one",     "relu",           "poly2",
        "favor",            "favor_stabilized", "generalized_relu",
        "random_fourier",   "smoothed_random_fourier"};
    static const FeatureMap kMaps[] = {
        FeatureMap::kEluPlusOne,      FeatureMap::kRelu,
        FeatureMap::kPoly2,           FeatureMap::kFavor,
        FeatureMap::kFavorStabilized, FeatureMap::kGeneralizedRelu,
        FeatureMap::kRandomFourier,   FeatureMap::kSmoothedRandomFourier};
    std::size_t fm = 0;
    RECUR_RETURN_IF_ERROR(c.Choice("feature_map", kFeatureMaps, &fm));
    p->feature_map = kMaps[fm];
    // performer-pytorch's kernels: ω [dk, m], ε added to every feature (its
    // constants: 1e-4 for the softmax kernel, 0.001 for the generalized one).
    const bool performer = fm == 4 || fm == 5;
    if (performer) {
      RECUR_RETURN_IF_ERROR(c.UInt("n_features", 1, &p->favor_features));
      p->softmax_temp = 1.0f / std::sqrt(static_cast<float>(p->dk));
      RECUR_RETURN_IF_ERROR(c.PositiveFloat("softmax_temp", &p->softmax_temp, false));
      p->feature_eps = fm == 4 ? 1e-4f : 1e-3f;
      RECUR_RETURN_IF_ERROR(c.PositiveFloat("feature_eps", &p->feature_eps, false));
      if (c.object.contains("favor_layout")) {
        return c.Invalid("favor_layout", "applies only to feature_map \"favor\"");
      }
    } else if (c.object.contains("feature_eps")) {
      return c.Invalid("feature_eps",
                       "applies only to feature_map \"favor_stabilized\" or \"generalized_relu\"");
    }
    // fast-transformers' random Fourier features: ω [dk, m/2], cos and sin.
    const bool fourier = fm == 6 || fm == 7;
    if (fourier) {
      RECUR_RETURN_IF_ERROR(c.UInt("n_features", 1, &p->favor_features));
      if (p->favor_features < 2) {
        return c.Invalid("n_features", std::string("must be >= 2 for feature_map \"") +
                                           kFeatureMaps[fm] + "\" (ω has n_features / 2 columns)");
      }
      p->softmax_temp = 1.0f / std::sqrt(static_cast<float>(p->dk));
      RECUR_RETURN_IF_ERROR(c.PositiveFloat("softmax_temp", &p->softmax_temp, false));
      if (c.object.contains("favor_layout")) {
        return c.Invalid("favor_layout", "applies only to feature_map \"favor\"");
      }
    }
    if (fm == 7) {
      RECUR_RETURN_IF_ERROR(
          c.reader.FiniteFloat(c.object, "smoothing", c.where, &p->smoothing, false));
    } else if (c.object.contains("smoothing")) {
      return c.Invalid("smoothing", "applies only to feature_map \"smoothed_random_fourier\"");
    }
    if (fm == 3) {
      RECUR_RETURN_IF_ERROR(c.UInt("n_features", 1, &p->favor_features));
      static const char* const kFavorLayouts[] = {"performer", "fast_transformers"};
      std::size_t favor_layout = 0;
      RECUR_RETURN_IF_ERROR(c.Choice("favor_layout", kFavorLayouts, &favor_layout, false));
      if (favor_layout == 1) p->feature_map = FeatureMap::kFavorHyperbolic;
      if (p->feature_map == FeatureMap::kFavorHyperbolic && p->favor_features < 2) {
        return c.Invalid("n_features", "must be >= 2 for the fast_transformers layout");
      }
      p->softmax_temp = 1.0f / std::sqrt(static_cast<float>(p->dk));
      RECUR_RETURN_IF_ERROR(c.PositiveFloat("softmax_temp", &p->softmax_temp, false));
    } else if (!performer && !fourier) {
      for (const char* key : {"n_features", "favor_layout", "softmax_temp"}) {
        if (c.object.contains(key)) {
          return c.Invalid(key, "applies only to feature_map \"favor\"");
        }
      }
    }
    if (performer && c.object.contains("eps") && c.object["eps"] == 0) {
      p->eps = 0.0f;  // the features are > 0: no eps needed (performer-pytorch's encoder)
    } else {
      RECUR_RETURN_IF_ERROR(c.PositiveFloat("eps", &p->eps));
    }
    RECUR_RETURN_IF_ERROR(
        c.reader.Bool(c.object, "eps_per_feature", c.where, &p->eps_per_feature, false));
    RECUR_RETURN_IF_ERROR(c.Causal(&p->causal));
    if (p->feature_map == FeatureMap::kFavorStabilized && p->causal) {
      return c.Invalid("feature_map",
                       "\"favor_stabilized\" is encoder-only (\"causal\": false): "
                       "its key stabiliser is a maximum over the whole sequence, "
                       "which a recurrent step cannot know");
    }
    RECUR_RETURN_IF_ERROR(c.Rotary(p->dk, "dk", &p->rotary));
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const LinearAttentionParams&>(params);
    out->AddAttentionProjections(int64_t{p.heads} * p.dk, int64_t{p.heads} * p.dv);
    if (p.favor()) {  // ω [dk, m] (Performer) or [dk, m/2] (fast-transformers)
      out->Add("feature_map.omega", {p.dk, p.OmegaColumns()});
    }
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const LinearAttentionParams&>(params);
    auto q = w->Dense("query");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto o = w->Dense("out");
    const int32_t omega = p.favor() ? w->Ref("feature_map.omega") : -1;
    auto rotary = w->Rotary(p.rotary);
    return fb::CreateLinearAttention(w->fbb(), p.heads, p.dk, p.dv, ToFb(p.feature_map), p.eps, q,
                                     k, v, o, p.causal, omega, p.favor_features, p.softmax_temp,
                                     p.feature_eps, p.eps_per_feature, rotary, p.smoothing)
        .Union();
  }

  uint32_t FormatVersion(const MixerParams& params) const override {
    const auto& p = static_cast<const LinearAttentionParams&>(params);
    const bool newer = p.feature_map == FeatureMap::kFavorStabilized ||
                       p.feature_map == FeatureMap::kGeneralizedRelu || p.fourier() ||
                       p.eps_per_feature;
    return newer ? 2 : 1;
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* la = static_cast<const fb::LinearAttention*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = la->heads();
    mixer["dk"] = la->dk();
    mixer["dv"] = la->dv();
    mixer["feature_map"] = InspectName(la->feature_map());
    mixer["eps"] = FloatForJson(la->eps());
    mixer["causal"] = la->causal();
    DescribeRotary(la->rotary(), refs, &mixer);
    if (la->feature_map() == fb::FeatureMap::Favor ||
        la->feature_map() == fb::FeatureMap::FavorHyperbolic ||
        la->feature_map() == fb::FeatureMap::FavorStabilized ||
        la->feature_map() == fb::FeatureMap::GeneralizedRelu ||
        la->feature_map() == fb::FeatureMap::RandomFourier ||
        la->feature_map() == fb::FeatureMap::SmoothedRandomFourier) {
      mixer["favor_features"] = la->favor_features();
      mixer["softmax_temp"] = FloatForJson(la->softmax_temp());
      mixer["omega"] = la->omega();
    }
    if (la->feature_map() == fb::FeatureMap::FavorStabilized ||
        la->feature_map() == fb::FeatureMap::GeneralizedRelu) {
      mixer["feature_eps"] = FloatForJson(la->feature_eps());
    }
    if (la->feature_map() == fb::FeatureMap::SmoothedRandomFourier) {
      mixer["smoothing"] = FloatForJson(la->smoothing());
    }
    if (la->eps_per_feature()) mixer["eps_per_feature"] = true;
    // S (H, C, dv) and z (H, C) per stream, and their compensations unless a
    // session keeps plain sums; encoders keep none between calls.
    const uint64_t c = FeatureWidth(la);
    const uint64_t sums = la->causal() ? 4 * uint64_t{la->heads()} * (c * la->dv() + c) : 0;
    mixer["state_bytes"] = 2 * sums;
    mixer["state_bytes_plain_sums"] = sums;
    mixer["state_grows_with_length"] = false;
    mixer["query"] = refs.Dense(la->query());
    mixer["key"] = refs.Dense(la->key());
    mixer["value"] = refs.Dense(la->value());
    mixer["out"] = refs.Dense(la->out());
  }

  std::string DescribeText(const OrderedJson& m) const override {
    std::string text = InspectFields(m, {"heads", "dk", "dv", "feature_map"});
    if (m.contains("favor_features")) {
      text += " m=" + std::to_string(m["favor_features"].get<uint32_t>()) + InspectFields(m, {"softmax_temp"});
    }
    if (m.contains("feature_eps")) text += InspectFields(m, {"feature_eps"});
    if (m.contains("smoothing")) text += InspectFields(m, {"smoothing"});
    text += InspectFields(m, {"eps"});
    if (m.contains("eps_per_feature")) text += " eps_per_feature";
    return text + InspectRotary(m) + InspectEncoderNote(m);
  }
};

}  // namespace

const char* FeatureMapName(FeatureMap f) {
  switch (f) {
    case FeatureMap::kEluPlusOne: return "elu_plus_one";
    case FeatureMap::kRelu: return "relu";
    case FeatureMap::kPoly2: return "poly2";
    case FeatureMap::kFavor: return "favor";
    case FeatureMap::kFavorHyperbolic: return "favor (fast-transformers)";
    case FeatureMap::kFavorStabilized:
      return "favor_stabilized";
    case FeatureMap::kGeneralizedRelu:
      return "generalized_relu";
    case FeatureMap::kRandomFourier: return "random_fourier";
    case FeatureMap::kSmoothedRandomFourier: return "smoothed_random_fourier";
  }
  return "?";
}

const MixerConverter& LinearAttentionConverter() {
  static const LinearAttentionConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
