// Block-quantised activations (DenseBlockQ8, Int8Activations::kBlocks): the
// spec's quantisers against ggml's quantize_row_q8_0 (the x86 form llama.cpp
// runs on x86-64) and quantize_row_q8_K_ref as ggml writes them (transcribed
// below), bit for bit; the spec's integer sums against the dot product of
// the dequantised activations and weights; then DenseBlockQ8 on every Highway
// target against the spec.
//
// Tolerance: each block's sum is exact in both; the kernels round the
// products of the block scales and the f32 sum over blocks, so |y − ref| ≤
// Float32SumBound(4·blocks + 4)·mag, mag = Σ_i |x̂_i|·(|code_i·scale_i·d| +
// |min_i·dmin|) + |bias| + |y_prev| (x̂ the dequantised activation, the
// weight's two terms before they cancel).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"
#include "test_util.h"

namespace recur::impl::kernels::test {
namespace {

// ---------------------------------------------------------------------------
// ggml's quantisers, kept apart from the spec.

// The nearest binary16 of v (finite, >= 0), ties to even, by frexp rather
// than by bits: 11 significant bits, or multiples of 2^-24 below 2^-14.
float NearestHalf(float v) {
  if (v < std::ldexp(1.0f, -14)) return std::nearbyint(std::ldexp(v, 24)) * std::ldexp(1.0f, -24);
  int e;
  std::frexp(v, &e);
  const float h = std::ldexp(std::nearbyint(std::ldexp(v, 11 - e)), e - 11);
  return h > 65504.0f ? std::numeric_limits<float>::infinity() : h;
}

// quantize_row_q8_0 of ggml-cpu/arch/x86/quants.c (its AVX path, per block):
// d = max|x| / 127 stored as f16, x·(127 / max|x|) rounded by
// _mm256_round_ps(_MM_ROUND_NEAREST).
float GgmlQuantizeQ8_0(const float* x, int8_t* qs) {
  float max_scalar = 0.0f;
  for (int j = 0; j < 32; ++j) max_scalar = std::max(max_scalar, std::fabs(x[j]));
  const float d = max_scalar / 127.f;
  const float id = (max_scalar != 0.0f) ? 127.f / max_scalar : 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float r = std::nearbyint(x[j] * id);  // _mm256_cvtps_epi32, then two saturating packs
    qs[j] = std::fabs(r) <= 127.0f ? static_cast<int8_t>(r) : int8_t{-128};
  }
  return NearestHalf(d);
}

int nearest_int(float fval) {
  float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

// quantize_row_q8_K_ref of ggml-quants.c, one block; bsums per 16.
float GgmlQuantizeQ8_K(const float* x, int8_t* qs, int16_t* bsums) {
  float max = 0;
  float amax = 0;
  for (int j = 0; j < 256; ++j) {
    float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (!amax) {
    std::memset(qs, 0, 256);
    std::memset(bsums, 0, 16 * sizeof(int16_t));
    return 0.0f;
  }
  const float iscale = -127.f / max;
  for (int j = 0; j < 256; ++j) {
    int v = nearest_int(iscale * x[j]);
    qs[j] = static_cast<int8_t>(std::min(127, v));
  }
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int ii = 0; ii < 16; ++ii) sum += qs[j * 16 + ii];
    bsums[j] = static_cast<int16_t>(sum);
  }
  return 1 / iscale;
}

// Activations of every kind the quantisers meet: uniform, a few large values,
// ties (x·127/max exactly k + 1/2), all zero, negatives largest, one nonzero,
// tiny (subnormal scales) and huge (an Inf scale as f16).
void FillActivations(std::mt19937& rng, float* x, size_t n, int kind) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) x[i] = u(rng);
  switch (kind % 8) {
    case 1:
      for (size_t i = 0; i < n; i += 37) x[i] *= 100.0f;
      break;
    case 2:
      for (size_t i = 0; i < n; ++i) x[i] = (static_cast<float>(rng() % 255) - 127.0f) * 0.5f;
      break;
    case 3:
      std::fill(x, x + n, 0.0f);
      break;
    case 4:
      for (size_t i = 0; i < n; ++i) x[i] = -std::fabs(x[i]);
      break;
    case 5:
      std::fill(x, x + n, 0.0f);
      x[n / 3] = 0.75f;
      break;
    case 6:
      for (size_t i = 0; i < n; ++i) x[i] *= 1e-38f;
      break;
    case 7:
      for (size_t i = 0; i < n; ++i) x[i] *= 3e7f;
      break;
    default:
      break;
  }
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST_CASE("block activations: the spec quantises as ggml's quantize_row_q8_0 and _q8_K") {
  std::mt19937 rng(7);
  std::vector<float> x(256);
  int8_t want[256], got[256];
  int16_t bsums[16];
  size_t mismatches = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    FillActivations(rng, x.data(), x.size(), trial);
    for (size_t k = 0; k < 8; ++k) {
      const float d_want = GgmlQuantizeQ8_0(x.data() + 32 * k, want);
      const float d_got = ref::QuantizeQ8_0Block(x.data() + 32 * k, got);
      // Where d is 0 the codes multiply nothing (ggml's are -128 where its
      // scale overflowed, the spec's 0).
      if (!SameBits(d_want, d_got) || (d_want != 0.0f && std::memcmp(want, got, 32) != 0)) {
        if (mismatches++ < 3)
          FAIL_CHECK("q8_0 kind " << trial % 8 << " d " << d_want << " " << d_got);
      }
    }
    const float d_want = GgmlQuantizeQ8_K(x.data(), want, bsums);
    const float d_got = ref::QuantizeQ8_KBlock(x.data(), got);
    if (!SameBits(d_want, d_got) || std::memcmp(want, got, 256) != 0) {
      if (mismatches++ < 3)
        FAIL_CHECK("q8_k kind " << trial % 8 << " d " << d_want << " " << d_got);
    }
  }
  CHECK(mismatches == 0);
  // Ties round to even: 2.5 and 3.5 of the scale.
  std::fill(x.begin(), x.end(), 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -2.5f;
  ref::QuantizeQ8_0Block(x.data(), got);
  CHECK(got[1] == 2);
  CHECK(got[2] == 4);
  CHECK(got[3] == -2);
  // Q8_K keeps the sign of the first largest |x|: codes of −x·127/max.
  x[4] = -127.0f;
  CHECK(ref::QuantizeQ8_KBlock(x.data(), got) == -1.0f);
  CHECK(got[0] == -127);
  CHECK(got[4] == 127);
}

