// The fast-transformers layout: a TransformerEncoder or RecurrentTransformerEncoder
// of the library (pytorch-fast-transformers 0.4.0), as its builders make it,
// with the builder's keyword arguments as the config and the model's
// state_dict names (models/configs/README.md, "fast-transformers layout";
// docs/layouts.md, "fast-transformers", for what is refused and why).
#include <algorithm>
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
#include "converter/mixers/sliding_window.h"
#include "converter/mixers/softmax_attention.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

// What MapTensors needs beyond the description.
struct FastTransformersOptions : LayoutOptions {
  // softmax_temp·√dk: the library's temperature folded into the query
  // projection, since recur's softmax mixers scale by 1/√dk.
  float query_scale = 1.0f;
  uint32_t heads = 0;
  uint32_t query_dimensions = 0;
  // GeneralizedRandomFeatures: φ(x) = relu(ωᵀ(x·√t)) with ω [query_dimensions,
  // m]; ω·√t is folded into the query and key projections, leaving recur's
  // relu map on m features. 0: another map.
  uint32_t random_features = 0;
  float random_scale = 1.0f;  // √t
};

enum class Attention { kFull, kLinear, kCausalLinear, kLocal, kAftFull };

// The attention types of the library's registries that recur cannot run,
// with the reason.
struct RefusedAttention {
  const char* name;
  const char* reason;
};
constexpr RefusedAttention kRefusedAttention[] = {
    {"reformer",
     "ReformerAttention draws its hash planes with normal_() in every round of every forward "
     "call; they are not in the state_dict, so no conversion can reproduce its buckets (and "
     "its torch.argsort is not stable within a bucket)"},
    {"clustered",
     "ClusteredAttention clusters the queries of the whole sequence (k-means over hashes of "
     "planes drawn on every forward call): no recurrent form, and the planes are not in the "
     "state_dict"},
    {"improved-clustered",
     "ImprovedClusteredAttention clusters the queries of the whole sequence (k-means over "
     "hashes of planes drawn on every forward call): no recurrent form, and the planes are "
     "not in the state_dict"},
    {"causal-improved-clustered",
     "ImprovedClusteredCausalAttention clusters the queries of the whole sequence (k-means "
     "over hashes of planes drawn on every forward call): no recurrent form, and the planes "
     "are not in the state_dict"},
    {"exact-topk",
     "ExactTopKAttention keeps each query's topk largest scores over all keys; recur has no "
     "top-k attention"},
    {"conditional-full",
     "ConditionalFullAttention switches between full and another attention on the sequence's "
     "length (length_limit), which a stream does not have"},
};

// "attention_type": a registry key, default "full" (the builder's).
Status ParseAttentionType(const KeyReader& r, const json& root, Attention* out) {
  *out = Attention::kFull;
  auto it = root.find("attention_type");
  if (it == root.end()) return Status::Ok();
  static const char* const kTypes[] = {"full", "linear", "causal-linear", "local", "aft-full"};
  if (it->is_string()) {
    const std::string type = it->get<std::string>();
    for (const RefusedAttention& refused : kRefusedAttention) {
      if (type == refused.name || type.rfind(std::string(refused.name) + ":", 0) == 0) {
        return r.Invalid("attention_type", "\"" + type + "\" is not supported: " + refused.reason);
      }
    }
    if (type.find_first_of(":,") != std::string::npos) {
      return r.Invalid("attention_type",
                       "\"" + type +
                           "\" composes attentions (the builder's \"outer:inner\" form); of the "
                           "library's attentions only conditional-full decorates another, and "
                           "it is not supported");
    }
  }
  std::size_t index = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(root, "attention_type", "", kTypes, &index));
  *out = static_cast<Attention>(index);
  return Status::Ok();
}

// A key that only some attention types read: refused with the others, so
// that it cannot be mistaken for one that has an effect.
Status OnlyFor(const KeyReader& r, const json& root, const char* key, bool applies,
               const char* types) {
  if (root.contains(key) && !applies) {
    return r.Invalid(key, std::string("applies only to attention_type ") + types);
  }
  return Status::Ok();
}

