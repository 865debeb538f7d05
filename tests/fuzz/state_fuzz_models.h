// The models the state-blob fuzz target loads blobs into, one per kind of
// recurrent state; make_seeds.cc saves a blob of each as a seed.
#ifndef RECUR_TESTS_FUZZ_STATE_FUZZ_MODELS_H_
#define RECUR_TESTS_FUZZ_STATE_FUZZ_MODELS_H_

#include <vector>

#include "test_models.h"

namespace recur::impl::fuzz {

// Softmax sessions hold this many positions, so that blobs stay small.
constexpr uint32_t kStateFuzzMaxContext = 16;

inline std::vector<const char*> StateFuzzConfigs() {
  using namespace recur::impl::testing;  // NOLINT
  // Append only: a blob's byte 0 picks the model by index (regressions/ keeps
  // blobs for index 6).
  return {kTinyTokensConfig,   kTinySoftmaxFeaturesConfig, kTinyMixedConfig, kTinySlidingWindowConfig,
          kTinyAftLocalConfig, kTinyAftFullConfig,         kTinyGauConfig,   kTinyFeaturesConfig,
          kTinyAftConfig,      kTinyAftConvConfig};
}

}  // namespace recur::impl::fuzz

#endif  // RECUR_TESTS_FUZZ_STATE_FUZZ_MODELS_H_
