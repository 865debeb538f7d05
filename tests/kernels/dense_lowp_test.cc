// Dense with f16, bf16, int8 and q8_0 weights vs the double-precision
// reference (ref::Dense over the exactly decoded weights) on every Highway
// target.
//
// Tolerance as in dense_test.cc: |y − ref| ≤ Float32SumBound(in + 2 + k)·mag
// = 8·√(in + 2 + k)·u·mag, mag = Σ_i |x_i·w_i| + |bias| + |y_prev| with w the
// decoded weight. The kernels are exact in the decode (every f16/bf16 value
// is an f32, and so is q8_0's scale·q: 8 bits times 11): k = 0; int8 adds
// one rounding, of scale·q (wide batches) or of scale·Σ (small): k = 1.
//
// Weights, and q8_0's group scales, end exactly at an inaccessible page, so a
// read past the last one (a full-width load in a loop tail) crashes the test.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"
#include "kernels/elementwise/elementwise.h"
#include "test_util.h"

namespace recur::impl::kernels::test {
namespace {

// A region whose end is followed by a PROT_NONE page; Place(n) returns n
// bytes that end right at that page.
class GuardedRegion {
 public:
  explicit GuardedRegion(size_t bytes) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_ = (bytes + page_ - 1) / page_ * page_;
    void* p = mmap(nullptr, size_ + page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    REQUIRE(p != MAP_FAILED);
    base_ = static_cast<uint8_t*>(p);
    REQUIRE(mprotect(base_ + size_, page_, PROT_NONE) == 0);
  }
  ~GuardedRegion() { munmap(base_, size_ + page_); }
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;

  uint8_t* Place(size_t n) {
    REQUIRE(n <= size_);
    return base_ + size_ - n;
  }

 private:
  size_t page_ = 0, size_ = 0;
  uint8_t* base_ = nullptr;
};

GuardedRegion& Region() {
  static GuardedRegion region(size_t{8} << 20);
  return region;
}

// Where group scales go (a region of their own, ending at its own page).
GuardedRegion& ScaleRegion() {
  static GuardedRegion region(size_t{1} << 20);
  return region;
}

// Random weights of `type` at p[0, n): finite values of magnitude < 2,
// with zeros and subnormals (f16, bf16) and the full int8 range.
void FillWeights(std::mt19937& rng, WeightType type, void* p, size_t n) {
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = bits(rng);
    const bool special = (r & 0xF) == 0;  // 1 in 16: zero or subnormal
    const uint16_t sign = (r >> 4) & 1 ? 0x8000 : 0;
    switch (type) {
      case WeightType::kF32:
        static_cast<float*>(p)[i] = std::ldexp(static_cast<float>(r >> 8), -24) - 0.5f;
        break;
      case WeightType::kF16: {  // exponent 0 (subnormal/zero) or 5..15 (2^-10 .. <2)
        const uint16_t exponent = special ? 0 : static_cast<uint16_t>(5 + (r >> 5) % 11);
        const uint16_t mantissa = (r >> 16) & 0x3FF;
        static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(sign | exponent << 10 | mantissa);
        break;
      }
      case WeightType::kBF16: {  // exponent 0 or 117..127 (2^-10 .. <2)
        const uint16_t exponent = special ? 0 : static_cast<uint16_t>(117 + (r >> 5) % 11);
        const uint16_t mantissa = (r >> 16) & 0x7F;
        static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(sign | exponent << 7 | mantissa);
        break;
      }
      case WeightType::kI8:
      case WeightType::kQ8_0:
        static_cast<int8_t*>(p)[i] = static_cast<int8_t>(static_cast<int>(r >> 24) - 128);
        break;
      case WeightType::kI4:  // dense_i4_test.cc fills its own layers
      case WeightType::kQ4_K:  // dense_kquant_test.cc too
      case WeightType::kQ6_K:
      case WeightType::kQ5_K:
        break;
    }
  }
}

// Random f16 group scales at p[0, n): magnitudes 2^-10 .. < 2^-6 of either
// sign, with zeros and subnormals (1 in 16 each), as GGUF files may hold.
void FillGroupScales(std::mt19937& rng, uint16_t* p, size_t n) {
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = bits(rng);
    const uint16_t sign = (r >> 4) & 1 ? 0x8000 : 0;
    const uint16_t mantissa = (r >> 16) & 0x3FF;
    const uint16_t exponent = (r & 0xF) == 0 ? 0 : static_cast<uint16_t>(5 + (r >> 5) % 4);
    p[i] = (r & 0xF) == 1 ? 0 : static_cast<uint16_t>(sign | exponent << 10 | mantissa);
  }
}

// Inputs of a row of `type` next to `in`: `in` rounded up to the type's
// block (q8_0's rows are whole groups of 32).
size_t InOf(WeightType type, size_t in) {
  const size_t block = Traits(type).block;
  return (in + block - 1) / block * block;
}

struct LowpCase {
  WeightType type;
  size_t batch, in, out;
  size_t x_pad, y_pad;  // row stride minus row width
  size_t offset;        // misalignment in floats of x (scales, bias, y: +1, +2, +3)
  bool bias, accumulate;
  bool packed = false;  // PackDense + DensePacked (two panel ranges) instead of Dense
  size_t group = 32;    // per-group scales: inputs per scale (divides in)
  bool narrow = false;  // with packed: panels of the weights' own type (f16, bf16)
  bool from_memory = false;  // DenseWeights::from_memory
};

// Roundings an int8 weight adds to a term's path (scale·q or scale·Σ);
// q8_0's scale·q is exact.
size_t ExtraRoundings(WeightType t) { return t == WeightType::kI8 ? 1 : 0; }

// The scales of weights of `type`, (out, in): per-row ones from `row`,
// per-group ones (c.group inputs each) made here, random, ending at a
// guarded page.
void SetScales(std::mt19937& rng, WeightType type, size_t in, size_t out, size_t group,
               const float* row, DenseWeights* w) {
  switch (Traits(type).scales) {
    case WeightScales::kNone:
      break;
    case WeightScales::kPerRow:
      w->scales = row;
      break;
    case WeightScales::kPerGroup: {
      const size_t n = in == 0 ? 0 : out * (in / group);
      auto* scales = reinterpret_cast<uint16_t*>(ScaleRegion().Place(n * sizeof(uint16_t)));
      FillGroupScales(rng, scales, n);
      w->group_scales = scales;
      w->group = static_cast<uint32_t>(group);
      break;
    }
    case WeightScales::kInBlock:  // the K-quants: dense_kquant_test.cc
      break;
  }
}

// Checks y (from the kernel) against ref::Dense over w; y_prev is y before
// the call. Returns the number of failures.
size_t Compare(const LowpCase& c, const DenseWeights& w, const Buffer& x, size_t x_stride,
               const std::vector<float>& y_prev, const Buffer& y, size_t y_stride) {
  std::vector<float> y_ref = y_prev;
  ref::Dense(x.data(), x_stride, c.batch, w, y_ref.data(), y_stride, c.accumulate);
  std::vector<double> decoded(size_t{w.out} * w.in);
  for (size_t o = 0; o < w.out; ++o) {
    for (size_t i = 0; i < w.in; ++i) decoded[o * w.in + i] = std::fabs(ref::DecodeWeight(w, o, i));
  }
  return CheckDenseResult(x.data(), x_stride, c.batch, w.in, w.out,
                          [&](size_t o, size_t i) { return decoded[o * w.in + i]; }, w.bias,
                          c.accumulate, y_prev, y_ref, y, y_stride, ExtraRoundings(c.type));
}

