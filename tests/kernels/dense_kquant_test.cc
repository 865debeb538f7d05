// K-quant weights (kQ4_K, kQ6_K, kQ5_K): the scalar spec
// (ref::DecodeKQuantBlock, ref::KQuantValue, ref::DecodeWeight) against
// ggml's dequantize_row_q4_K, _q6_K and _q5_K as ggml writes them
// (transcribed below from
// ggml-quants.c, on the blocks' C structs), bit for bit; then Dense on every
// Highway target against the double-precision reference over those weights.
//
// Tolerance as in dense_lowp_test.cc: |y − ref| ≤ Float32SumBound(in + 2)·mag,
// mag = Σ_i |x_i·w_i| + |bias| + |y_prev|: the kernels decode every weight
// exactly to the spec's f32 value, so they add no rounding of their own
// beyond the f32 sums.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
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
// ggml's blocks and decoders (ggml-common.h, ggml-quants.c), kept apart from
// the spec so that a slip in either shows.

constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

struct block_q4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q4_K) == 144, "block_q4_K");

struct block_q6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};
static_assert(sizeof(block_q6_K) == 210, "block_q6_K");

struct block_q5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q5_K) == 176, "block_q5_K");

// GGML_FP16_TO_FP32: every half is an f32.
float GgmlFp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const int exponent = (h >> 10) & 0x1F;
  const uint32_t mantissa = h & 0x3FF;
  float f;
  if (exponent == 0) {
    f = std::ldexp(static_cast<float>(mantissa), -24);
    if (sign) f = -f;
    return f;
  }
  const uint32_t bits = sign | static_cast<uint32_t>(exponent + 112) << 23 | mantissa << 13;
  std::memcpy(&f, &bits, 4);
  return f;
}

void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