// The optional keys every random feature map shares that change only how
// (and when) ω is drawn: the converted model uses the ω of the state_dict.
Status ParseRandomDrawKeys(const KeyReader& r, const json& fm) {
  bool flag = false;
  RECUR_RETURN_IF_ERROR(r.Bool(fm, "orthogonal", "feature_map", &flag, false));
  RECUR_RETURN_IF_ERROR(r.Bool(fm, "deterministic_eval", "feature_map", &flag, false));
  uint32_t redraw = 1;
  RECUR_RETURN_IF_ERROR(r.UInt(fm, "redraw", "feature_map", 1, &redraw, false));
  return Status::Ok();
}

// "feature_map" of linear attention (the builder takes a factory; the
// config names it): absent or null, the library's elu_feature_map.
Status ParseFeatureMap(const KeyReader& r, const json& root, LinearAttentionParams* la,
                       FastTransformersOptions* o) {
  la->feature_map = FeatureMap::kEluPlusOne;
  auto fm = root.find("feature_map");
  if (fm == root.end() || fm->is_null()) return Status::Ok();
  if (!fm->is_object()) return r.Invalid("feature_map", "must be a JSON object");
  static const char* const kMaps[] = {"elu",
                                      "activation",
                                      "favor",
                                      "generalized_random",
                                      "random_fourier",
                                      "smoothed_random_fourier"};
  std::size_t type = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(*fm, "type", "feature_map", kMaps, &type));
  const uint32_t dq = la->dk;
  switch (type) {
    case 0:  // elu_feature_map
      return r.OnlyKeys(*fm, "feature_map", {"type"});
    case 1: {  // ActivationFunctionFeatureMap.factory(f): f is any Python callable
      RECUR_RETURN_IF_ERROR(r.OnlyKeys(*fm, "feature_map", {"type", "activation_function"}));
      static const char* const kFunctions[] = {"elu_plus_one", "relu"};
      std::size_t f = 0;
      RECUR_RETURN_IF_ERROR(r.Choice(*fm, "activation_function", "feature_map", kFunctions, &f));
      la->feature_map = f == 0 ? FeatureMap::kEluPlusOne : FeatureMap::kRelu;
      return Status::Ok();
    }
    case 2: {  // Favor
      RECUR_RETURN_IF_ERROR(r.OnlyKeys(*fm, "feature_map",
                                       {"type", "n_dims", "softmax_temp", "orthogonal", "stabilize",
                                        "redraw", "deterministic_eval"}));
      la->feature_map = FeatureMap::kFavorHyperbolic;
      la->favor_features = dq;  // n_dims None: query_dimensions
      if (KeyReader::Given(*fm, "n_dims")) {
        RECUR_RETURN_IF_ERROR(r.UInt(*fm, "n_dims", "feature_map", 1, &la->favor_features));
      }
      if (la->favor_features < 2) {
        return r.Invalid("feature_map.n_dims", "must be at least 2 (ω has n_dims // 2 columns)");
      }
      la->softmax_temp = 1.0f / std::sqrt(static_cast<float>(dq));
      if (KeyReader::Given(*fm, "softmax_temp")) {
        RECUR_RETURN_IF_ERROR(
            r.PositiveFloat(*fm, "softmax_temp", "feature_map", &la->softmax_temp));
      }
      bool stabilize = false;
      RECUR_RETURN_IF_ERROR(r.Bool(*fm, "stabilize", "feature_map", &stabilize, false));
      if (stabilize) {
        return r.Invalid("feature_map.stabilize",
                         "must be false: the stabilised Favor subtracts a maximum over the whole "
                         "sequence, which has no recurrent form");
      }
      return ParseRandomDrawKeys(r, *fm);
    }
    case 3: {  // GeneralizedRandomFeatures
      RECUR_RETURN_IF_ERROR(r.OnlyKeys(*fm, "feature_map",
                                       {"type", "n_dims", "softmax_temp", "orthogonal", "kernel_fn",
                                        "redraw", "deterministic_eval"}));
      o->random_features = dq;  // n_dims None: query_dimensions
      if (KeyReader::Given(*fm, "n_dims")) {
        RECUR_RETURN_IF_ERROR(r.UInt(*fm, "n_dims", "feature_map", 1, &o->random_features));
      }
      // The constructor's default is 1.0, but an explicit None reaches
      // RandomFourierFeatures, which turns it into 1/√query_dimensions.
      float t = 1.0f;
      if (auto st = fm->find("softmax_temp"); st != fm->end()) {
        if (st->is_null()) {
          t = 1.0f / std::sqrt(static_cast<float>(dq));
        } else {
          RECUR_RETURN_IF_ERROR(r.PositiveFloat(*fm, "softmax_temp", "feature_map", &t));
        }
      }
      o->random_scale = t == 1.0f ? 1.0f : static_cast<float>(std::sqrt(static_cast<double>(t)));
      static const char* const kKernels[] = {"relu"};
      std::size_t kernel = 0;
      RECUR_RETURN_IF_ERROR(
          r.Choice(*fm, "kernel_fn", "feature_map", kKernels, &kernel, /*required=*/false));
      la->feature_map = FeatureMap::kRelu;
      la->dk = o->random_features;
      return ParseRandomDrawKeys(r, *fm);
    }
    default: {  // RandomFourierFeatures, SmoothedRandomFourierFeatures
      const bool smoothed = type == 5;
      RECUR_RETURN_IF_ERROR(
          smoothed ? r.OnlyKeys(*fm, "feature_map",
                                {"type", "n_dims", "softmax_temp", "orthogonal", "smoothing",
                                 "redraw", "deterministic_eval"})
                   : r.OnlyKeys(*fm, "feature_map",
                                {"type", "n_dims", "softmax_temp", "orthogonal", "redraw",
                                 "deterministic_eval"}));
      la->feature_map = smoothed ? FeatureMap::kSmoothedRandomFourier : FeatureMap::kRandomFourier;
      // RandomFourierFeatures' own n_dims (ω has n_dims // 2 columns, the
      // scale is √(2/n_dims)): the smoothed map passes it n_dims − 1 (None:
      // query_dimensions − 1), and `n_dims or query_dimensions` turns a 0
      // into query_dimensions.
      uint32_t n_dims = dq;
      const bool given = KeyReader::Given(*fm, "n_dims");
      if (given) RECUR_RETURN_IF_ERROR(r.UInt(*fm, "n_dims", "feature_map", 1, &n_dims));
      uint32_t m = smoothed ? n_dims - 1 : n_dims;
      if (m == 0) m = dq;
      if (m < 2) {
        return r.Invalid(given ? "feature_map.n_dims" : "query_dimensions",
                         smoothed ? "leaves SmoothedRandomFourierFeatures no random features "
                                    "(its ω has (n_dims − 1) // 2 columns)"
                                  : "leaves RandomFourierFeatures no random features (its ω "
                                    "has n_dims // 2 columns)");
      }
      la->favor_features = m;
      la->softmax_temp = 1.0f / std::sqrt(static_cast<float>(dq));
      if (KeyReader::Given(*fm, "softmax_temp")) {
        RECUR_RETURN_IF_ERROR(
            r.PositiveFloat(*fm, "softmax_temp", "feature_map", &la->softmax_temp));
      }
      if (smoothed) {
        la->smoothing = 1.0f;
        RECUR_RETURN_IF_ERROR(
            r.FiniteFloat(*fm, "smoothing", "feature_map", &la->smoothing, false));
      }
      return ParseRandomDrawKeys(r, *fm);
    }
  }
}

