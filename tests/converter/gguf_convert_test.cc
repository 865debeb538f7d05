// GGUF files of llama.cpp's rwkv7 architecture through the whole conversion
// (ConvertFiles: layout gguf, layouts/gguf.cc): hand-made files
// (SerializeGguf) that convert, whose Q4_0 weights arrive in the model as
// ggml's own dequantised values bit for bit, and every way such a file can be
// refused, each with its message. tests/layouts/test_gguf.py checks the
// models' outputs against BlinkDL's package on files of llama.cpp's gguf package.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "converter/convert.h"
#include "converter/gguf.h"
#include "converter/quantize.h"
#include "converter_test_util.h"
#include "engine/model_loader.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"
#include "model/model.h"
#include "recur/recur.h"
#include "schema/recur_generated.h"

namespace recur::impl::converter {
namespace {

// A small RWKV-7: C 32 in 2 heads of 16, 2 blocks, FFN 64, vocabulary 11,
// low-rank widths 8 (decay), 8 (a), 4 (value), 8 (gate).
constexpr uint64_t kC = 32, kLayers = 2, kFf = 64, kVocab = 11, kDw = 8, kDa = 8, kDv = 4, kDg = 8;

uint16_t Half(float v) {
  uint16_t h = 0;
  REQUIRE(F32ToF16(v, &h));
  return h;
}

// What the writer of a file in llama.cpp's form puts in it; tests change it.
struct GgufModel {
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<GgufTensorData> tensors;

  GgufTensorData* Find(const std::string& name) {
    for (GgufTensorData& t : tensors)
      if (t.name == name) return &t;
    FAIL("no tensor " << name);
    return nullptr;
  }
  const GgufTensorData* Find(const std::string& name) const {
    return const_cast<GgufModel*>(this)->Find(name);
  }
  void Remove(const std::string& name) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [&](const GgufTensorData& t) { return t.name == name; }),
                  tensors.end());
  }
  GgufValue* Key(const std::string& key) {
    for (auto& [k, v] : metadata)
      if (k == key) return &v;
    FAIL("no key " << key);
    return nullptr;
  }
  void RemoveKey(const std::string& key) {
    metadata.erase(std::remove_if(metadata.begin(), metadata.end(),
                                  [&](const auto& kv) { return kv.first == key; }),
                   metadata.end());
  }
};

// Random F32 values of `dims` (ggml order: ne[0] first): norms' weights near 1,
// everything else small.
GgufTensorData F32Tensor(const std::string& name, std::vector<uint64_t> dims, std::mt19937* rng) {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  const bool gain = name.find("norm.weight") != std::string::npos ||
                    name.find("norm_2.weight") != std::string::npos ||
                    name.find("time_mix_ln.weight") != std::string::npos;
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  std::vector<float> v(n);
  for (float& x : v) x = gain ? 1.0f + u(*rng) : u(*rng);
  return {name, ggml_type::kF32, std::move(dims), testing::BytesOf(v)};
}

// Q4_0 blocks for a [rows, cols] matrix (ne = [cols, rows]): each block's d
// drawn over negatives, positives, zero and subnormal halves, its 32 nibbles
// over all of 0..15.
GgufTensorData Q4_0Tensor(const std::string& name, uint64_t cols, uint64_t rows,
                          std::mt19937* rng) {
  std::vector<uint8_t> data;
  std::uniform_int_distribution<int> nibble(0, 15), kind(0, 9);
  std::uniform_real_distribution<float> mag(0.001f, 0.05f);
  for (uint64_t b = 0; b < rows * cols / 32; ++b) {
    const int k = kind(*rng);
    uint16_t d = k == 0 ? 0x0000 : k == 1 ? 0x8000 : k == 2 ? 0x8003 : Half(mag(*rng));
    if (k >= 6) d ^= 0x8000;  // negative
    data.push_back(uint8_t(d));
    data.push_back(uint8_t(d >> 8));
    for (int j = 0; j < 16; ++j) data.push_back(uint8_t(nibble(*rng) | nibble(*rng) << 4));
  }
  return {name, ggml_type::kQ4_0, {cols, rows}, std::move(data)};
}

// ggml's Q8_0 blocks for a [rows, cols] matrix: each block's d drawn as
// Q4_0Tensor's, its 32 int8 over all of -128..127.
GgufTensorData Q8_0Tensor(const std::string& name, uint64_t cols, uint64_t rows,
                          std::mt19937* rng) {
  std::vector<uint8_t> data;
  std::uniform_int_distribution<int> byte(0, 255), kind(0, 9);
  std::uniform_real_distribution<float> mag(0.0001f, 0.005f);
  for (uint64_t b = 0; b < rows * cols / 32; ++b) {
    const int k = kind(*rng);
    uint16_t d = k == 0 ? 0x0000 : k == 1 ? 0x8000 : k == 2 ? 0x8003 : Half(mag(*rng));
    if (k >= 6) d ^= 0x8000;  // negative
    data.push_back(uint8_t(d));
    data.push_back(uint8_t(d >> 8));
    for (int j = 0; j < 32; ++j) data.push_back(uint8_t(byte(*rng)));
  }
  return {name, ggml_type::kQ8_0, {cols, rows}, std::move(data)};
}

// K-quant blocks (ggml's block_q4_K, block_q5_K, block_q6_K; recur.fbs) for
// a [rows, cols] matrix: random codes and scale bytes, each block's d (and
// Q4_K's and Q5_K's dmin) drawn over negatives, positives, zero and
// subnormal halves.
GgufTensorData KQuantTensor(const std::string& name, uint32_t type, uint64_t cols, uint64_t rows,
                            std::mt19937* rng) {
  const bool q6 = type == ggml_type::kQ6_K;
  const size_t block_bytes = q6 ? 210 : type == ggml_type::kQ5_K ? 176 : 144;
  std::vector<uint8_t> data(rows * cols / 256 * block_bytes);
  std::uniform_int_distribution<int> byte(0, 255), kind(0, 9);
  std::uniform_real_distribution<float> mag(0.0005f, 0.004f);
  auto half = [&] {
    const int k = kind(*rng);
    uint16_t d = k == 0 ? 0x0000 : k == 1 ? 0x8000 : k == 2 ? 0x8003 : Half(mag(*rng));
    if (k >= 7) d ^= 0x8000;  // negative
    return d;
  };
  for (size_t b = 0; b < data.size() / block_bytes; ++b) {
    uint8_t* p = data.data() + b * block_bytes;
    for (size_t i = 0; i < block_bytes; ++i) p[i] = uint8_t(byte(*rng));
    for (size_t at : q6 ? std::vector<size_t>{208} : std::vector<size_t>{0, 2}) {
      const uint16_t d = half();
      p[at] = uint8_t(d);
      p[at + 1] = uint8_t(d >> 8);
    }
  }
  return {name, type, {cols, rows}, std::move(data)};
}

// How a file stores the matrices that llama-quantize quantises.
enum class Quant {
  kF32,     // convert_hf_to_gguf.py --outtype f32
  kQ4_0,    // llama-quantize --pure Q4_0: every such matrix Q4_0
  kQ8_0,    // convert_hf_to_gguf.py --outtype q8_0: every such matrix Q8_0
  kQ4_K_M,  // as a Q4_K_M-like mix: Q4_K, the value projections and output Q6_K
  kQ5_K_M   // the same with Q5_K for Q4_K
};

// The dimensions of the model a file holds.
struct RwkvDims {
  uint64_t c = kC, ff = kFf, head = 16;
};