// Fills y: previous values when accumulating, NaN otherwise (a stray read
// shows up), kGuard in the stride padding.
void FillY(std::mt19937& rng, Buffer& y, size_t batch, size_t out, size_t y_stride,
           bool accumulate) {
  for (size_t b = 0; b < batch; ++b) {
    float* row = y.data() + b * y_stride;
    if (accumulate) {
      FillUniform(rng, row, out, -1.0f, 1.0f);
    } else {
      std::fill(row, row + out, std::numeric_limits<float>::quiet_NaN());
    }
    std::fill(row + out, row + y_stride, kGuard);
  }
}

// One case: random data, the reference and its tolerances once, then Dense
// (or the packed GEMM) on every target (ForEachTarget), compared. Returns the number of
// failures.
size_t CheckLowp(std::mt19937& rng, const LowpCase& c) {
  const size_t x_stride = c.in + c.x_pad;
  const size_t y_stride = c.out + c.y_pad;
  Buffer x(c.batch * x_stride, c.offset % 4);
  Buffer scales(c.out, (c.offset + 1) % 4);
  Buffer bias(c.out, (c.offset + 2) % 4);
  Buffer y(c.batch * y_stride, (c.offset + 3) % 4);
  FillUniform(rng, x.data(), x.size(), -1.0f, 1.0f);
  FillUniform(rng, scales.data(), scales.size(), 1e-3f, 2e-2f);
  FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
  FillY(rng, y, c.batch, c.out, y_stride, c.accumulate);
  void* weights = Region().Place(WeightBytes(c.type, c.in * c.out));
  FillWeights(rng, c.type, weights, c.in * c.out);

  DenseWeights w;
  w.weight = weights;
  w.type = c.type;
  SetScales(rng, c.type, c.in, c.out, c.group, scales.data(), &w);
  w.bias = c.bias ? bias.data() : nullptr;
  w.in = static_cast<uint32_t>(c.in);
  w.out = static_cast<uint32_t>(c.out);
  w.from_memory = c.from_memory;
  const std::vector<float> y_prev(y.data(), y.data() + y.size());
  const std::vector<double> decoded = DecodedWeights(w);
  std::vector<float> y_ref = y_prev;
  RefDense(x.data(), x_stride, c.batch, w, decoded, y_ref.data(), y_stride, c.accumulate);
  const std::vector<double> tol = DenseTolerances(
      x.data(), x_stride, c.batch, w.in, w.out,
      [&](size_t o, size_t i) { return std::fabs(decoded[o * w.in + i]); }, w.bias, c.accumulate,
      y_prev, y_stride, ExtraRoundings(c.type));
  size_t failures = 0;
  ForEachTarget([&](const std::string&) {
    std::copy(y_prev.begin(), y_prev.end(), y.data());
    if (c.packed) {
      const WeightType panel_type = c.narrow ? c.type : WeightType::kF32;
      auto packed = hwy::AllocateAligned<uint8_t>(
          std::max<size_t>(1, DensePackedBytes(c.in, c.out, panel_type)));
      PackDense(w, panel_type, packed.get());
      // Two calls over disjoint panel ranges, as two threads would make them.
      const size_t panels = DensePanels(c.out), split = panels / 2;
      DensePacked(x.data(), x_stride, c.batch, packed.get(), panel_type, w.bias, c.in, c.out, 0,
                  split, y.data(), y_stride, c.accumulate);
      DensePacked(x.data(), x_stride, c.batch, packed.get(), panel_type, w.bias, c.in, c.out, split,
                  panels, y.data(), y_stride, c.accumulate);
    } else {
      Dense(x.data(), x_stride, c.batch, w, y.data(), y_stride, c.accumulate);
    }
    failures += CheckDenseWithin(c.batch, c.out, y_ref, tol, y, y_stride);
  });
  return failures;
}

// Checks case c with its `in` rounded up to its type's block (InOf).
#define RECUR_CHECK_LOWP(rng, c)                                                                   \
  do {                                                                                             \
    LowpCase c_ = (c);                                                                             \
    c_.in = InOf(c_.type, c_.in);                                                                  \
    INFO(kernels::WeightTypeName(c_.type)                                                          \
         << " batch=" << c_.batch << " in=" << c_.in << " out=" << c_.out << " x_pad=" << c_.x_pad \
         << " y_pad=" << c_.y_pad << " offset=" << c_.offset << " bias=" << c_.bias                \
         << " accumulate=" << c_.accumulate << " packed=" << c_.packed << " group=" << c_.group    \
         << " narrow=" << c_.narrow << " from_memory=" << c_.from_memory);                         \
    CHECK(CheckLowp(rng, c_) == 0);                                                                \
  } while (0)

constexpr WeightType kNarrowTypes[] = {WeightType::kF16, WeightType::kBF16, WeightType::kI8,
                                       WeightType::kQ8_0};

TEST_CASE("Dense lowp: odd shapes, strides, bias and accumulate, all targets") {
  const size_t batches[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 64};
  const size_t ins[] = {0, 1, 3, 17, 33, 255, 257};
  const size_t outs[] = {1, 3, 17, 33, 255, 257};
  const size_t pads[] = {0, 1, 5, 16};
  for (WeightType type : kNarrowTypes) {
    std::mt19937 rng(1234);
    size_t k = 0;
    for (size_t batch : batches) {
      for (size_t in : ins) {
        for (size_t out : outs) {
          // Short sweeps (arm64): arm64 has no batch panels, and from kMaxB + 1 = 4
          // rows the weights are widened and the row tiles take blocks of 3 and 2
          // rows: 4 rows (2 + 2) and 6 (3 + 3) run both tile heights, several
          // blocks a chunk; 5, 7, 8 and 9 rows repeat them, and 64 (22 blocks)
          // stays on the layers below 255 × 255.
          if (ShortSweeps() && ((batch >= 5 && batch <= 9 && batch != 6) ||
                                (batch == 64 && in >= 255 && out >= 255))) {
            continue;
          }
          ++k;
          LowpCase c{
              type,      batch, in, out, pads[k % 4], pads[(k / 4) % 4], k % 4, (k / 2) % 2 == 0,
              k % 2 == 0};
          RECUR_CHECK_LOWP(rng, c);
        }
      }
    }
  }
}

TEST_CASE("Dense lowp: in swept 0..64 plus 256, 1024, 2080 and 3072, every flag combination") {
  std::vector<size_t> ins;
  for (size_t i = 0; i <= 64; ++i) ins.push_back(i);
  ins.push_back(256);
  ins.push_back(1024);
  // q8_0: the row tiles decode 64 group scales of a row at a time (65 groups:
  // a run and one more; 96: a run and half of one).
  ins.push_back(2080);
  ins.push_back(3072);
  // 1..kMaxB widen in registers; 7 and 9 widen into the f32 scratch.
  const size_t batches[] = {1, 2, 6, 7, 9};
  const size_t outs[] = {1, 4, 5, 8, 9, 13};
  for (WeightType type : kNarrowTypes) {
    std::mt19937 rng(99);
    size_t k = 0, n_in = 0;
    for (size_t in : ins) {
      if (InOf(type, in) != in) continue;  // q8_0: whole groups of 32
      ++n_in;
      for (size_t bi = 0; bi < std::size(batches); ++bi) {
        const size_t batch = batches[bi];
        for (size_t oi = 0; oi < std::size(outs); ++oi) {
          const size_t out = outs[oi];
          ++k;
          for (int flags = 0; flags < 4; ++flags) {
            // Short sweeps (arm64): one flag combination per shape, turning
            // with the input, batch and output indices, so that every shape
            // (batch, out) meets all four over the inputs and every input all
            // four over the shapes. Bias and accumulate enter the tiles' finish
            // only, after the sums over `in`.
            if (ShortSweeps() && size_t(flags) != (n_in + bi + oi) % 4) continue;
            LowpCase c{
                type, batch, in, out, 3, 2, (k + flags) % 4, (flags & 1) != 0, (flags & 2) != 0};
            RECUR_CHECK_LOWP(rng, c);
          }
        }
      }
    }
  }
}