Status ParseBuilderArguments(const KeyReader& r, const json& root, ModelDescription* d) {
  Attention attention = Attention::kFull;
  RECUR_RETURN_IF_ERROR(ParseAttentionType(r, root, &attention));
  // The dimensions are required although the builder has defaults for them:
  // n_heads and query_dimensions cannot be told apart from the weight shapes,
  // so a config that leaves them out is more likely incomplete than default.
  uint32_t n_layers = 0, n_heads = 0, dq = 0, dv = 0, d_ff = 0;
  RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "n_layers", &n_layers));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "n_heads", "", 1, &n_heads));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "query_dimensions", "", 1, &dq));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "value_dimensions", "", 1, &dv));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "feed_forward_dimensions", "", 1, &d_ff));
  RECUR_RETURN_IF_ERROR(r.OnlyKeys(root, "",
                                   {"layout",
                                    "notes",
                                    "input_description",
                                    "output_description",
                                    "builder",
                                    "attn_mask",
                                    "n_layers",
                                    "n_heads",
                                    "query_dimensions",
                                    "value_dimensions",
                                    "feed_forward_dimensions",
                                    "activation",
                                    "final_normalization",
                                    "dropout",
                                    "attention_dropout",
                                    "attention_type",
                                    "softmax_temp",
                                    "local_context",
                                    "feature_map",
                                    "max_sequence_length",
                                    "aft_parameterization"}));
  static const char* const kActivations[] = {"relu", "gelu"};
  std::size_t act = 0;  // builder default: relu
  RECUR_RETURN_IF_ERROR(r.Choice(root, "activation", "", kActivations, &act, /*required=*/false));
  bool final_norm = true;
  RECUR_RETURN_IF_ERROR(r.Bool(root, "final_normalization", "", &final_norm, /*required=*/false));
  double dropout = 0;  // training only: the converted model is the eval() forward
  RECUR_RETURN_IF_ERROR(r.NumberIn(root, "dropout", "", 0.0, 1.0, &dropout, false));
  RECUR_RETURN_IF_ERROR(r.NumberIn(root, "attention_dropout", "", 0.0, 1.0, &dropout, false));

  // Whether the model is causal is not a builder argument: a
  // RecurrentTransformerEncoder sees one position at a time, and a
  // TransformerEncoder is causal when its forward gets a TriangularCausalMask.
  static const char* const kBuilders[] = {"TransformerEncoderBuilder", "RecurrentEncoderBuilder"};
  std::size_t builder = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(root, "builder", "", kBuilders, &builder, /*required=*/false));
  const bool recurrent = builder == 1;
  bool causal = attention == Attention::kCausalLinear;
  if (recurrent) {
    if (attention != Attention::kFull && attention != Attention::kLinear &&
        attention != Attention::kCausalLinear) {
      return r.Invalid("attention_type",
                       "\"" + root.at("attention_type").get<std::string>() +
                           "\" is not a recurrent attention: the library's "
                           "RecurrentAttentionRegistry has only \"full\", \"linear\" and "
                           "\"causal-linear\"");
    }
    if (root.contains("attn_mask")) {
      return r.Invalid("attn_mask",
                       "applies only to builder \"TransformerEncoderBuilder\": a "
                       "RecurrentTransformerEncoder takes no mask (it is causal)");
    }
    causal = true;  // its "linear" is the same RecurrentLinearAttention as "causal-linear"
  } else if (root.contains("attn_mask")) {
    static const char* const kMasks[] = {"full", "triangular"};
    std::size_t mask = 0;
    RECUR_RETURN_IF_ERROR(r.Choice(root, "attn_mask", "", kMasks, &mask));
    causal = mask == 1;
    if (attention == Attention::kLinear && causal) {
      return r.Invalid("attn_mask",
                       "must be \"full\" for attention_type \"linear\": LinearAttention raises on "
                       "any other mask (a causal one is attention_type \"causal-linear\")");
    }
    if (attention == Attention::kCausalLinear && !causal) {
      return r.Invalid("attn_mask",
                       "must be \"triangular\" for attention_type \"causal-linear\": "
                       "CausalLinearAttention raises on any other mask");
    }
    if (attention == Attention::kAftFull && causal) {
      return r.Invalid("attn_mask",
                       "must be \"full\" for attention_type \"aft-full\": AFTFullAttention "
                       "multiplies the keys by the mask's additive matrix, so a causal mask's "
                       "−inf gives NaN");
    }
  }

  const bool softmax = attention == Attention::kFull || attention == Attention::kLocal;
  const bool linear = attention == Attention::kLinear || attention == Attention::kCausalLinear;
  RECUR_RETURN_IF_ERROR(OnlyFor(r, root, "softmax_temp", softmax, "\"full\" and \"local\""));
  RECUR_RETURN_IF_ERROR(
      OnlyFor(r, root, "local_context", attention == Attention::kLocal, "\"local\""));
  RECUR_RETURN_IF_ERROR(
      OnlyFor(r, root, "feature_map", linear, "\"linear\" and \"causal-linear\""));
  for (const char* key : {"max_sequence_length", "aft_parameterization"}) {
    RECUR_RETURN_IF_ERROR(OnlyFor(r, root, key, attention == Attention::kAftFull, "\"aft-full\""));
  }

  const uint64_t d_model = static_cast<uint64_t>(n_heads) * dv;
  if (d_model > std::numeric_limits<uint32_t>::max())
    return r.Error("n_heads·value_dimensions = " + std::to_string(d_model) + " is too large");

  auto options = std::make_shared<FastTransformersOptions>();
  options->heads = n_heads;
  options->query_dimensions = dq;
  d->d_model = static_cast<uint32_t>(d_model);
  d->norm_placement = NormPlacement::kPost;
  d->layer_norm_eps = 1e-5f;
  d->input = InputDescription{};
  d->input.kind = InputKind::kFeatures;
  d->input.feature_width = d->d_model;
  d->input.projection = false;
  d->input.max_positions = 0;

  // softmax_temp (Optional(Float)): the library uses `softmax_temp or
  // 1/sqrt(E)`, so 0 is the default too.
  if (softmax && KeyReader::Given(root, "softmax_temp")) {
    const json& t = root["softmax_temp"];
    if (!t.is_number() || !std::isfinite(t.get<double>())) {
      return r.Invalid("softmax_temp", "must be a number or null");
    }
    const double temp = t.get<double>();
    // LocalAttention multiplies its −1e24 mask entries by the temperature
    // too, so a negative one would attend to the masked positions.
    if (attention == Attention::kLocal && temp < 0) {
      return r.Invalid("softmax_temp",
                       "must not be negative for attention_type \"local\": LocalAttention "
                       "multiplies its −1e24 mask by the temperature");
    }
    if (temp != 0)
      options->query_scale = static_cast<float>(temp * std::sqrt(static_cast<double>(dq)));
  }

  BlockDescription block;
  switch (attention) {
    case Attention::kFull: {
      auto p = std::make_unique<SoftmaxAttentionParams>();
      p->heads = n_heads;
      p->dk = dq;
      p->dv = dv;
      p->causal = causal;
      block.mixer = MixerDescription(FindMixerType(fb::Mixer::SoftmaxAttention), std::move(p));
      break;
    }
    case Attention::kLocal: {
      // The library's window is [i − ⌊c/2⌋, i + ⌈c/2⌉) (local_product_cpu.cpp),
      // intersected with the mask: with a triangular one, the ⌊c/2⌋ + 1
      // positions up to i.
      uint32_t c = 0;
      RECUR_RETURN_IF_ERROR(r.UInt(root, "local_context", "", 1, &c));
      if (c > 65536) return r.Invalid("local_context", "must be at most 65536");
      if (!causal && c % 2 == 0) {
        return r.Invalid("local_context",
                         "must be odd without a causal mask: the library's window [i − c/2, i + "
                         "c/2) is one position longer on the left for an even c, and recur's "
                         "non-causal sliding window is symmetric");
      }
      auto p = std::make_unique<SlidingWindowParams>();
      p->heads = n_heads;
      p->dk = dq;
      p->dv = dv;
      p->window = causal ? c / 2 + 1 : c;
      p->causal = causal;
      block.mixer = MixerDescription(FindMixerType(fb::Mixer::SlidingWindow), std::move(p));
      break;
    }
    case Attention::kLinear:
    case Attention::kCausalLinear: {
      auto la = std::make_unique<LinearAttentionParams>();
      la->heads = n_heads;
      la->dk = dq;
      la->dv = dv;
      la->eps = 1e-6f;  // the attention's own default; not a builder argument
      la->causal = causal;
      RECUR_RETURN_IF_ERROR(ParseFeatureMap(r, root, la.get(), options.get()));
      block.mixer = MixerDescription(FindMixerType(fb::Mixer::LinearAttention), std::move(la));
      break;
    }
    case Attention::kAftFull: {
      // AFTFullAttention (after 0.4.0): logits k·(u vᵀ) over all positions.
      if (dq != dv) {
        return r.Invalid("value_dimensions",
                         "must equal query_dimensions for attention_type "
                         "\"aft-full\" (AFT is element-wise)");
      }
      auto af = std::make_unique<AftFullParams>();
      af->heads = n_heads;
      af->dk = dq;
      af->max_length = 1024;  // the library's defaults
      af->bias_rank = 64;
      RECUR_RETURN_IF_ERROR(r.UInt(root, "max_sequence_length", "", 1, &af->max_length, false));
      if (af->max_length > 65536) return r.Invalid("max_sequence_length", "must be at most 65536");
      RECUR_RETURN_IF_ERROR(r.UInt(root, "aft_parameterization", "", 1, &af->bias_rank, false));
      af->multiply = true;
      af->causal = false;
      block.mixer = MixerDescription(FindMixerType(fb::Mixer::AftFull), std::move(af));
      break;
    }
  }
  block.d_ff = d_ff;
  block.activation = act == 0 ? Activation::kRelu : Activation::kGelu;
  d->blocks.assign(n_layers, block);
  d->final_norm = final_norm;
  d->has_head = false;
  d->layout_options = options;
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