// ---------------------------------------------------------------------------
// Random layers.

struct Layer {
  std::vector<uint8_t> weight;
  std::vector<uint16_t> group_scales;
  DenseWeights w;
};

uint16_t RandomScaleHalf(std::mt19937& rng) {
  const uint32_t r = rng();
  const uint16_t exponent = static_cast<uint16_t>(1 + (r >> 8) % 11);  // 2^-14 .. 2^-4
  return static_cast<uint16_t>((r & 1) << 15 | exponent << 10 | ((r >> 16) & 0x3FF));
}

void PutHalf(uint8_t* p, uint16_t h) {
  p[0] = static_cast<uint8_t>(h);
  p[1] = static_cast<uint8_t>(h >> 8);
}

Layer RandomLayer(std::mt19937& rng, WeightType type, size_t in, size_t out) {
  Layer l;
  l.w.type = type;
  l.w.in = static_cast<uint32_t>(in);
  l.w.out = static_cast<uint32_t>(out);
  l.weight.resize(std::max<size_t>(1, WeightBytes(type, in * out)));
  for (uint8_t& b : l.weight) b = static_cast<uint8_t>(rng());
  if (type == WeightType::kQ8_0) {
    for (uint8_t& b : l.weight) b = b == 0x80 ? 0x81 : b;  // q8_0 codes are in [-127, 127]
  }
  if (IsKQuant(type)) {
    const size_t bytes = Traits(type).block_bytes;
    for (size_t k = 0; k < in * out / kKQuantBlock; ++k) {
      uint8_t* b = l.weight.data() + k * bytes;
      if (type == WeightType::kQ6_K) {
        PutHalf(b + ref::kQ6KD, RandomScaleHalf(rng));
      } else {
        PutHalf(b, RandomScaleHalf(rng));
        PutHalf(b + 2, RandomScaleHalf(rng));
      }
    }
  } else {
    l.w.group = 32;
    l.group_scales.resize(std::max<size_t>(1, in / 32 * out));
    for (uint16_t& s : l.group_scales) s = RandomScaleHalf(rng);
    l.w.group_scales = l.group_scales.data();
  }
  l.w.weight = l.weight.data();
  return l;
}

// The magnitudes of the tolerance (file comment) and the dequantised-weight
// dot products Σ_i x̂_i·w_i in double for every output of `batch` activation
// rows x (row stride x_stride): mag and dot (batch, w.out). Each row is
// quantised once and each weight decoded once.
void Expected(const DenseWeights& w, const float* x, size_t x_stride, size_t batch,
              std::vector<double>* mag, std::vector<double>* dot) {
  const ActivationBlocks kind = ActivationBlocksOf(w.type, w.group);
  const size_t block = kind == ActivationBlocks::kQ8_0 ? 32 : kKQuantBlock;
  const size_t in = w.in, out = w.out, blocks = in / block;
  std::vector<double> xq(batch * blocks * block);  // the dequantised activations
  std::vector<int8_t> q(block);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t k = 0; k < blocks; ++k) {
      const double d = kind == ActivationBlocks::kQ8_0
                           ? ref::QuantizeQ8_0Block(x + b * x_stride + k * block, q.data())
                           : ref::QuantizeQ8_KBlock(x + b * x_stride + k * block, q.data());
      for (size_t i = 0; i < block; ++i) xq[b * blocks * block + k * block + i] = d * q[i];
    }
  }
  mag->assign(batch * out, 0.0);
  dot->assign(batch * out, 0.0);
  std::vector<double> terms(blocks * block), value(blocks * block);
  for (size_t o = 0; o < out; ++o) {
    for (size_t i = 0; i < blocks * block; ++i) {
      if (IsKQuant(w.type)) {
        const auto* blk = static_cast<const uint8_t*>(w.weight) + o * WeightRowBytes(w.type, w.in) +
                          (i / block) * Traits(w.type).block_bytes;
        int code, scale, min;
        ref::KQuantCode(w.type, blk, i % block, &code, &scale, &min);
        const bool q6 = w.type == WeightType::kQ6_K;
        terms[i] = std::fabs(double(code) * scale * ref::HalfAt(blk + (q6 ? ref::kQ6KD : 0))) +
                   (q6 ? 0.0 : std::fabs(double(min) * ref::HalfAt(blk + 2)));
      } else {
        terms[i] = std::fabs(ref::DecodeWeight(w, o, i));
      }
      value[i] = ref::DecodeWeight(w, o, i);
    }
    for (size_t b = 0; b < batch; ++b) {
      const double* xb = xq.data() + b * blocks * block;
      double m = 0.0, s = 0.0;
      for (size_t i = 0; i < blocks * block; ++i) {
        m += std::fabs(xb[i]) * terms[i];
        s += xb[i] * value[i];
      }
      (*mag)[b * out + o] = m;
      (*dot)[b * out + o] = s;
    }
  }
}