TEST_CASE("Dense lowp: large batches (panels on AVX-512, widened chunks, leftover rows)") {
  const size_t batches[] = {16, 31, 32, 33, 64, 65, 100, 290};
  const size_t ins[] = {0, 1, 3, 17, 64, 255};
  const size_t outs[] = {8, 32, 33, 39, 100};
  for (WeightType type : kNarrowTypes) {
    std::mt19937 rng(31);
    size_t k = 0;
    for (size_t batch : batches) {
      for (size_t in : ins) {
        for (size_t out : outs) {
          ++k;
          LowpCase c{type,        batch,           in,    out,
                     (k % 3) * 3, (k / 3) % 3 * 5, k % 4, (k / 2) % 2 == 0,
                     k % 2 == 0};
          RECUR_CHECK_LOWP(rng, c);
        }
      }
    }
  }
}

TEST_CASE("Dense lowp: real sizes, L2 out-chunks, very wide rows") {
  for (WeightType type : kNarrowTypes) {
    std::mt19937 rng(7);
    // Paper-MNIST-like shapes.
    RECUR_CHECK_LOWP(rng, (LowpCase{type, 1, 256, 1024, 0, 0, 0, true, false}));
    RECUR_CHECK_LOWP(rng, (LowpCase{type, 64, 256, 1024, 0, 0, 0, true, false}));
    RECUR_CHECK_LOWP(rng, (LowpCase{type, 64, 1024, 256, 0, 0, 1, true, true}));
    RECUR_CHECK_LOWP(rng, (LowpCase{type, 1, 1024, 1000, 0, 0, 2, true, false}));
    // Several widened chunks (64 KiB of f32 = 8 rows of 2048, 16 of 1024)
    // with a partial last one; more than one group of panels (290 rows).
    RECUR_CHECK_LOWP(rng, (LowpCase{type, 13, 2048, 150, 8, 4, 3, true, true}));
    RECUR_CHECK_LOWP(rng, (LowpCase{type, 70, 2048, 75, 1, 3, 2, true, true}));
    RECUR_CHECK_LOWP(rng, (LowpCase{type, 290, 1024, 40, 0, 2, 1, true, false}));
    // 8 rows of f32 would exceed the widening limit: in-register path.
    RECUR_CHECK_LOWP(rng, (LowpCase{type, 9, 140000, 3, 0, 0, 1, true, true}));
  }
}

// One batch row against a layer of a MiB or more with x in L1 reads the
// rows one after the other as one stream (StreamRows in dense-inl.h): its
// row tails, 1, 2 and 3 outputs past a multiple of 4, group sizes other
// than 32, and the boundary where x grows past L1 and the tiles take over.
TEST_CASE("Dense lowp: batch-1 layers of a MiB or more, one stream, all targets") {
  struct Shape {
    size_t in, out, group;
  };
  const Shape shapes[] = {{1024, 1101, 32}, {1000, 1104, 32},  {4096, 257, 32},  {4100, 300, 32},
                          {1024, 1100, 64}, {2048, 600, 2048}, {1024, 1102, 32}, {1056, 1107, 32}};
  for (WeightType type : kNarrowTypes) {
    std::mt19937 rng(77);
    size_t k = 0;
    for (const Shape& sh : shapes) {
      if (type != WeightType::kQ8_0 && sh.group != 32) continue;
      ++k;
      RECUR_CHECK_LOWP(rng, (LowpCase{type, 1, sh.in, sh.out, k % 3, k % 2, k % 4, k % 2 == 0,
                                      k % 3 != 0, false, sh.group}));
    }
  }
}

constexpr WeightType kAllTypes[] = {WeightType::kF32, WeightType::kF16, WeightType::kBF16,
                                    WeightType::kI8, WeightType::kQ8_0};

// Layers read from memory at every call (DenseWeights::from_memory) stream
// from 16 KiB: rows of fewer inputs than a vector (3), than four (17, 100),
// a low-rank layer's shapes (768 -> 64, 64 -> 768), tails of 1 to 3 outputs,
// layers just under the threshold (tiles), and batches of 2 and 5 (tiles,
// whatever the flag says).
TEST_CASE("Dense lowp: layers read from memory, batch 1 from 16 KiB one stream, all targets") {
  struct Shape {
    size_t batch, in, out;
  };
  const Shape shapes[] = {{1, 3, 2001}, {1, 17, 301}, {1, 100, 45},  {1, 768, 64},
                          {1, 64, 768}, {1, 64, 63},  {1, 64, 62},   {1, 33, 123},
                          {2, 64, 768}, {5, 100, 45}, {1, 2048, 257}};
  for (WeightType type : kAllTypes) {
    std::mt19937 rng(78);
    size_t k = 0;
    for (const Shape& sh : shapes) {
      ++k;
      RECUR_CHECK_LOWP(rng, (LowpCase{type, sh.batch, sh.in, sh.out, k % 3, k % 2, k % 4,
                                      k % 2 == 0, k % 3 != 0, false, 32, false, true}));
    }
  }
}

TEST_CASE("Dense lowp: Rows() slices equal the whole layer") {
  // The threaded engine runs a layer as slices w.Rows(begin, end) writing
  // y + begin; the slices must address the right weights, scales and bias.
  ForEachTarget([&](const std::string&) {
    for (WeightType type : kNarrowTypes) {
      for (size_t batch : {1, 5, 40}) {
        std::mt19937 rng(11);
        const size_t in = InOf(type, 37), out = 77, y_stride = out + 3;
        Buffer x(batch * in, 1), scales(out, 2), bias(out, 3), y(batch * y_stride, 0);
        FillUniform(rng, x.data(), x.size(), -1.0f, 1.0f);
        FillUniform(rng, scales.data(), scales.size(), 1e-3f, 2e-2f);
        FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
        FillY(rng, y, batch, out, y_stride, false);
        void* weights = Region().Place(WeightBytes(type, in * out));
        FillWeights(rng, type, weights, in * out);
        DenseWeights w;
        w.weight = weights;
        w.type = type;
        SetScales(rng, type, in, out, 32, scales.data(), &w);
        w.bias = bias.data();
        w.in = static_cast<uint32_t>(in);
        w.out = out;
        const size_t cuts[] = {0, 5, 37, 40, out};
        for (size_t s = 0; s + 1 < std::size(cuts); ++s) {
          Dense(x.data(), in, batch, w.Rows(cuts[s], cuts[s + 1]), y.data() + cuts[s], y_stride,
                false);
        }
        INFO(kernels::WeightTypeName(type) << " batch=" << batch);
        const LowpCase c{type, batch, in, out, 0, 3, 0, true, false};
        std::vector<float> y_prev(y.size(), std::numeric_limits<float>::quiet_NaN());
        CHECK(Compare(c, w, x, in, y_prev, y, y_stride) == 0);
      }
    }
  });
}