// The file convert_hf_to_gguf.py writes for the model above (names, shapes,
// metadata), F32 throughout; quantised as `quant` says: the blocks' r, k, v,
// o, channel-mix matrices, token_embd and output (llama-quantize).
GgufModel RwkvGgufOf(Quant quant, uint32_t seed, const RwkvDims& dims) {
  const uint64_t c = dims.c, ff = dims.ff;
  std::mt19937 rng(seed);
  GgufModel m;
  const uint32_t file_type = quant == Quant::kQ4_0     ? 2u
                             : quant == Quant::kQ8_0   ? 7u
                             : quant == Quant::kQ4_K_M ? 15u
                             : quant == Quant::kQ5_K_M ? 17u
                                                       : 0u;
  m.metadata = {{"general.architecture", GgufValue(std::string("rwkv7"))},
                {"general.name", GgufValue(std::string("tiny rwkv7"))},
                {"rwkv7.context_length", GgufValue(uint32_t{1048576})},
                {"rwkv7.embedding_length", GgufValue(uint32_t(c))},
                {"rwkv7.block_count", GgufValue(uint32_t{kLayers})},
                {"rwkv7.attention.layer_norm_epsilon", GgufValue(1e-5f)},
                {"rwkv7.wkv.head_size", GgufValue(uint32_t(dims.head))},
                {"rwkv7.attention.decay_lora_rank", GgufValue(uint32_t{kDw})},
                {"rwkv7.attention.iclr_lora_rank", GgufValue(uint32_t{kDa})},
                {"rwkv7.attention.value_residual_mix_lora_rank", GgufValue(uint32_t{kDv})},
                {"rwkv7.attention.gate_lora_rank", GgufValue(uint32_t{kDg})},
                {"rwkv7.feed_forward_length", GgufValue(uint32_t(ff))},
                {"general.file_type", GgufValue(file_type)},
                {"rwkv7.attention.head_count", GgufValue(uint32_t{0})}};
  auto matrix = [&](const std::string& name, uint64_t cols, uint64_t rows) {
    switch (quant) {
      case Quant::kF32:
        m.tensors.push_back(F32Tensor(name, {cols, rows}, &rng));
        return;
      case Quant::kQ4_0:
        m.tensors.push_back(Q4_0Tensor(name, cols, rows, &rng));
        return;
      case Quant::kQ8_0:
        m.tensors.push_back(Q8_0Tensor(name, cols, rows, &rng));
        return;
      case Quant::kQ4_K_M:
      case Quant::kQ5_K_M: {
        const bool q6 = name.find("_value.") != std::string::npos || name == "output.weight";
        const uint32_t most = quant == Quant::kQ4_K_M ? ggml_type::kQ4_K : ggml_type::kQ5_K;
        m.tensors.push_back(KQuantTensor(name, q6 ? ggml_type::kQ6_K : most, cols, rows, &rng));
        return;
      }
    }
  };
  auto f32 = [&](const std::string& name, std::vector<uint64_t> dims) {
    m.tensors.push_back(F32Tensor(name, std::move(dims), &rng));
  };
  matrix("token_embd.weight", c, kVocab);
  f32("token_embd_norm.weight", {c});
  f32("token_embd_norm.bias", {c});
  for (uint64_t i = 0; i < kLayers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    for (const char* norm : {"attn_norm", "attn_norm_2"}) {
      f32(b + norm + ".weight", {c});
      f32(b + norm + ".bias", {c});
    }
    f32(b + "time_mix_lerp_fused.weight", {c, 1, 1, 6});
    const uint64_t dv = i == 0 ? kDa : kDv;  // layer 0's v's: copies of its a's
    for (const auto& [l, d] : {std::pair{'w', kDw}, {'a', kDa}, {'v', dv}, {'g', kDg}}) {
      const std::string p = b + "time_mix_" + l;
      if (l != 'g') f32(p + "0.weight", {c});
      f32(p + "1.weight", {c, d});
      f32(p + "2.weight", {d, c});
    }
    for (const char* v : {"k_k", "k_a", "r_k"}) f32(b + "time_mix_" + v + ".weight", {c});
    for (const char* w : {"key", "value", "receptance", "output"}) {
      matrix(b + "time_mix_" + w + ".weight", c, c);
    }
    f32(b + "time_mix_ln.weight", {c});
    f32(b + "time_mix_ln.bias", {c});
    f32(b + "channel_mix_lerp_k.weight", {c});
    matrix(b + "channel_mix_key.weight", c, ff);
    matrix(b + "channel_mix_value.weight", ff, c);
  }
  f32("output_norm.weight", {c});
  f32("output_norm.bias", {c});
  matrix("output.weight", c, kVocab);
  return m;
}

GgufModel RwkvGguf(bool q4_0 = false, uint32_t seed = 1) {
  return RwkvGgufOf(q4_0 ? Quant::kQ4_0 : Quant::kF32, seed, RwkvDims());
}

struct Converted {
  Status status;
  AlignedBytes model;  // the written file, when status is OK
};

// `m` written to dir/t.gguf and converted (options' paths filled in).
Converted Convert(const testing::TempDir& dir, const GgufModel& m, ConvertOptions o = {},
                  ConvertReport* report = nullptr) {
  const std::vector<uint8_t> bytes = SerializeGguf(m.metadata, m.tensors);
  testing::WriteFile(dir.File("t.gguf"), bytes.data(), bytes.size());
  o.weights_path = dir.File("t.gguf");
  o.output_path = dir.File("t.recur");
  Converted out;
  out.status = ConvertFiles(o, report);
  if (out.status.ok()) {
    const std::string text = testing::ReadText(o.output_path);
    out.model.assign(text.begin(), text.end());
  }
  return out;
}

// The message of a conversion that must fail.
std::string Refusal(const GgufModel& m, ConvertOptions o = {}) {
  testing::TempDir dir;
  const Converted c = Convert(dir, m, o);
  CHECK_FALSE(c.status.ok());
  return c.status.message();
}

const fb::Tensor* TensorOf(const AlignedBytes& bytes, const std::string& name) {
  for (const fb::Tensor* t : *fb::GetSizePrefixedModel(bytes.data())->tensors()) {
    if (t->name()->str() == name) return t;
  }
  FAIL("no tensor " << name);
  return nullptr;
}

// Tensor `t`'s bytes in the model's data segment.
const uint8_t* DataOf(const AlignedBytes& bytes, const fb::Tensor* t) {
  uint32_t flatbuffer = 0;
  std::memcpy(&flatbuffer, bytes.data(), 4);
  return bytes.data() + RoundUp(4 + uint64_t{flatbuffer}, kAlignment) + t->offset();
}