constexpr WeightType kTypes[] = {WeightType::kQ8_0, WeightType::kI4, WeightType::kQ4_K,
                                 WeightType::kQ5_K, WeightType::kQ6_K};

TEST_CASE("block activations: the spec's integer sums are the dequantised dot product") {
  std::mt19937 rng(11);
  for (WeightType type : kTypes) {
    INFO(WeightTypeName(type));
    const size_t in = 768, out = 9;
    Layer l = RandomLayer(rng, type, in, out);
    std::vector<float> x(in), y(out);
    for (int kind = 0; kind < 8; ++kind) {
      FillActivations(rng, x.data(), in, kind);
      if (kind == 7) continue;  // an Inf scale: no finite dot product to compare
      ref::DenseBlockQ8(x.data(), in, 1, l.w, y.data(), out, false);
      std::vector<double> mag, dot;
      Expected(l.w, x.data(), in, 1, &mag, &dot);
      for (size_t o = 0; o < out; ++o) {
        // The dequantised weights are f32 roundings of the two terms.
        CHECK(std::fabs(y[o] - dot[o]) <= 1e-6 * mag[o] + 1e-30);
      }
    }
  }
}

// Short sweeps (arm64): the shapes of 13 rows and more of 768 inputs and more
// exist for AVX-512's GEMM (passes of rows, rows past a kernel's four, blocks
// past a panel); arm64 has no GEMM and runs its row forms on them, 4
// quantised rows at a time (kMaxRows), as on the shapes of 5 to 12 rows.
bool GemmOnlyShape(size_t batch, size_t in) { return batch >= 13 && in >= 768; }

