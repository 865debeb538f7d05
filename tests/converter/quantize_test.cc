// Reduced-precision weights in the converter (quantize.h, BuildOptions
// weight_dtype) and in the loader: f16/bf16 rounding to nearest even, int8
// per-row scales, int4 and q8_0 per-group scales, which tensors are
// converted, the file layout, and the loader's checks of dtypes and scales.
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "converter/convert.h"
#include "converter/quantize.h"
#include "converter/writer.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"
#include "converter_test_util.h"
#include "engine/model_loader.h"
#include "model/model.h"
#include "recur/recur.h"
#include "schema/recur_generated.h"
#include "test_models.h"
#include "tolerance.h"

namespace recur::impl::converter {
namespace {

using testing::kTokensConfig;

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// int8: q = rint(x / s) in double, s = max|row|/127 in f32, so x/s ≤ 127·(1 + u)
// and its double rounding moves q's argument by ≤ 127·2⁻⁵³: |x − s·q| ≤
// (s/2)·(1 + 254·2⁻⁵³); the check's own subtraction (in double, of values
// below s) adds 2⁻⁵³·s/2. Within (s/2)·(1 + 2⁻⁴⁵).
double Int8HalfStep(double scale) { return 0.5 * scale * (1 + 0x1p-45); }

uint16_t Bf16(float v) {
  uint16_t h = 0;
  CHECK(F32ToBf16(v, &h));
  return h;
}

uint16_t F16(float v) {
  uint16_t h = 0;
  CHECK(F32ToF16(v, &h));
  return h;
}

// True if `h` (decoded by `decode`) is a nearest neighbour of v among the
// finite values of its format, with ties going to the even mantissa.
template <class Decode>
bool IsNearestEven(float v, uint16_t h, Decode decode) {
  const double d = decode(h);
  const double err = std::fabs(d - v);
  for (int step : {-1, 1}) {
    const uint16_t n = static_cast<uint16_t>(h + step);
    const double dn = decode(n);
    if (!std::isfinite(dn)) continue;  // past the largest value, or NaN next to ±0
    const double en = std::fabs(dn - v);
    if (en < err) return false;
    if (en == err && (h & 1) != 0) return false;  // a tie must pick the even one
  }
  return true;
}

TEST_CASE("quantize: dtype names") {
  CHECK(kernels::WeightTypeNames() == "f32, f16, bf16, int8, int4, q8_0, q4_k, q6_k or q5_k");
  WeightType d = WeightType::kF32;
  for (WeightType type : kernels::kWeightTypes) {
    REQUIRE(ParseWeightType(WeightTypeName(type), &d));
    CHECK(d == type);
  }
  CHECK_FALSE(ParseWeightType("i8", &d));
  CHECK_FALSE(ParseWeightType("F16", &d));
}

TEST_CASE("quantize: bf16 rounds to nearest even") {
  CHECK(Bf16(1.0f) == 0x3F80);
  CHECK(Bf16(-2.0f) == 0xC000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even is 1.
  CHECK(Bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
  // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: even is up.
  CHECK(Bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
  CHECK(Bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);  // above the tie
  CHECK(Bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(Bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  const uint16_t nan = Bf16(std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(Bf16ToF32(nan)));
  CHECK(std::isnan(Bf16ToF32(Bf16(FromBits(0x7F800001)))));  // signalling NaN stays NaN
  CHECK(Bf16(FromBits(0x00000001)) == 0x0000);               // tiny subnormal → +0
  // Overflow: the largest floats round past the largest bf16.
  uint16_t h = 0;
  CHECK_FALSE(F32ToBf16(FLT_MAX, &h));
  CHECK(h == 0x7F80);
  CHECK(F32ToBf16(FromBits(0x7F7F7FFF), &h));  // just below the tie: the largest bf16
  CHECK(h == 0x7F7F);
}

TEST_CASE("quantize: f16 rounds to nearest even, subnormals included") {
  CHECK(F16(1.0f) == 0x3C00);
  CHECK(F16(-2.0f) == 0xC000);
  CHECK(F16(65504.0f) == 0x7BFF);
  CHECK(F16(65519.0f) == 0x7BFF);
  CHECK(F16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie → even (1)
  CHECK(F16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie → even (up)
  CHECK(F16(std::ldexp(1.0f, -24)) == 0x0001);             // smallest subnormal
  CHECK(F16(std::ldexp(1.0f, -25)) == 0x0000);             // tie → even (0)
  CHECK(F16(3 * std::ldexp(1.0f, -25)) == 0x0002);         // tie 1.5 → 2
  CHECK(F16(std::ldexp(1.0f, -14)) == 0x0400);             // smallest normal
  CHECK(F16(std::ldexp(1023.5f, -24)) == 0x0400);          // rounds up into the normals
  CHECK(F16(-std::ldexp(1.0f, -30)) == 0x8000);            // -0
  CHECK(F16(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(std::isnan(F16ToF32(F16(std::numeric_limits<float>::quiet_NaN()))));
  uint16_t h = 0;
  CHECK_FALSE(F32ToF16(65520.0f, &h));  // tie between 65504 and 2^16: even is 2^16 = Inf
  CHECK(h == 0x7C00);
  CHECK_FALSE(F32ToF16(-1e6f, &h));
  CHECK(h == 0xFC00);
}

TEST_CASE("quantize: every f16 and bf16 value round-trips exactly") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f16 = F16ToF32(h);
    uint16_t back = 0;
    if (std::isnan(f16)) {
      CHECK(F32ToF16(f16, &back));
      CHECK(std::isnan(F16ToF32(back)));
    } else {
      CHECK(F32ToF16(f16, &back));
      CHECK(back == h);
    }
    const float bf = Bf16ToF32(h);
    CHECK(F32ToBf16(bf, &back));
    if (std::isnan(bf)) {
      CHECK(std::isnan(Bf16ToF32(back)));
    } else {
      CHECK(back == h);
    }
  }
}

TEST_CASE("quantize: random floats land on a nearest value (ties to even)") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  size_t f16_checked = 0;
  for (int k = 0; k < 200000; ++k) {
    // Random bit patterns (every exponent), and values near the f16 range.
    float v = FromBits(bits(rng));
    if (k % 2) v = std::ldexp(static_cast<float>(bits(rng) % 65536) - 32768.0f, -(k % 40));
    if (!std::isfinite(v)) continue;
    uint16_t h = 0;
    if (F32ToBf16(v, &h)) {
      INFO("bf16 of " << v);
      CHECK(IsNearestEven(v, h, Bf16ToF32));
    }
    if (F32ToF16(v, &h)) {
      INFO("f16 of " << v);
      CHECK(IsNearestEven(v, h, F16ToF32));
      ++f16_checked;
    } else {
      CHECK(std::fabs(v) >= 65520.0f);
    }
  }
  CHECK(f16_checked > 50000);
}

TEST_CASE("quantize: int8 per-row scales, half-even rounding, clamping, zero rows") {
  Tensor t;
  t.shape = {4, 6};
  t.data = {127, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f,   // scale 1: exact ties
            0, 0, 0, 0, 0, 0,                      // zero row: scale 1, q = 0
            -3, 1, 2, 0.25f, -1, 3,                // max 3: scale 3/127
            1e-40f, -1e-40f, 0, 0, 0, 5e-41f};     // scale would be subnormal
  auto r = EncodeTensor("w", t, WeightType::kI8);
  REQUIRE_MESSAGE(r.ok(), r.message());
  REQUIRE(r->scales.size() == 4);
  REQUIRE(r->bytes.size() == 24);
  auto q = [&](size_t i) { return static_cast<int>(static_cast<int8_t>(r->bytes[i])); };
  CHECK(r->scales[0] == 1.0f);
  CHECK(std::vector<int>{q(0), q(1), q(2), q(3), q(4), q(5)} == std::vector<int>{127, 0, 2, 2, 0, -2});
  CHECK(r->scales[1] == 1.0f);
  for (size_t i = 6; i < 12; ++i) CHECK(q(i) == 0);
  CHECK(r->scales[2] == 3.0f / 127.0f);
  CHECK(q(12) == -127);
  CHECK(q(17) == 127);
  CHECK(r->scales[3] == FLT_MIN);
  for (size_t row = 0; row < 4; ++row) {
    for (size_t c = 0; c < 6; ++c) {
      const double back = double{r->scales[row]} * q(row * 6 + c);
      CHECK(std::fabs(back - t.data[row * 6 + c]) <= Int8HalfStep(r->scales[row]));
    }
  }
}

TEST_CASE("quantize: int8 of random rows decodes within half a step") {
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 0.3f);
  Tensor t;
  t.shape = {37, 53};
  for (int i = 0; i < 37 * 53; ++i) t.data.push_back(dist(rng) * (i % 37 + 1));
  auto r = EncodeTensor("w", t, WeightType::kI8);
  REQUIRE(r.ok());
  for (size_t row = 0; row < 37; ++row) {
    float max_abs = 0;
    for (size_t c = 0; c < 53; ++c) max_abs = std::max(max_abs, std::fabs(t.data[row * 53 + c]));
    CHECK(r->scales[row] == max_abs / 127.0f);
    bool hit_max = false;
    for (size_t c = 0; c < 53; ++c) {
      const int q = static_cast<int8_t>(r->bytes[row * 53 + c]);
      CHECK(q >= -127);
      CHECK(q <= 127);
      hit_max = hit_max || std::abs(q) == 127;
      CHECK(std::fabs(double{r->scales[row]} * q - t.data[row * 53 + c]) <=
            Int8HalfStep(r->scales[row]));
    }
    CHECK(hit_max);
  }
}

TEST_CASE("quantize: errors name the tensor") {
  Tensor big{{2, 2}, {1, 2, 7e4f, 4}};
  auto r = EncodeTensor("blocks.0.ffn.linear1.weight", big, WeightType::kF16);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() ==
        "blocks.0.ffn.linear1.weight: value 70000 at index 2 ([1,0]) is beyond the f16 range "
        "(max 65504); convert with --dtype bf16 or f32");
  CHECK(EncodeTensor("w", big, WeightType::kBF16).ok());
  Tensor vec{{3}, {1, 2, 3}};
  r = EncodeTensor("b", vec, WeightType::kI8);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "b: int8 needs a 2-D [out, in] weight, got shape [3]");
  Tensor nan{{1, 2}, {1, std::numeric_limits<float>::quiet_NaN()}};
  r = EncodeTensor("w", nan, WeightType::kI8);
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "w: cannot quantize NaN at index 1 ([0,1])");
}

TEST_CASE("quantize: which tensors take --dtype") {
  const WeightType b = WeightType::kBF16, f = WeightType::kF32;
  for (const char* name : {"blocks.0.mixer.query.weight", "blocks.0.mixer.key.weight",
                           "blocks.3.mixer.value.weight", "blocks.12.mixer.out.weight",
                           "blocks.1.ffn.linear1.weight", "blocks.1.ffn.linear2.weight",
                           "blocks.2.mixer.u_proj.weight", "blocks.2.mixer.v_proj.weight",
                           "blocks.2.mixer.z_proj.weight"}) {
    CHECK(StorageDType(name, b, false) == b);
  }
  for (const char* name : {"blocks.0.mixer.query.bias", "blocks.0.norm1.weight",
                           "blocks.0.ffn.linear1.bias", "input.embedding", "input.positions",
                           "blocks.0.mixer.u_proj.bias", "blocks.0.mixer.rel_bias",
                           "blocks.0.mixer.qk_gamma", "blocks.0.mixer.pos_bias", "blocks.0.mixer.u",
                           "blocks.0.mixer.E",
                           "input.projection.weight", "final_norm.weight", "head.bias",
                           "blocks.x.ffn.linear1.weight", "blocks..ffn.linear1.weight",
                           "xblocks.0.ffn.linear1.weight", "blocks.0.ffn.linear1.weightx"}) {
    CHECK(StorageDType(name, b, false) == f);
    CHECK(StorageDType(name, b, true) == f);
  }
  CHECK(StorageDType("head.weight", b, false) == f);
  CHECK(StorageDType("head.weight", b, true) == b);
}

// ---------------------------------------------------------------------------
// Models

size_t DTypeBytes(fb::DType d) {
  switch (d) {
    case fb::DType::F32: return 4;
    case fb::DType::F16:
    case fb::DType::BF16: return 2;
    case fb::DType::I8: return 1;
    case fb::DType::I4: return 0;  // half a byte: the int4 tests check sizes themselves
    case fb::DType::Q8_0: return 1;
    case fb::DType::Q4_K:
    case fb::DType::Q6_K:
    case fb::DType::Q5_K: return 0;  // blocks: taken over from GGUF files (gguf_convert_test.cc)
  }
  return 0;
}

// Decodes tensor `t` of a model image to f32 (int8: scale·q).
std::vector<float> Decode(const uint8_t* segment, const fb::Tensor* t) {
  size_t n = 1;
  for (int64_t d : *t->shape()) n *= static_cast<size_t>(d);
  std::vector<float> out(n);
  const uint8_t* p = segment + t->offset();
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    switch (t->dtype()) {
      case fb::DType::F32: std::memcpy(&out[i], p + 4 * i, 4); break;
      case fb::DType::F16: std::memcpy(&h, p + 2 * i, 2); out[i] = F16ToF32(h); break;
      case fb::DType::BF16: std::memcpy(&h, p + 2 * i, 2); out[i] = Bf16ToF32(h); break;
      case fb::DType::I8: {
        const size_t cols = n / static_cast<size_t>(t->shape()->Get(0));
        out[i] = t->quant()->scales()->Get(static_cast<uint32_t>(i / cols)) *
                 static_cast<int8_t>(p[i]);
        break;
      }
      case fb::DType::I4: break;  // not used here: the int4 tests decode with I4Value
      case fb::DType::Q8_0: break;  // not used here: the q8_0 tests decode themselves
      case fb::DType::Q4_K:
      case fb::DType::Q6_K:
      case fb::DType::Q5_K: break;  // not built here
    }
  }
  return out;
}

// The largest |a[i] − b[i]| over a's elements (b at least as long).
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
  return worst;
}

// Steps `steps` tokens through the model bytes with the C API; the outputs.
// int8 and int4 layers multiply f32 activations (no quantised rows) unless
// `int8` says otherwise, as a model of their decoded weights does.
std::vector<float> RunTokens(const AlignedBytes& bytes, size_t steps,
                             recur_int8_activations int8 = RECUR_INT8_ACTIVATIONS_FLOAT) {
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
  so.int8_activations = int8;
  recur_session* session = nullptr;
  REQUIRE_MESSAGE(recur_session_create(model, &so, &session) == RECUR_OK, recur_last_error());
  std::vector<float> out(steps * info.output_width);
  for (size_t s = 0; s < steps; ++s) {
    const int32_t token = static_cast<int32_t>((s * 7 + 3) % 11);
    recur_input in{&token, nullptr, 1};
    REQUIRE(recur_session_step(session, &in, out.data() + s * info.output_width) == RECUR_OK);
  }
  recur_session_free(session);
  recur_model_free(model);
  return out;
}

TEST_CASE("quantize: models in every dtype: layout, values, scales, runtime output") {
  auto desc = testing::Describe(kTokensConfig);
  const TensorMap t = testing::RandomTensors(desc, 21);
  auto f32 = BuildModel(desc, t);
  REQUIRE_MESSAGE(f32.ok(), f32.message());
  const std::vector<float> want = RunTokens(*f32, 8);
  for (WeightType dtype :
       {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kI8}) {
    for (bool quantize_head : {false, true}) {
      INFO(std::string(WeightTypeName(dtype)) << " quantize_head=" << quantize_head);
      BuildOptions o;
      o.weight_dtype = dtype;
      o.quantize_head = quantize_head;
      auto bytes = BuildModel(desc, t, o);  // self-check: the runtime loads it
      REQUIRE_MESSAGE(bytes.ok(), bytes.message());
      uint32_t s = 0;
      std::memcpy(&s, bytes->data(), 4);
      const uint64_t data_start = (4ull + s + 63) / 64 * 64;
      const fb::Model* m = fb::GetSizePrefixedModel(bytes->data());
      CHECK(bytes->size() == data_start + m->data_size());
      const uint8_t* segment = bytes->data() + data_start;
      uint64_t end = 0;
      size_t narrow = 0;
      TensorMap decoded = t;  // the source, narrow tensors replaced by their decoded values
      for (const fb::Tensor* tensor : *m->tensors()) {
        const std::string name = tensor->name()->str();
        INFO(name);
        const WeightType expected = StorageDType(name, dtype, quantize_head);
        CHECK(tensor->dtype() == SchemaDType(expected));
        narrow += expected != WeightType::kF32;
        CHECK(tensor->offset() % 64 == 0);
        CHECK(reinterpret_cast<uintptr_t>(segment + tensor->offset()) % 64 == 0);
        CHECK(tensor->offset() >= end);
        end = tensor->offset() + tensor->size();
        const Tensor& source = t.at(name);
        CHECK(tensor->size() == source.data.size() * DTypeBytes(tensor->dtype()));
        if (tensor->dtype() == fb::DType::I8) {
          REQUIRE(tensor->quant() != nullptr);
          CHECK(tensor->quant()->axis() == 0);
          REQUIRE(tensor->quant()->scales()->size() == static_cast<uint32_t>(source.shape[0]));
        } else {
          CHECK(tensor->quant() == nullptr);
        }
        // Decoded values are within half an ulp / half a step of the source
        // (F32: stored verbatim).
        const std::vector<float> back = Decode(segment, tensor);
        decoded.at(name).data = back;
        const size_t cols = source.shape.size() == 2 ? static_cast<size_t>(source.shape[1]) : 1;
        for (size_t i = 0; i < back.size(); ++i) {
          const double v = source.data[i];
          double tol = 0;
          switch (tensor->dtype()) {
            case fb::DType::F32: tol = 0; break;
            case fb::DType::F16:  // half an ulp: 2^(e-11), subnormals 2^-25
              tol = std::ldexp(1.0, std::max(std::ilogb(v == 0 ? 1e-30 : v), -14) - 11);
              break;
            case fb::DType::BF16: tol = std::ldexp(1.0, std::ilogb(v == 0 ? 1e-30 : v) - 8); break;
            case fb::DType::I8: {  // and Decode's f32 product s·q: u·127·s
              const double scale = tensor->quant()->scales()->Get(uint32_t(i / cols));
              tol = Int8HalfStep(scale) + 127 * recur::impl::testing::kFloat32Unit * scale;
              break;
            }
            case fb::DType::I4:    // not built here
            case fb::DType::Q8_0:  // (d_model 16 is no multiple of 32)
            case fb::DType::Q4_K:
            case fb::DType::Q6_K:
            case fb::DType::Q5_K:
              break;
          }
          if (!(std::fabs(back[i] - v) <= tol)) {
            FAIL_CHECK("element " << i << ": " << back[i] << " vs " << v);
            break;
          }
        }
      }
      CHECK(end == m->data_size());
      const size_t blocks = desc.blocks.size();
      CHECK(narrow == (dtype == WeightType::kF32 ? 0 : 6 * blocks + (quantize_head ? 1 : 0)));
      if (dtype != WeightType::kF32) CHECK(bytes->size() < f32->size());

      // The runtime runs it as the f32 model of its decoded weights: the
      // narrow kernels decode exactly (int8: one more rounding, s·q or s·Σ)
      // and sum in another order, so the two differ by the tiny-model f32
      // bound (tests/common/tolerance.h). What the narrow weights cost
      // against the source is the per-element bound above.
      const std::vector<float> got = RunTokens(*bytes, 8);
      REQUIRE(got.size() == want.size());
      auto as_decoded = BuildModel(desc, decoded);
      REQUIRE_MESSAGE(as_decoded.ok(), as_decoded.message());
      const std::vector<float> want_decoded = RunTokens(*as_decoded, 8);
      const double bound = recur::impl::testing::TinyModelOutputBound(unsigned(desc.blocks.size()));
      CHECK(recur::impl::testing::WorstRelative(got, want_decoded) <= bound);
      if (dtype == WeightType::kF32) {
        // The same bytes as the f32 model: the same kernels, order and shapes.
        CHECK(got == want);
      } else {
        CHECK(got != want);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// The loader's checks

Status Load(const AlignedBytes& bytes) {
  std::unique_ptr<Model> model;
  return LoadModel(bytes.data(), bytes.size(), {}, &model);
}

TEST_CASE("loader: narrow dense weights load, parameter count in elements") {
  auto desc = testing::Describe(kTokensConfig);
  const TensorMap t = testing::RandomTensors(desc, 22);
  uint64_t f32_params = 0;
  for (WeightType dtype :
       {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kI8}) {
    BuildOptions o;
    o.weight_dtype = dtype;
    o.quantize_head = true;
    auto bytes = BuildModel(desc, t, o);
    REQUIRE_MESSAGE(bytes.ok(), bytes.message());
    std::unique_ptr<Model> model;
    REQUIRE(LoadModel(bytes->data(), bytes->size(), {}, &model).ok());
    CHECK(model->blocks[1].ffn.linear2.type == dtype);
    CHECK(model->head.type == dtype);
    CHECK((model->head.scales != nullptr) == (dtype == WeightType::kI8));
    if (dtype == WeightType::kF32) f32_params = model->parameter_count;
    CHECK(model->parameter_count == f32_params);
    // Every dense matrix (the head too) is int8 or none is.
    const StepCost cost = EstimateStepCost(*model);
    CHECK(cost.integer_flops == (dtype == WeightType::kI8 ? cost.flops : 0));
  }
}

TEST_CASE("loader: positions, norms and biases must be f32") {
  auto desc = testing::Describe(kTokensConfig);
  const TensorMap t = testing::RandomTensors(desc, 23);
  const struct {
    const char* tensor;
    WeightType dtype;
    const char* message;
  } cases[] = {
      {"input.positions", WeightType::kF16,
       "input.positions: tensor 'input.positions' has dtype F16; only dense-layer weights and "
       "the token embedding may be f16, bf16, int8, int4, q8_0, q4_k, q6_k or q5_k, this tensor "
       "must be f32"},
      {"blocks.1.norm2.weight", WeightType::kF16,
       "blocks.1.norm2.weight: tensor 'blocks.1.norm2.weight' has dtype F16"},
      {"blocks.0.mixer.key.bias", WeightType::kBF16,
       "blocks.0.mixer.key.bias: tensor 'blocks.0.mixer.key.bias' has dtype BF16"},
      {"final_norm.bias", WeightType::kBF16,
       "final_norm.bias: tensor 'final_norm.bias' has dtype BF16"},
  };
  for (const auto& c : cases) {
    INFO(c.tensor);
    BuildOptions o;
    o.self_check = false;
    o.dtype_overrides[c.tensor] = c.dtype;
    auto bytes = BuildModel(desc, t, o);
    REQUIRE_MESSAGE(bytes.ok(), bytes.message());
    Status s = Load(*bytes);
    CHECK(s.code() == StatusCode::kUnsupported);
    CHECK_MESSAGE(s.message().rfind(c.message, 0) == 0, s.message());
  }
}

TEST_CASE("loader: a narrow token embedding computes as its values in f32") {
  // d_model 32: whole groups of 32 for int4 and q8_0.
  auto desc = testing::Describe(impl::testing::kTinyInt4Config);
  const TensorMap t = testing::RandomTensors(desc, 25);
  for (WeightType type : {WeightType::kF16, WeightType::kBF16, WeightType::kI8, WeightType::kI4,
                          WeightType::kQ8_0}) {
    INFO(std::string(WeightTypeName(type)));
    BuildOptions o;
    o.dtype_overrides["input.embedding"] = type;
    auto narrow = BuildModel(desc, t, o);  // self-checked: the runtime loads it
    REQUIRE_MESSAGE(narrow.ok(), narrow.message());
    std::unique_ptr<Model> model;
    REQUIRE(LoadModel(narrow->data(), narrow->size(), {}, &model).ok());
    const kernels::DenseWeights& e = model->embedding;
    CHECK(e.type == type);
    CHECK(e.out == 11);
    CHECK(e.in == 32);
    // The same model with the embedding's values in f32: the same outputs, bit for bit.
    TensorMap wide = t;
    std::vector<float>& values = wide["input.embedding"].data;
    for (size_t o2 = 0; o2 < e.out; ++o2) {
      for (size_t i = 0; i < e.in; ++i) {
        values[o2 * e.in + i] = static_cast<float>(kernels::ref::DecodeWeight(e, o2, i));
      }
    }
    auto f32 = BuildModel(desc, wide);
    REQUIRE_MESSAGE(f32.ok(), f32.message());
    CHECK(narrow->size() < f32->size());
    const std::vector<float> got = RunTokens(*narrow, 9);
    const std::vector<float> want = RunTokens(*f32, 9);
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  }
}

// Sets scalar field `field` of tensor `name` in model bytes.
template <typename T>
void SetTensorField(AlignedBytes& bytes, const std::string& name, uint16_t field, T value) {
  for (const fb::Tensor* tensor : *fb::GetSizePrefixedModel(bytes.data())->tensors()) {
    if (tensor->name()->str() != name) continue;
    auto* table = reinterpret_cast<flatbuffers::Table*>(const_cast<fb::Tensor*>(tensor));
    REQUIRE(table->SetField<T>(field, value, T{}));
  }
}

// The Quantization table of tensor `name` in model bytes (mutable, for tests).
fb::Quantization* QuantOf(AlignedBytes& bytes, const std::string& name);

TEST_CASE("loader: a narrow token embedding is checked as a dense weight, naming it") {
  auto desc = testing::Describe(impl::testing::kTinyInt4Config);
  const TensorMap t = testing::RandomTensors(desc, 26);
  auto build = [&](WeightType type) {
    BuildOptions o;
    o.dtype_overrides["input.embedding"] = type;
    auto bytes = BuildModel(desc, t, o);
    REQUIRE_MESSAGE(bytes.ok(), bytes.message());
    return *bytes;
  };
  const std::string name = "input.embedding";
  {  // int8: a scale that is not positive
    AlignedBytes bytes = build(WeightType::kI8);
    auto* scales = const_cast<flatbuffers::Vector<float>*>(QuantOf(bytes, name)->scales());
    scales->Mutate(4, 0.0f);
    const Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == "input.embedding: int8 tensor 'input.embedding': scale 4 is 0; scales "
                         "must be finite and positive");
  }
  {  // an f16 table relabelled int8: its size is not one byte a value
    AlignedBytes bytes = build(WeightType::kF16);
    SetTensorField<int8_t>(bytes, name, fb::Tensor::VT_DTYPE, int8_t(fb::DType::I8));
    const Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == "tensor 'input.embedding': size 704 bytes does not match shape "
                         "[11,32] of 1-byte elements");
  }
  {  // an f16 table relabelled int8 with the size of one: no scales
    AlignedBytes bytes = build(WeightType::kF16);
    SetTensorField<int8_t>(bytes, name, fb::Tensor::VT_DTYPE, int8_t(fb::DType::I8));
    SetTensorField<uint64_t>(bytes, name, fb::Tensor::VT_SIZE, 11 * 32);
    const Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == "input.embedding: int8 tensor 'input.embedding' has no quantization "
                         "scales");
  }
  {  // int4: one group scale too few
    AlignedBytes bytes = build(WeightType::kI4);
    const fb::Quantization* q = QuantOf(bytes, name);
    uint32_t n = q->scales_f16()->size() - 1;
    std::memcpy(const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(q->scales_f16()->data())) - 4,
                &n, 4);
    const Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == "input.embedding: int4 tensor 'input.embedding' has 10 group scales, "
                         "expected 11 (11 rows x 1 groups of 32)");
  }
  {  // q8_0: a group size that does not divide the row
    AlignedBytes bytes = build(WeightType::kQ8_0);
    auto* table = reinterpret_cast<flatbuffers::Table*>(QuantOf(bytes, name));
    REQUIRE(table->SetField<uint32_t>(fb::Quantization::VT_GROUP_SIZE, 64, 0));
    const Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == "input.embedding: q8_0 tensor 'input.embedding' has group size 64; it "
                         "must be a multiple of 32, at most 16384, that divides the 32 inputs");
  }
  {  // f16: a size that is not the shape's
    AlignedBytes bytes = build(WeightType::kF16);
    SetTensorField<uint64_t>(bytes, name, fb::Tensor::VT_SIZE, 11 * 32 * 2 - 64);
    const Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == "tensor 'input.embedding': size 640 bytes does not match shape [11,32] "
                         "of 2-byte elements");
  }
  {  // q4_k: rows of 32 inputs are not whole blocks of 256
    AlignedBytes bytes = build(WeightType::kF16);
    SetTensorField<int8_t>(bytes, name, fb::Tensor::VT_DTYPE, int8_t(fb::DType::Q4_K));
    const Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == "tensor 'input.embedding': q4_k needs a 2-D [out, in] shape with in a "
                         "multiple of 256, got [11,32]");
  }
  {  // a table of the wrong shape (vocab_size 11, d_model 32)
    BuildOptions o;
    o.validate = false;
    o.self_check = false;
    o.dtype_overrides[name] = WeightType::kF16;
    TensorMap bad = t;
    bad[name] = Tensor{{12, 32}, std::vector<float>(12 * 32, 0.25f)};
    auto bytes = BuildModel(desc, bad, o);
    REQUIRE_MESSAGE(bytes.ok(), bytes.message());
    const Status s = Load(*bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == "input.embedding: tensor 'input.embedding' has shape [12,32], expected "
                         "[11,32]");
  }
  CHECK(Load(build(WeightType::kI4)).ok());
}