// ggml's dequantize_row_q4_0 (ggml-quants.c) of one block: y = (q − 8)·d in float.
void GgmlDequantizeQ4_0(const uint8_t* block, float* y) {
  uint16_t bits;
  std::memcpy(&bits, block, 2);
  const float d = F16ToF32(bits);  // GGML_FP16_TO_FP32
  for (int j = 0; j < 16; ++j) {
    const int x0 = (block[2 + j] & 0x0F) - 8;
    const int x1 = (block[2 + j] >> 4) - 8;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

// ggml's dequantize_row_q8_0 of one block: y = q·d in float.
void GgmlDequantizeQ8_0(const uint8_t* block, float* y) {
  uint16_t bits;
  std::memcpy(&bits, block, 2);
  const float d = F16ToF32(bits);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(block[2 + j])) * d;
}

uint32_t Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

TEST_CASE("gguf rwkv7: an F32 file converts with no config, its metadata the model's") {
  testing::TempDir dir;
  GgufModel m = RwkvGguf();
  const std::vector<uint8_t> bytes = SerializeGguf(m.metadata, m.tensors);
  testing::WriteFile(dir.File("t.gguf"), bytes.data(), bytes.size());
  ConvertOptions o;
  o.weights_path = dir.File("t.gguf");
  o.output_path = dir.File("t.recur");
  ConvertReport report;
  const Status s = ConvertFiles(o, &report);
  REQUIRE_MESSAGE(s.ok(), s.message());
  CHECK(report.layout == Layout::kGguf);
  CHECK(report.narrow_tensors == 0);
  const std::string text = testing::ReadText(o.output_path);
  const AlignedBytes model(text.begin(), text.end());
  const fb::Model* fm = fb::GetSizePrefixedModel(model.data());
  CHECK(fm->d_model() == kC);
  REQUIRE(fm->blocks()->size() == kLayers);
  CHECK(fm->input()->vocab_size() == kVocab);
  CHECK(fm->metadata()->notes()->str() == "GGUF general.name: tiny rwkv7");
  const fb::Rwkv7* mixer = fm->blocks()->Get(1)->mixer_as_Rwkv7();
  REQUIRE(mixer != nullptr);
  CHECK(mixer->heads() == 2);
  CHECK(mixer->head_size() == 16);
  CHECK(mixer->group_norm_eps() == 64e-5f);  // llama.cpp's constant, whatever the head size
  CHECK(mixer->decay_scale() == 0.606531f);
  CHECK(mixer->value_down() != nullptr);
  CHECK(fm->blocks()->Get(0)->mixer_as_Rwkv7()->value_down() == nullptr);
  CHECK(fm->blocks()->Get(0)->norm1()->eps() == 1e-5f);
  // Copies, byte for byte: the (6, 1, 1, C) mixes are the table's rows (r, w, k, v,
  // a, g in both), w1 [D, C] (ne [C, D]) is decay_down, r_k [C] the bonus.
  for (const auto& [recur, gguf] :
       {std::pair<std::string, std::string>{"blocks.1.mixer.token_mix",
                                            "blk.1.time_mix_lerp_fused.weight"},
        {"blocks.1.mixer.decay_down.weight", "blk.1.time_mix_w1.weight"},
        {"blocks.0.mixer.rate_up.weight", "blk.0.time_mix_a2.weight"},
        {"blocks.1.mixer.bonus", "blk.1.time_mix_r_k.weight"},
        {"blocks.1.ffn.token_mix", "blk.1.channel_mix_lerp_k.weight"},
        {"blocks.1.ffn.linear2.weight", "blk.1.channel_mix_value.weight"},
        {"head.weight", "output.weight"}}) {
    const std::string where = recur;  // INFO cannot capture a structured binding (clang 14)
    INFO(where);
    const fb::Tensor* t = TensorOf(model, recur);
    const std::vector<uint8_t>& want = m.Find(gguf)->data;
    REQUIRE(t->size() == want.size());
    CHECK(std::memcmp(DataOf(model, t), want.data(), want.size()) == 0);
  }
}

TEST_CASE("gguf rwkv7: Q8_0 weights are ggml's dequantised values, bit for bit") {
  testing::TempDir dir;
  GgufModel m = RwkvGgufOf(Quant::kQ8_0, 11, RwkvDims());
  const Converted c = Convert(dir, m);
  REQUIRE_MESSAGE(c.status.ok(), c.status.message());
  for (const auto& [recur, gguf] :
       {std::pair<std::string, std::string>{"blocks.0.mixer.key.weight", "blk.0.time_mix_key.weight"},
        {"blocks.1.ffn.linear2.weight", "blk.1.channel_mix_value.weight"},
        {"head.weight", "output.weight"},
        {"input.embedding", "token_embd.weight"}}) {
    const std::string where = recur;  // INFO cannot capture a structured binding (clang 14)
    INFO(where);
    const fb::Tensor* t = TensorOf(c.model, recur);
    REQUIRE(t->dtype() == fb::DType::Q8_0);
    REQUIRE(t->quant()->group_size() == 32);
    const auto rows = size_t(t->shape()->Get(0)), cols = size_t(t->shape()->Get(1));
    const GgufTensorData* q = m.Find(gguf);
    REQUIRE(q->dims == std::vector<uint64_t>{cols, rows});
    const auto* bytes = reinterpret_cast<const int8_t*>(DataOf(c.model, t));
    size_t mismatches = 0, negative = 0, zero = 0;
    float block[32];
    for (size_t k = 0; k < rows * cols / 32; ++k) {
      GgmlDequantizeQ8_0(q->data.data() + k * 34, block);
      const uint16_t scale = t->quant()->scales_f16()->Get(uint32_t(k));
      negative += (scale & 0x8000) != 0;
      zero += (scale & 0x7FFF) == 0;
      for (size_t j = 0; j < 32; ++j) {
        const float w = F16ToF32(scale) * static_cast<float>(bytes[k * 32 + j]);  // the runtime's decoding
        mismatches += Bits(w) != Bits(block[j]);
      }
    }
    CHECK(mismatches == 0);
    CHECK(negative > 0);
    CHECK(zero > 0);
  }
  // A NaN scale is refused, naming the tensor and the block.
  GgufModel bad = m;
  GgufTensorData* key = bad.Find("blk.1.time_mix_key.weight");
  key->data[34 * 3] = 0x01;
  key->data[34 * 3 + 1] = 0x7E;
  const Converted refused = Convert(dir, bad);
  CHECK(!refused.status.ok());
  CHECK(refused.status.message().find("blk.1.time_mix_key.weight") != std::string::npos);
}

TEST_CASE("gguf rwkv7: Q4_0 weights are ggml's dequantised values, bit for bit") {
  testing::TempDir dir;
  GgufModel m = RwkvGguf(/*q4_0=*/true, 7);
  for (bool keep : {true, false}) {
    INFO((keep ? "without --dtype" : "--dtype int4 --quantize-head"));
    ConvertOptions o;
    if (!keep) {
      o.dtype = WeightType::kI4;
      o.quantize_head = true;
    }
    const Converted c = Convert(dir, m, o);
    REQUIRE_MESSAGE(c.status.ok(), c.status.message());
    for (const auto& [recur, gguf] :
         {std::pair<std::string, std::string>{"blocks.0.mixer.key.weight",
                                              "blk.0.time_mix_key.weight"},
          {"blocks.1.mixer.out.weight", "blk.1.time_mix_output.weight"},
          {"blocks.1.ffn.linear1.weight", "blk.1.channel_mix_key.weight"},
          {"blocks.0.ffn.linear2.weight", "blk.0.channel_mix_value.weight"},
          {"head.weight", "output.weight"},
          {"input.embedding", "token_embd.weight"}}) {
      const std::string where = recur;  // INFO cannot capture a structured binding (clang 14)
      INFO(where);
      // --dtype leaves the embedding f32 (below).
      if (!keep && where == "input.embedding") continue;
      const fb::Tensor* t = TensorOf(c.model, recur);
      REQUIRE(t->dtype() == fb::DType::I4);
      REQUIRE(t->quant()->group_size() == 32);
      const auto rows = size_t(t->shape()->Get(0)), cols = size_t(t->shape()->Get(1));
      const GgufTensorData* q = m.Find(gguf);
      REQUIRE(q->dims == std::vector<uint64_t>{cols, rows});
      const uint8_t* packed = DataOf(c.model, t);
      size_t mismatches = 0, negative = 0, zero = 0;
      float block[32];
      for (size_t r = 0; r < rows; ++r) {
        for (size_t g = 0; g < cols / 32; ++g) {
          const size_t k = r * (cols / 32) + g;
          GgmlDequantizeQ4_0(q->data.data() + k * 18, block);
          const uint16_t scale = t->quant()->scales_f16()->Get(uint32_t(k));
          negative += (scale & 0x8000) != 0;
          zero += (scale & 0x7FFF) == 0;
          for (size_t j = 0; j < 32; ++j) {
            // The runtime's decoding: the f16 scale widened, times q (kernels/dense).
            const float w = F16ToF32(scale) *
                            static_cast<float>(kernels::I4Value(packed + r * cols / 2, g * 32 + j));
            mismatches += Bits(w) != Bits(block[j]);
          }
        }
      }
      CHECK(mismatches == 0);
      CHECK(negative > 0);
      CHECK(zero > 0);
    }
    if (keep) continue;
    // With --dtype the embedding is f32, as from any source: the blocks' values, decoded.
    const fb::Tensor* emb = TensorOf(c.model, "input.embedding");
    REQUIRE(emb->dtype() == fb::DType::F32);
    const GgufTensorData* q = m.Find("token_embd.weight");
    std::vector<float> want(kVocab * kC);
    for (size_t k = 0; k < want.size() / 32; ++k) GgmlDequantizeQ4_0(q->data.data() + k * 18, &want[k * 32]);
    CHECK(std::memcmp(DataOf(c.model, emb), want.data(), want.size() * 4) == 0);
  }
  // --dtype f32: every weight widened, the same numbers.
  ConvertOptions wide;
  wide.dtype = WeightType::kF32;
  const Converted c = Convert(dir, m, wide);
  REQUIRE_MESSAGE(c.status.ok(), c.status.message());
  const fb::Tensor* t = TensorOf(c.model, "blocks.1.mixer.key.weight");
  REQUIRE(t->dtype() == fb::DType::F32);
  std::vector<float> want(kC * kC);
  for (size_t k = 0; k < want.size() / 32; ++k) {
    GgmlDequantizeQ4_0(m.Find("blk.1.time_mix_key.weight")->data.data() + k * 18, &want[k * 32]);
  }
  CHECK(std::memcmp(DataOf(c.model, t), want.data(), want.size() * 4) == 0);
}

// The outputs of `steps` token steps of a model (f32 activations).
std::vector<float> GgufStepOutputs(const AlignedBytes& bytes, size_t steps) {
  recur_model* model = nullptr;
  REQUIRE_MESSAGE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK,
                  recur_last_error());
  recur_model_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
  recur_session_options so;
  std::memset(&so, 0, sizeof(so));
  so.struct_size = sizeof(so);
  so.batch = 1;
  so.int8_activations = RECUR_INT8_ACTIVATIONS_FLOAT;
  recur_session* session = nullptr;
  REQUIRE_MESSAGE(recur_session_create(model, &so, &session) == RECUR_OK, recur_last_error());
  std::vector<float> out(steps * info.output_width);
  for (size_t s = 0; s < steps; ++s) {
    const int32_t token = static_cast<int32_t>((s * 7 + 3) % kVocab);
    recur_input in{&token, nullptr, 1};
    REQUIRE(recur_session_step(session, &in, out.data() + s * info.output_width) == RECUR_OK);
  }
  recur_session_free(session);
  recur_model_free(model);
  return out;
}

// The values of a K-quant GGUF tensor, block by block, as the runtime's
// scalar spec decodes them (tests/kernels/dense_kquant_test.cc holds the
// spec to ggml's dequantize_row_q4_K / _q5_K / _q6_K bit for bit).
std::vector<float> KQuantValues(const GgufTensorData& t) {
  const auto type = t.type == ggml_type::kQ4_K   ? WeightType::kQ4_K
                    : t.type == ggml_type::kQ5_K ? WeightType::kQ5_K
                                                 : WeightType::kQ6_K;
  const size_t block_bytes = kernels::Traits(type).block_bytes;
  std::vector<float> v(t.data.size() / block_bytes * 256);
  for (size_t k = 0; k < v.size() / 256; ++k) {
    kernels::ref::DecodeKQuantBlock(type, t.data.data() + k * block_bytes, &v[k * 256]);
  }
  return v;
}

constexpr RwkvDims kKQuantDims{256, 512, 64};