// Dense(DenseWeights) of kF32 forwards to the f32 entry point: the same
// kernel, order and shapes, so the same bits.
TEST_CASE("Dense lowp: f32 through DenseWeights equals the f32 entry point") {
  std::mt19937 rng(3);
  const size_t in = 33, out = 19, batch = 7;
  std::vector<float> x(batch * in), w(in * out), bias(out), y1(batch * out), y2(batch * out);
  FillUniform(rng, x.data(), x.size(), -1.0f, 1.0f);
  FillUniform(rng, w.data(), w.size(), -1.0f, 1.0f);
  FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
  DenseWeights dw;
  dw.weight = w.data();
  dw.bias = bias.data();
  dw.in = in;
  dw.out = out;
  Dense(x.data(), in, batch, w.data(), bias.data(), in, out, y1.data(), out, false);
  Dense(x.data(), in, batch, dw, y2.data(), out, false);
  CHECK(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)) == 0);
}

// DensePacked over rows × ins × outs of one weight type (a new stream of
// `seed`), the pads, offset and flags cycled through the shapes; `narrow`:
// panels of the weights' own type.
template <size_t kRows, size_t kIns, size_t kOuts>
void CheckPackedGrid(WeightType type, const size_t (&rows)[kRows], const size_t (&ins)[kIns],
                     const size_t (&outs)[kOuts], unsigned seed, bool narrow) {
  std::mt19937 rng(seed);
  size_t k = 0;
  for (size_t batch : rows) {
    for (size_t in : ins) {
      for (size_t out : outs) {
        ++k;
        LowpCase c{
            type,       batch, in, out, (k % 3) * 5, (k / 3) % 3 * 3, k % 4, (k / 2) % 2 == 0,
            k % 2 == 0, true};
        c.narrow = narrow;
        RECUR_CHECK_LOWP(rng, c);
      }
    }
  }
}

TEST_CASE("DensePacked: every weight type, odd shapes, partial panels, all targets") {
  const size_t rows[] = {0, 1, 2, 5, 13, 14, 15, 28, 29, 64, 100};
  // Short sweeps (arm64): arm64's register tiles are one row high (about 12
  // accumulators, and a row of a 32-wide panel takes 8 of 128 bits), so more
  // rows only repeat them: 14, 15 and 28 rows are x86's tile heights, and 64
  // and 100 rows are one row chunk as 29 are (kChunkFloats of x).
  const size_t short_rows[] = {0, 1, 2, 5, 13, 29};
  const size_t ins[] = {0, 1, 3, 17, 256};
  const size_t outs[] = {1, 7, 31, 32, 33, 65, 100};
  for (WeightType type : kAllTypes) {
    if (ShortSweeps()) {
      CheckPackedGrid(type, short_rows, ins, outs, 77, false);
    } else {
      CheckPackedGrid(type, rows, ins, outs, 77, false);
    }
  }
}

TEST_CASE("DensePacked: f16 and bf16 panels, odd shapes, partial panels, all targets") {
  const size_t rows[] = {1, 2, 4, 8, 13, 29, 100};
  const size_t ins[] = {0, 1, 3, 17, 256};
  const size_t outs[] = {1, 31, 33, 100};
  for (WeightType type : {WeightType::kF16, WeightType::kBF16}) {
    CheckPackedGrid(type, rows, ins, outs, 79, true);
  }
}

// The panels' element type changes the bytes read, not the numbers: the same
// values are multiplied in the same order.
TEST_CASE("DensePacked: f16 and bf16 panels give the f32 panels' results bit for bit") {
  ForEachTarget([&](const std::string&) {
    std::mt19937 rng(80);
    for (WeightType type : {WeightType::kF16, WeightType::kBF16}) {
      for (size_t rows : {1, 3, 8, 12, 70}) {
        const size_t in = 300, out = 70;
        std::vector<float> x(rows * in), bias(out);
        FillUniform(rng, x.data(), x.size(), -1.0f, 1.0f);
        FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
        std::vector<uint16_t> weights(in * out);
        FillWeights(rng, type, weights.data(), weights.size());
        DenseWeights w;
        w.weight = weights.data();
        w.type = type;
        w.bias = bias.data();
        w.in = in;
        w.out = out;
        std::vector<float> y[2];
        const WeightType panel_types[2] = {WeightType::kF32, type};
        for (int i = 0; i < 2; ++i) {
          auto packed = hwy::AllocateAligned<uint8_t>(DensePackedBytes(in, out, panel_types[i]));
          PackDense(w, panel_types[i], packed.get());
          y[i].assign(rows * out, 0.0f);
          DensePacked(x.data(), in, rows, packed.get(), panel_types[i], w.bias, in, out, 0,
                      DensePanels(out), y[i].data(), out, false);
        }
        INFO(WeightTypeName(type) << " rows=" << rows);
        CHECK(DensePackedBytes(in, out, type) * 2 == DensePackedBytes(in, out, WeightType::kF32));
        CHECK(std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)) == 0);
      }
    }
  });
}

TEST_CASE("DensePacked: real sizes, several row chunks") {
  std::mt19937 rng(78);
  // 64 rows × in 1024 is exactly one row chunk; 300 × 1024 is five.
  RECUR_CHECK_LOWP(rng, (LowpCase{WeightType::kF32, 64, 256, 1024, 0, 0, 0, true, false, true}));
  RECUR_CHECK_LOWP(rng, (LowpCase{WeightType::kF32, 300, 1024, 256, 0, 0, 1, true, true, true}));
  RECUR_CHECK_LOWP(rng, (LowpCase{WeightType::kI8, 70, 1024, 90, 3, 1, 2, true, false, true}));
  RECUR_CHECK_LOWP(rng, (LowpCase{WeightType::kBF16, 33, 2048, 40, 1, 0, 3, false, true, true}));
  LowpCase f16_panels{WeightType::kF16, 300, 1024, 100, 0, 0, 1, true, true, true};
  f16_panels.narrow = true;
  RECUR_CHECK_LOWP(rng, f16_panels);
  RECUR_CHECK_LOWP(rng, (LowpCase{WeightType::kQ8_0, 70, 1024, 90, 3, 1, 2, true, false, true}));
}

// q8_0 in groups of 64 and more (up to a whole row) on every path: row
// tiles (batches 1-6), widened chunks and AVX-512 panels (from 7), the
// packed GEMM.
TEST_CASE("Dense q8_0: groups of 64 to a whole row, every path, all targets") {
  struct Shape {
    size_t batch, in, out, group;
    bool packed;
  };
  const Shape shapes[] = {{1, 128, 33, 64, false},   {3, 256, 17, 128, false},
                          {6, 192, 9, 192, false},   {7, 128, 40, 64, false},
                          {40, 256, 70, 128, false}, {65, 96, 35, 96, false},
                          {13, 512, 33, 256, true},  {1, 64, 5, 64, false},
                          {2, 4096, 3, 4096, false}, {1, 1024, 50, 512, false}};
  std::mt19937 rng(41);
  size_t k = 0;
  for (const Shape& sh : shapes) {
    ++k;
    RECUR_CHECK_LOWP(rng, (LowpCase{WeightType::kQ8_0, sh.batch, sh.in, sh.out, k % 3, k % 2, k % 4,
                                    k % 2 == 0, k % 3 == 0, sh.packed, sh.group}));
  }
}