// The Quantization table of tensor `name` in model bytes (mutable, for tests).
fb::Quantization* QuantOf(AlignedBytes& bytes, const std::string& name) {
  const fb::Model* m = fb::GetSizePrefixedModel(bytes.data());
  for (const fb::Tensor* t : *m->tensors()) {
    if (t->name()->str() == name) return const_cast<fb::Quantization*>(t->quant());
  }
  return nullptr;
}

TEST_CASE("loader: int8 scales must be per output row, finite and positive") {
  auto desc = testing::Describe(kTokensConfig);
  const TensorMap t = testing::RandomTensors(desc, 24);
  BuildOptions o;
  o.weight_dtype = WeightType::kI8;
  auto good = BuildModel(desc, t, o);
  REQUIRE(good.ok());
  const std::string name = "blocks.1.mixer.value.weight";
  const char* prefix = "blocks.1.mixer.value.weight: int8 tensor 'blocks.1.mixer.value.weight'";

  for (float bad : {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    AlignedBytes bytes = *good;
    auto* scales = const_cast<flatbuffers::Vector<float>*>(QuantOf(bytes, name)->scales());
    scales->Mutate(3, bad);
    Status s = Load(bytes);
    INFO(s.message());
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message().rfind(std::string(prefix) + ": scale 3 is ", 0) == 0);
    CHECK(s.message().find("scales must be finite and positive") != std::string::npos);
  }
  {  // quantized along the wrong axis (the writer stores axis explicitly)
    AlignedBytes bytes = *good;
    // Generated tables derive privately from flatbuffers::Table (same address).
    auto* table = reinterpret_cast<flatbuffers::Table*>(QuantOf(bytes, name));
    REQUIRE(table->SetField<int32_t>(fb::Quantization::VT_AXIS, 1, 0));
    Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kUnsupported);
    CHECK(s.message() == std::string(prefix) +
                             " is quantized along axis 1; dense weights need one scale per "
                             "output row (axis 0)");
  }
  {  // one scale too few (the vector's length prefix lowered)
    AlignedBytes bytes = *good;
    const fb::Quantization* q = QuantOf(bytes, name);
    uint32_t n = q->scales()->size();
    n -= 1;
    std::memcpy(const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(q->scales()->data())) - 4,
                &n, 4);
    Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == std::string(prefix) + " has 7 scales, expected 8 (one per output row)");
  }
  CHECK(Load(*good).ok());
}