TEST_CASE("DenseBlockQ8: every target against the spec, batches, strides, bias, accumulation") {
  struct Shape {
    size_t batch, in, out;
  };
  const Shape shapes[] = {{1, 256, 1},
                          {1, 512, 33},
                          {2, 768, 17},
                          {3, 256, 64},
                          {4, 1024, 5},
                          {5, 512, 16},
                          {9, 256, 7},
                          {1, 16384, 3},
                          {0, 256, 4},
                          {6, 2048, 2},
                          {1, 256, 0},
                          // The GEMM (AVX-512 with VNNI): several panels, tiles past
                          // `out`, passes of rows, rows past a kernel's four; q8_0's
                          // blocks of 32 past a panel of 1,024 inputs.
                          {8, 256, 31},
                          {70, 768, 33},
                          {13, 2304, 70},
                          {11, 96, 40},
                          {16, 1056, 37}};
  std::mt19937 rng(3);
  for (WeightType type : kTypes) {
    for (const Shape& s : shapes) {
      if (s.in % Traits(type).block != 0) continue;
      if (ShortSweeps() && GemmOnlyShape(s.batch, s.in)) continue;
      // Variant 2: a bound scratch too small for the GEMM's rows (the row forms run).
      for (int variant = 0; variant < 3; ++variant) {
        if (variant == 2 && s.batch < 8) continue;
        const bool bias_on = variant != 1, accumulate = variant == 1;
        INFO(WeightTypeName(type) << " batch=" << s.batch << " in=" << s.in << " out=" << s.out
                                  << " accumulate=" << accumulate << " variant=" << variant);
        // The layer, its activations, the spec's outputs and their tolerances are
        // made once; every target runs them.
        Layer l = RandomLayer(rng, type, s.in, s.out);
        std::vector<float> bias(std::max<size_t>(1, s.out));
        for (float& b : bias) b = static_cast<float>(rng() % 1000) / 500.0f - 1.0f;
        if (bias_on) l.w.bias = bias.data();
        const size_t x_stride = s.in + 3, y_stride = s.out + 5;
        Buffer x(std::max<size_t>(1, s.batch * x_stride), 1);
        std::vector<float> y_prev(std::max<size_t>(1, s.batch * y_stride));
        for (size_t b = 0; b < s.batch; ++b) {
          FillActivations(rng, x.data() + b * x_stride, s.in, static_cast<int>(b) % 7);
          for (size_t o = 0; o < s.out; ++o) {
            y_prev[b * y_stride + o] = accumulate ? static_cast<float>(o % 7) - 3.0f
                                                  : std::numeric_limits<float>::quiet_NaN();
          }
        }
        std::vector<float> want = y_prev;
        ref::DenseBlockQ8(x.data(), x_stride, s.batch, l.w, want.data(), y_stride, accumulate);
        std::vector<double> tol(want.size()), mags, dots;
        Expected(l.w, x.data(), x_stride, s.batch, &mags, &dots);
        for (size_t b = 0; b < s.batch; ++b) {
          for (size_t o = 0; o < s.out; ++o) {
            const double mag = mags[b * s.out + o] + (bias_on ? std::fabs(bias[o]) : 0.0) +
                               (accumulate ? 3.0 : 0.0);
            tol[b * y_stride + o] = testing::Float32SumBound(4.0 * (s.in / 32) + 4) * mag;
          }
        }
        ForEachTarget([&](const std::string&) {
          float few[16];
          DenseScratch tiny;
          tiny.widen = few;
          tiny.widen_floats = 16;
          ScopedDenseScratch bind(variant == 2 ? &tiny : nullptr);
          Buffer y(std::max<size_t>(1, s.batch * y_stride), 2);
          for (size_t b = 0; b < s.batch; ++b) {
            std::copy_n(y_prev.data() + b * y_stride, s.out, y.data() + b * y_stride);
          }
          DenseBlockQ8(x.data(), x_stride, s.batch, l.w, y.data(), y_stride, accumulate);
          size_t bad = 0;
          for (size_t b = 0; b < s.batch; ++b) {
            for (size_t o = 0; o < s.out; ++o) {
              const size_t k = b * y_stride + o;
              if (!(std::fabs(y.data()[k] - want[k]) <= tol[k])) {
                if (bad++ < 3) {
                  FAIL_CHECK("row " << b << " out " << o << ": " << y.data()[k] << " vs " << want[k]
                                    << " tol " << tol[k]);
                }
              }
            }
            for (size_t o = s.out; o < y_stride && b + 1 < s.batch; ++o) {
              CHECK(y.data()[b * y_stride + o] == kGuard);  // the stride's gap is untouched
            }
          }
          CHECK(bad == 0);
          CHECK(x.GuardsIntact());
          CHECK(y.GuardsIntact());
        });
      }
    }
  }
}

TEST_CASE("Dense with kBlocks: the layers DenseBlockQ8 takes, and the others as before") {
  std::mt19937 rng(5);
  const size_t in = 512, out = 8;
  std::vector<float> x(8 * in), y(8 * out), want(8 * out);
  FillActivations(rng, x.data(), x.size(), 0);
  for (WeightType type : kTypes) {
    INFO(WeightTypeName(type));
    Layer l = RandomLayer(rng, type, in, out);
    Dense(x.data(), in, 2, l.w, y.data(), out, false, Int8Activations::kBlocks);
    DenseBlockQ8(x.data(), in, 2, l.w, want.data(), out, false);
    CHECK(y == want);
  }
  // int4 with groups of 64 has no Q8_0 pairing: f32 activations.
  Layer l = RandomLayer(rng, WeightType::kI4, in, out);
  std::vector<uint16_t> scales64(in / 64 * out);
  for (uint16_t& s : scales64) s = RandomScaleHalf(rng);
  l.w.group = 64;
  l.w.group_scales = scales64.data();
  CHECK(ActivationBlocksOf(WeightType::kI4, 64) == ActivationBlocks::kNone);
  Dense(x.data(), in, 2, l.w, y.data(), out, false, Int8Activations::kBlocks);
  Dense(x.data(), in, 2, l.w, want.data(), out, false);
  CHECK(y == want);
  // f32 weights: the f32 kernel.
  std::vector<float> wf(in * out);
  FillActivations(rng, wf.data(), wf.size(), 0);
  DenseWeights f;
  f.weight = wf.data();
  f.in = static_cast<uint32_t>(in);
  f.out = static_cast<uint32_t>(out);
  Dense(x.data(), in, 2, f, y.data(), out, false, Int8Activations::kBlocks);
  Dense(x.data(), in, 2, f, want.data(), out, false);
  CHECK(y == want);
  CHECK(ActivationBlocksOf(WeightType::kQ8_0, 64) == ActivationBlocks::kNone);
  // kAuto and kQuantized: K-quants and q8_0 on DenseBlockQ8 where it is preferred
  // (a decode step's single row on x86), else f32 activations; int4 never (its own
  // integer paths).
  ForEachTarget([&](const std::string&) {
    for (WeightType type : kTypes) {
      INFO(WeightTypeName(type));
      Layer k = RandomLayer(rng, type, in, out);
      for (size_t batch : {1, 2, 8}) {
        const bool blocks = DenseBlockQ8Preferred(type, batch);
        CHECK(RunsBlockQ8(type, k.w.group, in, Int8Activations::kAuto, batch) == blocks);
        CHECK(RunsBlockQ8(type, k.w.group, in, Int8Activations::kQuantized, batch) == blocks);
        CHECK(!RunsBlockQ8(type, k.w.group, in, Int8Activations::kFloat, batch));
        CHECK(RunsBlockQ8(type, k.w.group, in, Int8Activations::kBlocks, batch));
        CHECK(!RunsBlockQ8(type, k.w.group, kDenseBlockQ8MaxIn + 256, Int8Activations::kBlocks,
                           batch));
        if (type == WeightType::kI4) {
          CHECK(!blocks);
          continue;
        }
        Dense(x.data(), in, batch, k.w, y.data(), out, false, Int8Activations::kAuto);
        if (blocks) {
          DenseBlockQ8(x.data(), in, batch, k.w, want.data(), out, false);
        } else {
          Dense(x.data(), in, batch, k.w, want.data(), out, false);
        }
        CHECK(std::equal(y.begin(), y.begin() + batch * out, want.begin()));
      }
    }
  });
  CHECK(DenseBlockQ8Preferred(WeightType::kQ5_K, 1) == false);
  CHECK(DenseBlockQ8Preferred(WeightType::kQ4_K, 2) == false);
  CHECK(DenseBlockQ8Preferred(WeightType::kQ8_0, 2) == false);
  CHECK(ActivationBlocksOf(WeightType::kQ6_K, 0) == ActivationBlocks::kQ8_K);
  CHECK(ActivationBlocksOf(WeightType::kI8, 0) == ActivationBlocks::kNone);
}