TEST_CASE("gguf rwkv7: Q4_K, Q5_K and Q6_K matrices are taken over block for block") {
  for (const Quant quant : {Quant::kQ4_K_M, Quant::kQ5_K_M}) {
    const bool q4 = quant == Quant::kQ4_K_M;
    const WeightType most = q4 ? WeightType::kQ4_K : WeightType::kQ5_K;
    const fb::DType most_fb = q4 ? fb::DType::Q4_K : fb::DType::Q5_K;
    INFO((q4 ? "Q4_K_M" : "Q5_K_M"));
    testing::TempDir dir;
    const GgufModel m = RwkvGgufOf(quant, 9, kKQuantDims);
    ConvertOptions o;
    ConvertReport report;
    {
      const std::vector<uint8_t> bytes = SerializeGguf(m.metadata, m.tensors);
      testing::WriteFile(dir.File("t.gguf"), bytes.data(), bytes.size());
      o.weights_path = dir.File("t.gguf");
      o.output_path = dir.File("t.recur");
      const Status s = ConvertFiles(o, &report);
      REQUIRE_MESSAGE(s.ok(), s.message());
    }
    // Per block: r, k, o, the channel mix's key in Q4_K (Q5_K); v, the channel
    // mix's value in Q6_K; and the head in Q6_K.
    CHECK(report.narrow_types == std::map<WeightType, std::size_t>{
                                     {most, 4 * kLayers + 1}, {WeightType::kQ6_K, 2 * kLayers + 1}});
    const std::string text = testing::ReadText(o.output_path);
    const AlignedBytes model(text.begin(), text.end());
    for (const auto& [recur, gguf] :
         {std::pair<std::string, std::string>{"blocks.0.mixer.key.weight",
                                              "blk.0.time_mix_key.weight"},
          {"blocks.1.mixer.value.weight", "blk.1.time_mix_value.weight"},
          {"blocks.1.mixer.out.weight", "blk.1.time_mix_output.weight"},
          {"blocks.1.ffn.linear1.weight", "blk.1.channel_mix_key.weight"},
          {"blocks.0.ffn.linear2.weight", "blk.0.channel_mix_value.weight"},
          {"head.weight", "output.weight"},
          {"input.embedding", "token_embd.weight"}}) {
      const std::string where = recur;  // INFO cannot capture a structured binding (clang 14)
      INFO(where);
      const fb::Tensor* t = TensorOf(model, recur);
      const GgufTensorData* q = m.Find(gguf);
      CHECK(t->dtype() == (q->type == ggml_type::kQ6_K ? fb::DType::Q6_K : most_fb));
      CHECK(t->quant() == nullptr);
      CHECK(t->shape()->Get(1) == int64_t(q->dims[0]));
      REQUIRE(t->size() == q->data.size());
      CHECK(std::memcmp(DataOf(model, t), q->data.data(), q->data.size()) == 0);
    }
    // Zero, negative and subnormal scales among the blocks taken over.
    size_t zero = 0, negative = 0;
    const size_t block_bytes = kernels::Traits(most).block_bytes;
    for (size_t k = 0; k < m.Find("blk.0.time_mix_key.weight")->data.size() / block_bytes; ++k) {
      const uint8_t* b = m.Find("blk.0.time_mix_key.weight")->data.data() + k * block_bytes;
      zero += b[0] == 0 && (b[1] & 0x7F) == 0;
      negative += (b[1] & 0x80) != 0;
    }
    CHECK(zero > 0);
    CHECK(negative > 0);

    // --dtype f32 widens every weight to the same values: the runtime gives the
    // same outputs up to the order of its f32 sums.
    ConvertOptions wide;
    wide.dtype = WeightType::kF32;
    const Converted c = Convert(dir, m, wide);
    REQUIRE_MESSAGE(c.status.ok(), c.status.message());
    const fb::Tensor* v = TensorOf(c.model, "blocks.1.mixer.value.weight");
    REQUIRE(v->dtype() == fb::DType::F32);
    const std::vector<float> v_want = KQuantValues(*m.Find("blk.1.time_mix_value.weight"));
    CHECK(std::memcmp(DataOf(c.model, v), v_want.data(), v_want.size() * 4) == 0);
    const std::vector<float> got = GgufStepOutputs(model, 6), ref = GgufStepOutputs(c.model, 6);
    REQUIRE(got.size() == ref.size());
    double worst = 0, largest = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(double{got[i]} - ref[i]));
      largest = std::max(largest, std::fabs(double{ref[i]}));
    }
    INFO("max |Δ| " << worst << " of outputs up to " << largest);
    CHECK(largest > 0.1);
    CHECK(worst <= 1e-4 * std::max(1.0, largest));

    // --dtype q4_k (q5_k) takes the Q4_K (Q5_K) blocks over and cannot make the
    // Q6_K ones.
    ConvertOptions same;
    same.dtype = most;
    CHECK(Refusal(m, same) ==
          std::string("blocks.0.mixer.value.weight: recur-convert does not quantise to ") +
              WeightTypeName(most) + "; it takes a GGUF file's " + (q4 ? "Q4_K" : "Q5_K") +
              " matrices over as they are (convert that file without --dtype), and this tensor is "
              "not one: use another --dtype");
    // --dtype int8 quantises the decoded values as for any input.
    ConvertOptions int8;
    int8.dtype = WeightType::kI8;
    const Converted c8 = Convert(dir, m, int8);
    REQUIRE_MESSAGE(c8.status.ok(), c8.status.message());
    CHECK(TensorOf(c8.model, "blocks.0.mixer.key.weight")->dtype() == fb::DType::I8);
  }
}

// The loader's message for model bytes (empty when they load).
std::string LoadMessage(const AlignedBytes& bytes) {
  std::unique_ptr<Model> model;
  const Status s = LoadModel(bytes.data(), bytes.size(), {}, &model);
  return s.ok() ? std::string() : s.message();
}

// Sets field `field` of tensor `name` in model bytes (a scalar the FlatBuffer stores).
template <typename T>
void SetTensorField(AlignedBytes& bytes, const std::string& name, uint16_t field, T value) {
  for (const fb::Tensor* t : *fb::GetSizePrefixedModel(bytes.data())->tensors()) {
    if (t->name()->str() != name) continue;
    auto* table = reinterpret_cast<flatbuffers::Table*>(const_cast<fb::Tensor*>(t));
    REQUIRE(table->SetField<T>(field, value, T{}));
  }
}

TEST_CASE("gguf rwkv7: the loader refuses K-quant tensors of the wrong shape or size") {
  testing::TempDir dir;
  const Converted c = Convert(dir, RwkvGgufOf(Quant::kQ4_K_M, 5, kKQuantDims));
  REQUIRE_MESSAGE(c.status.ok(), c.status.message());
  CHECK(LoadMessage(c.model).empty());
  {  // a q4_k tensor's size: not its blocks'
    AlignedBytes bytes = c.model;
    const uint64_t size = TensorOf(bytes, "blocks.0.mixer.key.weight")->size();
    SetTensorField<uint64_t>(bytes, "blocks.0.mixer.key.weight", fb::Tensor::VT_SIZE, size - 144);
    CHECK(LoadMessage(bytes) == "tensor 'blocks.0.mixer.key.weight': size 36720 bytes does not "
                                "match shape [256,256] of q4_k elements (256 per 144 bytes: "
                                "36864)");
  }
  {  // rows that are not whole blocks: [256, 256] as [512, 128], the same elements
    AlignedBytes bytes = c.model;
    const auto* shape = TensorOf(bytes, "blocks.0.mixer.key.weight")->shape();
    const int64_t dims[2] = {512, 128};
    std::memcpy(const_cast<int64_t*>(shape->data()), dims, sizeof(dims));
    CHECK(LoadMessage(bytes) == "tensor 'blocks.0.mixer.key.weight': q4_k needs a 2-D [out, in] "
                                "shape with in a multiple of 256, got [512,128]");
  }
  {  // a q6_k tensor read as q5_k: refused by its size
    AlignedBytes bytes = c.model;
    SetTensorField<int8_t>(bytes, "head.weight", fb::Tensor::VT_DTYPE,
                           static_cast<int8_t>(fb::DType::Q5_K));
    CHECK(LoadMessage(bytes) == "tensor 'head.weight': size 2310 bytes does not match shape "
                                "[11,256] of q5_k elements (256 per 176 bytes: 1936)");
  }
}

TEST_CASE("gguf rwkv7: K-quant refusals") {
  SUBCASE("a non-finite d or dmin") {
    GgufModel m = RwkvGgufOf(Quant::kQ4_K_M, 3, kKQuantDims);
    GgufTensorData* q = m.Find("blk.1.time_mix_key.weight");
    q->data[144 * 3 + 2] = 0x00;
    q->data[144 * 3 + 3] = 0xFC;  // block 3's dmin: −Inf
    const std::string inf = Refusal(m);
    INFO(inf);
    CHECK(inf.rfind("blk.1.time_mix_key.weight: ", 0) == 0);
    CHECK(inf.find(" at index 768 ([3,0])") != std::string::npos);  // block 3: row 3
    m = RwkvGgufOf(Quant::kQ4_K_M, 3, kKQuantDims);
    q = m.Find("output.weight");
    q->data[210 + 208] = 0x01;
    q->data[210 + 209] = 0x7C;  // block 1's d: NaN
    CHECK(Refusal(m).rfind("output.weight: NaN at index 256 ([1,0])", 0) == 0);
  }
  SUBCASE("a K-quant whose stored form is not the recur type's") {
    // KQuantFromGguf itself: shapes and sizes the GGUF reader would not let
    // through, and the scales Get's checks would have caught first.
    std::vector<uint8_t> blocks(2 * 144, 0);
    auto r = KQuantFromGguf("w", WeightType::kQ4_K, blocks.data(), blocks.size(), {2, 128});
    CHECK(r.message() == "w: Q4_K rows of 128 inputs are not whole blocks of 256, shape [2,128]");
    r = KQuantFromGguf("w", WeightType::kQ4_K, blocks.data(), blocks.size(), {3, 256});
    CHECK(r.message() == "w: 288 bytes of Q4_K blocks do not hold shape [3,256] (144 bytes per "
                         "256 inputs of a row)");
    r = KQuantFromGguf("w", WeightType::kQ4_K, blocks.data(), blocks.size(), {512});
    CHECK(r.message() == "w: Q4_K as q4_k needs a 2-D [out, in] weight, got shape [512]");
    blocks[144 + 3] = 0x7C;  // block 1's dmin: +Inf
    r = KQuantFromGguf("w", WeightType::kQ4_K, blocks.data(), blocks.size(), {2, 256});
    CHECK(r.message() == "w: Q4_K block 0 of row 1 has a scale dmin that is infinite");
    std::vector<uint8_t> q6(210, 0);
    q6[209] = 0xFE;  // d: NaN
    r = KQuantFromGguf("w", WeightType::kQ6_K, q6.data(), q6.size(), {1, 256});
    CHECK(r.message() == "w: Q6_K block 0 of row 0 has a scale d that is NaN");
    q6[209] = 0x3C;
    r = KQuantFromGguf("w", WeightType::kQ6_K, q6.data(), q6.size(), {1, 256});
    REQUIRE(r.ok());
    CHECK(r->bytes == q6);
    CHECK(r->dtype == WeightType::kQ6_K);
    CHECK(r->scales_f16.empty());
  }
}