// ---------------------------------------------------------------------------
// int4

const char* const kInt4Config = impl::testing::kTinyInt4Config;

TEST_CASE("quantize: int4 groups: smallest f16 scale >= max/7, half a step, packed layout") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (int group : kInt4Groups) {
    INFO("group " << group);
    Tensor t;
    t.shape = {3, 512};
    t.data.resize(3 * 512);
    for (float& v : t.data) v = normal(rng);
    std::fill(t.data.begin() + 512, t.data.begin() + 512 + group, 0.0f);  // row 1, group 0
    auto st = EncodeTensor("w", t, WeightType::kI4, group);
    REQUIRE_MESSAGE(st.ok(), st.message());
    CHECK(st->dtype == WeightType::kI4);
    CHECK(st->group == group);
    REQUIRE(st->bytes.size() == 3 * 256);
    const size_t groups = 512 / size_t(group);
    REQUIRE(st->scales_f16.size() == 3 * groups);
    CHECK(st->scales_f16[groups] == 0x3C00);  // the zero group's scale is 1
    for (size_t r = 0; r < 3; ++r) {
      for (size_t g = 0; g < groups; ++g) {
        float max_abs = 0;
        for (size_t c = g * group; c < (g + 1) * group; ++c) {
          max_abs = std::max(max_abs, std::fabs(t.data[r * 512 + c]));
        }
        const uint16_t h = st->scales_f16[r * groups + g];
        const float scale = F16ToF32(h);
        if (max_abs > 0) {
          CHECK(scale >= max_abs / 7.0f);
          CHECK(F16ToF32(static_cast<uint16_t>(h - 1)) < max_abs / 7.0f);  // the smallest such
        }
        for (size_t c = g * group; c < (g + 1) * group; ++c) {
          const int q = kernels::I4Value(st->bytes.data() + r * 256, c);
          CHECK(q >= -7);
          CHECK(q <= 7);
          const double err = std::fabs(double{scale} * q - t.data[r * 512 + c]);
          if (!(err <= scale / 2.0 * (1 + 1e-6))) FAIL_CHECK("r " << r << " c " << c << " err " << err);
        }
      }
    }
  }
  // The layout, by hand: inputs 0 and 16 of a block share byte 0.
  Tensor t;
  t.shape = {1, 32};
  t.data.assign(32, 0.0f);
  t.data[0] = 7.0f;    // scale 1: q = 7, nibble 15
  t.data[16] = -3.0f;  // q = -3, nibble 5
  t.data[17] = 1.0f;   // byte 1, high nibble 9
  auto st = EncodeTensor("w", t, WeightType::kI4, 32);
  REQUIRE(st.ok());
  CHECK(st->scales_f16[0] == 0x3C00);
  CHECK(st->bytes[0] == 0x5F);
  CHECK(st->bytes[1] == 0x98);
  CHECK(st->bytes[2] == 0x88);
}