TEST_CASE(
    "DenseBlockQ8Tiled: DenseBlockQ8 bit for bit from tiles laid out once, tile ranges, all "
    "targets") {
  struct Shape {
    size_t batch, in, out;
  };
  // The GEMM's batches (8 and up, several passes' worth, rows past a kernel's
  // four), a batch it does not take (the row forms), single rows (q4_k's
  // tiles take them), tiles past `out`, q8_0's blocks of 32 past a panel.
  const Shape shapes[] = {{8, 256, 31}, {70, 768, 33}, {13, 2304, 70}, {9, 512, 64}, {3, 256, 40},
                          {1, 768, 33}, {1, 2304, 70}, {12, 1120, 45}, {8, 32, 33}};
  ForEachTarget([&](const std::string&) {
    std::mt19937 rng(17);
    for (WeightType type : kTypes) {
      const bool tiled =
          type == WeightType::kQ4_K || type == WeightType::kQ6_K || type == WeightType::kQ8_0;
      const size_t record = type == WeightType::kQ4_K   ? kQ4KTileBlockBytes
                            : type == WeightType::kQ6_K ? kQ6KTileBlockBytes
                                                        : kQ8_0TileBlockBytes;
      for (const Shape& s : shapes) {
        if (s.in % Traits(type).block != 0) continue;
        // Short sweeps (arm64): no tiles there (DenseBlockQ8TileBytes is 0), so a
        // tile range is DenseBlockQ8 on its rows: the GEMM's largest shapes
        // repeat the row forms of the others (GemmOnlyShape).
        if (ShortSweeps() && GemmOnlyShape(s.batch, s.in)) continue;
        INFO(WeightTypeName(type) << " batch=" << s.batch << " in=" << s.in << " out=" << s.out);
        Layer l = RandomLayer(rng, type, s.in, s.out);
        std::vector<float> bias(s.out);
        for (float& b : bias) b = static_cast<float>(rng() % 1000) / 500.0f - 1.0f;
        l.w.bias = bias.data();
        const size_t bytes = DenseBlockQ8TileBytes(l.w);
        const size_t tiles = DenseBlockQ8Tiles(s.out);
        // Tiles exactly where the GEMM runs (q4_k, q6_k and q8_0 on AVX-512 with VNNI).
        const bool gemm = tiled && DenseBlockQ8Preferred(type, 8);
        CHECK(bytes == (gemm ? tiles * (s.in / Traits(type).block) * record : 0));
        auto packed = hwy::AllocateAligned<uint8_t>(std::max<size_t>(bytes, 1));
        PackDenseBlockQ8Tiles(l.w, packed.get());
        const size_t x_stride = s.in + 3, y_stride = s.out + 5;
        std::vector<float> x(s.batch * x_stride);
        for (size_t b = 0; b < s.batch; ++b) {
          FillActivations(rng, x.data() + b * x_stride, s.in, static_cast<int>(b) % 8);
        }
        // A single q4_k row from tiles runs the GEMM: the row's sums in a batch
        // the GEMM takes (a row's result does not depend on the others).
        const bool one_on_gemm = gemm && type == WeightType::kQ4_K && s.batch == 1;
        std::vector<float> others(kBlockQ8TilesMinBatch * x_stride);
        if (one_on_gemm) {
          FillActivations(rng, others.data(), others.size(), 3);
          std::copy(x.begin(), x.end(), others.begin());
        }
        for (bool accumulate : {false, true}) {
          std::vector<float> want(s.batch * y_stride, 0.5f);
          if (one_on_gemm) {
            std::vector<float> batch_y(kBlockQ8TilesMinBatch * y_stride, 0.5f);
            DenseBlockQ8(others.data(), x_stride, kBlockQ8TilesMinBatch, l.w, batch_y.data(),
                         y_stride, accumulate);
            std::copy(batch_y.begin(), batch_y.begin() + y_stride, want.begin());
          } else {
            DenseBlockQ8(x.data(), x_stride, s.batch, l.w, want.data(), y_stride, accumulate);
          }
          // Whole, split after the first tile, and one tile at a time.
          for (size_t split : {tiles, size_t{1}, size_t{0}}) {
            std::vector<float> y(s.batch * y_stride, 0.5f);
            if (split == 0) {
              for (size_t t = 0; t < tiles; ++t) {
                DenseBlockQ8Tiled(x.data(), x_stride, s.batch, packed.get(), l.w, t, t + 1,
                                  y.data(), y_stride, accumulate);
              }
            } else {
              DenseBlockQ8Tiled(x.data(), x_stride, s.batch, packed.get(), l.w, 0, split, y.data(),
                                y_stride, accumulate);
              DenseBlockQ8Tiled(x.data(), x_stride, s.batch, packed.get(), l.w, split, tiles,
                                y.data(), y_stride, accumulate);
            }
            size_t differ = 0;
            for (size_t i = 0; i < y.size(); ++i) differ += !SameBits(y[i], want[i]);
            CHECK_MESSAGE(differ == 0, "split " << split << " accumulate " << accumulate);
          }
        }
        if (!gemm || (s.batch < kBlockQ8TilesMinBatch && !one_on_gemm)) continue;
        // The tiles are what the GEMM reads: a changed code byte changes the output
        // (and tiles from nothing, as the model's bytes, do not).
        std::vector<float> want(s.batch * s.out), y(s.batch * s.out);
        DenseBlockQ8Tiled(x.data(), x_stride, s.batch, packed.get(), l.w, 0, tiles, want.data(),
                          s.out, false);
        if (!one_on_gemm) {
          DenseBlockQ8Tiled(x.data(), x_stride, s.batch, nullptr, l.w, 0, tiles, y.data(), s.out,
                            false);
          CHECK(std::equal(y.begin(), y.end(), want.begin(), SameBits));  // NaN for an Inf row
        }
        packed[5] ^= 0x11;
        DenseBlockQ8Tiled(x.data(), x_stride, s.batch, packed.get(), l.w, 0, tiles, y.data(), s.out,
                          false);
        CHECK(!std::equal(y.begin(), y.end(), want.begin(), SameBits));
      }
    }
  });
}