// `t` (a projection's weight or bias) times `scale`: softmax_temp folded into
// the query projection.
void Scale(float scale, ExpectedTensor* t) {
  t->transform = SourceTransform::kComputed;
  t->inputs = {{t->source_name, t->shape}};
  t->source_name.clear();
  t->compute = [scale](const std::vector<std::vector<float>>& in) {
    std::vector<float> out(in[0].size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] = static_cast<float>(static_cast<double>(in[0][i]) * scale);
    }
    return out;
  };
}

// `t`, the query or key projection's weight [H·m, d] or bias [H·m], made from
// the library's [H·dq(, d)] and ω [dq, m]: each head's block B becomes
// √softmax_temp·ωᵀB, so that recur's relu map of the projection is the
// library's kernel_fn(x̃ᵀω) (GeneralizedRandomFeatures).
void FoldFeatureProjection(const FastTransformersOptions& o, const std::string& omega,
                           ExpectedTensor* t) {
  const int64_t heads = o.heads, dq = o.query_dimensions, m = o.random_features;
  const int64_t row = t->shape.size() == 2 ? t->shape[1] : 1;
  std::vector<int64_t> source_shape = t->shape;
  source_shape[0] = heads * dq;
  t->transform = SourceTransform::kComputed;
  t->inputs = {{t->source_name, source_shape}, {omega, {dq, m}}};
  t->source_name.clear();
  const double scale = o.random_scale;
  t->compute = [heads, dq, m, row, scale](const std::vector<std::vector<float>>& in) {
    const std::vector<float>& w = in[0];
    const std::vector<float>& omega = in[1];
    std::vector<float> out(static_cast<std::size_t>(heads * m * row));
    std::vector<double> acc(static_cast<std::size_t>(row));
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j = 0; j < m; ++j) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t i = 0; i < dq; ++i) {
          const double a = omega[i * m + j];
          const float* src = w.data() + (h * dq + i) * row;
          for (int64_t c = 0; c < row; ++c) acc[c] += a * src[c];
        }
        float* dst = out.data() + (h * m + j) * row;
        for (int64_t c = 0; c < row; ++c) dst[c] = static_cast<float>(scale * acc[c]);
      }
    }
    return out;
  };
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

  void MapTensors(const ModelDescription& desc,
                  std::vector<ExpectedTensor>* tensors) const override {
    static const FastTransformersOptions kDefaults;
    const auto* o = dynamic_cast<const FastTransformersOptions*>(desc.layout_options.get());
    if (!o) o = &kDefaults;  // a description made by hand
    for (ExpectedTensor& t : *tensors) {
      uint32_t block = 0;
      std::string rest;
      if (SplitBlockName(t.name, &block, &rest)) {
        const std::string layer = "layers." + std::to_string(block) + ".";
        t.source_name = layer + BlockSourceName(rest);
        const bool query = rest.compare(0, 12, "mixer.query.") == 0;
        if (o->random_features && (query || rest.compare(0, 10, "mixer.key.") == 0)) {
          FoldFeatureProjection(*o, layer + "attention.inner_attention.feature_map.omega", &t);
        } else if (query && o->query_scale != 1.0f) {
          Scale(o->query_scale, &t);
        }
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