TEST_CASE("quantize: int4 errors name the tensor and the problem") {
  Tensor t;
  t.shape = {2, 48};
  t.data.assign(96, 0.5f);
  auto s = EncodeTensor("blocks.0.ffn.linear2.weight", t, WeightType::kI4, 32);
  CHECK(s.status().code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == "blocks.0.ffn.linear2.weight: int4 groups of 32 need the input dimension "
                       "to be a multiple of 32, got shape [2,48]; use a --group that divides it "
                       "or another --dtype");
  t.shape = {2, 64};
  t.data.assign(128, 0.5f);
  s = EncodeTensor("w", t, WeightType::kI4, 48);
  CHECK(s.message() == "w: int4 group size 48 is not supported; use 32, 64, 128 or 256");
  t.data[70] = std::numeric_limits<float>::quiet_NaN();
  s = EncodeTensor("w", t, WeightType::kI4, 32);
  CHECK(s.message() == "w: cannot quantize NaN at index 70 ([1,6])");
  t.data[70] = 1e6f;  // scale 1e6/7 > 65504
  s = EncodeTensor("w", t, WeightType::kI4, 32);
  CHECK(s.message().rfind("w: row 1 group 0 has max |w| 1e+06, whose int4 scale (max/7) is "
                          "beyond the f16 range", 0) == 0);
  Tensor v;
  v.shape = {64};
  v.data.assign(64, 1.0f);
  s = EncodeTensor("v", v, WeightType::kI4, 32);
  CHECK(s.message() == "v: int4 needs a 2-D [out, in] weight, got shape [64]");
  WeightType d;
  REQUIRE(ParseWeightType("int4", &d));
  CHECK(d == WeightType::kI4);

  // A model whose d_model (16) is no multiple of the group: the first block
  // weight named, nothing written.
  auto desc = testing::Describe(kTokensConfig);
  BuildOptions o;
  o.weight_dtype = WeightType::kI4;
  auto bytes = BuildModel(desc, testing::RandomTensors(desc, 3), o);
  CHECK(bytes.message().rfind("blocks.0.mixer.query.weight: int4 groups of 32 need", 0) == 0);

  // recur-convert's options: --group outside the list, or without int4.
  ConvertOptions co;
  co.weights_path = "missing.safetensors";
  co.config_path = "missing.json";
  co.output_path = "out.recur";
  co.dtype = WeightType::kI4;
  co.group = 100;
  CHECK(ConvertFiles(co, nullptr).message() ==
        "--group 100 is not supported: use 32, 64, 128 or 256");
  co.dtype = WeightType::kI8;
  co.group = 64;
  CHECK(ConvertFiles(co, nullptr).message() ==
        "--group applies to --dtype int4 only (got --dtype int8)");
}

