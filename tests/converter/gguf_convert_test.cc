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
#include "kernels/dense/dense.h"
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

// The file convert_hf_to_gguf.py writes for the model above (names, shapes,
// metadata), F32 throughout; with q4_0, the blocks' r, k, v, o, channel-mix
// matrices, token_embd and output are Q4_0 (llama-quantize --pure).
GgufModel RwkvGguf(bool q4_0 = false, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  GgufModel m;
  m.metadata = {{"general.architecture", GgufValue(std::string("rwkv7"))},
                {"general.name", GgufValue(std::string("tiny rwkv7"))},
                {"rwkv7.context_length", GgufValue(uint32_t{1048576})},
                {"rwkv7.embedding_length", GgufValue(uint32_t{kC})},
                {"rwkv7.block_count", GgufValue(uint32_t{kLayers})},
                {"rwkv7.attention.layer_norm_epsilon", GgufValue(1e-5f)},
                {"rwkv7.wkv.head_size", GgufValue(uint32_t{16})},
                {"rwkv7.attention.decay_lora_rank", GgufValue(uint32_t{kDw})},
                {"rwkv7.attention.iclr_lora_rank", GgufValue(uint32_t{kDa})},
                {"rwkv7.attention.value_residual_mix_lora_rank", GgufValue(uint32_t{kDv})},
                {"rwkv7.attention.gate_lora_rank", GgufValue(uint32_t{kDg})},
                {"rwkv7.feed_forward_length", GgufValue(uint32_t{kFf})},
                {"general.file_type", GgufValue(uint32_t{q4_0 ? 2u : 0u})},
                {"rwkv7.attention.head_count", GgufValue(uint32_t{0})}};
  auto matrix = [&](const std::string& name, uint64_t cols, uint64_t rows) {
    m.tensors.push_back(q4_0 ? Q4_0Tensor(name, cols, rows, &rng)
                             : F32Tensor(name, {cols, rows}, &rng));
  };
  auto f32 = [&](const std::string& name, std::vector<uint64_t> dims) {
    m.tensors.push_back(F32Tensor(name, std::move(dims), &rng));
  };
  matrix("token_embd.weight", kC, kVocab);
  f32("token_embd_norm.weight", {kC});
  f32("token_embd_norm.bias", {kC});
  for (uint64_t i = 0; i < kLayers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    for (const char* norm : {"attn_norm", "attn_norm_2"}) {
      f32(b + norm + ".weight", {kC});
      f32(b + norm + ".bias", {kC});
    }
    f32(b + "time_mix_lerp_fused.weight", {kC, 1, 1, 6});
    const uint64_t dv = i == 0 ? kDa : kDv;  // layer 0's v's: copies of its a's
    for (const auto& [l, d] : {std::pair{'w', kDw}, {'a', kDa}, {'v', dv}, {'g', kDg}}) {
      const std::string p = b + "time_mix_" + l;
      if (l != 'g') f32(p + "0.weight", {kC});
      f32(p + "1.weight", {kC, d});
      f32(p + "2.weight", {d, kC});
    }
    for (const char* v : {"k_k", "k_a", "r_k"}) f32(b + "time_mix_" + v + ".weight", {kC});
    for (const char* w : {"key", "value", "receptance", "output"}) {
      matrix(b + "time_mix_" + w + ".weight", kC, kC);
    }
    f32(b + "time_mix_ln.weight", {kC});
    f32(b + "time_mix_ln.bias", {kC});
    f32(b + "channel_mix_lerp_k.weight", {kC});
    matrix(b + "channel_mix_key.weight", kC, kFf);
    matrix(b + "channel_mix_value.weight", kFf, kC);
  }
  f32("output_norm.weight", {kC});
  f32("output_norm.bias", {kC});
  matrix("output.weight", kC, kVocab);
  return m;
}

struct Converted {
  Status status;
  AlignedBytes model;  // the written file, when status is OK
};

// `m` written to dir/t.gguf and converted (options' paths filled in).
Converted Convert(const testing::TempDir& dir, const GgufModel& m, ConvertOptions o = {}) {
  const std::vector<uint8_t> bytes = SerializeGguf(m.metadata, m.tensors);
  testing::WriteFile(dir.File("t.gguf"), bytes.data(), bytes.size());
  o.weights_path = dir.File("t.gguf");
  o.output_path = dir.File("t.recur");
  Converted out;
  out.status = ConvertFiles(o, nullptr);
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
          {"head.weight", "output.weight"}}) {
      const std::string where = recur;  // INFO cannot capture a structured binding (clang 14)
      INFO(where);
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
    // The embedding is f32 in recur: the blocks' values, decoded.
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
    // Matrices recur keeps in f32 (the embedding, the low-rank paths): widened exactly.
    CHECK(TensorOf(c.model, "input.embedding")->dtype() == fb::DType::F32);
    CHECK(TensorOf(c.model, "blocks.1.mixer.gate_up.weight")->dtype() == fb::DType::F32);
    const fb::Tensor* k = TensorOf(c.model, "blocks.1.mixer.key.weight");
    CHECK(std::memcmp(DataOf(c.model, k), half.Find("blk.1.time_mix_key.weight")->data.data(),
                      k->size()) == 0);
  }
}

TEST_CASE("gguf rwkv7: refusals name the key, tensor or type") {
  SUBCASE("another architecture") {
    GgufModel m = RwkvGguf();
    *m.Key("general.architecture") = GgufValue(std::string("llama"));
    CHECK(Refusal(m) == "t.gguf: general.architecture is \"llama\": recur-convert reads GGUF "
                        "files of llama.cpp's architecture \"rwkv7\" (RWKV-7) only");
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
    t->type = ggml_type::kQ8_0;
    t->data.assign(kC * kC / 32 * 34, 0);
    CHECK(Refusal(m) == "t.gguf: tensor \"blk.0.time_mix_key.weight\" is Q8_0, which no recur "
                        "weight type holds exactly yet (int8 has one scale per row, Q8_0 one per "
                        "32 values): use a GGUF file in F32, F16, BF16 or Q4_0");
    for (const auto& [type, name, block_bytes] :
         {std::tuple{ggml_type::kQ4_1, "Q4_1", 20}, {ggml_type::kQ5_0, "Q5_0", 22}}) {
      t->type = type;
      t->data.assign(kC * kC / 32 * size_t(block_bytes), 0);
      CHECK(Refusal(m) == std::string("t.gguf: tensor \"blk.0.time_mix_key.weight\" is ") + name +
                              ": recur-convert reads GGUF tensors of types F32, F16, BF16 and "
                              "Q4_0 only");
    }
    m = RwkvGguf();
    t = m.Find("output.weight");
    t->type = ggml_type::kQ6_K;
    t->dims = {256, 2};
    t->data.assign(2 * 210, 0);
    CHECK(Refusal(m) == "t.gguf: tensor \"output.weight\" is Q6_K: recur-convert reads GGUF "
                        "tensors of types F32, F16, BF16 and Q4_0 only");
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
  CHECK(report.narrow_types == std::map<WeightType, std::size_t>{{WeightType::kI4, 13}});
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

TEST_CASE("gguf rwkv7: a config with layout gguf is refused") {
  auto parsed = ParseConfig(R"({"layout": "gguf"})");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.message() == "config.json: layout \"gguf\" takes its configuration from a GGUF "
                            "file's metadata, not from a config: convert the .gguf file without "
                            "--config");
}

}  // namespace
}  // namespace recur::impl::converter
