// Small models for unit tests, built in memory with the converter's writer
// from a config JSON and seeded random weights (no Python needed).
#ifndef RECUR_TESTS_COMMON_TEST_MODELS_H_
#define RECUR_TESTS_COMMON_TEST_MODELS_H_

#include <random>
#include <string>

#include "converter/config.h"
#include "converter/writer.h"

namespace recur::testing {

// Pre-norm, tokens (vocab 11), 2 blocks, learned positions (64), softmax head.
inline const char* kTinyTokensConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 64,
  "mixer": {"type": "linear_attention", "heads": 2, "dk": 8, "dv": 8,
            "feature_map": "elu_plus_one", "eps": 1e-6},
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

// Post-norm, features (width 5, projected), 1 block, no head.
inline const char* kTinyFeaturesConfig = R"({
  "layout": "recur", "d_model": 12, "n_layers": 1, "norm_placement": "post",
  "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 5, "projection": true},
  "max_positions": 0,
  "mixer": {"type": "linear_attention", "heads": 3, "dk": 4, "dv": 4,
            "feature_map": "elu_plus_one", "eps": 1e-6},
  "ffn": {"d_ff": 24, "activation": "relu"}, "final_norm": false, "head": null})";

// Every tensor the config needs under its `layout` name, N(0, 0.3²) values
// (norm weights around 1).
inline converter::TensorMap RandomTensors(const converter::ModelDescription& desc, unsigned seed,
                                          converter::Layout layout = converter::Layout::kRecur) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  converter::TensorMap tensors;
  for (const auto& e : converter::ExpectedTensors(desc, layout)) {
    converter::Tensor t;
    t.shape = e.shape;
    size_t n = 1;
    for (int64_t d : e.shape) n *= size_t(d);
    t.data.resize(n);
    const bool norm_weight = e.name.find("norm") != std::string::npos &&
                             e.name.size() > 7 && e.name.rfind(".weight") == e.name.size() - 7;
    for (float& v : t.data) v = normal(rng) + (norm_weight ? 1.0f : 0.0f);
    tensors[e.source_name] = std::move(t);
  }
  return tensors;
}

// The same for a config JSON (either layout; kAuto decides as the converter does).
inline converter::TensorMap RandomTensors(const char* config, unsigned seed,
                                          converter::Layout layout = converter::Layout::kAuto) {
  auto parsed = converter::ParseConfig(config, layout);
  if (!parsed.ok()) return {};
  return RandomTensors(parsed.value().desc, seed, parsed.value().layout);
}

// Model bytes (64-byte aligned) for `config`; empty on failure with *error set.
inline converter::AlignedBytes BuildTestModel(const char* config, unsigned seed,
                                              std::string* error = nullptr) {
  auto parsed = converter::ParseConfig(config);
  if (!parsed.ok()) {
    if (error) *error = parsed.message();
    return {};
  }
  auto bytes = converter::BuildModel(parsed.value().desc, RandomTensors(parsed.value().desc, seed));
  if (!bytes.ok()) {
    if (error) *error = bytes.message();
    return {};
  }
  return std::move(bytes.value());
}

}  // namespace recur::testing

#endif  // RECUR_TESTS_COMMON_TEST_MODELS_H_