TEST_CASE("quantize: int4 models build, load and compute their decoded weights") {
  auto desc = testing::Describe(kInt4Config);
  const TensorMap t = testing::RandomTensors(desc, 31);
  for (int group : {32}) {  // d_model 32: the group sizes are the kernel tests'
    for (bool quantize_head : {false, true}) {
      INFO("group " << group << " quantize_head " << quantize_head);
      BuildOptions o;
      o.weight_dtype = WeightType::kI4;
      o.group = group;
      o.quantize_head = quantize_head;
      auto bytes = BuildModel(desc, t, o);
      REQUIRE_MESSAGE(bytes.ok(), bytes.message());
      std::unique_ptr<Model> model;
      REQUIRE(LoadModel(bytes->data(), bytes->size(), {}, &model).ok());
      const kernels::DenseWeights& w = model->blocks[1].ffn.linear2;
      CHECK(w.type == kernels::WeightType::kI4);
      CHECK(w.group == uint32_t(group));
      CHECK(w.in == 64);
      CHECK((model->head.type == kernels::WeightType::kI4) == quantize_head);
      // The integer FLOPs: all but the head's unless it is int4 too.
      const StepCost cost = EstimateStepCost(*model);
      const uint64_t head = 2 * uint64_t{model->head.in} * model->head.out;
      CHECK(cost.integer_flops == cost.flops - (quantize_head ? 0 : head));
      // The f32 model of the decoded weights (the runtime's view decodes to
      // the converter's encoding, checked for one layer).
      TensorMap decoded = t;
      for (auto& [name, tensor] : decoded) {
        if (StorageDType(name, WeightType::kI4, quantize_head) != WeightType::kI4) continue;
        auto enc = EncodeTensor(name, tensor, WeightType::kI4, group);
        REQUIRE(enc.ok());
        const size_t cols = size_t(tensor.shape[1]), groups = cols / size_t(group);
        for (size_t k = 0; k < tensor.data.size(); ++k) {
          const size_t r = k / cols, i = k % cols;
          tensor.data[k] = F16ToF32(enc->scales_f16[r * groups + i / size_t(group)]) *
                           float(kernels::I4Value(enc->bytes.data() + r * cols / 2, i));
        }
      }
      const Tensor& d2 = decoded.at("blocks.1.ffn.linear2.weight");
      size_t mismatches = 0;
      for (size_t k = 0; k < d2.data.size(); ++k) {
        mismatches += kernels::ref::DecodeWeight(w, k / 64, k % 64) != double{d2.data[k]};
      }
      CHECK(mismatches == 0);
      auto reference = BuildModel(desc, decoded);
      REQUIRE(reference.ok());
      const std::vector<float> want = RunTokens(*reference, 8);
      // f32 activations: the same products in another order. The tiny
      // model's bound (docs/testing.md, Float32OrderBound): 4.0e-4.
      const std::vector<float> got = RunTokens(*bytes, 8, RECUR_INT8_ACTIVATIONS_FLOAT);
      const double max_diff = MaxAbsDiff(got, want);
      INFO("f32 activations: max diff " << max_diff);
      CHECK(max_diff <= 4.0e-4);
      // Quantised activations add each row's rounding (≤ s/2 per element):
      // a smoke test (measured 5.3e-2 at most here, AVX-512); the parity tests bound it
      // on real shapes.
      const std::vector<float> quantized = RunTokens(*bytes, 8, RECUR_INT8_ACTIVATIONS_QUANTIZED);
      const double max_q = MaxAbsDiff(quantized, want);
      INFO("quantized activations: max diff " << max_q);
      CHECK(max_q > 0);
      CHECK(max_q <= 0.2);
    }
  }
}

