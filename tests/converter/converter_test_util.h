// Helpers for the converter tests: configs, seeded tensors, hand-made
// safetensors images, temporary folders.
#ifndef RECUR_TESTS_CONVERTER_CONVERTER_TEST_UTIL_H_
#define RECUR_TESTS_CONVERTER_CONVERTER_TEST_UTIL_H_

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "converter/config.h"
#include "converter/model_description.h"
#include "test_models.h"

namespace recur::impl::converter::testing {

// Pre-norm, tokens, learned positions, log-softmax head (every tensor kind).
inline const char* kTokensConfig = R"({
  "layout": "recur", "d_model": 16, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 8,
  "mixer": {"type": "linear_attention", "heads": 2, "dk": 8, "dv": 4,
            "feature_map": "elu_plus_one", "eps": 1e-6},
  "ffn": {"d_ff": 32, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "log_softmax"},
  "notes": "test model", "input_description": "ids", "output_description": "log-probs"})";

// Post-norm, projected features, no final norm, no head.
inline const char* const kFeaturesConfig = recur::impl::testing::kTinyFeaturesConfig;

// fast-transformers builder kwargs: d_model = 2·8 = 16.
inline const char* kFastTransformersConfig = R"({
  "n_layers": 2, "n_heads": 2, "query_dimensions": 4, "value_dimensions": 8,
  "feed_forward_dimensions": 24, "activation": "gelu", "final_normalization": true,
  "attention_type": "causal-linear"})";

inline ModelDescription Describe(const char* config, Layout layout = Layout::kAuto) {
  auto parsed = ParseConfig(config, layout);
  if (!parsed.ok()) return {};
  return parsed.value().desc;
}

using recur::impl::testing::RandomTensors;

// A safetensors image from a literal header and data bytes.
inline std::vector<uint8_t> MakeSafetensors(const std::string& header,
                                            const std::vector<uint8_t>& data,
                                            uint64_t header_len_override = UINT64_MAX) {
  std::vector<uint8_t> out(8);
  const uint64_t len = header_len_override == UINT64_MAX ? header.size() : header_len_override;
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(len >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

template <class T>
std::vector<uint8_t> BytesOf(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// A fresh folder under /tmp, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/recur_converter_test_XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    path_ = made ? made : "/tmp";
  }
  ~TempDir() {
    if (path_ != "/tmp") {
      std::string cmd = "rm -rf '" + path_ + "'";
      int rc = std::system(cmd.c_str());
      (void)rc;
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const void* data, std::size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
}

inline void WriteFile(const std::string& path, const std::string& text) {
  WriteFile(path, text.data(), text.size());
}

inline std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace recur::impl::converter::testing

#endif  // RECUR_TESTS_CONVERTER_CONVERTER_TEST_UTIL_H_