TEST_CASE("gguf rwkv7: F16 and BF16 matrices stay f16 and bf16 without --dtype") {
  testing::TempDir dir;
  GgufModel m = RwkvGguf();
  // As convert_hf_to_gguf.py --outtype f16 writes them: 2-D weights in F16 (bf16: BF16).
  for (uint32_t type : {ggml_type::kF16, ggml_type::kBF16}) {
    INFO("ggml type " << type);
    GgufModel half = m;
    for (GgufTensorData& t : half.tensors) {
      if (t.dims.size() != 2 || t.name.find("time_mix_w") != std::string::npos) continue;
      std::vector<float> v(t.data.size() / 4);
      std::memcpy(v.data(), t.data.data(), t.data.size());
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        REQUIRE((type == ggml_type::kF16 ? F32ToF16(v[i], &h[i]) : F32ToBf16(v[i], &h[i])));
      }
      t.type = type;
      t.data = testing::BytesOf(h);
    }
    const Converted c = Convert(dir, half);
    REQUIRE_MESSAGE(c.status.ok(), c.status.message());
    const fb::DType narrow = type == ggml_type::kF16 ? fb::DType::F16 : fb::DType::BF16;
    CHECK(TensorOf(c.model, "blocks.1.mixer.receptance.weight")->dtype() == narrow);
    CHECK(TensorOf(c.model, "blocks.0.ffn.linear1.weight")->dtype() == narrow);
    CHECK(TensorOf(c.model, "head.weight")->dtype() == narrow);
    // The low-rank paths keep the file's type (the decay's is F32 in the file).
    CHECK(TensorOf(c.model, "blocks.1.mixer.gate_up.weight")->dtype() == narrow);
    CHECK(TensorOf(c.model, "blocks.1.mixer.value_down.weight")->dtype() == narrow);
    CHECK(TensorOf(c.model, "blocks.1.mixer.decay_down.weight")->dtype() == fb::DType::F32);
    // The embedding keeps the file's type too, its bits unchanged.
    const fb::Tensor* emb = TensorOf(c.model, "input.embedding");
    CHECK(emb->dtype() == narrow);
    REQUIRE(emb->size() == half.Find("token_embd.weight")->data.size());
    CHECK(std::memcmp(DataOf(c.model, emb), half.Find("token_embd.weight")->data.data(),
                      emb->size()) == 0);
    const fb::Tensor* k = TensorOf(c.model, "blocks.1.mixer.key.weight");
    CHECK(std::memcmp(DataOf(c.model, k), half.Find("blk.1.time_mix_key.weight")->data.data(),
                      k->size()) == 0);
  }
}

// The values ggml dequantises tensor `t` (F16, BF16, Q4_0, Q8_0 or a K-quant) to.
std::vector<float> GgmlValues(const GgufTensorData& t) {
  std::vector<float> v;
  if (t.type == ggml_type::kF16 || t.type == ggml_type::kBF16) {
    v.resize(t.data.size() / 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const auto h = static_cast<uint16_t>(t.data[2 * i] | t.data[2 * i + 1] << 8);
      v[i] = t.type == ggml_type::kF16 ? F16ToF32(h) : Bf16ToF32(h);
    }
  } else if (t.type == ggml_type::kQ4_0) {
    v.resize(t.data.size() / 18 * 32);
    for (size_t k = 0; k < v.size() / 32; ++k) GgmlDequantizeQ4_0(t.data.data() + k * 18, &v[k * 32]);
  } else if (t.type == ggml_type::kQ8_0) {
    v.resize(t.data.size() / 34 * 32);
    for (size_t k = 0; k < v.size() / 32; ++k) GgmlDequantizeQ8_0(t.data.data() + k * 34, &v[k * 32]);
  } else {
    v = KQuantValues(t);
  }
  return v;
}

// `t` in the file's type `type` (F16 or BF16 from F32 values; a K-quant drawn anew).
GgufTensorData Retyped(const GgufTensorData& t, uint32_t type, std::mt19937* rng) {
  if (type != ggml_type::kF16 && type != ggml_type::kBF16) {
    return KQuantTensor(t.name, type, t.dims[0], t.dims[1], rng);
  }
  std::vector<float> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), t.data.size());
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    REQUIRE((type == ggml_type::kF16 ? F32ToF16(v[i], &h[i]) : F32ToBf16(v[i], &h[i])));
  }
  return {t.name, type, t.dims, testing::BytesOf(h)};
}

TEST_CASE("gguf rwkv7: a narrow embedding gives the logits of its values in f32, bit for bit, in fewer bytes") {
  const struct {
    const char* name;
    Quant quant;
    uint32_t embedding;  // token_embd's type: 0 = as `quant` leaves it
    fb::DType stored;
    RwkvDims dims;
  } cases[] = {
      {"Q4_0", Quant::kQ4_0, 0, fb::DType::I4, RwkvDims()},
      {"Q8_0", Quant::kQ8_0, 0, fb::DType::Q8_0, RwkvDims()},
      {"Q4_K", Quant::kQ4_K_M, 0, fb::DType::Q4_K, kKQuantDims},
      {"Q5_K", Quant::kQ5_K_M, 0, fb::DType::Q5_K, kKQuantDims},
      {"Q6_K", Quant::kQ4_K_M, ggml_type::kQ6_K, fb::DType::Q6_K, kKQuantDims},
      {"F16", Quant::kF32, ggml_type::kF16, fb::DType::F16, RwkvDims()},
      {"BF16", Quant::kF32, ggml_type::kBF16, fb::DType::BF16, RwkvDims()},
  };
  for (const auto& c : cases) {
    INFO("token_embd " << c.name);
    testing::TempDir dir;
    std::mt19937 rng(31);
    GgufModel m = RwkvGgufOf(c.quant, 13, c.dims);
    GgufTensorData* embd = m.Find("token_embd.weight");
    if (c.embedding != 0) *embd = Retyped(*embd, c.embedding, &rng);
    // The same file with token_embd in F32 holding ggml's values of it: the
    // model a converter that widened the embedding wrote.
    GgufModel wide = m;
    const std::vector<float> values = GgmlValues(*embd);
    REQUIRE(values.size() == kVocab * c.dims.c);
    *wide.Find("token_embd.weight") = {"token_embd.weight", ggml_type::kF32, embd->dims,
                                       testing::BytesOf(values)};
    const Converted narrow = Convert(dir, m);
    REQUIRE_MESSAGE(narrow.status.ok(), narrow.status.message());
    const Converted widened = Convert(dir, wide);
    REQUIRE_MESSAGE(widened.status.ok(), widened.status.message());
    const fb::Tensor* emb = TensorOf(narrow.model, "input.embedding");
    CHECK(emb->dtype() == c.stored);
    CHECK(TensorOf(widened.model, "input.embedding")->dtype() == fb::DType::F32);
    // Every row as the runtime decodes it is ggml's.
    std::unique_ptr<Model> loaded;
    const Status s = LoadModel(narrow.model.data(), narrow.model.size(), {}, &loaded);
    REQUIRE_MESSAGE(s.ok(), s.message());
    std::vector<float> rows(values.size());
    kernels::DecodeWeightRows(loaded->embedding, 0, kVocab, rows.data());
    size_t mismatches = 0;  // values, so that Q6_K's +0 for ggml's −0 passes (dense.h)
    for (size_t i = 0; i < values.size(); ++i) mismatches += !(rows[i] == values[i]);
    CHECK(mismatches == 0);
    // The same logits, bit for bit.
    const std::vector<float> got = GgufStepOutputs(narrow.model, 8);
    const std::vector<float> want = GgufStepOutputs(widened.model, 8);
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
    // In fewer bytes: the f32 table less the narrow one and its scales (up
    // to the 64-byte alignment of tensors and the FlatBuffer's padding).
    const fb::Quantization* q = emb->quant();
    const int64_t scale_bytes = q != nullptr && q->scales_f16() ? 2 * q->scales_f16()->size() : 0;
    const int64_t saved = int64_t(widened.model.size()) - int64_t(narrow.model.size());
    const int64_t expected = int64_t(values.size() * 4) - int64_t(emb->size()) - scale_bytes;
    INFO("saved " << saved << " bytes, expected " << expected);
    CHECK(expected > 0);
    CHECK(std::abs(saved - expected) <= 128);
  }
}