// Every int4 tensor of `bytes` with the groups whose index is odd negated
// both ways: the scale's sign bit flipped and each q made −q (n → 16 − n; the
// converter writes q in [−7, 7]). The weights are the same numbers.
AlignedBytes NegateOddGroups(const AlignedBytes& bytes) {
  AlignedBytes out = bytes;
  const fb::Model* m = fb::GetSizePrefixedModel(out.data());
  uint32_t flatbuffer = 0;
  std::memcpy(&flatbuffer, out.data(), 4);
  const uint64_t segment = RoundUp(4 + uint64_t{flatbuffer}, kAlignment);
  for (const fb::Tensor* t : *m->tensors()) {
    if (t->dtype() != fb::DType::I4) continue;
    const size_t rows = size_t(t->shape()->Get(0)), cols = size_t(t->shape()->Get(1));
    const size_t group = t->quant()->group_size(), groups = cols / group;
    auto* scales = const_cast<flatbuffers::Vector<uint16_t>*>(t->quant()->scales_f16());
    uint8_t* w = out.data() + segment + t->offset();
    for (size_t r = 0; r < rows; ++r) {
      for (size_t g = 1; g < groups; g += 2) {
        scales->Mutate(r * groups + g, uint16_t(scales->Get(r * groups + g) ^ 0x8000));
        for (size_t i = g * group; i < (g + 1) * group; ++i) {
          uint8_t& byte = w[r * cols / 2 + (i / 32) * 16 + i % 16];
          const int n = (i % 32 < 16 ? byte & 0xF : byte >> 4);
          REQUIRE(n >= 1);
          const int flipped = 16 - n;
          byte = uint8_t(i % 32 < 16 ? (byte & 0xF0) | flipped : (byte & 0x0F) | flipped << 4);
        }
      }
    }
  }
  return out;
}

TEST_CASE("int4: negative group scales compute the same outputs as positive ones") {
  // A GGUF Q4_0 import keeps each block's d, negative for about half of them:
  // every kernel path must take a scale of either sign. The 64-input layers'
  // rows have a negated group and a kept one.
  auto desc = testing::Describe(kInt4Config);
  const TensorMap t = testing::RandomTensors(desc, 37);
  BuildOptions o;
  o.weight_dtype = WeightType::kI4;
  o.quantize_head = true;
  auto bytes = BuildModel(desc, t, o);
  REQUIRE_MESSAGE(bytes.ok(), bytes.message());
  const AlignedBytes negated = NegateOddGroups(*bytes);
  REQUIRE(negated != *bytes);
  for (auto int8 : {RECUR_INT8_ACTIVATIONS_FLOAT, RECUR_INT8_ACTIVATIONS_QUANTIZED}) {
    INFO("int8_activations " << int(int8));
    const std::vector<float> want = RunTokens(*bytes, 6, int8);
    const std::vector<float> got = RunTokens(negated, 6, int8);
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("loader: int4 group scales: count, axis, group size, values, size") {
  auto desc = testing::Describe(kInt4Config);
  const TensorMap t = testing::RandomTensors(desc, 32);
  BuildOptions o;
  o.weight_dtype = WeightType::kI4;
  auto good = BuildModel(desc, t, o);
  REQUIRE_MESSAGE(good.ok(), good.message());
  const std::string name = "blocks.1.ffn.linear2.weight";  // [32, 64]: 2 groups a row
  const std::string prefix = name + ": int4 tensor '" + name + "'";
  for (uint16_t bad : {uint16_t{0x7E00}, uint16_t{0xFC00}, uint16_t{0x7C00}}) {  // NaN, ±Inf
    AlignedBytes bytes = *good;
    auto* scales = const_cast<flatbuffers::Vector<uint16_t>*>(QuantOf(bytes, name)->scales_f16());
    scales->Mutate(5, bad);
    Status s = Load(bytes);
    INFO(s.message());
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message().rfind(prefix + ": group scale 5 (row 2) is ", 0) == 0);
    CHECK(s.message().find("scales must be finite") != std::string::npos);
  }
  // Zero, negative and subnormal scales are finite halves: taken as they are (a GGUF
  // Q4_0 block's d is negative when its largest-magnitude weight is positive).
  for (uint16_t fine : {uint16_t{0x0000}, uint16_t{0x8000}, uint16_t{0xBC00}, uint16_t{0x0001}}) {
    AlignedBytes bytes = *good;
    auto* scales = const_cast<flatbuffers::Vector<uint16_t>*>(QuantOf(bytes, name)->scales_f16());
    scales->Mutate(5, fine);
    Status s = Load(bytes);
    INFO(s.message());
    CHECK(s.ok());
  }
  {
    AlignedBytes bytes = *good;
    auto* table = reinterpret_cast<flatbuffers::Table*>(QuantOf(bytes, name));
    REQUIRE(table->SetField<int32_t>(fb::Quantization::VT_AXIS, 0, 0));
    Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kUnsupported);
    CHECK(s.message() == prefix + " is quantized along axis 0; int4 dense weights are grouped "
                                  "along the input dimension (axis 1)");
  }
  for (uint32_t group : {0u, 48u, 128u}) {
    AlignedBytes bytes = *good;
    auto* table = reinterpret_cast<flatbuffers::Table*>(QuantOf(bytes, name));
    REQUIRE(table->SetField<uint32_t>(fb::Quantization::VT_GROUP_SIZE, group, 0));
    Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == prefix + " has group size " + std::to_string(group) +
                             "; it must be a multiple of 32, at most 16384, that divides the 64 "
                             "inputs");
  }
  {  // a truncated scale vector (its length prefix lowered)
    AlignedBytes bytes = *good;
    const fb::Quantization* q = QuantOf(bytes, name);
    uint32_t n = q->scales_f16()->size() - 1;
    std::memcpy(const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(q->scales_f16()->data())) - 4,
                &n, 4);
    Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == prefix + " has 63 group scales, expected 64 (32 rows x 2 groups of 32)");
  }
  {  // bytes that do not match half a byte per weight
    AlignedBytes bytes = *good;
    const fb::Model* m = fb::GetSizePrefixedModel(bytes.data());
    for (const fb::Tensor* tensor : *m->tensors()) {
      if (tensor->name()->str() == name) {
        auto* table = reinterpret_cast<flatbuffers::Table*>(const_cast<fb::Tensor*>(tensor));
        REQUIRE(table->SetField<uint64_t>(fb::Tensor::VT_SIZE, tensor->size() * 2, 0));
      }
    }
    Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == "tensor '" + name + "': size 2048 bytes does not match shape [32,64] of "
                                             "int4 elements (two per byte: 1024)");
  }
  CHECK(Load(*good).ok());
}

// ---------------------------------------------------------------------------
// q8_0

// GGUF's Q8_0 of one row of n values (n a multiple of 32), by the formula of
// the reference quantiser that makes GGUF files (llama.cpp's
// quantize_row_q8_0_ref), written out here on its own: per group of 32, in
// f32, the largest magnitude a, d = a/127, the inverse i = 1/d (0 for d = 0),
// the stored scale f16(d) rounded to nearest even and the stored values
// roundf(w·i), half away from zero. Where 1/d overflows (a < 127·2^-128) the
// values are 0 (the reference's float-to-int8 conversion of ±Inf and NaN is
// undefined; f16(d) is 0 there).
void GgufQ8_0Row(const float* w, size_t n, uint16_t* scales, int8_t* q) {
  for (size_t g = 0; g < n / 32; ++g) {
    const float* v = w + 32 * g;
    float a = 0.0f;
    for (size_t j = 0; j < 32; ++j) a = std::fabs(v[j]) > a ? std::fabs(v[j]) : a;
    const float d = a / 127.0f;
    float inv = d == 0.0f ? 0.0f : 1.0f / d;
    if (std::isinf(inv)) inv = 0.0f;
    scales[g] = F16(d);
    for (size_t j = 0; j < 32; ++j) q[32 * g + j] = static_cast<int8_t>(roundf(v[j] * inv));
  }
}

