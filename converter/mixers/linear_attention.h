// Linear attention's converter parameters (converter/mixers/linear_attention.cc).
#ifndef RECUR_CONVERTER_MIXERS_LINEAR_ATTENTION_H_
#define RECUR_CONVERTER_MIXERS_LINEAR_ATTENTION_H_

#include <cstdint>

#include "converter/model_description.h"

namespace recur::impl::converter {

// See runtime/schema/recur.fbs (FeatureMap) for the maps and their widths.
enum class FeatureMap {
  kEluPlusOne,
  kRelu,
  kPoly2,
  kFavor,
  kFavorHyperbolic,
  kFavorStabilized,  // performer-pytorch's softmax kernel (encoder only)
  kGeneralizedRelu,  // performer-pytorch's generalized kernel, relu
  kRandomFourier,    // fast-transformers' RandomFourierFeatures
  kSmoothedRandomFourier,  // fast-transformers' SmoothedRandomFourierFeatures
};

// "elu_plus_one", "relu", "poly2", "favor", "favor (fast-transformers)",
// "favor_stabilized", "generalized_relu", "random_fourier",
// "smoothed_random_fourier"
const char* FeatureMapName(FeatureMap f);

// Config type "linear_attention"; also what the fast-transformers layout's
// "linear" and "causal-linear" attention map onto.
struct LinearAttentionParams : MixerParamsOf<LinearAttentionParams> {
  uint32_t heads = 0;
  uint32_t dk = 0;
  uint32_t dv = 0;
  FeatureMap feature_map = FeatureMap::kEluPlusOne;
  float eps = 1e-6f;
  // The maps with ω (favor()): m (fast-transformers' n_dims) and the
  // temperature (default 1/√dk); the tensor mixer.feature_map.omega is
  // [dk, OmegaColumns()].
  uint32_t favor_features = 0;
  float softmax_temp = 0.0f;
  // kFavorStabilized, kGeneralizedRelu: the ε added to every feature.
  float feature_eps = 0.0f;
  // kSmoothedRandomFourier: the constant last feature.
  float smoothing = 1.0f;
  // The denominator φ(q)·(z + eps) instead of φ(q)·z + eps.
  bool eps_per_feature = false;

  // The maps with a random projection ω (mixer.feature_map.omega).
  bool favor() const {
    return feature_map == FeatureMap::kFavor || feature_map == FeatureMap::kFavorHyperbolic ||
           feature_map == FeatureMap::kFavorStabilized ||
           feature_map == FeatureMap::kGeneralizedRelu || fourier();
  }
  bool fourier() const {
    return feature_map == FeatureMap::kRandomFourier ||
           feature_map == FeatureMap::kSmoothedRandomFourier;
  }
  uint32_t OmegaColumns() const {
    return feature_map == FeatureMap::kFavorHyperbolic || fourier() ? favor_features / 2
                                                                      : favor_features;
  }
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_LINEAR_ATTENTION_H_