// A GGUF Q8_0 tensor is blocks of 34 bytes: an f16 d, then 32 int8 q, the
// weight d·q. Split into q8_0's bytes and scales, the same values: the
// reference decode gives d·q (as an f32 product, exact) for every int8 q,
// -128 included, and d of 0, -0, negative, subnormal and 65504; the
// kernels compute with those values on every target.
TEST_CASE("Dense q8_0: GGUF Q8_0 blocks, extreme values included, all targets") {
  const size_t in = 128, out = 7, blocks = in / 32;
  const uint16_t ds[] = {0x0000, 0x7BFF, 0xBC00, 0x0001, 0x8000, 0x2C00, 0x03FF};
  std::mt19937 rng(42);
  std::vector<uint8_t> gguf(out * blocks * 34);
  for (size_t b = 0; b < out * blocks; ++b) {
    uint8_t* block = gguf.data() + 34 * b;
    const uint16_t d = b < std::size(ds) ? ds[b] : static_cast<uint16_t>(0x2000 + rng() % 0x1000);
    std::memcpy(block, &d, 2);  // little-endian, as the file
    for (size_t j = 0; j < 32; ++j) {
      int q = static_cast<int>(rng() % 256) - 128;
      if (b % 4 == 1) q = -128;
      if (b % 4 == 2) q = j % 2 ? 127 : -128;
      block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
  std::vector<int8_t> q(out * in);
  std::vector<uint16_t> scales(out * blocks);
  for (size_t b = 0; b < out * blocks; ++b) {
    std::memcpy(&scales[b], gguf.data() + 34 * b, 2);
    std::memcpy(&q[32 * b], gguf.data() + 34 * b + 2, 32);
  }
  DenseWeights w;
  w.weight = q.data();
  w.type = WeightType::kQ8_0;
  w.group_scales = scales.data();
  w.group = 32;
  w.in = in;
  w.out = out;
  size_t mismatches = 0, minus_128 = 0;
  for (size_t o = 0; o < out; ++o) {
    for (size_t i = 0; i < in; ++i) {
      const uint8_t* block = gguf.data() + 34 * (o * blocks + i / 32);
      uint16_t d;
      std::memcpy(&d, block, 2);
      const auto qi = static_cast<int8_t>(block[2 + i % 32]);
      const float value = static_cast<float>(qi) * ref::F16ToF32(d);  // d·q in f32
      mismatches += ref::DecodeWeight(w, o, i) != double{value};
      minus_128 += qi == -128 && d == 0x7BFF && ref::DecodeWeight(w, o, i) == -128.0 * 65504;
    }
  }
  CHECK(mismatches == 0);
  CHECK(minus_128 > 0);
  ForEachTarget([&](const std::string&) {
    for (size_t batch : {1, 3, 9, 40}) {
      INFO("batch=" << batch);
      const LowpCase c{WeightType::kQ8_0, batch, in, out, 0, 0, 0, false, batch % 2 == 1};
      Buffer x(batch * in, 1), y(batch * out, 2);
      FillUniform(rng, x.data(), x.size(), -1.0f, 1.0f);
      FillY(rng, y, batch, out, out, c.accumulate);
      std::vector<float> y_prev(y.data(), y.data() + y.size());
      Dense(x.data(), in, batch, w, y.data(), out, c.accumulate);
      CHECK(Compare(c, w, x, in, y_prev, y, out) == 0);
    }
  });
}

TEST_CASE("Dense lowp: the reference decodes f16 and bf16 exactly") {
  CHECK(ref::Bf16ToF32(0x3F80) == 1.0f);
  CHECK(ref::Bf16ToF32(0xC040) == -3.0f);
  CHECK(ref::Bf16ToF32(0x0001) == std::ldexp(1.0f, -133));  // smallest subnormal
  CHECK(std::isinf(ref::Bf16ToF32(0x7F80)));
  CHECK(std::isnan(ref::Bf16ToF32(0x7FC0)));
  CHECK(ref::F16ToF32(0x3C00) == 1.0f);
  CHECK(ref::F16ToF32(0xC000) == -2.0f);
  CHECK(ref::F16ToF32(0x7BFF) == 65504.0f);
  CHECK(ref::F16ToF32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(ref::F16ToF32(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(ref::F16ToF32(0x0400) == std::ldexp(1.0f, -14));  // smallest normal
  CHECK(ref::F16ToF32(0x3555) == std::ldexp(1365.0f, -12));  // ≈ 1/3
  CHECK(std::signbit(ref::F16ToF32(0x8000)));
  CHECK(std::isinf(ref::F16ToF32(0xFC00)));
  CHECK(std::isnan(ref::F16ToF32(0x7E00)));
}

TEST_CASE("Dense lowp: the harness detects a wrong output") {
  // A wrong answer must fail the tolerance: perturb one weight (one step of
  // its type) after the reference and expect a mismatch in that output only.
  for (WeightType type : kNarrowTypes) {
    for (size_t batch : {1, 9}) {
      INFO(kernels::WeightTypeName(type) << " batch=" << batch);
      const size_t in = 64, out = 8;
      std::vector<float> x(batch * in, 1.0f), scales(out, 0.01f), y(batch * out),
          y_ref(batch * out);
      std::vector<uint16_t> group_scales(out * in / 32, 0x2000);  // 2^-7
      std::vector<uint8_t> bytes(WeightBytes(type, in * out));
      for (size_t i = 0; i < in * out; ++i) {
        if (type == WeightType::kI8) {
          bytes[i] = 50;
        } else if (type == WeightType::kQ8_0) {
          bytes[i] = 64;  // 64·2^-7
        } else {
          const uint16_t half = type == WeightType::kF16 ? 0x3800 : 0x3F00;  // 0.5
          std::memcpy(bytes.data() + 2 * i, &half, 2);
        }
      }
      DenseWeights w;
      w.weight = bytes.data();
      w.type = type;
      w.scales = type == WeightType::kI8 ? scales.data() : nullptr;
      if (type == WeightType::kQ8_0) {
        w.group_scales = group_scales.data();
        w.group = 32;
      }
      w.in = in;
      w.out = out;
      ref::Dense(x.data(), in, batch, w, y_ref.data(), out, false);
      const bool bytes_each = type == WeightType::kI8 || type == WeightType::kQ8_0;
      const size_t e = bytes_each ? 3 * in + 5 : 2 * (3 * in + 5);
      bytes[e] += 1;  // the lowest byte: +1 int8 step or +1 ulp
      Dense(x.data(), in, batch, w, y.data(), out, false);
      const double tol =
          recur::impl::testing::Float32SumBound(DenseRoundings(in,
                                                               ExtraRoundings(type))) *
          (0.5 * in);  // every w is 0.5
      for (size_t b = 0; b < batch; ++b) {
        CHECK(std::fabs(double{y[b * out + 3]} - y_ref[b * out + 3]) > tol);
        CHECK(std::fabs(double{y[b * out + 2]} - y_ref[b * out + 2]) <= tol);
      }
    }
  }
}

// A caller's bound scratch (ScopedDenseScratch, what arena sessions use) of
// exactly DenseScratchNeed floats must give the kernels everything they ask
// for: the same paths, so the same bits as their own buffers. One float
// less takes a no-scratch path somewhere, which rounds differently; that it
// shows is what makes the first check able to fail.
TEST_CASE("Dense: bound scratch of DenseScratchNeed floats gives the same bits, all targets") {
  struct Shape {
    size_t batch, in, out;
  };
  const Shape shapes[] = {{1, 64, 64},  {4, 256, 96},  {7, 100, 40},   {32, 64, 64},
                          {40, 64, 128}, {64, 256, 1024}, {65, 1024, 256}, {100, 33, 40}};
  ForEachTarget([&](const std::string&) {
    size_t needing = 0, differing = 0;
    for (WeightType type : kAllTypes) {
      std::mt19937 rng(5);
      for (Shape sh : shapes) {
        sh.in = InOf(type, sh.in);
        INFO(kernels::WeightTypeName(type) << " batch=" << sh.batch << " in=" << sh.in << " out=" << sh.out);
        std::vector<uint8_t> bytes(WeightBytes(type, sh.in * sh.out));
        FillWeights(rng, type, bytes.data(), sh.in * sh.out);
        std::vector<float> x(sh.batch * sh.in), scales(sh.out), bias(sh.out);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float& v : x) v = u(rng);
        for (float& v : scales) v = 0.01f * (1.0f + u(rng));
        for (float& v : bias) v = u(rng);
        DenseWeights w;
        w.weight = bytes.data();
        w.type = type;
        SetScales(rng, type, sh.in, sh.out, 32, scales.data(), &w);
        w.bias = bias.data();
        w.in = static_cast<uint32_t>(sh.in);
        w.out = static_cast<uint32_t>(sh.out);
        std::vector<float> own(sh.batch * sh.out), bound(own.size()), short_by_one(own.size());
        Dense(x.data(), sh.in, sh.batch, w, own.data(), sh.out, false);

        DenseScratch scratch = DenseScratchNeed(sh.batch, sh.in, sh.out, type);
        auto widen = hwy::AllocateAligned<float>(std::max<size_t>(scratch.widen_floats, 1));
        auto panel = hwy::AllocateAligned<float>(std::max<size_t>(scratch.panel_floats, 1));
        scratch.widen = widen.get();
        scratch.panel = panel.get();
        {
          const ScopedDenseScratch bind(&scratch);
          CHECK(BoundDenseScratch() == &scratch);
          Dense(x.data(), sh.in, sh.batch, w, bound.data(), sh.out, false);
        }
        CHECK(BoundDenseScratch() == nullptr);
        CHECK(std::memcmp(own.data(), bound.data(), own.size() * sizeof(float)) == 0);

        if (scratch.widen_floats + scratch.panel_floats == 0) continue;
        ++needing;
        DenseScratch less = scratch;
        if (less.widen_floats > 0) --less.widen_floats;
        if (less.panel_floats > 0) --less.panel_floats;
        {
          const ScopedDenseScratch bind(&less);
          Dense(x.data(), sh.in, sh.batch, w, short_by_one.data(), sh.out, false);
        }
        differing += std::memcmp(own.data(), short_by_one.data(), own.size() * 4) != 0;
        // The no-scratch paths are as exact: both within the kernels'
        // tolerance of the double reference.
        std::vector<float> y_ref(own.size());
        ref::Dense(x.data(), sh.in, sh.batch, w, y_ref.data(), sh.out, false);
        const double tol =
            recur::impl::testing::Float32SumBound(DenseRoundings(sh.in, ExtraRoundings(type)));
        size_t far = 0;
        for (size_t b = 0; b < sh.batch; ++b) {
          for (size_t o = 0; o < sh.out; ++o) {
            double mag = std::fabs(bias[o]);
            for (size_t i = 0; i < sh.in; ++i) {
              mag += std::fabs(x[b * sh.in + i] * ref::DecodeWeight(w, o, i));
            }
            const size_t k = b * sh.out + o;
            far += !(std::fabs(double{own[k]} - y_ref[k]) <= tol * mag);
            far += !(std::fabs(double{short_by_one[k]} - y_ref[k]) <= tol * mag);
          }
        }
        CHECK(far == 0);
      }
    }
    // Every target needs scratch for narrow weights at wide batches, and
    // taking it away changes the rounding of some of them.
    CHECK(needing > 0);
    CHECK(differing > 0);
  });
}

// ---------------------------------------------------------------------------
// DenseI8Dot: int8 weights × int8 activations. The i32 sums are exact, and
// the kernels and ref::DenseI8DotQuantized share f32(sum) and scale_w·scale_x
// (the same f32 operations); they differ only where the compiler contracts
// the rest of the finish (·, + bias, + y_prev) into an FMA. Each side is a
// chain of at most 3 roundings from the same exact value, so they differ by
// at most 2·γ₃·(|scaled sum| + |bias| + |y_prev|) ≈ 6u·mag (I8FinishBound).
double I8FinishBound() { return 2 * recur::impl::testing::Float32ChainBound(3); }

// Activation rows end at an inaccessible page, as the weights do.
GuardedRegion& QRegion() {
  static GuardedRegion region(size_t{1} << 20);
  return region;
}

struct I8Case {
  size_t batch, in, out;
  size_t q_pad, y_pad;  // row stride minus row width
  size_t offset;        // misalignment of scales, bias, y (floats)
  bool bias, accumulate;
};

// The tolerance of each output of DenseI8DotQuantized against
// ref::DenseI8DotQuantized: I8FinishBound()·mag, mag = |Σ q·w·scale·s_b| +
// |bias| + |y_prev|, indexed as y (row stride y_stride).
std::vector<double> I8Tolerances(const I8Case& c, const int8_t* q, size_t q_stride,
                                 const float* q_scales, const DenseWeights& w,
                                 const std::vector<float>& y_prev, size_t y_stride) {
  const auto* qw = static_cast<const int8_t*>(w.weight);
  std::vector<double> tol(c.batch * y_stride);
  for (size_t b = 0; b < c.batch; ++b) {
    for (size_t o = 0; o < c.out; ++o) {
      const size_t k = b * y_stride + o;
      // The sum is exact either way (|Σ| < 2^31): in integers, as the kernels.
      int64_t isum = 0;
      for (size_t i = 0; i < c.in; ++i) isum += int64_t{q[b * q_stride + i]} * qw[o * c.in + i];
      const double sum = static_cast<double>(isum);
      double mag = std::fabs(sum * w.scales[o] * q_scales[b]);
      if (w.bias) mag += std::fabs(w.bias[o]);
      if (c.accumulate) mag += std::fabs(y_prev[k]);
      tol[k] = I8FinishBound() * mag;
    }
  }
  return tol;
}

// Checks y against y_ref within tol (I8Tolerances); returns the number of
// failures.
size_t CompareI8(const I8Case& c, const std::vector<float>& y_ref, const std::vector<double>& tol,
                 const Buffer& y, size_t y_stride) {
  size_t failures = 0;
  for (size_t b = 0; b < c.batch; ++b) {
    for (size_t o = 0; o < c.out; ++o) {
      const size_t k = b * y_stride + o;
      const double err = std::fabs(double{y[k]} - y_ref[k]);
      if (!(err <= tol[k])) {
        if (failures++ < 3) {
          FAIL_CHECK("b=" << b << " o=" << o << " got " << y[k] << " want " << y_ref[k]);
        }
      }
    }
    for (size_t o = c.out; o < y_stride; ++o) {
      if (!Buffer::SameBits(y[b * y_stride + o], kGuard) && failures++ < 3) {
        FAIL_CHECK("wrote stride padding b=" << b << " col " << o);
      }
    }
  }
  if (!y.GuardsIntact()) {
    ++failures;
    FAIL_CHECK("wrote outside y");
  }
  return failures;
}

// One case of DenseI8DotQuantized: q and w from `fill_q`/`fill_w` (random
// when null), both ending at an inaccessible page. The data, the reference
// and its tolerances once, the kernel on every target (ForEachTarget).
template <class FillQ, class FillW>
size_t CheckI8(std::mt19937& rng, const I8Case& c, const FillQ& fill_q, const FillW& fill_w) {
  const size_t q_stride = c.in + c.q_pad;
  const size_t y_stride = c.out + c.y_pad;
  Buffer q_scales(c.batch, c.offset % 4);
  Buffer scales(c.out, (c.offset + 1) % 4);
  Buffer bias(c.out, (c.offset + 2) % 4);
  Buffer y(c.batch * y_stride, (c.offset + 3) % 4);
  FillUniform(rng, q_scales.data(), q_scales.size(), 1e-3f, 2e-2f);
  FillUniform(rng, scales.data(), scales.size(), 1e-3f, 2e-2f);
  FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
  FillY(rng, y, c.batch, c.out, y_stride, c.accumulate);
  // The last row needs only `in` bytes: its stride padding is not there.
  const size_t q_bytes = c.batch == 0 ? 0 : (c.batch - 1) * q_stride + c.in;
  auto* q = reinterpret_cast<int8_t*>(QRegion().Place(q_bytes));
  std::uniform_int_distribution<int> qdist(-127, 127);
  for (size_t k = 0; k < q_bytes; ++k) q[k] = static_cast<int8_t>(qdist(rng));
  fill_q(q, q_stride);
  auto* weights = reinterpret_cast<int8_t*>(Region().Place(c.in * c.out));
  FillWeights(rng, WeightType::kI8, weights, c.in * c.out);
  fill_w(weights);

  DenseWeights w;
  w.weight = weights;
  w.type = WeightType::kI8;
  w.scales = scales.data();
  w.bias = c.bias ? bias.data() : nullptr;
  w.in = static_cast<uint32_t>(c.in);
  w.out = static_cast<uint32_t>(c.out);
  const std::vector<float> y_prev(y.data(), y.data() + y.size());
  std::vector<float> y_ref = y_prev;
  ref::DenseI8DotQuantized(q, q_stride, q_scales.data(), c.batch, w, y_ref.data(), y_stride,
                           c.accumulate);
  const std::vector<double> tol =
      I8Tolerances(c, q, q_stride, q_scales.data(), w, y_prev, y_stride);
  size_t failures = 0;
  ForEachTarget([&](const std::string&) {
    std::copy(y_prev.begin(), y_prev.end(), y.data());
    DenseI8DotQuantized(q, q_stride, q_scales.data(), c.batch, w, y.data(), y_stride, c.accumulate);
    failures += CompareI8(c, y_ref, tol, y, y_stride);
  });
  return failures;
}

size_t CheckI8(std::mt19937& rng, const I8Case& c) {
  return CheckI8(rng, c, [](int8_t*, size_t) {}, [](int8_t*) {});
}

#define RECUR_I8_INFO(c)                                                                  \
  INFO("batch=" << (c).batch << " in=" << (c).in << " out=" << (c).out                    \
                << " q_pad=" << (c).q_pad << " y_pad=" << (c).y_pad << " offset="         \
                << (c).offset << " bias=" << (c).bias << " accumulate=" << (c).accumulate)

TEST_CASE("DenseI8Dot: in 0..130 plus 255, 256, 1000 and 1024, with strides, bias and accumulate") {
  std::vector<size_t> ins;
  for (size_t in = 0; in <= 130; ++in) ins.push_back(in);  // 0..2N+2 for N = 64 (AVX-512)
  for (size_t in : {255, 256, 1000, 1024}) ins.push_back(in);
  struct BO {
    size_t batch, out;
  };
  const BO shapes[] = {{1, 5}, {1, 8}, {2, 3}, {3, 1}, {4, 9}, {5, 13}, {9, 4}, {0, 4}};
  const size_t pads[] = {0, 1, 5, 16};
  std::mt19937 rng(77);
  size_t k = 0;
  for (size_t in : ins) {
    for (const BO& bo : shapes) {
      ++k;
      const I8Case c{bo.batch,          in,    bo.out,           pads[k % 4],
                     pads[(k / 4) % 4], k % 4, (k / 2) % 2 == 0, k % 2 == 0};
      RECUR_I8_INFO(c);
      CHECK(CheckI8(rng, c) == 0);
    }
  }
}

// Batches of 16 rows and more (the AVX512-VNNI GEMM: blocks of 32 outputs,
// 1,024 inputs, 8 and 64 rows; the AVX2 GEMM: blocks of 16 outputs, 512
// inputs, 4 and 64 rows).
TEST_CASE("DenseI8Dot: batches from 16 rows, in 0..130 plus depth-block edges") {
  std::vector<size_t> ins;
  for (size_t in = 0; in <= 130; ++in) ins.push_back(in);
  for (size_t in : {255, 511, 512, 513, 1024, 1027, 1600}) ins.push_back(in);
  struct BO {
    size_t batch, out;
  };
  const BO shapes[] = {{16, 1}, {17, 16}, {23, 33}, {64, 31}, {65, 17}, {130, 70}};
  const size_t pads[] = {0, 1, 5, 16};
  std::mt19937 rng(79);
  size_t k = 0;
  for (size_t in : ins) {
    for (const BO& bo : shapes) {
      if (bo.batch > 23 && in % 7 != 0 && in < 255) continue;  // the long sweep on smaller batches
      ++k;
      const I8Case c{bo.batch,          in,    bo.out,           pads[k % 4],
                     pads[(k / 4) % 4], k % 4, (k / 2) % 2 == 0, k % 2 == 0};
      RECUR_I8_INFO(c);
      CHECK(CheckI8(rng, c) == 0);
    }
  }
}

TEST_CASE("DenseI8Dot: extreme values, zero rows, wide batches and layers") {
  std::mt19937 rng(78);
  size_t k = 0;
  for (size_t in : {size_t{64}, size_t{1000}, size_t{4096}, kDenseI8DotMaxIn}) {
    for (int pattern = 0; pattern < 8; ++pattern) {
      ++k;
      const size_t batch = pattern < 4 ? 3 : 17;  // row tiles, GEMM
      const I8Case c{batch, in, 6, k % 3, k % 2, k % 4, k % 2 == 0, k % 3 == 0};
      RECUR_I8_INFO(c);
      INFO("pattern " << pattern);
      // q: ±127 (row 0 all +127, row 1 alternating, row 2 zeros); w: row 0
      // all -128 (its negation is no int8), row 1 all +127, row 2 zeros,
      // row 3 alternating ±127 in step with q, rows 4-5 random ±127 / -128.
      auto fill_q = [&](int8_t* q, size_t stride) {
        for (size_t i = 0; i < in; ++i) {
          q[i] = pattern % 4 == 1 ? -127 : 127;
          q[stride + i] = static_cast<int8_t>(i % 2 ? -127 : 127);
          q[2 * stride + i] = pattern % 4 == 3 ? 0 : static_cast<int8_t>(i % 3 ? 127 : -127);
        }
      };
      auto fill_w = [&](int8_t* w) {
        if (pattern % 4 == 2) return;  // random weights, extreme activations
        for (size_t i = 0; i < in; ++i) {
          w[i] = -128;
          w[in + i] = 127;
          w[2 * in + i] = 0;
          w[3 * in + i] = static_cast<int8_t>(i % 2 ? -127 : 127);
          w[4 * in + i] = static_cast<int8_t>(rng() % 2 ? -128 : 127);
          w[5 * in + i] = static_cast<int8_t>(rng() % 2 ? -127 : 127);
        }
      };
      CHECK(CheckI8(rng, c, fill_q, fill_w) == 0);
    }
  }
  // Several batch blocks and L2 out-chunks (the last one partial).
  for (const I8Case& c :
       {I8Case{64, 256, 1030, 0, 3, 1, true, false}, I8Case{67, 1024, 300, 7, 0, 2, false, true},
        I8Case{13, 4000, 70, 0, 0, 0, true, true}}) {
    RECUR_I8_INFO(c);
    CHECK(CheckI8(rng, c) == 0);
  }
}

// DenseI8Dot on f32 rows: as QuantizeS8 (on the same target: the same q and
// s_b) then DenseI8DotQuantized, within I8FinishBound; and within the
// activation rounding of the exact product: |y − Σ x·w| ≤
// scales[o]·h_b·Σ_i |q_w[o, i]| + γ₆·mag, with h_b = QuantizeS8HalfStep(s_b)
// (max|x_b| for a row too small to quantise) and six roundings: f32(sum),
// scale_w·scale_x, the product, + bias, + y_prev, and y_exact's own to f32.
TEST_CASE("DenseI8Dot: f32 activations, tiny and zero rows, blocks of rows, fallback") {
  struct Shape {
    size_t batch, in, out;
  };
  const Shape shapes[] = {{1, 256, 40},   {2, 33, 7},     {5, 1024, 12},
                          {64, 256, 36},  {100, 256, 9},  {20, 1024, 5},
                          {3, 0, 4},      {2, 5000, 3},   {2, kDenseI8DotMaxIn + 1, 3},
                          // wider than the stack's 16 KiB of rows: passes from the scratch
                          {40, 8192, 5},  {17, kDenseI8DotMaxIn, 3}};
  ForEachTarget([&](const std::string&) {
    std::mt19937 rng(79);
    size_t k = 0;
    for (const Shape& sh : shapes) {
      ++k;
      INFO("batch=" << sh.batch << " in=" << sh.in << " out=" << sh.out);
      const size_t x_stride = sh.in + k % 3;
      std::vector<float> x(sh.batch * x_stride), scales(sh.out), bias(sh.out);
      FillUniform(rng, x.data(), x.size(), -2.0f, 2.0f);
      FillUniform(rng, scales.data(), scales.size(), 1e-3f, 2e-2f);
      FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
      if (sh.batch >= 2 && sh.in > 0) {  // a zero row and a row below kQuantizeS8MinMax
        std::fill(x.begin(), x.begin() + sh.in, 0.0f);
        for (size_t i = 0; i < sh.in; ++i) x[x_stride + i] = (i % 2 ? 1e-39f : -3e-39f);
      }
      if (sh.batch >= 3 && sh.in > 0) {  // a row whose max is tiny but quantisable
        for (size_t i = 0; i < sh.in; ++i) x[2 * x_stride + i] *= 1e-30f;
      }
      std::vector<int8_t> qw(sh.in * sh.out);
      FillWeights(rng, WeightType::kI8, qw.data(), qw.size());
      DenseWeights w;
      w.weight = qw.data();
      w.type = WeightType::kI8;
      w.scales = scales.data();
      w.bias = k % 2 ? bias.data() : nullptr;
      w.in = static_cast<uint32_t>(sh.in);
      w.out = static_cast<uint32_t>(sh.out);
      const bool accumulate = k % 3 == 0;
      std::vector<float> y_prev(sh.batch * sh.out);
      FillUniform(rng, y_prev.data(), y_prev.size(), -1.0f, 1.0f);
      std::vector<float> y = y_prev;
      DenseI8Dot(x.data(), x_stride, sh.batch, w, y.data(), sh.out, accumulate);

      if (sh.in > kDenseI8DotMaxIn) {  // runs Dense instead: the same bits
        std::vector<float> y_dense = y_prev;
        Dense(x.data(), x_stride, sh.batch, w, y_dense.data(), sh.out, accumulate);
        CHECK(std::memcmp(y.data(), y_dense.data(), y.size() * sizeof(float)) == 0);
        continue;
      }
      std::vector<int8_t> q(sh.batch * sh.in);
      std::vector<float> qs(sh.batch);
      for (size_t b = 0; b < sh.batch; ++b) {
        qs[b] = QuantizeS8(x.data() + b * x_stride, q.data() + b * sh.in, sh.in);
      }
      if (sh.batch >= 2) CHECK(qs[1] == 0.0f);  // too small to quantise: y = bias (+ y)
      std::vector<float> y_ref = y_prev;
      ref::DenseI8DotQuantized(q.data(), sh.in, qs.data(), sh.batch, w, y_ref.data(), sh.out,
                               accumulate);
      std::vector<float> y_exact = y_prev;
      ref::Dense(x.data(), x_stride, sh.batch, w, y_exact.data(), sh.out, accumulate);
      size_t failures = 0;
      for (size_t b = 0; b < sh.batch; ++b) {
        for (size_t o = 0; o < sh.out; ++o) {
          const size_t j = b * sh.out + o;
          double sum_w = 0, mag = std::fabs(y_ref[j]) + (accumulate ? std::fabs(y_prev[j]) : 0);
          for (size_t i = 0; i < sh.in; ++i) sum_w += std::abs(int{qw[o * sh.in + i]});
          if (w.bias) mag += std::fabs(w.bias[o]);
          // A row too small to quantise (s_b = 0) loses all of itself.
          double max_x = 0;
          for (size_t i = 0; i < sh.in; ++i) {
            max_x = std::max(max_x, std::fabs(double{x[b * x_stride + i]}));
          }
          const double err_x = qs[b] > 0 ? QuantizeS8HalfStep(qs[b]) : max_x;
          const double quant = scales[o] * err_x * sum_w;
          if (!(std::fabs(double{y[j]} - y_ref[j]) <= I8FinishBound() * mag) ||
              !(std::fabs(double{y[j]} - y_exact[j]) <=
                quant + recur::impl::testing::Float32ChainBound(6) * (mag + quant))) {
            if (failures++ < 3) {
              FAIL_CHECK("b=" << b << " o=" << o << " got " << y[j] << " ref " << y_ref[j]
                              << " exact " << y_exact[j] << " bound " << quant);
            }
          }
        }
      }
      CHECK(failures == 0);
    }
  });
}

TEST_CASE("DenseI8Dot: Dense with Int8Activations runs the path it names") {
  ForEachTarget([&](const std::string&) {
    std::mt19937 rng(80);
    const size_t batch = 3, in = 96, out = 10;
    std::vector<float> x(batch * in), scales(out), bias(out);
    FillUniform(rng, x.data(), x.size(), -1.0f, 1.0f);
    FillUniform(rng, scales.data(), scales.size(), 1e-3f, 2e-2f);
    FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
    std::vector<int8_t> qw(in * out);
    FillWeights(rng, WeightType::kI8, qw.data(), qw.size());
    DenseWeights w;
    w.weight = qw.data();
    w.type = WeightType::kI8;
    w.scales = scales.data();
    w.bias = bias.data();
    w.in = in;
    w.out = out;
    CheckInt8ActivationsChoice(x, batch, w, DenseI8Dot, DenseI8DotPreferred(batch, in, out));
    // Other weight types ignore the choice.
    std::vector<float> wf(in * out), yf(batch * out), y(batch * out);
    FillUniform(rng, wf.data(), wf.size(), -1.0f, 1.0f);
    w.weight = wf.data();
    w.type = WeightType::kF32;
    w.scales = nullptr;
    Dense(x.data(), in, batch, w, yf.data(), out, false);
    Dense(x.data(), in, batch, w, y.data(), out, false, Int8Activations::kQuantized);
    CHECK(y == yf);  // exact: the same f32 call
  });
}

}  // namespace
}  // namespace recur::impl::kernels::test
