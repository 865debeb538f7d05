// Definitions for test_models.h.
#include "test_models.h"

#include <random>
#include <utility>

#include "converter/config.h"
#include "converter/writer.h"
#include "recur/recur.h"

namespace recur::impl::testing {

const std::map<std::string, const char*>& TinyModelPerMixer() {
  static const std::map<std::string, const char*> models = {
      {"LinearAttention", kTinyTokensConfig},
      {"SoftmaxAttention", kTinySoftmaxConfig},
      {"SlidingWindow", kTinySlidingWindowConfig},
      {"AftSimple", kTinyAftConfig},
      {"Flash", kTinyFlashConfig},
      {"Linformer", kTinyLinformerConfig},
      {"AftLocal", kTinyAftLocalConfig},
      {"AftFull", kTinyAftFullConfig},
      {"Gau", kTinyGauConfig},
      {"Reformer", kTinyReformerConfig},
      {"RetNet", kTinyRetNetConfig},
      {"BlockLocal", kTinyBlockLocalConfig},
      {"Rwkv7", kTinyRwkv7Config},
      {"Mamba2", kTinyMamba2Config},
      {"GatedDeltaNet", kTinyGatedDeltaNetConfig},
      {"Gla", kTinyGlaConfig},
  };
  return models;
}

std::vector<std::string> CompiledBackends() {
  std::vector<std::string> names;
  const std::string list = recur_backends();
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find(", ", start);
    if (end == std::string::npos) end = list.size();
    names.push_back(list.substr(start, end - start));
    start = end + 2;
  }
  return names;
}

bool EncoderOnly(const std::string& tag) { return tag == "Linformer" || tag == "Reformer"; }

std::vector<const char*> TinyStepModels() {
  std::vector<const char*> configs;
  for (const auto& [tag, config] : TinyModelPerMixer()) {
    if (!EncoderOnly(tag)) configs.push_back(config);
  }
  configs.insert(configs.end(), {kTinyFeaturesConfig, kTinyAftConvConfig, kTinyMixedConfig,
                                 kTinyRotaryConfig, kTinyTokenShiftConfig, kTinyReversibleConfig,
                                 kTinyNoFfnConfig});
  return configs;
}

converter::TensorMap RandomTensors(const converter::ModelDescription& desc, unsigned seed,
                                   converter::Layout layout) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  converter::TensorMap tensors;
  for (const auto& e : converter::ExpectedTensors(desc, layout)) {
    // A source tensor feeds one or more model tensors (slices of a fused
    // projection); a made-up bias has none.
    std::vector<std::pair<std::string, std::vector<int64_t>>> sources;
    if (e.transform == converter::SourceTransform::kComputed) {
      for (const auto& input : e.inputs) sources.emplace_back(input.name, input.shape);
    } else if (e.transform != converter::SourceTransform::kZeros) {
      sources.emplace_back(e.source_name, e.SourceShape());
    }
    for (const auto& [name, shape] : sources) {
      if (tensors.count(name)) continue;
      converter::Tensor t;
      t.shape = shape;
      size_t n = 1;
      for (int64_t d : t.shape) n *= size_t(d);
      t.data.resize(n);
      const bool norm_weight = e.name.find("norm") != std::string::npos && e.name.size() > 7 &&
                               e.name.rfind(".weight") == e.name.size() - 7;
      for (float& v : t.data) v = normal(rng) + (norm_weight ? 1.0f : 0.0f);
      tensors[name] = std::move(t);
    }
  }
  return tensors;
}

converter::TensorMap RandomTensors(const char* config, unsigned seed,
                                   converter::Layout layout) {
  auto parsed = converter::ParseConfig(config, layout);
  if (!parsed.ok()) return {};
  return RandomTensors(parsed.value().desc, seed, parsed.value().layout);
}

namespace {

converter::AlignedBytes Build(const char* config, unsigned seed, converter::WeightType dtype,
                              std::string* error) {
  auto parsed = converter::ParseConfig(config);
  if (!parsed.ok()) {
    if (error) *error = parsed.message();
    return {};
  }
  converter::BuildOptions options;
  options.weight_dtype = dtype;
  auto bytes = converter::BuildModel(parsed.value().desc, RandomTensors(parsed.value().desc, seed),
                                     options);
  if (!bytes.ok()) {
    if (error) *error = bytes.message();
    return {};
  }
  return std::move(bytes.value());
}

}  // namespace

converter::AlignedBytes BuildTestModel(const char* config, unsigned seed, std::string* error) {
  return Build(config, seed, converter::WeightType::kF32, error);
}

converter::AlignedBytes BuildTestModel(const char* config, unsigned seed,
                                       converter::WeightType dtype) {
  return Build(config, seed, dtype, nullptr);
}

}  // namespace recur::impl::testing