// ---------------------------------------------------------------------------
// f16 and bf16 weights: the activations rounded to the weights' type.

// The nearer of v's two bf16 neighbours by double distance, ties to the even
// one: independent of the spec's bit trick. |v| below the largest bf16.
float NearestBf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  const uint32_t lo_bits = u & 0xFFFF0000u, hi_bits = lo_bits + 0x10000u;
  float lo, hi;
  std::memcpy(&lo, &lo_bits, sizeof(lo));
  std::memcpy(&hi, &hi_bits, sizeof(hi));
  const double d_lo = std::fabs(double{v} - lo), d_hi = std::fabs(double{v} - hi);
  if (d_lo != d_hi) return d_lo < d_hi ? lo : hi;
  return (lo_bits >> 16) & 1u ? hi : lo;
}

TEST_CASE("rounded activations: f16 and bf16 to nearest, ties to even, as ggml rounds them") {
  std::mt19937 rng(11);
  std::vector<float> values = {
      0.0f,         -0.0f,           1.0f,         65504.0f,         -65504.0f,       65519.99f,
      65520.0f,     -70000.0f,       0x1p-24f,     0x1p-25f,         3 * 0x1p-26f,    0x1p-14f,
      0x1.ffcp-15f, 1 + 0x1p-11f,    1 + 0x1p-12f, 1 + 3 * 0x1p-12f, -(1 + 0x1p-12f), 1 + 0x1p-8f,
      1 + 0x1p-9f,  1 + 3 * 0x1p-9f, 3e38f,        -1e-40f};
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (((u >> 23) & 0xFF) >= 0xFE) u &= 0xBFFFFFFFu;  // finite, below the largest bf16
    float v;
    std::memcpy(&v, &u, sizeof(v));
    values.push_back(v);
    values.push_back(std::ldexp(v, -static_cast<int>((u >> 23) & 0xFF)) * 0x1p10f);  // f16 range
  }
  size_t bad = 0;
  for (float v : values) {
    const float h = ref::RoundActivation(ActivationBlocks::kF16, v);
    const float h_want = std::copysign(NearestHalf(std::fabs(v)), v);
    const float b = ref::RoundActivation(ActivationBlocks::kBF16, v);
    const bool ok = SameBits(h, h_want) && SameBits(ref::F16ToF32(ref::F32ToF16Bits(v)), h) &&
                    (std::fabs(v) > 3.3e38f || SameBits(b, NearestBf16(v)));
    if (!ok && bad++ < 3) FAIL_CHECK(v << ": f16 " << h << " vs " << h_want << ", bf16 " << b);
  }
  CHECK(bad == 0);
  CHECK(ref::RoundActivation(ActivationBlocks::kF16, 1 + 0x1p-12f) == 1.0f);  // a tie: to even
  CHECK(ref::RoundActivation(ActivationBlocks::kF16, 1 + 3 * 0x1p-12f) == 1 + 0x1p-10f);
  CHECK(ref::F32ToF16Bits(-0.0f) == 0x8000);
  CHECK(ref::F32ToF16Bits(65520.0f) == 0x7C00);
}

