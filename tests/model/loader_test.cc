// The loader treats model bytes as untrusted: every malformed file is
// refused with a message that names the problem, and nothing crashes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "converter/config.h"
#include "converter/mixers/rwkv7.h"
#include "converter/writer.h"
#include "engine/model_loader.h"
#include "model/model.h"
#include "recur/recur.h"
#include "schema/recur_generated.h"
#include "test_models.h"

namespace {

using recur::impl::converter::AlignedBytes;
using recur::impl::testing::BuildTestModel;
using recur::impl::testing::kTinyTokensConfig;
namespace fb = recur::fb;

// Loads `bytes` (copied to aligned memory of exactly `size` bytes).
recur_status Load(const AlignedBytes& bytes, size_t size, uint32_t flags = 0) {
  AlignedBytes copy(bytes.begin(), bytes.begin() + std::min(size, bytes.size()));
  copy.resize(size, 0);
  recur_load_options options = recur_load_options_default();
  options.flags = flags;
  recur_model* model = nullptr;
  recur_status s = recur_model_load_buffer(copy.data(), copy.size(), &options, &model);
  if (s == RECUR_OK) {
    // A model that loads must also run.
    recur_session* session = nullptr;
    recur_model_info info{};
    info.struct_size = sizeof(info);
    if (recur_model_get_info(model, &info) == RECUR_OK &&
        recur_session_create(model, nullptr, &session) == RECUR_OK) {
      int32_t token = 0;
      std::vector<float> features(info.feature_width, 0.5f), out(info.output_width);
      recur_input in{info.input_kind == RECUR_INPUT_TOKENS ? &token : nullptr,
                     info.input_kind == RECUR_INPUT_TOKENS ? nullptr : features.data(),
                     info.input_kind == RECUR_INPUT_TOKENS ? 1 : features.size()};
      recur_session_step(session, &in, out.data());
      recur_session_free(session);
    }
    recur_model_free(model);
  }
  return s;
}

std::string Error() { return recur_last_error(); }

const fb::Model* Root(AlignedBytes& bytes) { return fb::GetSizePrefixedModel(bytes.data()); }

// Overwrites a scalar field in place (the field must be stored, not default).
// Generated tables derive privately from flatbuffers::Table, at offset 0.
template <typename T>
void Poke(const void* generated_table, uint16_t field, T value) {
  const auto* table = reinterpret_cast<const flatbuffers::Table*>(generated_table);
  const uint8_t* p = table->GetAddressOf(field);
  REQUIRE(p != nullptr);
  std::memcpy(const_cast<uint8_t*>(p), &value, sizeof(T));
}

// Builds `config`, overwrites one scalar field of block `block`'s mixer table
// (of type Table) and loads it: the loader's status (Error() has its message).
template <typename Table, typename T>
recur_status LoadWithMixerField(const char* config, uint32_t block, uint16_t field, T value) {
  auto bytes = BuildTestModel(config, 1);
  REQUIRE(!bytes.empty());
  const Table* table = Root(bytes)->blocks()->Get(block)->template mixer_as<Table>();
  REQUIRE(table != nullptr);
  Poke<T>(table, field, value);
  return Load(bytes, bytes.size());
}

}  // namespace

TEST_CASE("a valid model loads, with and without the Verifier") {
  auto bytes = BuildTestModel(kTinyTokensConfig, 1);
  REQUIRE(!bytes.empty());
  CHECK(Load(bytes, bytes.size()) == RECUR_OK);
  CHECK(Load(bytes, bytes.size(), RECUR_LOAD_TRUSTED) == RECUR_OK);
}

TEST_CASE("truncated files are refused at every length") {
  auto bytes = BuildTestModel(kTinyTokensConfig, 1);
  for (size_t size = 0; size < bytes.size(); size += (size < 512 ? 1 : 97)) {
    CHECK_MESSAGE(Load(bytes, size) != RECUR_OK, "size ", size);
  }
  Load(bytes, bytes.size() - 1);
  CHECK(Error().find("truncated") != std::string::npos);
  CHECK(Load(bytes, 3) == RECUR_INVALID_MODEL);
  CHECK(Error().find("too small") != std::string::npos);
}

TEST_CASE("a padded file is refused") {
  auto bytes = BuildTestModel(kTinyTokensConfig, 1);
  CHECK(Load(bytes, bytes.size() + 64) == RECUR_INVALID_MODEL);
  CHECK(Error().find("truncated or padded") != std::string::npos);
}

TEST_CASE("wrong file identifier") {
  auto bytes = BuildTestModel(kTinyTokensConfig, 1);
  bytes[8] = 'X';
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error().find("file identifier is not \"RCUR\"") != std::string::npos);
}

TEST_CASE("a GGUF file is named as one, with the way to convert it") {
  const uint8_t gguf[] = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t size : {size_t{4}, sizeof(gguf)}) {
    CHECK(Load(AlignedBytes(gguf, gguf + size), size) == RECUR_INVALID_MODEL);
    CHECK(Error().find("a GGUF file (llama.cpp's), not a recur model: convert it once with "
                       "recur-convert") != std::string::npos);
  }
}

TEST_CASE("a newer format version is refused with a clear message") {
  auto bytes = BuildTestModel(kTinyTokensConfig, 1);
  Poke<uint32_t>(Root(bytes), fb::Model::VT_FORMAT_VERSION, RECUR_FORMAT_VERSION + 1);
  CHECK(Load(bytes, bytes.size()) == RECUR_UNSUPPORTED);
  CHECK(Error().find("format version " + std::to_string(RECUR_FORMAT_VERSION + 1) +
                     " is newer than this runtime reads (" + std::to_string(RECUR_FORMAT_VERSION) +
                     ")") != std::string::npos);
  // A file stamped 1 (no version-2 feature) still loads, as every older file does.
  Poke<uint32_t>(Root(bytes), fb::Model::VT_FORMAT_VERSION, 1);
  CHECK(Load(bytes, bytes.size()) == RECUR_OK);
}

TEST_CASE("an unknown mixer union tag is refused") {
  auto bytes = BuildTestModel(kTinyTokensConfig, 1);
  const fb::Block* block = Root(bytes)->blocks()->Get(1);
  Poke<uint8_t>(block, fb::Block::VT_MIXER_TYPE, 42);
  CHECK(Load(bytes, bytes.size(), RECUR_LOAD_TRUSTED) == RECUR_UNSUPPORTED);
  CHECK(Error().find("blocks.1: mixer type 42 is not supported") != std::string::npos);
}

TEST_CASE("a tensor of the wrong shape is named with the expected shape") {
  auto parsed = recur::impl::converter::ParseConfig(kTinyTokensConfig);
  REQUIRE(parsed.ok());
  auto tensors = recur::impl::testing::RandomTensors(parsed->desc, 1);
  auto& key = tensors["blocks.1.mixer.key.weight"];
  key.shape = {8, 16};
  key.data.resize(8 * 16);
  recur::impl::converter::BuildOptions options;
  options.validate = false;
  options.self_check = false;
  auto bytes = recur::impl::converter::BuildModel(parsed->desc, tensors, options);
  REQUIRE(bytes.ok());
  CHECK(Load(*bytes, bytes->size()) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.1.mixer.key.weight: tensor 'blocks.1.mixer.key.weight' has shape "
                   "[8,16], expected [16,16]");
}

TEST_CASE("a missing tensor is named") {
  auto parsed = recur::impl::converter::ParseConfig(kTinyTokensConfig);
  REQUIRE(parsed.ok());
  auto tensors = recur::impl::testing::RandomTensors(parsed->desc, 1);
  tensors.erase("blocks.0.ffn.linear2.weight");
  recur::impl::converter::BuildOptions options;
  options.validate = false;
  options.self_check = false;
  auto bytes = recur::impl::converter::BuildModel(parsed->desc, tensors, options);
  REQUIRE(bytes.ok());
  CHECK(Load(*bytes, bytes->size()) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0.ffn.linear2.weight is missing (expected shape [16,32])");
}

TEST_CASE("tensor records that point outside the data or are misaligned") {
  auto bytes = BuildTestModel(kTinyTokensConfig, 1);
  const fb::Tensor* t = Root(bytes)->tensors()->Get(3);
  const uint64_t offset = t->offset();
  Poke<uint64_t>(t, fb::Tensor::VT_OFFSET, offset + 4);
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error().find("is not 64-byte aligned") != std::string::npos);
  Poke<uint64_t>(t, fb::Tensor::VT_OFFSET, uint64_t{1} << 40);
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error().find("outside the") != std::string::npos);
  Poke<uint64_t>(t, fb::Tensor::VT_OFFSET, offset);
  Poke<uint64_t>(t, fb::Tensor::VT_SIZE, t->size() + 4);
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error().find("does not match shape") != std::string::npos);
}