TEST_CASE("quantize: q8_0 is GGUF's Q8_0 - d = max/127 stored as f16, q = roundf(w/d)") {
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t rows = 9, cols = 96, groups = 3;
  Tensor t;
  t.shape = {int64_t(rows), int64_t(cols)};
  t.data.resize(rows * cols);
  for (size_t r = 0; r < rows; ++r) {  // magnitudes 2^-14 .. 2^10
    for (size_t c = 0; c < cols; ++c)
      t.data[r * cols + c] = normal(rng) * std::ldexp(1.0f, 3 * int(r) - 14);
  }
  float* const zeros = &t.data[1 * cols + 32];  // row 1, group 1
  std::fill(zeros, zeros + 32, 0.0f);
  float* const tiny = &t.data[2 * cols + 64];  // row 2, group 2: f16(d) = 0, q not 0
  for (size_t j = 0; j < 32; ++j) tiny[j] = normal(rng) * 1e-9f;
  float* const below = &t.data[4 * cols];  // row 4, group 0: 1/d overflows
  for (size_t j = 0; j < 32; ++j) below[j] = (j % 2 ? 1e-38f : -2e-38f) * float(j % 5);
  // Row 3, group 0: max 127 (d = 1, exact): ties round away from zero.
  const float ties[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 126.5f, -126.5f, 1.5f};
  std::copy(std::begin(ties), std::end(ties), &t.data[3 * cols]);
  for (size_t j = std::size(ties); j < 32; ++j) t.data[3 * cols + j] = 0.25f * float(j);

  auto st = EncodeTensor("w", t, WeightType::kQ8_0);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(st->dtype == WeightType::kQ8_0);
  CHECK(st->group == 32);
  CHECK(st->scales.empty());
  REQUIRE(st->bytes.size() == rows * cols);
  REQUIRE(st->scales_f16.size() == rows * groups);
  size_t mismatches = 0, from_stored_scale_differs = 0;
  for (size_t r = 0; r < rows; ++r) {
    std::vector<uint16_t> d(groups);
    std::vector<int8_t> q(cols);
    GgufQ8_0Row(&t.data[r * cols], cols, d.data(), q.data());
    for (size_t g = 0; g < groups; ++g) mismatches += st->scales_f16[r * groups + g] != d[g];
    for (size_t c = 0; c < cols; ++c) {
      const int got = static_cast<int8_t>(st->bytes[r * cols + c]);
      mismatches += got != q[c];
      // q comes from the f32 d; dividing by the stored f16 d would round
      // some values the other way, which the data here shows.
      const float stored = F16ToF32(d[c / 32]);
      if (stored > 0 && std::round(t.data[r * cols + c] / stored) != float(got)) {
        ++from_stored_scale_differs;
      }
    }
  }
  CHECK(mismatches == 0);
  CHECK(from_stored_scale_differs > 0);
  auto q = [&](size_t r, size_t c) { return int{static_cast<int8_t>(st->bytes[r * cols + c])}; };
  CHECK(st->scales_f16[3 * groups] == 0x3C00);
  CHECK(std::vector<int>{q(3, 0), q(3, 1), q(3, 2), q(3, 3), q(3, 4), q(3, 5), q(3, 6), q(3, 7)} ==
        std::vector<int>{127, 3, -3, 1, -1, 127, -127, 2});
  CHECK(st->scales_f16[1 * groups + 1] == 0x0000);
  CHECK(st->scales_f16[2 * groups + 2] == 0x0000);
  CHECK(st->scales_f16[4 * groups] == 0x0000);
  int tiny_q = 0, zero_q = 0, below_q = 0;
  for (size_t j = 0; j < 32; ++j) {
    tiny_q = std::max(tiny_q, std::abs(q(2, 64 + j)));
    zero_q = std::max(zero_q, std::abs(q(1, 32 + j)));
    below_q = std::max(below_q, std::abs(q(4, j)));
  }
  CHECK(tiny_q == 127);  // as GGUF files have them: worth 0 beside a scale of 0
  CHECK(zero_q == 0);
  CHECK(below_q == 0);
  // Each weight within d/2 + 127·|d − f16(d)| of the source, d = max/127.
  for (size_t r = 0; r < rows; ++r) {
    for (size_t g = 0; g < groups; ++g) {
      const uint16_t h = st->scales_f16[r * groups + g];
      if ((h & 0x7C00) == 0) continue;  // zero or subnormal scales: checked above
      float a = 0;
      for (size_t c = 32 * g; c < 32 * (g + 1); ++c)
        a = std::max(a, std::fabs(t.data[r * cols + c]));
      const double d = a / 127.0f, stored = F16ToF32(h);
      for (size_t c = 32 * g; c < 32 * (g + 1); ++c) {
        const double err = std::fabs(stored * q(r, c) - t.data[r * cols + c]);
        if (!(err <= d / 2 * (1 + 1e-6) + 127 * std::fabs(d - stored))) {
          FAIL_CHECK("r " << r << " c " << c << " err " << err);
        }
      }
    }
  }
}

TEST_CASE("quantize: q8_0 errors name the tensor and the problem") {
  Tensor t;
  t.shape = {2, 48};
  t.data.assign(96, 0.5f);
  auto s = EncodeTensor("blocks.0.ffn.linear2.weight", t, WeightType::kQ8_0);
  CHECK(s.status().code() == StatusCode::kInvalidArgument);
  CHECK(s.message() ==
        "blocks.0.ffn.linear2.weight: q8_0 groups of 32 need the input dimension "
        "to be a multiple of 32, got shape [2,48]; use another --dtype");
  t.shape = {2, 64};
  t.data.assign(128, 0.5f);
  t.data[70] = std::numeric_limits<float>::quiet_NaN();
  s = EncodeTensor("w", t, WeightType::kQ8_0);
  CHECK(s.message() == "w: cannot quantize NaN at index 70 ([1,6])");
  t.data[70] = -std::numeric_limits<float>::infinity();
  s = EncodeTensor("w", t, WeightType::kQ8_0);
  CHECK(s.message() == "w: cannot quantize Inf at index 70 ([1,6])");
  t.data[70] = 127.0f * 65504.0f;  // d = 65504: the largest f16
  CHECK(EncodeTensor("w", t, WeightType::kQ8_0).ok());
  t.data[70] = 127.0f * 65536.0f;
  s = EncodeTensor("w", t, WeightType::kQ8_0);
  CHECK(s.message() ==
        "w: row 1 group 0 has max |w| 8323072, whose q8_0 scale (max/127) is "
        "beyond the f16 range (max 65504); convert with --dtype int8 or f32");
  Tensor v;
  v.shape = {64};
  v.data.assign(64, 1.0f);
  s = EncodeTensor("v", v, WeightType::kQ8_0);
  CHECK(s.message() == "v: q8_0 needs a 2-D [out, in] weight, got shape [64]");
  WeightType d;
  REQUIRE(ParseWeightType("q8_0", &d));
  CHECK(d == WeightType::kQ8_0);
  CHECK(std::string(WeightTypeEncoding(WeightType::kQ8_0)).find("Q8_0") != std::string::npos);

  // A model whose d_model (16) is no multiple of 32: the first block weight
  // named, nothing written.
  auto desc = testing::Describe(kTokensConfig);
  BuildOptions o;
  o.weight_dtype = WeightType::kQ8_0;
  auto bytes = BuildModel(desc, testing::RandomTensors(desc, 3), o);
  CHECK(bytes.message().rfind("blocks.0.mixer.query.weight: q8_0 groups of 32 need", 0) == 0);

  // --group is int4's.
  ConvertOptions co;
  co.weights_path = "missing.safetensors";
  co.config_path = "missing.json";
  co.output_path = "out.recur";
  co.dtype = WeightType::kQ8_0;
  co.group = 64;
  CHECK(ConvertFiles(co, nullptr).message() ==
        "--group applies to --dtype int4 only (got --dtype q8_0)");
}

