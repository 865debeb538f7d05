// Writes the fuzz targets' seed corpora from real models:
//   make_seeds OUT_DIR  →  OUT_DIR/{model,state,safetensors,config,npy,gguf}/
// model: every small test model (tests/common/test_models.h) in f32, the
// mixed one in f16, bf16 and int8, and kInt4SeedConfig in int4 and q8_0
// and with its token embedding in f16, int8, int4 and q8_0;
// state: a saved blob of each state_fuzz_models.h model after a few steps
// (byte 0 picks the model; the second copy asks for stamping, see
// state_load_fuzz.cc); safetensors: their weights; config: their config
// JSON (scripts/fuzz.sh adds models/configs); npy: small arrays of every
// dtype recur-run reads; gguf: small GGUF files (metadata of every value
// type and arrays, tensors of common ggml types).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "converter/config.h"
#include "converter/gguf.h"
#include "converter/safetensors.h"
#include "converter/writer.h"
#include "npy.h"
#include "recur/recur.h"
#include "state_fuzz_models.h"

namespace {

using namespace recur::impl::testing;  // NOLINT

const std::vector<const char*> kConfigs = {
    kTinyTokensConfig,        kTinyFeaturesConfig, kTinySoftmaxConfig, kTinySoftmaxFeaturesConfig,
    kTinySlidingWindowConfig, kTinyAftConfig,      kTinyFlashConfig,   kTinyLinformerConfig,
    kTinyReformerConfig,      kTinyAftLocalConfig, kTinyAftConvConfig, kTinyAftFullConfig,
    kTinyGauConfig,           kTinyRetNetConfig,   kTinyMixedConfig,   kTinyRotaryConfig,
    kTinyTokenShiftConfig,    kTinyBlockLocalConfig, kTinyBlockLocalEncoderConfig,
    kTinyReformerTransformersConfig, kTinyRwkv7Config, kTinyGatedDeltaNetConfig, kTinyGlaConfig};

// int4 and q8_0 need input dimensions that are multiples of the group (32):
// the mixed model's d_model 16 is not. Two mixers, so their seeds reach the
// dense layers of linear and softmax attention and the FFN.
const char* kInt4SeedConfig = R"({
  "layout": "recur", "d_model": 32, "n_layers": 2, "norm_placement": "pre",
  "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 11},
  "max_positions": 16,
  "mixer": [{"type": "linear_attention", "heads": 2, "dk": 16, "dv": 16,
             "feature_map": "elu_plus_one", "eps": 1e-6},
            {"type": "softmax_attention", "heads": 2, "dk": 16, "dv": 16}],
  "ffn": {"d_ff": 64, "activation": "gelu"}, "final_norm": true,
  "head": {"out": 11, "activation": "softmax"}})";