TEST_CASE("random corruption of the metadata never crashes the loader") {
  const auto clean = BuildTestModel(kTinyTokensConfig, 1);
  uint32_t fb_size;
  std::memcpy(&fb_size, clean.data(), 4);
  std::mt19937 rng(42);
  int refused = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    AlignedBytes bytes = clean;
    const int flips = 1 + int(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      bytes[rng() % (4 + fb_size)] ^= uint8_t(1u << (rng() % 8));
    }
    refused += Load(bytes, bytes.size()) != RECUR_OK;
  }
  MESSAGE(refused, " of 3000 corrupted models refused, the rest loaded and ran");
  CHECK(refused > 0);
}

namespace {
// kTinyTokensConfig with another feature map ("favor" and the random Fourier
// maps add n_features 6, the smoothed one smoothing 0.5).
std::string TinyWithFeatureMap(const std::string& map) {
  std::string config = kTinyTokensConfig;
  const std::string from = "\"feature_map\": \"elu_plus_one\"";
  std::string to = "\"feature_map\": \"" + map + "\"";
  if (map == "favor" || map == "random_fourier" || map == "smoothed_random_fourier") {
    to += ", \"n_features\": 6";
  }
  if (map == "smoothed_random_fourier") to += ", \"smoothing\": 0.5";
  config.replace(config.find(from), from.size(), to);
  return config;
}
}  // namespace