void dequantize_row_q4_K(const block_q4_K* x, float* y, int64_t k) {
  const int nb = static_cast<int>(k / QK_K);
  for (int i = 0; i < nb; i++) {
    const uint8_t* q = x[i].qs;
    const float d = GgmlFp16ToFp32(x[i].d);
    const float min = GgmlFp16ToFp32(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < QK_K; j += 64) {
      get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void dequantize_row_q6_K(const block_q6_K* x, float* y, int64_t k) {
  const int64_t nb = k / QK_K;
  for (int i = 0; i < nb; i++) {
    const float d = GgmlFp16ToFp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < QK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        int is = l / 16;
        const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void dequantize_row_q5_K(const block_q5_K* x, float* y, int64_t k) {
  const int64_t nb = k / QK_K;
  for (int i = 0; i < nb; i++) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = GgmlFp16ToFp32(x[i].d);
    const float min = GgmlFp16ToFp32(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < QK_K; j += 64) {
      get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

// ggml's dequantised row of `blocks` blocks of `type`.
std::vector<float> GgmlDequantize(WeightType type, const uint8_t* bytes, size_t blocks) {
  std::vector<float> y(blocks * QK_K);
  if (type == WeightType::kQ4_K) {
    std::vector<block_q4_K> b(blocks);
    std::memcpy(b.data(), bytes, blocks * sizeof(block_q4_K));
    dequantize_row_q4_K(b.data(), y.data(), static_cast<int64_t>(y.size()));
  } else if (type == WeightType::kQ5_K) {
    std::vector<block_q5_K> b(blocks);
    std::memcpy(b.data(), bytes, blocks * sizeof(block_q5_K));
    dequantize_row_q5_K(b.data(), y.data(), static_cast<int64_t>(y.size()));
  } else {
    std::vector<block_q6_K> b(blocks);
    std::memcpy(b.data(), bytes, blocks * sizeof(block_q6_K));
    dequantize_row_q6_K(b.data(), y.data(), static_cast<int64_t>(y.size()));
  }
  return y;
}

// ---------------------------------------------------------------------------
// Random blocks.

constexpr WeightType kKQuantTypes[] = {WeightType::kQ4_K, WeightType::kQ6_K, WeightType::kQ5_K};

// Whether blocks of `type` have Q4_K's d, dmin and scales (Q4_K, Q5_K).
bool HasMins(WeightType type) { return type != WeightType::kQ6_K; }

// Halves a block's d and dmin take: zeros, subnormals, negatives, the
// extremes, then random finite ones of moderate size.
constexpr uint16_t kSpecialHalves[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400,
                                       0x83FF, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00, 0x1400};

// A random finite half with |h| in [2^-14, 2^-4) (weights of order 0.01..1
// with 6-bit codes), either sign; one in eight is a special half.
uint16_t RandomHalf(std::mt19937& rng, bool specials) {
  const uint32_t r = rng();
  if (specials && r % 8 == 0) return kSpecialHalves[(r >> 3) % std::size(kSpecialHalves)];
  const uint16_t exponent = static_cast<uint16_t>(1 + (r >> 8) % 11);  // 2^-14 .. 2^-4
  return static_cast<uint16_t>(((r >> 4) & 1) << 15 | exponent << 10 | ((r >> 16) & 0x3FF));
}

void PutHalf(uint8_t* p, uint16_t h) {
  p[0] = static_cast<uint8_t>(h);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// `blocks` random blocks of `type` at p: random code and scale bytes, d and
// dmin from RandomHalf (specials: with zeros, subnormals and extremes, for
// the spec; without, for kernel sums of a sane size).
void FillBlocks(std::mt19937& rng, WeightType type, uint8_t* p, size_t blocks, bool specials) {
  const size_t bytes = Traits(type).block_bytes;
  for (size_t k = 0; k < blocks; ++k) {
    uint8_t* b = p + k * bytes;
    for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>(rng());
    if (HasMins(type)) {
      PutHalf(b, RandomHalf(rng, specials));
      PutHalf(b + 2, RandomHalf(rng, specials));
    } else {
      PutHalf(b + ref::kQ6KD, RandomHalf(rng, specials));
    }
  }
}

bool SameFloatBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST_CASE("K-quants: the spec is ggml's dequantize_row_q4_K and _q6_K, bit for bit") {
  for (WeightType type : kKQuantTypes) {
    INFO(WeightTypeName(type));
    std::mt19937 rng(41 + static_cast<unsigned>(type));
    constexpr size_t kBlocks = 2000;
    const size_t bytes = Traits(type).block_bytes;
    std::vector<uint8_t> data(kBlocks * bytes);
    FillBlocks(rng, type, data.data(), kBlocks, /*specials=*/true);
    // Every 6-bit scale and min in every sub-block position (Q4_K, Q5_K),
    // every int8 scale (Q6_K), every half of kSpecialHalves as d and as dmin.
    if (HasMins(type)) {
      for (size_t k = 0; k < 64; ++k) {
        uint8_t* s = data.data() + k * bytes + ref::kQ4KScales;
        for (size_t j = 0; j < 8; ++j) {
          const uint8_t v = static_cast<uint8_t>(k), m = static_cast<uint8_t>(63 - k);
          if (j < 4) {
            s[j] = static_cast<uint8_t>((s[j] & 0xC0) | v);
            s[j + 4] = static_cast<uint8_t>((s[j + 4] & 0xC0) | m);
          } else {
            s[j + 4] = static_cast<uint8_t>((v & 0xF) | (m & 0xF) << 4);
            s[j - 4] = static_cast<uint8_t>((s[j - 4] & 0x3F) | (v >> 4) << 6);
            s[j] = static_cast<uint8_t>((s[j] & 0x3F) | (m >> 4) << 6);
          }
        }
      }
      for (size_t k = 0; k < std::size(kSpecialHalves); ++k) {
        PutHalf(data.data() + (100 + k) * bytes, kSpecialHalves[k]);
        PutHalf(data.data() + (200 + k) * bytes + 2, kSpecialHalves[k]);
      }
      std::array<std::array<bool, 64>, 8> seen_sc{}, seen_m{};
      for (size_t k = 0; k < kBlocks; ++k) {
        for (size_t j = 0; j < 8; ++j) {
          int sc, m;
          ref::KQuantScaleMin(data.data() + k * bytes + ref::kQ4KScales, j, &sc, &m);
          seen_sc[j][static_cast<size_t>(sc)] = seen_m[j][static_cast<size_t>(m)] = true;
        }
      }
      for (size_t j = 0; j < 8; ++j) {
        CHECK(std::count(seen_sc[j].begin(), seen_sc[j].end(), true) == 64);
        CHECK(std::count(seen_m[j].begin(), seen_m[j].end(), true) == 64);
      }
    } else {
      for (size_t k = 0; k < 256; ++k) {
        data[k * bytes + ref::kQ6KScales + k % 16] = static_cast<uint8_t>(k);
      }
      for (size_t k = 0; k < std::size(kSpecialHalves); ++k) {
        PutHalf(data.data() + (300 + k) * bytes + ref::kQ6KD, kSpecialHalves[k]);
      }
    }
    const std::vector<float> want = GgmlDequantize(type, data.data(), kBlocks);
    std::vector<float> block(kKQuantBlock);
    size_t mismatches = 0;
    for (size_t k = 0; k < kBlocks; ++k) {
      const uint8_t* b = data.data() + k * bytes;
      ref::DecodeKQuantBlock(type, b, block.data());
      for (size_t i = 0; i < kKQuantBlock; ++i) {
        const float w = want[k * kKQuantBlock + i];
        if (!SameFloatBits(block[i], w) || !SameFloatBits(ref::KQuantValue(type, b, i), w)) {
          if (mismatches++ < 5) {
            FAIL_CHECK("block " << k << " input " << i << ": spec " << block[i] << " / "
                                << ref::KQuantValue(type, b, i) << ", ggml " << w);
          }
        }
      }
    }
    CHECK(mismatches == 0);
    // DecodeWeight reads the same blocks as a layer of 4 rows of 500 blocks.
    DenseWeights w;
    w.weight = data.data();
    w.type = type;
    w.out = 4;
    w.in = static_cast<uint32_t>(kBlocks / 4 * kKQuantBlock);
    for (size_t o = 0; o < w.out; o += 3) {
      for (size_t i = 0; i < w.in; i += 97) {
        CHECK(ref::DecodeWeight(w, o, i) == want[o * w.in + i]);
      }
    }
  }
}

TEST_CASE("K-quants: layout facts") {
  CHECK(WeightRowBytes(WeightType::kQ4_K, 512) == 288);
  CHECK(WeightRowBytes(WeightType::kQ6_K, 768) == 630);
  CHECK(IsKQuant(WeightType::kQ4_K));
  CHECK(IsKQuant(WeightType::kQ6_K));
  CHECK(IsKQuant(WeightType::kQ5_K));
  CHECK(!IsKQuant(WeightType::kI4));
  // One Q4_K block by hand: d = 1, dmin = 0.5, sub-block 0 scale 3, min 2;
  // input 0's nibble 5, input 32's (sub-block 1: scale 0, min 0) nibble 9.
  uint8_t b[144] = {};
  PutHalf(b, 0x3C00);
  PutHalf(b + 2, 0x3800);
  b[ref::kQ4KScales + 0] = 3;
  b[ref::kQ4KScales + 4] = 2;
  b[ref::kQ4KQs] = 0x95;
  CHECK(ref::KQuantValue(WeightType::kQ4_K, b, 0) == 3.0f * 5 - 1.0f);
  CHECK(ref::KQuantValue(WeightType::kQ4_K, b, 32) == 0.0f);
  // One Q6_K block: d = 0.25, scale[1] = −3; input 16: ql[16] low nibble 7,
  // qh[16] bits 0-1 = 2: q = 7 | 2 << 4 = 39, weight 0.25·(−3)·7.
  uint8_t c[210] = {};
  PutHalf(c + ref::kQ6KD, 0x3400);
  c[ref::kQ6KScales + 1] = static_cast<uint8_t>(-3);
  c[16] = 0x07;
  c[ref::kQ6KQh + 16] = 0x02;
  CHECK(ref::KQuantValue(WeightType::kQ6_K, c, 16) == 0.25f * -3 * 7);
  // One Q5_K block: Q4_K's scales above; input 0's nibble 5 with its fifth
  // bit (qh[0] bit 0) set: 21; input 96 (chunk 1, high nibbles: sub-block 3,
  // scale 0) bit 3 of qh[0].
  uint8_t e[176] = {};
  std::memcpy(e, b, 16);
  e[ref::kQ5KQs] = 0x95;
  e[ref::kQ5KQh] = 0x09;
  CHECK(WeightRowBytes(WeightType::kQ5_K, 512) == 352);
  CHECK(ref::KQuantValue(WeightType::kQ5_K, e, 0) == 3.0f * 21 - 1.0f);
  CHECK(ref::KQuantValue(WeightType::kQ5_K, e, 32) == 0.0f);
  e[ref::kQ4KScales + 1] = 2;  // sub-block 1 (inputs 32..63): scale 2, min 0
  CHECK(ref::KQuantValue(WeightType::kQ5_K, e, 32) == 2.0f * 9);
  e[ref::kQ5KQh] = 0x0B;  // and bit 1: input 32's fifth bit
  CHECK(ref::KQuantValue(WeightType::kQ5_K, e, 32) == 2.0f * 25);
}

// ---------------------------------------------------------------------------
// Dense on every target.

// Bytes whose end is followed by a PROT_NONE page: a read past the last
// weight crashes the test.
class KQuantGuardedBytes {
 public:
  explicit KQuantGuardedBytes(size_t bytes) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_ = (bytes + page_ - 1) / page_ * page_;
    void* p =
        mmap(nullptr, size_ + page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    base_ = static_cast<uint8_t*>(p);
    REQUIRE(mprotect(base_ + size_, page_, PROT_NONE) == 0);
  }
  ~KQuantGuardedBytes() { munmap(base_, size_ + page_); }
  KQuantGuardedBytes(const KQuantGuardedBytes&) = delete;
  KQuantGuardedBytes& operator=(const KQuantGuardedBytes&) = delete;
  // n bytes ending at the guard page.
  uint8_t* End(size_t n) {
    REQUIRE(n <= size_);
    return base_ + size_ - n;
  }
  // n bytes starting `skew` bytes past a 64-byte boundary (not at the guard).
  uint8_t* Skewed(size_t n, size_t skew) {
    REQUIRE(n + 64 + skew <= size_);
    return base_ + 64 + skew;
  }

 private:
  size_t page_ = 0, size_ = 0;
  uint8_t* base_ = nullptr;
};

KQuantGuardedBytes& KQuantRegion() {
  static KQuantGuardedBytes region(size_t{16} << 20);
  return region;
}

struct KQuantCase {
  WeightType type;
  size_t batch, in, out;
  size_t x_pad, y_pad;  // row stride minus row width
  size_t offset;        // misalignment in floats of x (bias, y: +2, +3)
  bool bias, accumulate;
  size_t skew = 0;      // weights: 0 = ending at the guard page, else this many bytes off 64
  bool packed = false;  // PackDense + DensePacked instead of Dense
};

// One case: random data, the reference and its tolerances once, then Dense
// (or the packed GEMM) on every target (ForEachTarget), compared. Returns the
// number of failures.
size_t CheckKQuant(std::mt19937& rng, const KQuantCase& c) {
  const size_t x_stride = c.in + c.x_pad, y_stride = c.out + c.y_pad;
  Buffer x(c.batch * x_stride, c.offset % 4);
  Buffer bias(c.out, (c.offset + 2) % 4);
  Buffer y(c.batch * y_stride, (c.offset + 3) % 4);
  FillUniform(rng, x.data(), x.size(), -1.0f, 1.0f);
  FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
  for (size_t b = 0; b < c.batch; ++b) {
    float* row = y.data() + b * y_stride;
    if (c.accumulate) {
      FillUniform(rng, row, c.out, -1.0f, 1.0f);
    } else {
      std::fill(row, row + c.out, std::numeric_limits<float>::quiet_NaN());
    }
    std::fill(row + c.out, row + y_stride, kGuard);
  }
  const size_t bytes = WeightBytes(c.type, c.in * c.out);
  uint8_t* weights = c.skew == 0 ? KQuantRegion().End(bytes) : KQuantRegion().Skewed(bytes, c.skew);
  FillBlocks(rng, c.type, weights, c.in * c.out / kKQuantBlock, /*specials=*/true);

  DenseWeights w;
  w.weight = weights;
  w.type = c.type;
  w.bias = c.bias ? bias.data() : nullptr;
  w.in = static_cast<uint32_t>(c.in);
  w.out = static_cast<uint32_t>(c.out);
  const std::vector<float> y_prev(y.data(), y.data() + y.size());
  const std::vector<double> decoded = DecodedWeights(w);
  std::vector<float> y_ref = y_prev;
  RefDense(x.data(), x_stride, c.batch, w, decoded, y_ref.data(), y_stride, c.accumulate);
  const std::vector<double> tol = DenseTolerances(
      x.data(), x_stride, c.batch, c.in, c.out,
      [&](size_t o, size_t i) { return std::fabs(decoded[o * c.in + i]); }, w.bias, c.accumulate,
      y_prev, y_stride);
  size_t failures = 0;
  ForEachTarget([&](const std::string&) {
    std::copy(y_prev.begin(), y_prev.end(), y.data());
    if (c.packed) {
      auto packed =
          hwy::AllocateAligned<float>(std::max<size_t>(1, DensePackedFloats(c.in, c.out)));
      PackDense(w, packed.get());
      DensePacked(x.data(), x_stride, c.batch, packed.get(), w.bias, c.in, c.out, 0,
                  DensePanels(c.out), y.data(), y_stride, c.accumulate);
    } else {
      Dense(x.data(), x_stride, c.batch, w, y.data(), y_stride, c.accumulate);
    }
    failures += CheckDenseWithin(c.batch, c.out, y_ref, tol, y, y_stride);
  });
  return failures;
}

#define RECUR_CHECK_KQUANT(rng, c)                                                            \
  do {                                                                                        \
    INFO(WeightTypeName((c).type) << " batch=" << (c).batch << " in=" << (c).in               \
                                  << " out=" << (c).out << " x_pad=" << (c).x_pad             \
                                  << " y_pad=" << (c).y_pad << " offset=" << (c).offset       \
                                  << " bias=" << (c).bias << " accumulate=" << (c).accumulate \
                                  << " skew=" << (c).skew << " packed=" << (c).packed);       \
    CHECK(CheckKQuant(rng, c) == 0);                                                          \
  } while (0)

TEST_CASE("K-quants: Dense on every target, batches, shapes, strides, misaligned buffers") {
  // 1..6 run the fused rows (up to kMaxB: 6 with AVX-512, 3 otherwise), then
  // the widened chunks with panels (AVX-512) and row tiles.
  const size_t batches[] = {0, 1, 2, 3, 4, 5, 6, 7, 9, 16, 33};
  const size_t ins[] = {256, 512, 768, 1280};
  const size_t outs[] = {1, 3, 8, 17, 33};
  const size_t pads[] = {0, 1, 5, 16};
  for (WeightType type : kKQuantTypes) {
    std::mt19937 rng(5 + static_cast<unsigned>(type));
    size_t k = 0;
    for (size_t batch : batches) {
      // Short sweeps (arm64): from kMaxB + 1 = 4 rows the weights are widened
      // and the f32 row tiles take blocks of 3 and 2 rows: 4 (2 + 2), 9 (3 × 3)
      // and 33 rows run both; 5, 6, 7 and 16 (x86's fused rows up to 6 and
      // its panels) repeat them.
      if (ShortSweeps() && (batch == 5 || batch == 6 || batch == 7 || batch == 16)) continue;
      for (size_t in : ins) {
        for (size_t out : outs) {
          ++k;
          const size_t skew = k % 3 == 0 ? 0 : (k * 7) % 64;
          KQuantCase c{
              type,       batch, in, out, pads[k % 4], pads[(k / 4) % 4], k % 4, (k / 2) % 2 == 0,
              k % 2 == 0, skew};
          RECUR_CHECK_KQUANT(rng, c);
        }
      }
    }
  }
}

TEST_CASE("K-quants: real sizes, several widened chunks, a layer too wide to widen") {
  for (WeightType type : kKQuantTypes) {
    std::mt19937 rng(17);
    RECUR_CHECK_KQUANT(rng, (KQuantCase{type, 1, 768, 300, 0, 0, 0, true, false}));
    RECUR_CHECK_KQUANT(rng, (KQuantCase{type, 2, 2048, 70, 3, 1, 1, true, true, 1}));
    RECUR_CHECK_KQUANT(rng, (KQuantCase{type, 64, 768, 100, 0, 0, 2, true, false}));
    RECUR_CHECK_KQUANT(rng, (KQuantCase{type, 40, 4096, 24, 1, 2, 3, false, true, 13}));
    // 8 rows of f32 would pass the widening limit (4 MiB): the stack path.
    RECUR_CHECK_KQUANT(rng, (KQuantCase{type, 8, 131328, 2, 0, 0, 1, true, true}));
    RECUR_CHECK_KQUANT(rng, (KQuantCase{type, 1, 131328, 2, 0, 0, 1, true, false}));
  }
}

TEST_CASE("K-quants: PackDense decodes them for the packed GEMM") {
  for (WeightType type : kKQuantTypes) {
    std::mt19937 rng(19);
    RECUR_CHECK_KQUANT(rng, (KQuantCase{type, 5, 512, 40, 1, 2, 1, true, true, 0, true}));
    RECUR_CHECK_KQUANT(rng, (KQuantCase{type, 33, 256, 65, 0, 0, 0, false, false, 0, true}));
  }
}

TEST_CASE("K-quants: Rows() slices equal the whole layer") {
  for (WeightType type : kKQuantTypes) {
    for (size_t batch : {1, 4, 40}) {
      std::mt19937 rng(11);
      const size_t in = 512, out = 45;
      std::vector<uint8_t> bytes(WeightBytes(type, in * out));
      FillBlocks(rng, type, bytes.data(), in * out / kKQuantBlock, false);
      std::vector<float> x(batch * in), bias(out), y_ref(batch * out);
      FillUniform(rng, x.data(), x.size(), -1.0f, 1.0f);
      FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
      DenseWeights w;
      w.weight = bytes.data();
      w.type = type;
      w.bias = bias.data();
      w.in = in;
      w.out = out;
      INFO(WeightTypeName(type) << " batch=" << batch);
      // The reference and its tolerances once; every target's slices against them.
      ref::Dense(x.data(), in, batch, w, y_ref.data(), out, false);
      const std::vector<float> y_prev(batch * out, 0.0f);
      const std::vector<double> tol = DenseTolerances(
          x.data(), in, batch, in, out,
          [&](size_t o, size_t i) { return std::fabs(ref::DecodeWeight(w, o, i)); }, w.bias, false,
          y_prev, out);
      ForEachTarget([&](const std::string&) {
        Buffer y(batch * out, 1);
        const size_t cuts[] = {0, 5, 17, 40, out};
        for (size_t s = 0; s + 1 < std::size(cuts); ++s) {
          Dense(x.data(), in, batch, w.Rows(cuts[s], cuts[s + 1]), y.data() + cuts[s], out, false);
        }
        CHECK(CheckDenseWithin(batch, out, y_ref, tol, y, out) == 0);
      });
    }
  }
}

TEST_CASE("K-quants: the harness detects a wrong weight") {
  // One code of one block changed after the reference: the outputs of that
  // row must fail the tolerance, the others pass.
  for (WeightType type : kKQuantTypes) {
    for (size_t batch : {1, 9}) {
      INFO(WeightTypeName(type) << " batch=" << batch);
      std::mt19937 rng(3);
      const size_t in = 512, out = 4;
      std::vector<uint8_t> bytes(WeightBytes(type, in * out));
      FillBlocks(rng, type, bytes.data(), in * out / kKQuantBlock, false);
      uint8_t* b = bytes.data() + 2 * WeightRowBytes(type, in);
      // Row 2's first block: d = 1 (Q4_K, Q5_K: dmin 0), input 0's scale 5.
      PutHalf(b + (HasMins(type) ? 0 : ref::kQ6KD), 0x3C00);
      if (HasMins(type)) {
        PutHalf(b + 2, 0);
        b[ref::kQ4KScales] = static_cast<uint8_t>((b[ref::kQ4KScales] & 0xC0) | 5);
      } else {
        b[ref::kQ6KScales] = 5;
      }
      std::vector<float> x(batch * in, 1.0f), y_prev(batch * out, 0.0f), y_ref(batch * out);
      DenseWeights w;
      w.weight = bytes.data();
      w.type = type;
      w.in = in;
      w.out = out;
      ref::Dense(x.data(), in, batch, w, y_ref.data(), out, false);
      const size_t codes = type == WeightType::kQ4_K   ? ref::kQ4KQs
                           : type == WeightType::kQ5_K ? ref::kQ5KQs
                                                       : 0;
      b[codes] ^= 0x01;  // input 0's code ± 1
      Buffer y(batch * out, 0);
      Dense(x.data(), in, batch, w, y.data(), out, false);
      std::vector<double> decoded(out * in);
      for (size_t o = 0; o < out; ++o) {
        for (size_t i = 0; i < in; ++i) decoded[o * in + i] = std::fabs(ref::DecodeWeight(w, o, i));
      }
      // Count failures without reporting them (FAIL_CHECK would fail this test).
      const double scale = recur::impl::testing::Float32SumBound(DenseRoundings(in));
      size_t bad = 0, bad_row2 = 0;
      for (size_t r = 0; r < batch; ++r) {
        for (size_t o = 0; o < out; ++o) {
          double mag = 0;
          for (size_t i = 0; i < in; ++i) mag += decoded[o * in + i];
          const bool wrong =
              !(std::fabs(double{y[r * out + o]} - y_ref[r * out + o]) <= scale * mag);
          bad += wrong;
          bad_row2 += wrong && o == 2;
        }
      }
      CHECK(bad == batch);
      CHECK(bad_row2 == batch);
    }
  }
}

}  // namespace
}  // namespace recur::impl::kernels::test