// A layer of f16 or bf16 weights, values uniform in [-1, 1) rounded to the type.
Layer RandomNarrowLayer(std::mt19937& rng, WeightType type, size_t in, size_t out) {
  Layer l;
  l.w.type = type;
  l.w.in = static_cast<uint32_t>(in);
  l.w.out = static_cast<uint32_t>(out);
  l.weight.resize(std::max<size_t>(2, 2 * in * out));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t k = 0; k < in * out; ++k) {
    const float v = u(rng);
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    const uint16_t h =
        type == WeightType::kF16 ? ref::F32ToF16Bits(v) : static_cast<uint16_t>(bits >> 16);
    std::memcpy(l.weight.data() + 2 * k, &h, 2);
  }
  l.w.weight = l.weight.data();
  return l;
}

TEST_CASE("DenseBlockQ8 and DensePacked on f16 and bf16 layers: every target against the spec") {
  struct Shape {
    size_t batch, in, out;
  };
  // A step's f16 stream (1 MiB and more), row tiles with tails, batches of
  // the row tiles, the widened GEMM (32 rows and more on AVX-512), nothing.
  const Shape shapes[] = {{1, 1024, 512}, {1, 2048, 301}, {1, 256, 64}, {1, 100, 7}, {3, 1024, 33},
                          {8, 512, 70},   {40, 300, 100}, {0, 64, 4},   {1, 64, 0}};
  std::mt19937 rng(13);
  for (WeightType type : {WeightType::kF16, WeightType::kBF16}) {
    const ActivationBlocks kind = ActivationBlocksOf(type, 0);
    for (const Shape& s : shapes) {
      // Short sweeps (arm64): 40 rows are AVX-512's widened GEMM; arm64 runs the
      // widened row tiles on them (kMaxB rows at a time) as on 8 rows, and the
      // packed GEMM's one-row tiles as on 3 and 8.
      if (ShortSweeps() && s.batch == 40) continue;
      // Variants: 0 bias, 1 accumulate, 2 the scratch DenseScratchNeed asks
      // for bound, 3 a bound scratch without room (one row at a time), 4 one
      // nonzero activation a row (its product is exact: rounded or not), 5 the
      // layer read from memory (DenseWeights::from_memory: one row streams
      // from 16 KiB, so 256 -> 64 too).
      for (int variant = 0; variant < 6; ++variant) {
        const bool bias_on = variant != 1 && variant != 4, accumulate = variant == 1;
        INFO(WeightTypeName(type) << " batch=" << s.batch << " in=" << s.in << " out=" << s.out
                                  << " variant=" << variant);
        Layer l = RandomNarrowLayer(rng, type, s.in, s.out);
        l.w.from_memory = variant == 5;
        std::vector<float> bias(std::max<size_t>(1, s.out));
        for (float& b : bias) b = static_cast<float>(rng() % 1000) / 500.0f - 1.0f;
        if (bias_on) l.w.bias = bias.data();
        const size_t x_stride = s.in + 3, y_stride = s.out + 5;
        Buffer x(std::max<size_t>(1, s.batch * x_stride), 1);
        std::vector<float> rounded(std::max<size_t>(1, s.batch * s.in));
        std::vector<float> y_prev(std::max<size_t>(1, s.batch * y_stride), kGuard);
        for (size_t b = 0; b < s.batch; ++b) {
          float* xb = x.data() + b * x_stride;
          FillActivations(rng, xb, s.in, static_cast<int>(b % 3 == 2 ? 4 : b % 3));
          if (variant == 4) {
            std::fill(xb, xb + s.in, 0.0f);
            xb[(b * 7) % s.in] = 1 + 0x1p-12f + 0x1p-20f;  // f16: 1 + 2^-11, bf16: 1
          }
          for (size_t i = 0; i < s.in; ++i)
            rounded[b * s.in + i] = ref::RoundActivation(kind, xb[i]);
          for (size_t o = 0; o < s.out; ++o) {
            y_prev[b * y_stride + o] = accumulate ? static_cast<float>(o % 7) - 3.0f : 0.0f;
          }
        }
        std::vector<float> want = y_prev;
        ref::DenseBlockQ8(x.data(), x_stride, s.batch, l.w, want.data(), y_stride, accumulate);
        std::vector<double> weights_abs(s.in * s.out);
        for (size_t k = 0; k < weights_abs.size(); ++k) {
          weights_abs[k] = std::fabs(ref::DecodeWeight(l.w, k / s.in, k % s.in));
        }
        const auto abs_w = [&](size_t o, size_t i) { return weights_abs[o * s.in + i]; };
        const std::vector<double> tol =
            DenseTolerances(rounded.data(), s.in, s.batch, s.in, s.out, abs_w, l.w.bias, accumulate,
                            y_prev, y_stride);
        // The layer, its activations, the spec's outputs and their tolerances are
        // made once; every target runs them.
        ForEachTarget([&](const std::string&) {
          const DenseScratch need =
              DenseScratchNeed(s.batch, s.in, s.out, type, Int8Activations::kBlocks);
          CHECK(DenseScratchNeed(s.batch, s.in, s.out, type).rounded_floats == 0);
          std::vector<hwy::AlignedFreeUniquePtr<float[]>> regions;
          const auto region = [&](size_t floats) {
            regions.push_back(hwy::AllocateAligned<float>(std::max<size_t>(floats, 1)));
            return regions.back().get();
          };
          DenseScratch planned = need, none;
          planned.widen = region(need.widen_floats);
          planned.panel = region(need.panel_floats);
          planned.rounded = region(need.rounded_floats);
          const DenseScratch* bound = variant == 2 ? &planned : variant == 3 ? &none : nullptr;
          // Three ways: DenseBlockQ8, Dense with kBlocks, the packed GEMM (f32 panels and
          // the layer's own values).
          for (int way = 0; way < 4; ++way) {
            INFO("way " << way);
            Buffer y(std::max<size_t>(1, s.batch * y_stride), 2);
            for (size_t k = 0; k < s.batch * y_stride; ++k) {
              if (k % y_stride < s.out) y.data()[k] = y_prev[k];
            }
            {
              const ScopedDenseScratch bind(bound);
              if (way == 0) {
                DenseBlockQ8(x.data(), x_stride, s.batch, l.w, y.data(), y_stride, accumulate);
              } else if (way == 1) {
                Dense(x.data(), x_stride, s.batch, l.w, y.data(), y_stride, accumulate,
                      Int8Activations::kBlocks);
              } else {
                const WeightType panel_type = way == 2 ? WeightType::kF32 : type;
                std::vector<uint8_t> storage(DensePackedBytes(s.in, s.out, panel_type) + 64);
                void* packed =
                    storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
                PackDense(l.w, panel_type, packed);
                DensePacked(x.data(), x_stride, s.batch, packed, panel_type, l.w.bias, s.in, s.out,
                            0, DensePanels(s.out), y.data(), y_stride, accumulate, kind);
              }
            }
            CHECK(CheckDenseWithin(s.batch, s.out, want, tol, y, y_stride) == 0);
            if (variant != 4) continue;
            // One product a row: exactly the weight times the rounded value, which
            // differs from the value itself (so the rounding is not skipped).
            size_t exact = 0, moved = 0;
            for (size_t b = 0; b < s.batch; ++b) {
              const size_t i = (b * 7) % s.in;
              for (size_t o = 0; o < s.out; ++o) {
                const float w = static_cast<float>(ref::DecodeWeight(l.w, o, i));
                exact += SameBits(y.data()[b * y_stride + o], w * rounded[b * s.in + i]);
                moved += w != 0.0f && y.data()[b * y_stride + o] != w * x.data()[b * x_stride + i];
              }
            }
            CHECK(exact == s.batch * s.out);
            if (s.batch * s.out != 0) CHECK(moved > (s.batch * s.out) / 2);
          }
        });
      }
    }
  }
}