bool Write(const std::string& path, const void* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

// A .npy v1.0 image: header dict padded to a multiple of 64 bytes.
std::vector<uint8_t> Npy(const char* descr, const char* shape, const void* data, size_t bytes) {
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " +
                       shape + ", }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                              uint8_t(header.size() & 0xff), uint8_t(header.size() >> 8)};
  out.insert(out.end(), header.begin(), header.end());
  const auto* p = static_cast<const uint8_t*>(data);
  out.insert(out.end(), p, p + bytes);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(
        stderr, "usage: %s OUT_DIR (with subdirectories model state safetensors config npy gguf)\n",
        argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  int failures = 0;
  auto write = [&](const std::string& name, const void* data, size_t size) {
    if (!Write(out + "/" + name, data, size)) {
      std::fprintf(stderr, "make_seeds: cannot write %s/%s\n", out.c_str(), name.c_str());
      ++failures;
    }
  };
  for (size_t i = 0; i < kConfigs.size(); ++i) {
    std::string error;
    auto bytes = BuildTestModel(kConfigs[i], 1, &error);
    if (bytes.empty()) {
      std::fprintf(stderr, "make_seeds: test model %zu: %s\n", i, error.c_str());
      return 1;
    }
    write("model/tiny" + std::to_string(i) + ".recur", bytes.data(), bytes.size());
    write("config/tiny" + std::to_string(i) + ".json", kConfigs[i], std::strlen(kConfigs[i]));
    auto tensors = RandomTensors(kConfigs[i], 1);
    auto st = recur::impl::converter::SerializeSafetensors(tensors, {{"producer", "make_seeds"}});
    write("safetensors/tiny" + std::to_string(i) + ".safetensors", st.data(), st.size());
  }
  using recur::impl::converter::WeightType;
  for (auto dtype : {WeightType::kF16, WeightType::kBF16, WeightType::kI8}) {
    recur::impl::converter::BuildOptions options;
    options.weight_dtype = dtype;
    options.quantize_head = true;
    auto bytes = recur::impl::converter::BuildModelFromConfig(
        kTinyMixedConfig, RandomTensors(kTinyMixedConfig, 2), recur::impl::converter::Layout::kAuto,
        options);
    if (!bytes.ok()) {
      std::fprintf(stderr, "make_seeds: quantised model: %s\n", bytes.message().c_str());
      return 1;
    }
    write(std::string("model/mixed_") + recur::impl::converter::WeightTypeName(dtype) + ".recur",
          bytes->data(), bytes->size());
  }
  for (auto dtype : {WeightType::kI4, WeightType::kQ8_0}) {
    recur::impl::converter::BuildOptions options;
    options.weight_dtype = dtype;  // int4's options.group: the default, 32
    options.quantize_head = true;
    auto bytes = recur::impl::converter::BuildModelFromConfig(
        kInt4SeedConfig, RandomTensors(kInt4SeedConfig, 3), recur::impl::converter::Layout::kAuto,
        options);
    const char* name = recur::impl::converter::WeightTypeName(dtype);
    if (!bytes.ok()) {
      std::fprintf(stderr, "make_seeds: %s model: %s\n", name, bytes.message().c_str());
      return 1;
    }
    write(std::string("model/") + name + ".recur", bytes->data(), bytes->size());
  }
  // The token embedding narrow (the runtime decodes a row per token), the
  // rest as above in int4.
  for (auto dtype : {WeightType::kF16, WeightType::kI8, WeightType::kI4, WeightType::kQ8_0}) {
    recur::impl::converter::BuildOptions options;
    options.weight_dtype = WeightType::kI4;
    options.dtype_overrides["input.embedding"] = dtype;
    auto bytes = recur::impl::converter::BuildModelFromConfig(
        kInt4SeedConfig, RandomTensors(kInt4SeedConfig, 4), recur::impl::converter::Layout::kAuto,
        options);
    const char* name = recur::impl::converter::WeightTypeName(dtype);
    if (!bytes.ok()) {
      std::fprintf(stderr, "make_seeds: %s embedding: %s\n", name, bytes.message().c_str());
      return 1;
    }
    write(std::string("model/embedding_") + name + ".recur", bytes->data(), bytes->size());
  }

  // Each state model twice: compensated sums, then plain (byte 0's bit 6).
  const auto configs = recur::impl::fuzz::StateFuzzConfigs();
  for (size_t k = 0; k < 2 * configs.size(); ++k) {
    const size_t i = k % configs.size();
    const bool plain = k >= configs.size();
    auto bytes = BuildTestModel(configs[i], 1);
    recur_model* model = nullptr;
    recur_session* session = nullptr;
    recur_session_options options = recur_session_options_default();
    options.batch = 2;
    options.backend = "highway";
    options.max_context = recur::impl::fuzz::kStateFuzzMaxContext;
    options.state_sums = plain ? RECUR_STATE_SUMS_PLAIN : RECUR_STATE_SUMS_COMPENSATED;
    recur_model_info info{};
    info.struct_size = sizeof(info);
    if (recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) != RECUR_OK ||
        recur_model_get_info(model, &info) != RECUR_OK ||
        recur_session_create(model, &options, &session) != RECUR_OK) {
      std::fprintf(stderr, "make_seeds: state model %zu: %s\n", i, recur_last_error());
      return 1;
    }
    const int32_t tokens[2] = {3, 4};
    const float features[10] = {0.5f, -1, 0.25f, 2, 0, 1, 1, -0.5f, 0, 0.75f};
    recur_input in = info.input_kind == RECUR_INPUT_TOKENS
                         ? recur_input{tokens, nullptr, 2}
                         : recur_input{nullptr, features, 2 * size_t(info.feature_width)};
    std::vector<float> y(2 * info.output_width);
    for (int t = 0; t < 5; ++t) recur_session_step(session, &in, y.data());
    size_t size = 0;
    recur_session_state_size(session, &size);
    std::vector<uint8_t> blob(1 + size);
    recur_session_state_save(session, 0, blob.data() + 1, size);
    const std::string name = "state/model" + std::to_string(i) + (plain ? "_plain" : "");
    blob[0] = uint8_t(i | (plain ? 0x40 : 0));
    write(name + ".blob", blob.data(), blob.size());
    blob[0] = uint8_t(blob[0] | 0x80);
    write(name + "_stamped.blob", blob.data(), blob.size());
    recur_session_free(session);
    recur_model_free(model);
  }

  const float f4[6] = {1, -2, 3.5f, 0, 1e-3f, 7};
  const double f8[3] = {0.5, -0.25, 8};
  const int32_t i4[4] = {0, 5, 10, 255};
  const int64_t i8[2] = {1, 256};
  for (const auto& [name, bytes] :
       {std::pair{"f4.npy", Npy("<f4", "(2, 3)", f4, sizeof(f4))},
        std::pair{"f8.npy", Npy("<f8", "(3,)", f8, sizeof(f8))},
        std::pair{"i4.npy", Npy("<i4", "(1, 4)", i4, sizeof(i4))},
        std::pair{"i8.npy", Npy("<i8", "(2,)", i8, sizeof(i8))},
        std::pair{"empty.npy", Npy("<f4", "(0, 5)", nullptr, 0)}}) {
    write(std::string("npy/") + name, bytes.data(), bytes.size());
  }
  {
    using recur::impl::converter::GgufScalar;
    using recur::impl::converter::GgufType;
    using recur::impl::converter::GgufValue;
    namespace gt = recur::impl::converter::ggml_type;
    const std::vector<std::pair<std::string, GgufValue>> metadata = {
        {"general.architecture", GgufValue(std::string("llama"))},
        {"u8", GgufValue(uint8_t{1})},
        {"i8", GgufValue(int8_t{-1})},
        {"u16", GgufValue(uint16_t{2})},
        {"i16", GgufValue(int16_t{-2})},
        {"u32", GgufValue(uint32_t{3})},
        {"i32", GgufValue(int32_t{-3})},
        {"f32", GgufValue(0.5f)},
        {"bool", GgufValue(true)},
        {"u64", GgufValue(uint64_t{4})},
        {"i64", GgufValue(int64_t{-4})},
        {"f64", GgufValue(0.25)},
        {"tokenizer.ggml.tokens",
         GgufValue::Array(GgufType::kString, {std::string("<s>"), std::string("a")})},
        {"tokenizer.ggml.scores", GgufValue::Array(GgufType::kF32, {0.0f, -1.0f})},
        {"flags", GgufValue::Array(GgufType::kBool, {false, true})}};
    auto block = [](size_t n) {
      std::vector<uint8_t> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 13 + 5);
      return b;
    };
    const std::vector<recur::impl::converter::GgufTensorData> tensors = {
        {"f32", gt::kF32, {3, 2}, block(24)},
        {"f16", gt::kF16, {4}, block(8)},
        {"q8_0", gt::kQ8_0, {32, 2}, block(68)},
        {"q4_0", gt::kQ4_0, {64}, block(36)},
        {"q4_k", gt::kQ4_K, {256, 1, 1}, block(144)}};
    for (uint32_t alignment : {32u, 64u}) {
      auto bytes = recur::impl::converter::SerializeGguf(metadata, tensors, alignment);
      write("gguf/tiny_align" + std::to_string(alignment) + ".gguf", bytes.data(), bytes.size());
    }
    auto bytes = recur::impl::converter::SerializeGguf(metadata, {});
    write("gguf/metadata_only.gguf", bytes.data(), bytes.size());
  }
  if (failures) return 1;
  std::printf("make_seeds: seeds in %s\n", out.c_str());
  return 0;
}