TEST_CASE("quantize: q8_0 models build, load and compute their decoded weights") {
  auto desc = testing::Describe(kInt4Config);  // d_model 32, d_ff 64
  const TensorMap t = testing::RandomTensors(desc, 33);
  for (bool quantize_head : {false, true}) {
    INFO("quantize_head " << quantize_head);
    BuildOptions o;
    o.weight_dtype = WeightType::kQ8_0;
    o.quantize_head = quantize_head;
    auto bytes = BuildModel(desc, t, o);
    REQUIRE_MESSAGE(bytes.ok(), bytes.message());
    std::unique_ptr<Model> model;
    REQUIRE(LoadModel(bytes->data(), bytes->size(), {}, &model).ok());
    const kernels::DenseWeights& w = model->blocks[1].ffn.linear2;
    CHECK(w.type == kernels::WeightType::kQ8_0);
    CHECK(w.group == 32);
    CHECK(w.in == 64);
    CHECK(w.scales == nullptr);
    CHECK((model->head.type == kernels::WeightType::kQ8_0) == quantize_head);
    // Sizes: a byte a weight and an f16 scale a group (with the int8 and
    // int4 ones, what a step streams).
    const StepCost cost = EstimateStepCost(*model);
    CHECK(cost.integer_flops == 0);  // no integer kernels: f32 FMAs
    const fb::Model* m = fb::GetSizePrefixedModel(bytes->data());
    for (const fb::Tensor* tensor : *m->tensors()) {
      if (tensor->dtype() != fb::DType::Q8_0) continue;
      INFO(tensor->name()->str());
      const uint64_t out = uint64_t(tensor->shape()->Get(0)),
                     in = uint64_t(tensor->shape()->Get(1));
      CHECK(tensor->size() == out * in);
      REQUIRE(tensor->quant() != nullptr);
      CHECK(tensor->quant()->axis() == 1);
      CHECK(tensor->quant()->group_size() == 32);
      CHECK(tensor->quant()->scales_f16()->size() == out * in / 32);
      CHECK(tensor->quant()->scales() == nullptr);
    }
    // The runtime's view decodes to the encoder's values, as ggml decodes a
    // block (scale·q), for one layer.
    TensorMap decoded = t;
    for (auto& [name, tensor] : decoded) {
      if (StorageDType(name, WeightType::kQ8_0, quantize_head) != WeightType::kQ8_0) continue;
      auto enc = EncodeTensor(name, tensor, WeightType::kQ8_0);
      REQUIRE(enc.ok());
      // Scales (rows, cols / 32) row-major: element k's is scale k / 32.
      for (size_t k = 0; k < tensor.data.size(); ++k) {
        tensor.data[k] = F16ToF32(enc->scales_f16[k / 32]) * float(int8_t(enc->bytes[k]));
      }
    }
    const Tensor& d2 = decoded.at("blocks.1.ffn.linear2.weight");
    size_t mismatches = 0;
    for (size_t k = 0; k < d2.data.size(); ++k) {
      mismatches += kernels::ref::DecodeWeight(w, k / 64, k % 64) != double{d2.data[k]};
    }
    CHECK(mismatches == 0);
    auto reference = BuildModel(desc, decoded);
    REQUIRE(reference.ok());
    const std::vector<float> want = RunTokens(*reference, 8);
    // The same products in another order: the tiny model's bound
    // (docs/testing.md, Float32OrderBound), as int4 with f32 activations.
    const std::vector<float> got = RunTokens(*bytes, 8);
    const double max_diff = MaxAbsDiff(got, want);
    INFO("max diff " << max_diff);
    CHECK(max_diff <= 4.0e-4);
    // Quantised activations: a step's q8_0 rows run on block-quantised
    // activations (DenseBlockQ8, as llama.cpp) where the CPU prefers them,
    // adding each block's rounding (a smoke test: measured 8.7e-2 at most
    // here, AVX-512; the parity tests bound it on real shapes); elsewhere as f32.
    const std::vector<float> quantized = RunTokens(*bytes, 8, RECUR_INT8_ACTIVATIONS_QUANTIZED);
    CHECK(RunTokens(*bytes, 8, RECUR_INT8_ACTIVATIONS_AUTO) == quantized);
    if (kernels::DenseBlockQ8Preferred(kernels::WeightType::kQ8_0, 1)) {
      CHECK(quantized != got);
      const double q_diff = MaxAbsDiff(quantized, want);
      INFO("quantised max diff " << q_diff);
      CHECK(q_diff <= 0.2);
    } else {
      CHECK(quantized == got);
    }
  }
}

TEST_CASE("writer: each grouped tensor records its own group (q8_0 beside int4 in groups of 64)") {
  auto desc = testing::Describe(kInt4Config);
  const TensorMap t = testing::RandomTensors(desc, 34);
  BuildOptions o;
  o.group = 64;
  o.dtype_overrides["blocks.0.ffn.linear2.weight"] = WeightType::kI4;    // [32, 64]
  o.dtype_overrides["blocks.0.ffn.linear1.weight"] = WeightType::kQ8_0;  // [64, 32]
  o.dtype_overrides["blocks.1.ffn.linear2.weight"] = WeightType::kQ8_0;  // [32, 64]
  auto bytes = BuildModel(desc, t, o);  // self-check: the runtime loads it
  REQUIRE_MESSAGE(bytes.ok(), bytes.message());
  std::unique_ptr<Model> model;
  REQUIRE(LoadModel(bytes->data(), bytes->size(), {}, &model).ok());
  CHECK(model->blocks[0].ffn.linear2.type == kernels::WeightType::kI4);
  CHECK(model->blocks[0].ffn.linear2.group == 64);
  CHECK(model->blocks[0].ffn.linear1.type == kernels::WeightType::kQ8_0);
  CHECK(model->blocks[0].ffn.linear1.group == 32);
  CHECK(model->blocks[1].ffn.linear2.type == kernels::WeightType::kQ8_0);
  CHECK(model->blocks[1].ffn.linear2.group == 32);
}

TEST_CASE("loader: q8_0 group scales, group size and row length") {
  auto desc = testing::Describe(kInt4Config);
  const TensorMap t = testing::RandomTensors(desc, 35);
  BuildOptions o;
  o.weight_dtype = WeightType::kQ8_0;
  auto good = BuildModel(desc, t, o);
  REQUIRE_MESSAGE(good.ok(), good.message());
  const std::string name = "blocks.1.ffn.linear2.weight";  // [32, 64]: 2 groups a row
  const std::string prefix = name + ": q8_0 tensor '" + name + "'";
  for (uint16_t bad : {uint16_t{0x7E00}, uint16_t{0xFC00}}) {  // NaN, -Inf
    AlignedBytes bytes = *good;
    auto* scales = const_cast<flatbuffers::Vector<uint16_t>*>(QuantOf(bytes, name)->scales_f16());
    scales->Mutate(5, bad);
    Status s = Load(bytes);
    INFO(s.message());
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message().rfind(prefix + ": group scale 5 (row 2) is ", 0) == 0);
  }
  for (uint16_t fine : {uint16_t{0x0000}, uint16_t{0xBC00}, uint16_t{0x0001}}) {
    AlignedBytes bytes = *good;
    auto* scales = const_cast<flatbuffers::Vector<uint16_t>*>(QuantOf(bytes, name)->scales_f16());
    scales->Mutate(5, fine);
    CHECK(Load(bytes).ok());
  }
  for (uint32_t group : {0u, 48u, 128u}) {
    AlignedBytes bytes = *good;
    auto* table = reinterpret_cast<flatbuffers::Table*>(QuantOf(bytes, name));
    REQUIRE(table->SetField<uint32_t>(fb::Quantization::VT_GROUP_SIZE, group, 0));
    Status s = Load(bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() == prefix + " has group size " + std::to_string(group) +
                             "; it must be a multiple of 32, at most 16384, that divides the 64 "
                             "inputs");
  }
  {  // groups of 64 (one a row): a group size it takes, with twice its count of scales
    AlignedBytes bytes = *good;
    auto* table = reinterpret_cast<flatbuffers::Table*>(QuantOf(bytes, name));
    REQUIRE(table->SetField<uint32_t>(fb::Quantization::VT_GROUP_SIZE, 64, 0));
    Status s = Load(bytes);
    CHECK(s.message() == prefix + " has 64 group scales, expected 32 (32 rows x 1 groups of 64)");
  }
  {  // a row length that is no multiple of 32: a q8_0 [16, 16] tensor (int8's bytes, relabelled)
    auto desc16 = testing::Describe(kTokensConfig);
    BuildOptions o16;
    o16.self_check = false;
    o16.dtype_overrides["blocks.0.mixer.query.weight"] = WeightType::kI8;
    auto bytes = BuildModel(desc16, testing::RandomTensors(desc16, 36), o16);
    REQUIRE_MESSAGE(bytes.ok(), bytes.message());
    const fb::Model* m = fb::GetSizePrefixedModel(bytes->data());
    for (const fb::Tensor* tensor : *m->tensors()) {
      if (tensor->name()->str() != "blocks.0.mixer.query.weight") continue;
      auto* table = reinterpret_cast<flatbuffers::Table*>(const_cast<fb::Tensor*>(tensor));
      REQUIRE(table->SetField<int8_t>(fb::Tensor::VT_DTYPE, int8_t(fb::DType::Q8_0), 0));
    }
    Status s = Load(*bytes);
    CHECK(s.code() == StatusCode::kInvalidModel);
    CHECK(s.message() ==
          "tensor 'blocks.0.mixer.query.weight': q8_0 needs a 2-D [out, in] "
          "shape with in a multiple of 32, got [16,16]");
  }
  CHECK(Load(*good).ok());
}

}  // namespace
}  // namespace recur::impl::converter