TEST_CASE("Int8Activations on f16 and bf16 layers: kBlocks rounds, the others do not") {
  std::mt19937 rng(17);
  const size_t in = 512, out = 40;
  std::vector<float> x(8 * in), y(8 * out), want(8 * out);
  FillActivations(rng, x.data(), x.size(), 0);
  ForEachTarget([&](const std::string&) {
    for (WeightType type : {WeightType::kF16, WeightType::kBF16}) {
      INFO(WeightTypeName(type));
      Layer l = RandomNarrowLayer(rng, type, in, out);
      for (size_t batch : {1, 8}) {
        CHECK(RunsBlockQ8(type, 0, in, Int8Activations::kBlocks, batch));
        CHECK(!RunsBlockQ8(type, 0, kDenseBlockQ8MaxIn + 256, Int8Activations::kBlocks, batch));
        Dense(x.data(), in, batch, l.w, y.data(), out, false, Int8Activations::kBlocks);
        DenseBlockQ8(x.data(), in, batch, l.w, want.data(), out, false);
        CHECK(std::equal(y.begin(), y.begin() + batch * out, want.begin()));
        Dense(x.data(), in, batch, l.w, want.data(), out, false);
        CHECK(!std::equal(y.begin(), y.begin() + batch * out, want.begin()));
        for (Int8Activations int8 :
             {Int8Activations::kAuto, Int8Activations::kFloat, Int8Activations::kQuantized}) {
          CHECK(!RunsBlockQ8(type, 0, in, int8, batch));
          Dense(x.data(), in, batch, l.w, y.data(), out, false, int8);
          CHECK(std::equal(y.begin(), y.begin() + batch * out, want.begin()));
        }
      }
    }
  });
}

}  // namespace
}  // namespace recur::impl::kernels::test