TEST_CASE("feature maps: every map loads and steps, bad Favor fields are named") {
  for (const char* map : {"relu", "poly2", "favor", "random_fourier", "smoothed_random_fourier"}) {
    CAPTURE(map);
    auto bytes = BuildTestModel(TinyWithFeatureMap(map).c_str(), 1);
    REQUIRE(!bytes.empty());
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
  }
  const std::string favor = TinyWithFeatureMap("favor");
  {
    CHECK(LoadWithMixerField<fb::LinearAttention>(favor.c_str(), 0,
                                                  fb::LinearAttention::VT_SOFTMAX_TEMP,
                                                  float{-1.0f}) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.0: feature map Favor needs softmax_temp > 0 (got -1)");
  }
  {
    CHECK(LoadWithMixerField<fb::LinearAttention>(favor.c_str(), 1,
                                                  fb::LinearAttention::VT_FAVOR_FEATURES,
                                                  uint32_t{0}) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.1: feature map Favor needs favor_features in [1, 1048576] (got 0)");
  }
  {
    // elu+1, with an omega.
    CHECK(LoadWithMixerField<fb::LinearAttention>(favor.c_str(), 0,
                                                  fb::LinearAttention::VT_FEATURE_MAP,
                                                  uint8_t{0}) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.0: omega is set, but feature map elu+1/relu takes no projection");
    CHECK(LoadWithMixerField<fb::LinearAttention>(favor.c_str(), 0,
                                                  fb::LinearAttention::VT_FEATURE_MAP,
                                                  uint8_t{77}) == RECUR_UNSUPPORTED);
    CHECK(Error() == "blocks.0: feature map 77 is not supported by this runtime");
  }
  {
    // Favor without its ω tensor.
    auto parsed = recur::impl::converter::ParseConfig(favor);
    REQUIRE(parsed.ok());
    auto tensors = recur::impl::testing::RandomTensors(parsed->desc, 1);
    tensors.erase("blocks.1.mixer.feature_map.omega");
    recur::impl::converter::BuildOptions options;
    options.validate = false;
    options.self_check = false;
    auto bytes = recur::impl::converter::BuildModel(parsed->desc, tensors, options);
    REQUIRE(bytes.ok());
    CHECK(Load(*bytes, bytes->size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.1.mixer.feature_map.omega is missing (expected shape [8,6])");
  }
}

TEST_CASE("random Fourier feature maps: bad fields in the file are named") {
  const std::string rff = TinyWithFeatureMap("random_fourier");
  CHECK(LoadWithMixerField<fb::LinearAttention>(rff.c_str(), 1,
                                                fb::LinearAttention::VT_FAVOR_FEATURES,
                                                uint32_t{1}) == RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "blocks.1: feature map RandomFourier needs favor_features in [2, 1048576] (got 1)");
  CHECK(LoadWithMixerField<fb::LinearAttention>(rff.c_str(), 0,
                                                fb::LinearAttention::VT_SOFTMAX_TEMP,
                                                float{0.0f}) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: feature map RandomFourier needs softmax_temp > 0 (got 0)");
  const std::string smoothed = TinyWithFeatureMap("smoothed_random_fourier");
  for (float bad : {std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(bad);
    CHECK(LoadWithMixerField<fb::LinearAttention>(smoothed.c_str(), 0,
                                                  fb::LinearAttention::VT_SMOOTHING,
                                                  float{bad}) == RECUR_INVALID_MODEL);
    CHECK(Error().rfind("blocks.0: feature map SmoothedRandomFourier needs a finite smoothing", 0) ==
          0);
  }
}

TEST_CASE("linear attention: eps of 0, negative or NaN in the file is named") {
  for (float eps : {0.0f, -1e-6f, std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(eps);
    // eps 1e-3 rather than the schema's default, so that the field is stored.
    std::string config = recur::impl::testing::kTinyTokensConfig;
    config.replace(config.find("\"eps\": 1e-6"), 11, "\"eps\": 1e-3");
    CHECK(LoadWithMixerField<fb::LinearAttention>(config.c_str(), 1, fb::LinearAttention::VT_EPS,
                                                  float{eps}) == RECUR_INVALID_MODEL);
    CHECK(Error().find("blocks.1: linear attention eps must be finite and > 0") == 0);
  }
}

TEST_CASE("sliding window: wrong window parameters in the file are named") {
  {
    auto bytes = BuildTestModel(recur::impl::testing::kTinySlidingWindowConfig, 1);
    REQUIRE(!bytes.empty());
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    const auto* sw = Root(bytes)->blocks()->Get(1)->mixer_as_SlidingWindow();
    REQUIRE(sw != nullptr);
    Poke<uint32_t>(sw, fb::SlidingWindow::VT_WINDOW, 0);
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.1: sliding window needs window in [1, 65536] and global_tokens <= "
                     "65536 (got 0, 2)");
  }
  {
    auto bytes = BuildTestModel(recur::impl::testing::kTinySlidingWindowConfig, 1);
    const auto* sw = Root(bytes)->blocks()->Get(0)->mixer_as_SlidingWindow();
    const uint32_t zero = 0;
    std::memcpy(const_cast<uint32_t*>(sw->dilation()->data()) + 1, &zero, sizeof(zero));
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.0: sliding window dilation 0 of head 1 is outside [1, 65536]");
  }
  {
    auto bytes = BuildTestModel(recur::impl::testing::kTinyAftConfig, 1);
    REQUIRE(!bytes.empty());
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    const auto* aft = Root(bytes)->blocks()->Get(0)->mixer_as_AftSimple();
    Poke<uint32_t>(aft, fb::AftSimple::VT_DK, 0);
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.0: AFT needs heads, dk > 0 (got 2, 0)");
  }
}

TEST_CASE("FLASH: bad sizes and a mis-shaped bias are named") {
  {
    auto bytes = BuildTestModel(recur::impl::testing::kTinyFlashConfig, 1);
    REQUIRE(!bytes.empty());
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    const auto* fl = Root(bytes)->blocks()->Get(0)->mixer_as_Flash();
    REQUIRE(fl != nullptr);
    Poke<uint32_t>(fl, fb::Flash::VT_CHUNK, 0);
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.0: FLASH needs expansion_dim and qk_dim in [1, 1048576] and chunk "
                     "in [1, 65536] (got 24, 8, 0)");
  }
  {
    // rel_bias has 5 entries.
    CHECK(LoadWithMixerField<fb::Flash>(recur::impl::testing::kTinyFlashConfig, 1,
                                        fb::Flash::VT_CHUNK, uint32_t{6}) == RECUR_INVALID_MODEL);
    CHECK(Error().find("blocks.1.mixer.rel_bias") != std::string::npos);
    CHECK(Error().find("expected [6]") != std::string::npos);
  }
}

TEST_CASE("AFT-local: a table with both or neither bias tensors is named") {
  auto bytes = BuildTestModel(recur::impl::testing::kTinyAftLocalConfig, 1);
  REQUIRE(!bytes.empty());
  CHECK(Load(bytes, bytes.size()) == RECUR_OK);
  const auto* al = Root(bytes)->blocks()->Get(0)->mixer_as_AftLocal();
  REQUIRE(al != nullptr);
  Poke<int32_t>(al, fb::AftLocal::VT_POS_BIAS, -1);
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: AFT-local needs exactly one of pos_bias (aft_local) and conv_kernel "
                   "(aft_conv)");
}

TEST_CASE("AFT-local/AFT-conv and Linformer: mis-shaped position tables are named") {
  {
    // pos_bias has 4 entries.
    CHECK(LoadWithMixerField<fb::AftLocal>(recur::impl::testing::kTinyAftLocalConfig, 1,
                                           fb::AftLocal::VT_WINDOW,
                                           uint32_t{5}) == RECUR_INVALID_MODEL);
    CHECK(Error().find("blocks.1.mixer.pos_bias") != std::string::npos);
    CHECK(Error().find("expected [5]") != std::string::npos);
  }
  {
    // conv_kernel is [3, 3].
    CHECK(LoadWithMixerField<fb::AftLocal>(recur::impl::testing::kTinyAftConvConfig, 0,
                                           fb::AftLocal::VT_WINDOW,
                                           uint32_t{4}) == RECUR_INVALID_MODEL);
    CHECK(Error().find("blocks.0.mixer.conv_kernel") != std::string::npos);
    CHECK(Error().find("expected [3,4]") != std::string::npos);
  }
  {
    auto bytes = BuildTestModel(recur::impl::testing::kTinyLinformerConfig, 1);
    REQUIRE(!bytes.empty());
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    const auto* lf = Root(bytes)->blocks()->Get(1)->mixer_as_Linformer();
    Poke<uint32_t>(lf, fb::Linformer::VT_SEQ_LEN, 16);  // E, F are [3, 6, 32]
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error().find("blocks.1.mixer.E") != std::string::npos);
    CHECK(Error().find("has shape [3,6,32], expected [6,16] (shared) or [3,6,16] (per head)") !=
          std::string::npos);
  }
}

TEST_CASE("GAU: bad sizes, a bad scale and a mis-shaped bias are named") {
  {
    auto bytes = BuildTestModel(recur::impl::testing::kTinyGauConfig, 1);
    REQUIRE(!bytes.empty());
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    const auto* g = Root(bytes)->blocks()->Get(0)->mixer_as_Gau();
    REQUIRE(g != nullptr);
    Poke<uint32_t>(g, fb::Gau::VT_MAX_LENGTH, 0);
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.0: GAU needs expansion_dim and qk_dim in [1, 1048576] and max_length "
                     "in [1, 65536] (got 16, 6, 0)");
  }
  {
    CHECK(LoadWithMixerField<fb::Gau>(recur::impl::testing::kTinyGauConfig, 1, fb::Gau::VT_SCALE,
                                      float{std::numeric_limits<float>::quiet_NaN()}) ==
          RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.1: GAU scale must be finite and positive (got nan)");
    CHECK(LoadWithMixerField<fb::Gau>(recur::impl::testing::kTinyGauConfig, 1, fb::Gau::VT_SCALE,
                                      -0.5f) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.1: GAU scale must be finite and positive (got -0.5)");
  }
  {
    // rel_bias has 48 entries.
    CHECK(LoadWithMixerField<fb::Gau>(recur::impl::testing::kTinyGauConfig, 1,
                                      fb::Gau::VT_MAX_LENGTH, uint32_t{47}) == RECUR_INVALID_MODEL);
    CHECK(Error().find("blocks.1.mixer.rel_bias") != std::string::npos);
    CHECK(Error().find("expected [47]") != std::string::npos);
  }
}

TEST_CASE("Reformer: bad sizes and a mis-shaped rotation table are named") {
  {
    auto bytes = BuildTestModel(recur::impl::testing::kTinyReformerConfig, 1);
    REQUIRE(!bytes.empty());
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    const auto* rf = Root(bytes)->blocks()->Get(0)->mixer_as_Reformer();
    REQUIRE(rf != nullptr);
    Poke<uint32_t>(rf, fb::Reformer::VT_N_BUCKETS, 3);
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.0: reformer needs an even n_buckets in [2, 65536], chunk in "
                     "[1, 65536] and rounds in [1, 64] (got 3, 5, 2)");
  }
  {
    // rotations has 2 rounds.
    CHECK(LoadWithMixerField<fb::Reformer>(recur::impl::testing::kTinyReformerConfig, 1,
                                           fb::Reformer::VT_ROUNDS,
                                           uint32_t{3}) == RECUR_INVALID_MODEL);
    CHECK(Error().find("blocks.1.mixer.rotations") != std::string::npos);
    CHECK(Error().find("expected [3,4,2]") != std::string::npos);
  }
}

TEST_CASE("BlockLocal: bad chunk, chunks around, padding and mis-shaped projections are named") {
  const char* config = recur::impl::testing::kTinyBlockLocalEncoderConfig;  // chunk 4, pad 8 above 2
  using T = fb::BlockLocal;
  CHECK(LoadWithMixerField<T>(config, 0, T::VT_HEADS, uint32_t{0}) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: block-local attention needs heads, dk, dv > 0 (got 0, 2, 4)");
  CHECK(LoadWithMixerField<T>(config, 0, T::VT_CHUNK, uint32_t{0}) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: block-local attention needs chunk in [1, 65536] (got 0)");
  CHECK(LoadWithMixerField<T>(config, 1, T::VT_CHUNK, uint32_t{65537}) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.1: block-local attention needs chunk in [1, 65536] (got 65537)");
  CHECK(LoadWithMixerField<T>(config, 0, T::VT_CHUNKS_AFTER, uint32_t{257}) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: block-local attention needs chunks_before and chunks_after <= 256 "
                   "(got 1, 257)");
  CHECK(LoadWithMixerField<T>(config, 1, T::VT_PAD_MULTIPLE, uint32_t{6}) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.1: block-local attention needs pad_multiple a multiple of chunk 4 in "
                   "[1, 16777216] (got 6)");
  CHECK(LoadWithMixerField<T>(config, 0, T::VT_PAD_MULTIPLE, uint32_t{0}) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: block-local attention needs pad_multiple a multiple of chunk 4 in "
                   "[1, 16777216] (got 0)");
  CHECK(LoadWithMixerField<T>(config, 0, T::VT_PAD_ABOVE, uint32_t{5}) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: block-local attention needs pad_above <= chunk 4 (got 5)");
  CHECK(LoadWithMixerField<T>(config, 1, T::VT_DV, uint32_t{5}) == RECUR_INVALID_MODEL);
  CHECK(Error().find("blocks.1.mixer.value") != std::string::npos);
  // The same fields at the edges load.
  CHECK(LoadWithMixerField<T>(config, 0, T::VT_PAD_ABOVE, uint32_t{4}) == RECUR_OK);
  CHECK(LoadWithMixerField<T>(config, 0, T::VT_CHUNKS_AFTER, uint32_t{256}) == RECUR_OK);
}

TEST_CASE(
    "Reformer's transformers form: a bad form, paper-form fields, pad and window fields and "
    "per-head rotations are named") {
  const char* config = recur::impl::testing::kTinyReformerTransformersConfig;
  {
    auto bytes = BuildTestModel(config, 1);
    REQUIRE(!bytes.empty());
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    CHECK(Root(bytes)->format_version() == 2);
  }
  CHECK(LoadWithMixerField<fb::Reformer>(config, 0, fb::Reformer::VT_FORM, uint8_t{2}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "blocks.0: reformer form 2 is not one this runtime knows (0 paper, 1 "
        "transformers)");
  CHECK(LoadWithMixerField<fb::Reformer>(config, 0, fb::Reformer::VT_FORM, uint8_t{0}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "blocks.0: the paper-form reformer needs chunks_before 1, chunks_after 0, "
        "causal_mask false, pad_multiple 0 and pad_above 0 (got 2, 1, true, 10, 4)");
  CHECK(LoadWithMixerField<fb::Reformer>(config, 1, fb::Reformer::VT_PAD_MULTIPLE, uint32_t{7}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "blocks.1: reformer pad_multiple must be a positive multiple of chunk 5, at "
        "most 65536 (got 7)");
  CHECK(LoadWithMixerField<fb::Reformer>(config, 0, fb::Reformer::VT_PAD_MULTIPLE, uint32_t{0}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error().find("pad_multiple must be a positive multiple of chunk 5") != std::string::npos);
  CHECK(LoadWithMixerField<fb::Reformer>(config, 0, fb::Reformer::VT_PAD_ABOVE, uint32_t{6}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: reformer pad_above must be at most chunk 5 (got 6)");
  CHECK(LoadWithMixerField<fb::Reformer>(config, 0, fb::Reformer::VT_CHUNKS_BEFORE, uint32_t{63}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "blocks.0: reformer chunks_before + chunks_after + 1 must be at most 64 (got "
        "63 + 1 + 1)");
  CHECK(LoadWithMixerField<fb::Reformer>(config, 0, fb::Reformer::VT_CHUNKS_BEFORE,
                                         uint32_t{0xffffffffu}) == RECUR_INVALID_MODEL);
  CHECK(Error().find("must be at most 64") != std::string::npos);
  // The rotations are per head: [heads, dk, rounds, n_buckets/2].
  CHECK(LoadWithMixerField<fb::Reformer>(config, 1, fb::Reformer::VT_ROUNDS, uint32_t{3}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error().find("blocks.1.mixer.rotations") != std::string::npos);
  CHECK(Error().find("expected [2,4,3,2]") != std::string::npos);
}

TEST_CASE("RetNet: an odd dk, decays that do not match the heads or leave (0, 1), a bad eps "
          "and mis-shaped projections are named") {
  auto fresh = [] {
    auto bytes = BuildTestModel(recur::impl::testing::kTinyRetNetConfig, 1);
    REQUIRE(!bytes.empty());
    return bytes;
  };
  {
    auto bytes = fresh();
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    const auto* rn = Root(bytes)->blocks()->Get(0)->mixer_as_RetNet();
    REQUIRE(rn != nullptr);
    Poke<uint32_t>(rn, fb::RetNet::VT_DK, 3);
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.0: RetNet needs an even dk: the rotation turns pairs of dims (got 3)");
  }
  {
    auto bytes = fresh();
    const auto* rn = Root(bytes)->blocks()->Get(1)->mixer_as_RetNet();
    Poke<uint32_t>(rn, fb::RetNet::VT_HEADS, 2);  // 3 decays
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.1: RetNet has 3 decays for 2 heads (decay: one per head)");
  }
  for (float gamma : {1.0f, 0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(gamma);
    auto bytes = fresh();
    const auto* rn = Root(bytes)->blocks()->Get(1)->mixer_as_RetNet();
    const_cast<flatbuffers::Vector<float>*>(rn->decay())->Mutate(2, gamma);
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error().find("blocks.1: RetNet decay") == 0);
    CHECK(Error().find("of head 2 is outside (0, 1)") != std::string::npos);
  }
  {
    std::string config = recur::impl::testing::kTinyRetNetConfig;
    const std::string key = "\"decay\": [0.5, 0.9, 0.99]";
    config.replace(config.find(key), key.size(), key + ", \"eps\": 1e-5");
    auto bytes = BuildTestModel(config.c_str(), 1);
    REQUIRE(!bytes.empty());
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    const auto* rn = Root(bytes)->blocks()->Get(0)->mixer_as_RetNet();
    CHECK(rn->eps() == 1e-5f);
    Poke<float>(rn, fb::RetNet::VT_EPS, 0.0f);
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.0: RetNet eps must be finite and > 0 (got 0)");
    Poke<float>(rn, fb::RetNet::VT_EPS, std::numeric_limits<float>::infinity());
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.0: RetNet eps must be finite and > 0 (got inf)");
  }
  {
    auto bytes = fresh();
    const auto* rn = Root(bytes)->blocks()->Get(1)->mixer_as_RetNet();
    Poke<uint32_t>(rn, fb::RetNet::VT_DV, 5);  // the projections are 3 x 6 wide
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error().find("blocks.1.mixer.value") != std::string::npos);
  }
}

TEST_CASE("Gated DeltaNet: bad constants, head counts, missing vectors and a convolution "
          "without conv_size are named") {
  const std::string config = recur::impl::testing::kTinyGatedDeltaNetConfig;
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity()}) {
    CAPTURE(bad);
    CHECK(LoadWithMixerField<fb::GatedDeltaNet>(config.c_str(), 1, fb::GatedDeltaNet::VT_NORM_EPS,
                                                bad) == RECUR_INVALID_MODEL);
    CHECK(Error().rfind("blocks.1: Gated DeltaNet norm_eps must be finite and > 0 (got ", 0) == 0);
    CHECK(LoadWithMixerField<fb::GatedDeltaNet>(config.c_str(), 0,
                                                fb::GatedDeltaNet::VT_BETA_SCALE,
                                                bad) == RECUR_INVALID_MODEL);
    CHECK(Error().rfind("blocks.0: Gated DeltaNet beta_scale must be finite and > 0 (got ", 0) ==
          0);
  }
  CHECK(LoadWithMixerField<fb::GatedDeltaNet>(config.c_str(), 0, fb::GatedDeltaNet::VT_HEADS,
                                              uint32_t{3}) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: Gated DeltaNet v_heads (2) must be a multiple of heads (3 > 0)");
  CHECK(LoadWithMixerField<fb::GatedDeltaNet>(config.c_str(), 1, fb::GatedDeltaNet::VT_A_LOG,
                                              int32_t{-1}) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.1.mixer.a_log is missing (expected shape [2])");
  CHECK(LoadWithMixerField<fb::GatedDeltaNet>(config.c_str(), 1, fb::GatedDeltaNet::VT_CONV_SIZE,
                                              uint32_t{0}) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.1: Gated DeltaNet conv_size is 0, but the file gives a convolution");
  CHECK(LoadWithMixerField<fb::GatedDeltaNet>(config.c_str(), 1, fb::GatedDeltaNet::VT_CONV_SIZE,
                                              uint32_t{4}) == RECUR_INVALID_MODEL);
  CHECK(Error().find("blocks.1.mixer.query_conv") != std::string::npos);
  CHECK(LoadWithMixerField<fb::GatedDeltaNet>(config.c_str(), 0, fb::GatedDeltaNet::VT_HEAD_V_DIM,
                                              uint32_t{0}) == RECUR_INVALID_MODEL);
  CHECK(Error().find("blocks.0: Gated DeltaNet needs heads, dk, dv > 0") == 0);
}

TEST_CASE("GLA: bad constants, head counts, missing tensors and a convolution without "
          "conv_size are named") {
  const std::string config = recur::impl::testing::kTinyGlaConfig;
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity()}) {
    CAPTURE(bad);
    CHECK(LoadWithMixerField<fb::Gla>(config.c_str(), 1, fb::Gla::VT_NORM_EPS, bad) ==
          RECUR_INVALID_MODEL);
    CHECK(Error().rfind("blocks.1: GLA norm_eps must be finite and > 0 (got ", 0) == 0);
    CHECK(LoadWithMixerField<fb::Gla>(config.c_str(), 0, fb::Gla::VT_GATE_LOGIT_NORMALIZER,
                                      bad) == RECUR_INVALID_MODEL);
    CHECK(Error().rfind("blocks.0: GLA gate_logit_normalizer must be finite and > 0 (got ", 0) ==
          0);
  }
  CHECK(LoadWithMixerField<fb::Gla>(config.c_str(), 0, fb::Gla::VT_CLAMP_MIN, 0.5f) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: GLA clamp_min must be at most 0 (got 0.5)");
  CHECK(LoadWithMixerField<fb::Gla>(config.c_str(), 0, fb::Gla::VT_KV_HEADS, uint32_t{3}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: GLA heads (4) must be a multiple of kv_heads (3 > 0)");
  CHECK(LoadWithMixerField<fb::Gla>(config.c_str(), 1, fb::Gla::VT_NORM_WEIGHT, int32_t{-1}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.1.mixer.norm_weight is missing (expected shape [2])");
  CHECK(LoadWithMixerField<fb::Gla>(config.c_str(), 1, fb::Gla::VT_CONV_SIZE, uint32_t{0}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.1: GLA conv_size is 0, but the file gives a convolution");
  CHECK(LoadWithMixerField<fb::Gla>(config.c_str(), 0, fb::Gla::VT_HEAD_K_DIM, uint32_t{4}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error().find("blocks.0.mixer.query.weight") != std::string::npos);
}

// The tiny RWKV-7 model with its constants stored (non-default values), so
// that they can be poked.
std::string Rwkv7WithConstants() {
  std::string config = recur::impl::testing::kTinyRwkv7Config;
  const std::string key = "\"gate_rank\": 5";
  config.replace(config.find(key), key.size(),
                 key + ", \"group_norm_eps\": 1e-4, \"decay_scale\": 0.5");
  return config;
}

// Model bytes of a description the converter's own checks would refuse (no
// self-check): what a hand-made or damaged file may hold.
AlignedBytes BuildUnchecked(const recur::impl::converter::ModelDescription& desc) {
  recur::impl::converter::BuildOptions options;
  options.self_check = false;
  auto bytes = recur::impl::converter::BuildModel(
      desc, recur::impl::testing::RandomTensors(desc, 1), options);
  REQUIRE(bytes.ok());
  return std::move(bytes).value();
}

TEST_CASE("RWKV-7: bad constants, missing vectors, mis-shaped projections, a value residual "
          "with no value to mix in and a token mix without pre-norm are named") {
  const std::string config = Rwkv7WithConstants();
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity()}) {
    CAPTURE(bad);
    CHECK(LoadWithMixerField<fb::Rwkv7>(config.c_str(), 1, fb::Rwkv7::VT_GROUP_NORM_EPS, bad) ==
          RECUR_INVALID_MODEL);
    CHECK(Error().rfind("blocks.1: RWKV-7 group_norm_eps must be finite and > 0 (got ", 0) == 0);
    CHECK(LoadWithMixerField<fb::Rwkv7>(config.c_str(), 0, fb::Rwkv7::VT_DECAY_SCALE, bad) ==
          RECUR_INVALID_MODEL);
    CHECK(Error().rfind("blocks.0: RWKV-7 decay_scale must be finite and > 0 (got ", 0) == 0);
  }
  CHECK(LoadWithMixerField<fb::Rwkv7>(config.c_str(), 2, fb::Rwkv7::VT_KEY_NORM, int32_t{-1}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.2.mixer.key_norm is missing (expected shape [16])");
  CHECK(LoadWithMixerField<fb::Rwkv7>(config.c_str(), 1, fb::Rwkv7::VT_HEADS, uint32_t{3}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error().find("blocks.1.mixer.receptance.weight") != std::string::npos);
  CHECK(Error().find("expected [24,16]") != std::string::npos);
  CHECK(LoadWithMixerField<fb::Rwkv7>(config.c_str(), 0, fb::Rwkv7::VT_HEAD_SIZE, uint32_t{0}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error().find("blocks.0: RWKV-7 needs heads, dk, dv > 0") == 0);

  // Every block with a value residual: the first reads rows no block wrote.
  auto parsed = recur::impl::converter::ParseConfig(recur::impl::testing::kTinyRwkv7Config);
  REQUIRE(parsed.ok());
  recur::impl::converter::ModelDescription desc = parsed->desc;
  desc.blocks[0].mixer.As<recur::impl::converter::Rwkv7Params>()->value_rank = 3;
  AlignedBytes bytes = BuildUnchecked(desc);
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "blocks.0: its mixer reads rows an earlier block's mixer shares (RWKV-7's first-layer "
        "value), but no block before it shares any");
  // The FFN's token mix in a post-norm model.
  desc = parsed->desc;
  desc.norm_placement = recur::impl::converter::NormPlacement::kPost;
  bytes = BuildUnchecked(desc);
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "blocks.0.ffn.token_mix: a token mix needs pre-norm blocks (it mixes norm2's outputs "
        "of consecutive positions)");
}

TEST_CASE("rotary: bad dims, base and pairs in the file are named, per mixer") {
  // Blocks: 0 softmax (dims 6 of dk 8, half), 1 linear, 2 sliding window, 3 FLASH (qk_dim 8).
  auto fresh = [] {
    auto bytes = BuildTestModel(recur::impl::testing::kTinyRotaryConfig, 1);
    REQUIRE(!bytes.empty());
    return bytes;
  };
  auto rotary_of = [](AlignedBytes& bytes, uint32_t block) -> const fb::Rotary* {
    const fb::Block* b = Root(bytes)->blocks()->Get(block);
    const fb::Rotary* r = nullptr;
    if (const auto* t = b->mixer_as_SoftmaxAttention()) r = t->rotary();
    if (const auto* t = b->mixer_as_LinearAttention()) r = t->rotary();
    if (const auto* t = b->mixer_as_SlidingWindow()) r = t->rotary();
    if (const auto* t = b->mixer_as_Flash()) r = t->rotary();
    REQUIRE(r != nullptr);
    return r;
  };
  {
    auto bytes = fresh();
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    CHECK(Root(bytes)->format_version() == 2);
  }
  const std::pair<uint32_t, std::string> mixers[] = {{0, "softmax attention"},
                                                     {1, "linear attention"},
                                                     {2, "sliding-window attention"},
                                                     {3, "FLASH"}};
  for (const auto& [block, what] : mixers) {
    const std::string width = block == 3 ? "qk_dim" : "dk";
    const std::string prefix = "blocks." + std::to_string(block) + ": " + what;
    for (uint32_t dims : {5u, 10u, 0u}) {
      const uint32_t block_index = block;  // CAPTURE's lambda cannot take a structured binding
      CAPTURE(block_index);
      CAPTURE(dims);
      auto bytes = fresh();
      Poke<uint32_t>(rotary_of(bytes, block), fb::Rotary::VT_DIMS, dims);
      CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
      CHECK(Error() == prefix + " rotary.dims must be even and in [2, " + width + " = 8] (got " +
                           std::to_string(dims) + ")");
    }
    for (double base : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                        std::numeric_limits<double>::infinity()}) {
      CAPTURE(base);
      auto bytes = fresh();
      Poke<double>(rotary_of(bytes, block), fb::Rotary::VT_BASE, base);
      CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
      CHECK(Error().rfind(prefix + " rotary.base must be finite and > 0 (got ", 0) == 0);
    }
  }
  {
    auto bytes = fresh();  // block 0's pairs are stored (half, not the default)
    Poke<int8_t>(rotary_of(bytes, 0), fb::Rotary::VT_PAIRS, 7);
    CHECK(Load(bytes, bytes.size()) == RECUR_UNSUPPORTED);
    CHECK(Error() == "blocks.0: softmax attention rotary.pairs 7 is not supported by this runtime");
  }
}

TEST_CASE("token shift: bad segments, a shift -1 in a causal block and post-norm are named") {
  // Segments [5, 1], [3, 0], [4, 1] of d_model 16 on two causal blocks.
  auto fresh = [] {
    auto bytes = BuildTestModel(recur::impl::testing::kTinyTokenShiftConfig, 1);
    REQUIRE(!bytes.empty());
    return bytes;
  };
  auto segment = [](AlignedBytes& bytes, uint32_t block, uint32_t i) {
    const fb::TokenShift* ts = Root(bytes)->blocks()->Get(block)->token_shift();
    REQUIRE(ts != nullptr);
    return const_cast<fb::ShiftSegment*>(ts->segments()->Get(i));
  };
  {
    auto bytes = fresh();
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    CHECK(Root(bytes)->format_version() == 2);
  }
  const std::tuple<uint32_t, uint32_t, uint32_t, int32_t, std::string> bad[] = {
      {0, 1, 0, 0, "blocks.0.token_shift: segment 1 has width 0"},
      {1, 2, 4, 2, "blocks.1.token_shift: segment 2 shifts by 2 (must be -1, 0 or 1)"},
      {0, 0, 5, -1,
       "blocks.0.token_shift: segment 0 takes the next position (shift -1), which a causal block "
       "has not seen: only encoder blocks (causal false) shift by -1"},
      {1, 2, 9, 1, "blocks.1.token_shift: the segments cover 17 features, more than d_model (16)"},
  };
  for (const auto& [block, i, width, shift, message] : bad) {
    const std::string expected = message;  // CAPTURE's lambda cannot take a structured binding
    CAPTURE(expected);
    auto bytes = fresh();
    *segment(bytes, block, i) = fb::ShiftSegment(width, shift);
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == message);
  }
  {
    auto bytes = fresh();  // a segments vector of length 0
    const fb::TokenShift* ts = Root(bytes)->blocks()->Get(1)->token_shift();
    const uint32_t zero = 0;
    std::memcpy(const_cast<void*>(static_cast<const void*>(ts->segments())), &zero, sizeof(zero));
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.1.token_shift has no segments");
  }
  {
    // A post-norm model with a token shift, written past the converter's check.
    auto desc = recur::impl::converter::ParseConfig(recur::impl::testing::kTinyTokenShiftConfig);
    REQUIRE(desc.ok());
    desc->desc.norm_placement = recur::impl::converter::NormPlacement::kPost;
    recur::impl::converter::BuildOptions options;
    options.self_check = false;
    auto bytes = recur::impl::converter::BuildModel(
        desc->desc, recur::impl::testing::RandomTensors(desc->desc, 1), options);
    REQUIRE(bytes.ok());
    CHECK(Load(*bytes, bytes->size()) == RECUR_INVALID_MODEL);
    CHECK(Error() ==
          "blocks.0.token_shift: token shift needs pre-norm blocks (it shifts the "
          "normalised inputs of the mixer and the FFN)");
  }
}

// ---- model-level features (models/configs/README.md): norm kinds, blocks without a
// feed-forward, sinusoidal positions, GLU feed-forwards, reversible residual blocks

namespace {

// kTinyTokensConfig with `extra` keys added at the top level (`extra` is
// ", \"key\": value, ...").
std::string TinyTokensWith(const std::string& extra) {
  std::string config = kTinyTokensConfig;
  config.insert(config.rfind('}'), extra);
  return config;
}

// Points the vtable slot `to` of `generated_table` at the field of slot
// `from` (both of the same type): a field the writer never stores gets
// another one's value. The vtable may be shared by every table of the same
// layout in the file.
void AliasField(const void* generated_table, uint16_t to, uint16_t from) {
  const auto* p = reinterpret_cast<const uint8_t*>(generated_table);
  flatbuffers::soffset_t back = 0;
  std::memcpy(&back, p, sizeof(back));
  auto* vtable = const_cast<uint8_t*>(p - back);
  flatbuffers::voffset_t vsize = 0, offset = 0;
  std::memcpy(&vsize, vtable, sizeof(vsize));
  REQUIRE(to < vsize);
  std::memcpy(&offset, vtable + from, sizeof(offset));
  REQUIRE(offset != 0);
  std::memcpy(vtable + to, &offset, sizeof(offset));
}

// Marks the field of vtable slot `field` of `generated_table` absent (the
// vtable may be shared by every table of the same layout in the file).
void ClearField(const void* generated_table, uint16_t field) {
  const auto* p = reinterpret_cast<const uint8_t*>(generated_table);
  flatbuffers::soffset_t back = 0;
  std::memcpy(&back, p, sizeof(back));
  auto* vtable = const_cast<uint8_t*>(p - back);
  flatbuffers::voffset_t vsize = 0;
  std::memcpy(&vsize, vtable, sizeof(vsize));
  REQUIRE(field < vsize);
  const flatbuffers::voffset_t absent = 0;
  std::memcpy(vtable + field, &absent, sizeof(absent));
}

}  // namespace

TEST_CASE(
    "norms: each kind loads and steps, and a bad kind, a bias where none belongs and a "
    "mis-shaped weight are named") {
  for (const char* norm : {R"({"type": "rms_norm"})", R"({"type": "scale_norm", "scale": "l2"})",
                           R"({"type": "scale_norm", "scale": "rms"})"}) {
    CAPTURE(norm);
    const std::string config = TinyTokensWith(std::string(", \"norm\": ") + norm);
    auto bytes = BuildTestModel(config.c_str(), 1);
    REQUIRE(!bytes.empty());
    CHECK(Load(bytes, bytes.size()) == RECUR_OK);
    const fb::LayerNorm* final_norm = Root(bytes)->final_norm();
    Poke<int8_t>(final_norm, fb::LayerNorm::VT_KIND, 9);
    CHECK(Load(bytes, bytes.size()) == RECUR_UNSUPPORTED);
    CHECK(Error() == "final_norm: norm kind 9 is not supported by this runtime (newer model?)");
  }
  const std::string rms = TinyTokensWith(R"(, "norm": {"type": "rms_norm"})");
  auto bytes = BuildTestModel(rms.c_str(), 1);
  REQUIRE(!bytes.empty());
  AliasField(Root(bytes)->final_norm(), fb::LayerNorm::VT_BIAS, fb::LayerNorm::VT_WEIGHT);
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0.norm1: norm kind RmsNorm has no bias, but the file gives one");

  const std::string scale = TinyTokensWith(R"(, "norm": {"type": "scale_norm", "scale": "l2"})");
  auto parsed = recur::impl::converter::ParseConfig(scale);
  REQUIRE(parsed.ok());
  auto tensors = recur::impl::testing::RandomTensors(parsed->desc, 1);
  tensors["final_norm.weight"] = {{16}, std::vector<float>(16, 1.0f)};
  recur::impl::converter::BuildOptions options;
  options.validate = false;
  options.self_check = false;
  auto built = recur::impl::converter::BuildModel(parsed->desc, tensors, options);
  REQUIRE(built.ok());
  CHECK(Load(*built, built->size()) == RECUR_INVALID_MODEL);
  CHECK(Error() == "final_norm.weight: tensor 'final_norm.weight' has shape [16], expected [1]");
}

TEST_CASE(
    "blocks without a feed-forward: load and step, and linear layers or a norm2 beside d_ff 0 "
    "are named") {
  // kTinyTokensConfig's "ffn" replaced by null.
  std::string config = kTinyTokensConfig;
  const size_t at = config.find("\"ffn\"");
  config.replace(at, config.find('}', at) + 1 - at, "\"ffn\": null");
  auto bytes = BuildTestModel(config.c_str(), 1);
  REQUIRE(!bytes.empty());
  CHECK(Load(bytes, bytes.size()) == RECUR_OK);
  // norm1 stands in for a norm2, and the layers for linear1/linear2: vtable
  // slots pointed at fields of the same type (Block's norm1, FeedForward's
  // own d_ff would not do: the FeedForward table of d_ff 0 is empty).
  const fb::Block* block = Root(bytes)->blocks()->Get(0);
  AliasField(block, fb::Block::VT_NORM2, fb::Block::VT_NORM1);
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "blocks.0.norm2: the block has no feed-forward (ffn.d_ff 0), so no norm2, but "
        "the file gives one");

  // A block of kTinyTokensConfig with d_ff 0 and its norm2 taken away (the
  // Block vtable, shared by both blocks, loses the slot) keeps its layers.
  auto with_layers = BuildTestModel(kTinyTokensConfig, 1);
  REQUIRE(!with_layers.empty());
  const fb::Block* first = Root(with_layers)->blocks()->Get(0);
  ClearField(first, fb::Block::VT_NORM2);
  CHECK(Load(with_layers, with_layers.size()) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0.norm2 is missing");
  Poke<uint32_t>(first->ffn(), fb::FeedForward::VT_D_FF, 0);
  CHECK(Load(with_layers, with_layers.size()) == RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "blocks.0.ffn: d_ff is 0 (no feed-forward), but the file gives linear1 or "
        "linear2");
}

TEST_CASE(
    "sinusoidal positions: load and step, and a bad base, an odd d_model and a mis-shaped "
    "scale are named") {
  const std::string config =
      TinyTokensWith(R"(, "positions": {"type": "sinusoid", "base": 500, "scale": "learned"})");
  auto bytes = BuildTestModel(config.c_str(), 1);
  REQUIRE(!bytes.empty());
  CHECK(Load(bytes, bytes.size()) == RECUR_OK);
  const fb::SinusoidPositions* s = Root(bytes)->input()->sinusoid();
  REQUIRE(s != nullptr);
  CHECK(s->base() == 500.0);
  for (double base : {0.0, -2.0, std::numeric_limits<double>::infinity(),
                      std::numeric_limits<double>::quiet_NaN()}) {
    Poke<double>(s, fb::SinusoidPositions::VT_BASE, base);
    CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
    CHECK(Error().find("input.sinusoid: base is ") == 0);
    CHECK(Error().find("; it must be positive and finite") != std::string::npos);
  }
  Poke<double>(s, fb::SinusoidPositions::VT_BASE, 500.0);
  Poke<uint32_t>(Root(bytes), fb::Model::VT_D_MODEL, 17);
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error() == "input.sinusoid: sinusoidal positions need an even d_model, got 17");

  auto parsed = recur::impl::converter::ParseConfig(config);
  REQUIRE(parsed.ok());
  auto tensors = recur::impl::testing::RandomTensors(parsed->desc, 1);
  tensors["input.position_scale"] = {{2}, {1.0f, 1.0f}};
  recur::impl::converter::BuildOptions options;
  options.validate = false;
  options.self_check = false;
  auto built = recur::impl::converter::BuildModel(parsed->desc, tensors, options);
  REQUIRE(built.ok());
  CHECK(Load(*built, built->size()) == RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "input.position_scale: tensor 'input.position_scale' has shape [2], expected [1]");
}

TEST_CASE("sinusoidal positions: as exact far into a stream as at its start") {
  const std::string config = TinyTokensWith(R"(, "positions": {"type": "sinusoid"})");
  auto bytes = BuildTestModel(config.c_str(), 1);
  REQUIRE(!bytes.empty());
  std::unique_ptr<recur::impl::Model> model;
  REQUIRE(recur::impl::LoadModel(bytes.data(), bytes.size(), {}, &model).ok());
  const size_t d = model->d_model, half = d / 2;
  REQUIRE(model->sinusoid_freq.size() == half);
  for (uint64_t t :
       {uint64_t{0}, uint64_t{1}, uint64_t{999}, uint64_t{1000003}, (uint64_t{1} << 32) + 11}) {
    CAPTURE(t);
    std::vector<float> x(d, 0.25f);
    recur::impl::AddSinusoidPositions(*model, t, x.data());
    for (size_t i = 0; i < half; ++i) {
      // The angle in long double. The runtime's is off by the rounding of
      // f_i and of t·f_i to double, ≤ 2.3e-16·t rad (5e-7 at t = 2^32);
      // then sin (≤ 1) and x + sin are rounded to float: ≤ 2 · 2^-24 · 1.25.
      const long double a =
          static_cast<long double>(t) * std::pow(10000.0L, -2.0L * static_cast<long double>(i) / d);
      const long double tol = 1.5e-7L + static_cast<long double>(t) * 2.3e-16L;
      CHECK(std::fabs(x[i] - (0.25L + std::sin(a))) <= tol);
      CHECK(std::fabs(x[half + i] - (0.25L + std::cos(a))) <= tol);
    }
  }
}

namespace {

// kTinyRotaryConfig with block 0's θ stored, block 1 turned by a stored table
// of 40 rows and, with `sinusoid`, sinusoidal positions of stored frequencies.
std::string StoredAnglesConfig(bool sinusoid = true) {
  std::string config = recur::impl::testing::kTinyRotaryConfig;
  auto put = [&](const std::string& from, const std::string& to) {
    const size_t at = config.find(from);
    REQUIRE(at != std::string::npos);
    config.replace(at, from.size(), to);
  };
  put(R"("base": 500})", R"("base": 500, "theta": "stored"})");
  put(R"("pairs": "interleaved", "base": 100})", R"("pairs": "interleaved", "table": 40})");
  if (sinusoid) {
    put(R"("max_positions": 0,)",
        R"("max_positions": 0, "positions": {"type": "sinusoid", "freq": "stored"},)");
  }
  return config;
}

// `config` built from `tensors` without validation (so that bad values reach
// the file) and loaded: the loader's status.
recur_status LoadBuilt(const std::string& config, const recur::impl::converter::TensorMap& tensors) {
  auto parsed = recur::impl::converter::ParseConfig(config);
  REQUIRE(parsed.ok());
  recur::impl::converter::BuildOptions options;
  options.validate = false;
  options.self_check = false;
  auto bytes = recur::impl::converter::BuildModel(parsed->desc, tensors, options);
  REQUIRE(bytes.ok());
  return Load(*bytes, bytes->size());
}

// The outputs of `steps` steps of one stream of the model `bytes` (a session
// of max_context 64), token t % 11 at step t; the status of the first step
// that fails in *failed (RECUR_OK if none).
std::vector<float> Steps(const AlignedBytes& bytes, size_t steps, recur_status* failed) {
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  recur_session_options options = recur_session_options_default();
  options.max_context = 64;
  recur_session* session = nullptr;
  REQUIRE(recur_session_create(model, &options, &session) == RECUR_OK);
  std::vector<float> out, y(11);
  *failed = RECUR_OK;
  for (size_t t = 0; t < steps && *failed == RECUR_OK; ++t) {
    const int32_t token = int32_t(t % 11);
    const recur_input in{&token, nullptr, 1};
    *failed = recur_session_step(session, &in, y.data());
    if (*failed == RECUR_OK) out.insert(out.end(), y.begin(), y.end());
  }
  recur_session_free(session);
  recur_model_free(model);
  return out;
}

}  // namespace

TEST_CASE("stored angles: a rotary's theta and table and the sinusoid's freq are read as stored") {
  // The base's θ stored as floats, and a table of the base's sines and cosines
  // ([sin | cos] rows), run as the base does (to float rounding of θ and of
  // the table); other values change the outputs.
  const std::string stored = StoredAnglesConfig(false);
  auto parsed = recur::impl::converter::ParseConfig(stored);
  REQUIRE(parsed.ok());
  auto tensors = recur::impl::testing::RandomTensors(parsed->desc, 3);
  auto& theta = tensors.at("blocks.0.mixer.rotary.theta");
  REQUIRE(theta.shape == std::vector<int64_t>{3});
  for (size_t i = 0; i < 3; ++i) theta.data[i] = float(std::pow(500.0, -2.0 * double(i) / 6));
  auto& table = tensors.at("blocks.1.mixer.rotary.table");
  REQUIRE(table.shape == std::vector<int64_t>{40, 8});
  for (size_t t = 0; t < 40; ++t) {
    for (size_t i = 0; i < 4; ++i) {
      const double a = double(t) * std::pow(100.0, -2.0 * double(i) / 8);
      table.data[t * 8 + i] = float(std::sin(a));
      table.data[t * 8 + 4 + i] = float(std::cos(a));
    }
  }
  auto base_tensors = tensors;
  base_tensors.erase("blocks.0.mixer.rotary.theta");
  base_tensors.erase("blocks.1.mixer.rotary.table");
  auto with_tables = recur::impl::converter::BuildModel(parsed->desc, tensors, {});
  REQUIRE(with_tables.ok());
  auto base = recur::impl::converter::BuildModel(
      recur::impl::converter::ParseConfig(recur::impl::testing::kTinyRotaryConfig)->desc,
      base_tensors, {});
  REQUIRE(base.ok());
  CHECK(Root(*with_tables)->format_version() == 3);
  CHECK(Root(*base)->format_version() == 2);
  recur_status failed = RECUR_OK;
  const std::vector<float> want = Steps(*base, 40, &failed);
  REQUIRE(failed == RECUR_OK);
  const std::vector<float> got = Steps(*with_tables, 40, &failed);
  REQUIRE(failed == RECUR_OK);
  REQUIRE(got.size() == want.size());
  float worst = 0.0f;
  for (size_t k = 0; k < got.size(); ++k) worst = std::max(worst, std::fabs(got[k] - want[k]));
  CHECK(worst <= 1e-5f);

  for (const char* name : {"blocks.0.mixer.rotary.theta", "blocks.1.mixer.rotary.table"}) {
    CAPTURE(name);
    auto changed = tensors;
    for (float& v : changed.at(name).data) v *= 0.9f;
    auto bytes = recur::impl::converter::BuildModel(parsed->desc, changed, {});
    REQUIRE(bytes.ok());
    const std::vector<float> moved = Steps(*bytes, 40, &failed);
    REQUIRE(failed == RECUR_OK);
    float diff = 0.0f;
    for (size_t k = 0; k < moved.size(); ++k) diff = std::max(diff, std::fabs(moved[k] - want[k]));
    CHECK(diff > 1e-4f);
  }

  // The sinusoid's stored frequencies, element by element.
  const std::string config =
      TinyTokensWith(R"(, "positions": {"type": "sinusoid", "base": 500, "freq": "stored"})");
  auto sin_parsed = recur::impl::converter::ParseConfig(config);
  REQUIRE(sin_parsed.ok());
  auto sin_tensors = recur::impl::testing::RandomTensors(sin_parsed->desc, 1);
  auto& freq = sin_tensors.at("input.position_freq");
  REQUIRE(freq.shape == std::vector<int64_t>{8});
  for (size_t i = 0; i < 8; ++i) freq.data[i] = 0.1f * float(i) - 0.3f;
  auto bytes = recur::impl::converter::BuildModel(sin_parsed->desc, sin_tensors, {});
  REQUIRE(bytes.ok());
  CHECK(Root(*bytes)->format_version() == 3);
  std::unique_ptr<recur::impl::Model> model;
  REQUIRE(recur::impl::LoadModel(bytes->data(), bytes->size(), {}, &model).ok());
  REQUIRE(model->sinusoid_freq.size() == 8);
  for (size_t i = 0; i < 8; ++i) CHECK(model->sinusoid_freq[i] == double(freq.data[i]));
}

TEST_CASE("stored angles: the rotary table bounds the streams, named in the message") {
  auto bytes = BuildTestModel(StoredAnglesConfig().c_str(), 1);
  REQUIRE(!bytes.empty());
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  recur_model_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
  CHECK(info.max_positions == 40);
  recur_model_free(model);
  recur_status failed = RECUR_OK;
  CHECK(Steps(bytes, 41, &failed).size() == 40 * 11);
  CHECK(failed == RECUR_OUT_OF_RANGE);
  CHECK(Error() == "stream 0 is at position 40; 1 more steps pass the rotary table rows of "
                   "blocks.1, which end at 40; reset the stream");
}

TEST_CASE("stored angles: wrong sizes, non-finite values and both theta and table are named") {
  const std::string config = StoredAnglesConfig();
  auto parsed = recur::impl::converter::ParseConfig(config);
  REQUIRE(parsed.ok());
  const auto tensors = recur::impl::testing::RandomTensors(parsed->desc, 1);
  CHECK(LoadBuilt(config, tensors) == RECUR_OK);
  const struct {
    const char* name;
    std::vector<int64_t> shape;
    std::string message;
  } sizes[] = {
      {"blocks.0.mixer.rotary.theta", {4},
       "blocks.0.mixer.rotary.theta: tensor 'blocks.0.mixer.rotary.theta' has shape [4], "
       "expected [3]"},
      {"blocks.1.mixer.rotary.table", {40, 6},
       "blocks.1.mixer.rotary.table: tensor 'blocks.1.mixer.rotary.table' has shape [40,6], "
       "expected [40,8]"},
      {"blocks.1.mixer.rotary.table", {320},
       "blocks.1.mixer.rotary.table: tensor 'blocks.1.mixer.rotary.table' has shape [320], "
       "expected [rows, 8] with rows in [1, 2^31]"},
      {"input.position_freq", {7},
       "input.position_freq: tensor 'input.position_freq' has shape [7], expected [8]"},
  };
  for (const auto& c : sizes) {
    CAPTURE(c.name);
    auto bad = tensors;
    auto& t = bad.at(c.name);
    t.shape = c.shape;
    size_t n = 1;
    for (int64_t d : c.shape) n *= size_t(d);
    t.data.resize(n, 0.5f);
    CHECK(LoadBuilt(config, bad) == RECUR_INVALID_MODEL);
    CHECK(Error() == c.message);
  }
  const struct {
    const char* name;
    size_t index;
    float value;
    std::string message;
  } values[] = {
      {"blocks.0.mixer.rotary.theta", 2, std::numeric_limits<float>::quiet_NaN(),
       "blocks.0.mixer.rotary.theta[2] is nan; it must be finite"},
      {"blocks.1.mixer.rotary.table", 317, std::numeric_limits<float>::infinity(),
       "blocks.1.mixer.rotary.table[317] is inf; it must be finite"},
      {"input.position_freq", 1, -std::numeric_limits<float>::infinity(),
       "input.position_freq[1] is -inf; the frequencies must be finite"},
  };
  for (const auto& c : values) {
    CAPTURE(c.name);
    auto bad = tensors;
    bad.at(c.name).data[c.index] = c.value;
    CHECK(LoadBuilt(config, bad) == RECUR_INVALID_MODEL);
    CHECK(Error() == c.message);
  }
  // Both on block 1 (which the config cannot say): a description made so.
  auto both = parsed->desc;
  both.blocks[1].mixer.As<recur::impl::converter::MixerParams>()->rotary.theta = true;
  recur::impl::converter::BuildOptions options;
  options.validate = false;
  options.self_check = false;
  auto bytes = recur::impl::converter::BuildModel(
      both, recur::impl::testing::RandomTensors(both, 1), options);
  REQUIRE(bytes.ok());
  CHECK(Load(*bytes, bytes->size()) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.1: linear attention rotary has both theta and table; it takes at "
                   "most one");
}

TEST_CASE("GLU feed-forwards: load and step, linear1 of d_ff rows is named") {
  std::string config = kTinyTokensConfig;
  const std::string act = "\"activation\": \"gelu\"";
  config.replace(config.find(act), act.size(), act + ", \"glu\": true");
  auto bytes = BuildTestModel(config.c_str(), 1);
  REQUIRE(!bytes.empty());
  CHECK(Load(bytes, bytes.size()) == RECUR_OK);
  Poke<uint32_t>(Root(bytes)->blocks()->Get(0)->ffn(), fb::FeedForward::VT_D_FF, (1u << 19) + 1);
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0.ffn: 2·d_ff (glu) must be in [1, 1048576], got 1048578");
  // A GLU block whose linear1 has d_ff rows, not 2·d_ff.
  auto parsed = recur::impl::converter::ParseConfig(config);
  REQUIRE(parsed.ok());
  auto tensors = recur::impl::testing::RandomTensors(parsed->desc, 1);
  tensors["blocks.0.ffn.linear1.weight"] = {{32, 16}, std::vector<float>(32 * 16, 0.1f)};
  recur::impl::converter::BuildOptions options;
  options.validate = false;
  options.self_check = false;
  auto built = recur::impl::converter::BuildModel(parsed->desc, tensors, options);
  REQUIRE(built.ok());
  CHECK(Load(*built, built->size()) == RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "blocks.0.ffn.linear1.weight: tensor 'blocks.0.ffn.linear1.weight' has shape "
        "[32,16], expected [64,16]");
}

TEST_CASE(
    "reversible models: load and step, and an unknown residual kind, post-norm and a block "
    "without a feed-forward are named") {
  const std::string config = TinyTokensWith(R"(, "residual": "reversible")");
  auto bytes = BuildTestModel(config.c_str(), 1);
  REQUIRE(!bytes.empty());
  CHECK(Load(bytes, bytes.size()) == RECUR_OK);
  Poke<int8_t>(Root(bytes), fb::Model::VT_RESIDUAL, 7);
  CHECK(Load(bytes, bytes.size()) == RECUR_UNSUPPORTED);
  CHECK(Error() == "residual kind 7 is not supported by this runtime (newer model?)");
  Poke<int8_t>(Root(bytes), fb::Model::VT_RESIDUAL, 1);

  // Block 0 without a feed-forward: no norm2 (both blocks lose the slot of
  // their shared vtable), d_ff 0, no linear layers.
  auto no_ffn = bytes;
  const fb::Block* block = Root(no_ffn)->blocks()->Get(0);
  ClearField(block, fb::Block::VT_NORM2);
  Poke<uint32_t>(block->ffn(), fb::FeedForward::VT_D_FF, 0);
  ClearField(block->ffn(), fb::FeedForward::VT_LINEAR1);
  ClearField(block->ffn(), fb::FeedForward::VT_LINEAR2);
  CHECK(Load(no_ffn, no_ffn.size()) == RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "blocks.0: a reversible model's blocks need a feed-forward (y2 = x2 + "
        "ffn(norm2(y1))), but ffn.d_ff is 0");

  // Post-norm: the norm placement read from the residual field (Reversible, 1 = Post).
  AliasField(Root(bytes), fb::Model::VT_NORM_PLACEMENT, fb::Model::VT_RESIDUAL);
  CHECK(Root(bytes)->norm_placement() == fb::NormPlacement::Post);
  CHECK(Load(bytes, bytes.size()) == RECUR_INVALID_MODEL);
  CHECK(Error() ==
        "a reversible model must be pre-norm: its blocks add mixer(norm1(x2)) to x1 "
        "and ffn(norm2(y1)) to x2");
}

TEST_CASE("Mamba2: groups that do not divide heads, a bad kernel, eps or clamp and missing or "
          "mis-shaped tensors are named") {
  const char* config = recur::impl::testing::kTinyMamba2Config;
  CHECK(LoadWithMixerField<fb::Mamba2>(config, 1, fb::Mamba2::VT_GROUPS, uint32_t{3}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.1: Mamba2 groups (3) must divide heads (4)");
  for (uint32_t bad : {0u, 257u}) {
    CAPTURE(bad);
    CHECK(LoadWithMixerField<fb::Mamba2>(config, 0, fb::Mamba2::VT_CONV_KERNEL, bad) ==
          RECUR_INVALID_MODEL);
    CHECK(Error() == "blocks.0: Mamba2 conv_kernel must be in [1, 256] (got " +
                         std::to_string(bad) + ")");
  }
  CHECK(LoadWithMixerField<fb::Mamba2>(config, 0, fb::Mamba2::VT_CONV_KERNEL, uint32_t{4}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error().find("blocks.0.mixer.conv.weight") != std::string::npos);
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity()}) {
    CAPTURE(bad);
    CHECK(LoadWithMixerField<fb::Mamba2>(config, 1, fb::Mamba2::VT_NORM_EPS, bad) ==
          RECUR_INVALID_MODEL);
    CHECK(Error().rfind("blocks.1: Mamba2 norm_eps must be finite and > 0 (got ", 0) == 0);
  }
  CHECK(LoadWithMixerField<fb::Mamba2>(config, 0, fb::Mamba2::VT_DT_MIN, 20.0f) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.0: Mamba2 needs 0 <= dt_min < dt_max (got 20, 10)");
  CHECK(LoadWithMixerField<fb::Mamba2>(config, 0, fb::Mamba2::VT_DT_MAX,
                                       std::numeric_limits<float>::quiet_NaN()) ==
        RECUR_INVALID_MODEL);
  CHECK(Error().rfind("blocks.0: Mamba2 needs 0 <= dt_min < dt_max", 0) == 0);
  CHECK(LoadWithMixerField<fb::Mamba2>(config, 1, fb::Mamba2::VT_A, int32_t{-1}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error() == "blocks.1.mixer.A is missing (expected shape [4])");
  CHECK(LoadWithMixerField<fb::Mamba2>(config, 1, fb::Mamba2::VT_STATE_SIZE, uint32_t{6}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error().find("blocks.1.mixer.in_proj.weight") != std::string::npos);
  CHECK(LoadWithMixerField<fb::Mamba2>(config, 0, fb::Mamba2::VT_HEAD_DIM, uint32_t{0}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error().find("blocks.0: Mamba2 needs heads, dk, dv > 0") == 0);
  // 160,000 heads: H·P and H·N within kMaxWidth, in_proj's 2·H·P + 2·G·N + H past it.
  CHECK(LoadWithMixerField<fb::Mamba2>(config, 0, fb::Mamba2::VT_HEADS, uint32_t{160000}) ==
        RECUR_INVALID_MODEL);
  CHECK(Error().rfind("blocks.0: Mamba2 in_proj's width", 0) == 0);
}