// A small Mamba2 as llama.cpp's converter writes it (d_model 32, 2 heads of
// 16, state 16, one group, kernel 4, 2 blocks, vocabulary 11), F32 but for
// token_embd in `embedding`'s type (F32, Q8_0 or F16); no output.weight when
// `tied` (the head is token_embd), else output.weight a copy of token_embd.
GgufModel Mamba2Gguf(uint32_t embedding, bool tied) {
  constexpr uint64_t d = 32, heads = 2, inner = 32, state = 16, kernel = 4, layers = 2;
  std::mt19937 rng(5);
  GgufModel m;
  m.metadata = {{"general.architecture", GgufValue(std::string("mamba2"))},
                {"mamba2.context_length", GgufValue(uint32_t{1048576})},
                {"mamba2.embedding_length", GgufValue(uint32_t(d))},
                {"mamba2.feed_forward_length", GgufValue(uint32_t{0})},
                {"mamba2.attention.head_count", GgufValue(uint32_t{0})},
                {"mamba2.block_count", GgufValue(uint32_t(layers))},
                {"mamba2.ssm.conv_kernel", GgufValue(uint32_t(kernel))},
                {"mamba2.ssm.inner_size", GgufValue(uint32_t(inner))},
                {"mamba2.ssm.state_size", GgufValue(uint32_t(state))},
                {"mamba2.ssm.time_step_rank", GgufValue(uint32_t(heads))},
                {"mamba2.ssm.group_count", GgufValue(uint32_t{1})},
                {"mamba2.attention.layer_norm_rms_epsilon", GgufValue(1e-5f)}};
  auto f32 = [&](const std::string& name, std::vector<uint64_t> dims) {
    m.tensors.push_back(F32Tensor(name, std::move(dims), &rng));
  };
  if (embedding == ggml_type::kQ8_0) {
    m.tensors.push_back(Q8_0Tensor("token_embd.weight", d, kVocab, &rng));
  } else {
    f32("token_embd.weight", {d, kVocab});
    if (embedding != ggml_type::kF32) m.tensors.back() = Retyped(m.tensors.back(), embedding, &rng);
  }
  for (uint64_t i = 0; i < layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    const uint64_t conv = inner + 2 * state;
    f32(b + "attn_norm.weight", {d});
    f32(b + "ssm_in.weight", {d, 2 * inner + 2 * state + heads});
    f32(b + "ssm_conv1d.weight", {kernel, conv});
    f32(b + "ssm_conv1d.bias", {conv});
    f32(b + "ssm_dt.bias", {heads});
    f32(b + "ssm_a", {1, heads});
    std::vector<float> a(heads);
    for (float& x : a) x = -1.0f - std::uniform_real_distribution<float>(0.0f, 4.0f)(rng);
    m.tensors.back().data = testing::BytesOf(a);  // A < 0: a decaying state
    f32(b + "ssm_d", {1, heads});
    f32(b + "ssm_norm.weight", {inner, 1});
    f32(b + "ssm_out.weight", {inner, d});
  }
  f32("output_norm.weight", {d});
  if (!tied) {
    GgufTensorData head = *m.Find("token_embd.weight");
    head.name = "output.weight";
    m.tensors.push_back(std::move(head));
  }
  return m;
}

TEST_CASE("gguf mamba2: a head tied to the embedding is one tensor, in its type") {
  for (const uint32_t type : {ggml_type::kF32, ggml_type::kQ8_0, ggml_type::kF16}) {
    INFO("token_embd of ggml type " << type);
    testing::TempDir dir;
    ConvertReport tied_report, untied_report;
    const Converted tied = Convert(dir, Mamba2Gguf(type, true), {}, &tied_report);
    REQUIRE_MESSAGE(tied.status.ok(), tied.status.message());
    const Converted untied = Convert(dir, Mamba2Gguf(type, false), {}, &untied_report);
    REQUIRE_MESSAGE(untied.status.ok(), untied.status.message());
    const fb::Model* t = fb::GetSizePrefixedModel(tied.model.data());
    const fb::Model* u = fb::GetSizePrefixedModel(untied.model.data());
    // One tensor, referred to from the input and the head.
    CHECK(t->input()->embedding() == t->head()->dense()->weight());
    CHECK(u->input()->embedding() != u->head()->dense()->weight());
    CHECK(t->tensors()->size() + 1 == u->tensors()->size());
    CHECK(tied_report.tensors + 1 == untied_report.tensors);
    CHECK(tied_report.tensors == t->tensors()->size());
    const fb::Tensor* emb = t->tensors()->Get(uint32_t(t->input()->embedding()));
    const fb::DType stored = type == ggml_type::kQ8_0 ? fb::DType::Q8_0
                             : type == ggml_type::kF16 ? fb::DType::F16
                                                       : fb::DType::F32;
    CHECK(emb->dtype() == stored);
    // The file is smaller by the matrix (and its scales), up to the 64-byte
    // alignment of tensors and the FlatBuffer's entry for the second one.
    const fb::Quantization* q = emb->quant();
    const int64_t matrix = int64_t(emb->size()) +
                           (q != nullptr && q->scales_f16() ? 2 * q->scales_f16()->size() : 0);
    const int64_t saved = int64_t(untied.model.size()) - int64_t(tied.model.size());
    INFO("saved " << saved << " bytes of a " << matrix << "-byte matrix");
    CHECK(saved >= matrix);
    CHECK(saved <= matrix + 64 + 256);
    // Counted once among the parameters; the same logits, bit for bit.
    std::unique_ptr<Model> a, b;
    REQUIRE(LoadModel(tied.model.data(), tied.model.size(), {}, &a).ok());
    REQUIRE(LoadModel(untied.model.data(), untied.model.size(), {}, &b).ok());
    CHECK(a->parameter_count + kVocab * 32 == b->parameter_count);
    // A step streams the head, tied or not.
    CHECK(EstimateStepCost(*a).weight_bytes == EstimateStepCost(*b).weight_bytes);
    CHECK(EstimateStepCost(*a).flops == EstimateStepCost(*b).flops);
    const std::vector<float> got = GgufStepOutputs(tied.model, 8);
    const std::vector<float> want = GgufStepOutputs(untied.model, 8);
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
  }
}

TEST_CASE("gguf rwkv7: refusals name the key, tensor or type") {
  SUBCASE("another architecture") {
    GgufModel m = RwkvGguf();
    *m.Key("general.architecture") = GgufValue(std::string("llama"));
    CHECK(Refusal(m) == "t.gguf: general.architecture is \"llama\": recur-convert reads GGUF "
                        "files of llama.cpp's architectures \"rwkv7\" (RWKV-7) and \"mamba2\" "
                        "(Mamba2) only");
  }
  SUBCASE("a missing key") {
    GgufModel m = RwkvGguf();
    m.RemoveKey("rwkv7.wkv.head_size");
    CHECK(Refusal(m) == "t.gguf: metadata key \"rwkv7.wkv.head_size\" is missing");
    m = RwkvGguf();
    m.RemoveKey("rwkv7.attention.layer_norm_epsilon");
    CHECK(Refusal(m) == "t.gguf: metadata key \"rwkv7.attention.layer_norm_epsilon\" is missing");
  }
  SUBCASE("a key of another type") {
    GgufModel m = RwkvGguf();
    *m.Key("rwkv7.block_count") = GgufValue(uint64_t{2});
    CHECK(Refusal(m) == "t.gguf: metadata key \"rwkv7.block_count\" is u64, expected u32");
  }
  SUBCASE("a head size that does not divide the width") {
    GgufModel m = RwkvGguf();
    *m.Key("rwkv7.wkv.head_size") = GgufValue(uint32_t{12});
    CHECK(Refusal(m) == "t.gguf: metadata key \"rwkv7.wkv.head_size\" (12) does not divide "
                        "\"rwkv7.embedding_length\" (32)");
  }
  SUBCASE("zero, and another token shift count") {
    GgufModel m = RwkvGguf();
    *m.Key("rwkv7.attention.gate_lora_rank") = GgufValue(uint32_t{0});
    CHECK(Refusal(m) == "t.gguf: metadata key \"rwkv7.attention.gate_lora_rank\" is 0");
    m = RwkvGguf();
    m.metadata.push_back({"rwkv7.token_shift_count", GgufValue(uint32_t{1})});
    CHECK(Refusal(m) == "t.gguf: metadata key \"rwkv7.token_shift_count\" is 1; an RWKV-7 model "
                        "shifts 2 (llama.cpp's rwkv7 graph takes no other)");
  }
  SUBCASE("feed-forward widths per block") {
    GgufModel m = RwkvGguf();
    *m.Key("rwkv7.feed_forward_length") = GgufValue::Array(
        GgufType::kU32, {GgufScalar(uint32_t{kFf}), GgufScalar(uint32_t{kFf})});
    testing::TempDir dir;
    CHECK(Convert(dir, m).status.ok());  // one width for every block: fine
    *m.Key("rwkv7.feed_forward_length") = GgufValue::Array(
        GgufType::kU32, {GgufScalar(uint32_t{kFf}), GgufScalar(uint32_t{32})});
    CHECK(Refusal(m) == "t.gguf: metadata key \"rwkv7.feed_forward_length\" gives the blocks "
                        "different widths; recur's RWKV-7 blocks share one");
  }
  SUBCASE("no token_embd, or one of another width") {
    GgufModel m = RwkvGguf();
    m.Remove("token_embd.weight");
    CHECK(Refusal(m) ==
          "t.gguf: tensor \"token_embd.weight\" is missing (its rows are the vocabulary)");
    m = RwkvGguf();
    m.Find("token_embd.weight")->dims = {kC / 2, kVocab * 2};
    CHECK(Refusal(m) == "t.gguf: tensor \"token_embd.weight\" has shape [22,16], expected "
                        "[vocab,32]");
  }
  SUBCASE("a missing tensor") {
    GgufModel m = RwkvGguf();
    m.Remove("blk.1.time_mix_a2.weight");
    CHECK(Refusal(m) == "blk.1.time_mix_a2.weight: missing tensor, expected shape [32,8]");
  }
  SUBCASE("a tensor of the wrong shape") {
    GgufModel m = RwkvGguf();
    m.Find("blk.0.time_mix_lerp_fused.weight")->dims = {kC, 6};  // squeezed
    CHECK(Refusal(m) ==
          "blk.0.time_mix_lerp_fused.weight: shape [6,32], expected [6,1,1,32]");
    m = RwkvGguf();
    m.Find("blk.1.time_mix_w1.weight")->dims = {kDw, kC};  // BlinkDL's [C, D], not transposed
    CHECK(Refusal(m) == "blk.1.time_mix_w1.weight: shape [32,8], expected [8,32]");
  }
  SUBCASE("ggml types without an exact recur type") {
    GgufModel m = RwkvGguf();
    GgufTensorData* t = m.Find("blk.0.time_mix_key.weight");
    for (const auto& [type, name, block_bytes] :
         {std::tuple{ggml_type::kQ4_1, "Q4_1", 20}, {ggml_type::kQ5_0, "Q5_0", 22}}) {
      t->type = type;
      t->data.assign(kC * kC / 32 * size_t(block_bytes), 0);
      CHECK(Refusal(m) == std::string("t.gguf: tensor \"blk.0.time_mix_key.weight\" is ") + name +
                              ": recur-convert reads GGUF tensors of types F32, F16, BF16, "
                              "Q4_0, Q8_0, Q4_K, Q5_K and Q6_K only");
    }
    m = RwkvGguf();
    t = m.Find("output.weight");
    t->type = ggml_type::kQ3_K;
    t->dims = {256, 2};
    t->data.assign(2 * 110, 0);
    CHECK(Refusal(m) == "t.gguf: tensor \"output.weight\" is Q3_K: recur-convert reads GGUF "
                        "tensors of types F32, F16, BF16, Q4_0, Q8_0, Q4_K, Q5_K and Q6_K only");
  }
  SUBCASE("non-finite values and Q4_0 scales") {
    GgufModel m = RwkvGguf();
    float nan = std::nanf("");
    std::memcpy(m.Find("blk.1.time_mix_k_k.weight")->data.data() + 4 * 5, &nan, 4);
    CHECK(Refusal(m) == "blk.1.time_mix_k_k.weight: NaN at index 5");
    m = RwkvGguf(true);
    GgufTensorData* q = m.Find("blk.1.time_mix_value.weight");
    q->data[18 * 3] = 0x00;
    q->data[18 * 3 + 1] = 0x7C;  // block 3's d: +Inf
    const std::string inf = Refusal(m);  // (q − 8)·Inf: ±Inf, or NaN for q = 8
    CHECK(inf.rfind("blk.1.time_mix_value.weight: ", 0) == 0);
    INFO(inf);
    CHECK(inf.find(" at index 96 ([3,0])") != std::string::npos);  // block 3: row 3
  }
  SUBCASE("an extra tensor") {
    GgufModel m = RwkvGguf();
    m.tensors.push_back({"blk.1.time_mix_extra.weight", ggml_type::kF32, {4}, std::vector<uint8_t>(16)});
    CHECK(Refusal(m) == "blk.1.time_mix_extra.weight: unexpected tensor, not used by this config "
                        "(allow with --allow-extra)");
  }
  SUBCASE("options that a GGUF file does not take") {
    GgufModel m = RwkvGguf();
    testing::TempDir dir;
    testing::WriteFile(dir.File("config.json"), testing::kTokensConfig);
    ConvertOptions o;
    o.config_path = dir.File("config.json");
    CHECK(Refusal(m, o) == "t.gguf is a GGUF file, which carries its configuration in its "
                           "metadata: convert it without --config");
    o = {};
    o.layout = Layout::kFla;
    CHECK(Refusal(m, o) == "t.gguf is a GGUF file, of layout gguf (got --layout fla)");
  }
}

TEST_CASE("gguf rwkv7: the gguf package's file converts, its Q4_0 blocks taken over") {
  // tests/fuzz/gguf_seeds/rwkv7_q4_0.gguf: llama.cpp's gguf package wrote it as
  // convert_hf_to_gguf.py and llama-quantize --pure do (gguf_rwkv7_seed.py).
  const std::string path = std::string(RECUR_GGUF_SEEDS) + "/rwkv7_q4_0.gguf";
  auto file = ReadGgufFile(path);
  REQUIRE_MESSAGE(file.ok(), file.message());
  testing::TempDir dir;
  ConvertOptions o;
  o.weights_path = path;
  o.output_path = dir.File("seed.recur");
  ConvertReport report;
  const Status s = ConvertFiles(o, &report);
  REQUIRE_MESSAGE(s.ok(), s.message());
  CHECK(report.layout == Layout::kGguf);
  // 2 blocks × 6 matrices, the head and the embedding.
  CHECK(report.narrow_types == std::map<WeightType, std::size_t>{{WeightType::kI4, 14}});
  const std::string text = testing::ReadText(o.output_path);
  const AlignedBytes model(text.begin(), text.end());
  const GgufTensor* q = file->FindTensor("blk.1.time_mix_receptance.weight");
  REQUIRE(q != nullptr);
  REQUIRE(q->type->id == ggml_type::kQ4_0);
  const fb::Tensor* t = TensorOf(model, "blocks.1.mixer.receptance.weight");
  REQUIRE(t->dtype() == fb::DType::I4);
  const uint8_t* packed = DataOf(model, t);
  size_t differ = 0;
  for (size_t k = 0; k < q->nbytes / 18; ++k) {
    uint16_t d;
    std::memcpy(&d, q->data + 18 * k, 2);
    differ += t->quant()->scales_f16()->Get(uint32_t(k)) != d;
    differ += std::memcmp(packed + 16 * k, q->data + 18 * k + 2, 16) != 0;
  }
  CHECK(differ == 0);
}

// tokenizer.ggml.* as llama.cpp's _set_vocab_rwkv_world writes them for
// kVocab rows: "<s>" (control), `tokens` (escaped: repr(bytes)[2:-1]), then
// "[PAD<i>]" (unused) up to the rows.
void SetRwkvVocabulary(GgufModel* m, const std::vector<std::string>& tokens) {
  std::vector<GgufScalar> texts = {std::string("<s>")};
  std::vector<GgufScalar> types = {int32_t{3}};
  for (const std::string& t : tokens) {
    texts.push_back(t);
    types.push_back(int32_t{1});
  }
  while (texts.size() < kVocab) {
    texts.push_back("[PAD" + std::to_string(texts.size()) + "]");
    types.push_back(int32_t{5});
  }
  m->metadata.emplace_back("tokenizer.ggml.model", GgufValue(std::string("rwkv")));
  m->metadata.emplace_back("tokenizer.ggml.tokens", GgufValue::Array(GgufType::kString, texts));
  m->metadata.emplace_back("tokenizer.ggml.token_type", GgufValue::Array(GgufType::kI32, types));
}

// The vocabulary of converted model bytes, loaded.
struct LoadedVocabulary {
  std::unique_ptr<Model> model;
  std::vector<int32_t> Encode(const std::string& text) const {
    std::vector<int32_t> ids;
    const Status s =
        model->vocabulary.Encode(reinterpret_cast<const uint8_t*>(text.data()), text.size(), &ids);
    REQUIRE_MESSAGE(s.ok(), s.message());
    return ids;
  }
};
LoadedVocabulary LoadVocabulary(const AlignedBytes& bytes) {
  LoadedVocabulary l;
  REQUIRE(LoadModel(bytes.data(), bytes.size(), LoadOptions{}, &l.model).ok());
  return l;
}

TEST_CASE("gguf rwkv7: tokenizer model rwkv's vocabulary comes along, unescaped") {
  testing::TempDir dir;
  GgufModel m = RwkvGguf();
  SetRwkvVocabulary(&m, {"a", "b", "ab", "\\xe4\\xb8", "\\n", "\\'"});
  const Converted c = Convert(dir, m);
  REQUIRE_MESSAGE(c.status.ok(), c.status.message());
  const LoadedVocabulary l = LoadVocabulary(c.model);
  const text::Vocabulary& v = l.model->vocabulary;
  CHECK(v.size() == 7);  // the unused [PAD7] to [PAD10] are left out
  CHECK(v.end_of_text() == 0);
  CHECK(l.Encode("ab\n'\xe4\xb8"
                 "a") == std::vector<int32_t>{3, 5, 6, 4, 1});
  // Not llama.cpp's: "<s>" in the text is no token (the rwkv package's rule).
  const std::string s = "<s>";
  std::vector<int32_t> ids;
  CHECK(v.Encode(reinterpret_cast<const uint8_t*>(s.data()), s.size(), &ids).code() ==
        StatusCode::kInvalidArgument);

  // The file's vocabulary, or --tokenizer's: not both.
  testing::WriteFile(dir.File("vocab.txt"), "1 'a' 1\n");
  ConvertOptions o;
  o.tokenizer_path = dir.File("vocab.txt");
  CHECK(Refusal(m, o) == "--tokenizer: t.gguf carries a vocabulary of its own");
}

TEST_CASE("gguf rwkv7: without a tokenizer model recur reads, the model comes without a vocabulary") {
  testing::TempDir dir;
  GgufModel m = RwkvGguf();
  // No tokenizer keys (as the recur reference's writer leaves them by
  // default), or "none": no vocabulary, and nothing to say about it.
  for (const char* model : {"", "none", "llama"}) {
    CAPTURE(model);
    GgufModel with = m;
    if (*model != '\0') {
      with.metadata.emplace_back("tokenizer.ggml.model", GgufValue(std::string(model)));
      with.metadata.emplace_back(
          "tokenizer.ggml.tokens",
          GgufValue::Array(GgufType::kString, {std::string("a"), std::string("b")}));
    }
    ConvertReport report;
    const Converted c = Convert(dir, with, {}, &report);
    REQUIRE(c.status.ok());
    const LoadedVocabulary l = LoadVocabulary(c.model);
    CHECK(l.model->vocabulary.available().code() == StatusCode::kInvalidArgument);
    if (std::string(model) == "llama") {
      CHECK(report.warnings ==
            std::vector<std::string>{"tokenizer.ggml.model is \"llama\": recur reads the "
                                     "vocabularies of tokenizer models \"rwkv\" and \"gpt2\"; the "
                                     "model is converted without a vocabulary"});
    } else {
      CHECK(report.warnings.empty());
    }
  }
  // --tokenizer gives one to a file without.
  testing::WriteFile(dir.File("vocab.txt"), "1 'a' 1\n2 'b' 1\n");
  ConvertOptions o;
  o.tokenizer_path = dir.File("vocab.txt");
  const Converted c = Convert(dir, m, o);
  REQUIRE_MESSAGE(c.status.ok(), c.status.message());
  CHECK(LoadVocabulary(c.model).Encode("ba") == std::vector<int32_t>{2, 1});
}

TEST_CASE("gguf rwkv7: a broken rwkv vocabulary is refused, naming the token") {
  GgufModel m = RwkvGguf();
  GgufModel bad = m;
  SetRwkvVocabulary(&bad, {"a", "\\x8"});
  CHECK(Refusal(bad) == "t.gguf: tokenizer.ggml.tokens[2]: \\x needs two hex digits");
  bad = m;
  SetRwkvVocabulary(&bad, {"a", "b", "\\x61"});
  CHECK(Refusal(bad) == "t.gguf: tokenizer.ggml.tokens[3] (\"\\x61\") is token 1's bytes too");
  bad = m;
  SetRwkvVocabulary(&bad, {"a", ""});
  CHECK(Refusal(bad) == "t.gguf: tokenizer.ggml.tokens[2] is empty");
  bad = m;
  SetRwkvVocabulary(&bad, {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"});
  CHECK(Refusal(bad) ==
        "t.gguf: tokenizer.ggml.tokens has 12 tokens, more than token_embd's "
        "11 rows");
  bad = m;
  SetRwkvVocabulary(&bad, {"a"});
  *bad.Key("tokenizer.ggml.token_type") = GgufValue::Array(GgufType::kI32, {int32_t{3}});
  CHECK(Refusal(bad) == "t.gguf: tokenizer.ggml.token_type has 1 entries for 11 tokens");

  // A control token past id 0: converted without the vocabulary, saying why.
  GgufModel odd = m;
  SetRwkvVocabulary(&odd, {"a", "b"});
  GgufValue* types = odd.Key("tokenizer.ggml.token_type");
  types->elements[2] = int32_t{3};
  testing::TempDir dir;
  ConvertReport report;
  REQUIRE(Convert(dir, odd, {}, &report).status.ok());
  CHECK(report.warnings == std::vector<std::string>{
                               "tokenizer.ggml.tokens[2] (\"b\") is of token type 3; recur's rwkv "
                               "vocabularies have one control token, id 0, and unused ones only "
                               "at the end; the model is converted without a vocabulary"});
}

// A byte-level BPE as llama.cpp's converter writes one: "<|endoftext|>"
// (control) at 0, normal tokens in the byte-level alphabet, "    "
// (user defined), [PAD<i>] (unused) to kVocab; merges "a b", "Ġ ab".
void SetGpt2Vocabulary(GgufModel* m, const std::string& pre,
                       const std::vector<std::string>& merges = {"a b", "\u0120 ab"}) {
  std::vector<GgufScalar> texts, types;
  const std::vector<std::pair<std::string, int32_t>> tokens = {
      {"<|endoftext|>", 3}, {"a", 1}, {"b", 1}, {"\u0120", 1}, {"ab", 1}, {"\u0120ab", 1},
      {"    ", 4}};
  for (const auto& [t, type] : tokens) {
    texts.push_back(t);
    types.push_back(type);
  }
  while (texts.size() < kVocab) {
    texts.push_back("[PAD" + std::to_string(texts.size()) + "]");
    types.push_back(int32_t{5});
  }
  std::vector<GgufScalar> merge_texts(merges.begin(), merges.end());
  m->metadata.emplace_back("tokenizer.ggml.model", GgufValue(std::string("gpt2")));
  if (!pre.empty()) m->metadata.emplace_back("tokenizer.ggml.pre", GgufValue(pre));
  m->metadata.emplace_back("tokenizer.ggml.tokens", GgufValue::Array(GgufType::kString, texts));
  m->metadata.emplace_back("tokenizer.ggml.token_type", GgufValue::Array(GgufType::kI32, types));
  m->metadata.emplace_back("tokenizer.ggml.merges",
                           GgufValue::Array(GgufType::kString, merge_texts));
  m->metadata.emplace_back("tokenizer.ggml.eos_token_id", GgufValue(uint32_t{0}));
}

TEST_CASE("gguf rwkv7: tokenizer model gpt2's byte-level BPE comes along") {
  testing::TempDir dir;
  GgufModel m = RwkvGguf();
  SetGpt2Vocabulary(&m, "gpt-2");
  ConvertReport report;
  const Converted c = Convert(dir, m, {}, &report);
  REQUIRE_MESSAGE(c.status.ok(), c.status.message());
  CHECK(report.warnings.empty());
  const LoadedVocabulary l = LoadVocabulary(c.model);
  CHECK(l.model->vocabulary.size() == 7);  // the unused [PAD7] to [PAD10] are left out
  CHECK(l.model->vocabulary.end_of_text() == 0);
  CHECK(l.Encode("ab ab<|endoftext|>ba     ab") == std::vector<int32_t>{4, 5, 0, 2, 1, 6, 5});
}

TEST_CASE("gguf rwkv7: a gpt2 vocabulary of another pre-tokenizer or broken merges") {
  GgufModel m = RwkvGguf();
  for (const char* pre : {"", "llama-bpe"}) {
    CAPTURE(pre);
    GgufModel other = m;
    SetGpt2Vocabulary(&other, pre);
    testing::TempDir dir;
    ConvertReport report;
    REQUIRE(Convert(dir, other, {}, &report).status.ok());
    CHECK(report.warnings ==
          std::vector<std::string>{
              "tokenizer.ggml.pre is \"" + std::string(*pre ? pre : "(none)") +
              "\": recur's byte-level BPE splits text by the GPT-2 pattern only "
              "(tokenizer.ggml.pre \"gpt-2\", \"olmo\", \"mpt\", ...); the model is converted "
              "without a vocabulary"});
  }
  GgufModel bad = m;
  SetGpt2Vocabulary(&bad, "olmo", {"a b", "a c"});
  CHECK(Refusal(bad) ==
        "t.gguf: tokenizer.ggml.merges[1]: \"c\" is not a token of the vocabulary");
  bad = m;
  SetGpt2Vocabulary(&bad, "olmo", {"a b", "ab"});
  CHECK(Refusal(bad) ==
        "t.gguf: tokenizer.ggml.merges[1] (\"ab\") is not two token texts with a space between");
  bad = m;
  SetGpt2Vocabulary(&bad, "olmo", {"a b", "a b"});
  CHECK(Refusal(bad) == "t.gguf: tokenizer.ggml.merges: merge 1 repeats merge 0 (tokens 1 and 2)");
}

TEST_CASE("gguf rwkv7: a config with layout gguf is refused") {
  auto parsed = ParseConfig(R"({"layout": "gguf"})");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.message() == "config.json: layout \"gguf\" takes its configuration from a GGUF "
                            "file's metadata, not from a config: convert the .gguf file without "
                            "--config");
}

}  // namespace
}  // namespace recur::impl::converter
