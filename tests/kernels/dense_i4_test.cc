// Dense with int4 weights (kI4) on every Highway target against the scalar
// references (dense_ref.h): the f32-activation path (Dense, DenseI4Float),
// the integer path (DenseI4Dot, DenseI4DotQuantized), the packed GEMM and
// the batch-1 row panels (PackDenseI4Panels, DenseI4PanelsQuantized).
//
// Sizes: the packed rows are whole 32-input blocks, every target steps one
// block at a time and tiles kO = 4 weight rows by up to 4 activation rows,
// so in sweeps 0..2·(a group of 256) in blocks, out 1..2·4+1 and batch
// 0..2·4+1 (plus wide cases). Weights end at an inaccessible page (a read
// past the last block crashes); weights, scales, x and y are also placed at
// odd offsets.
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

// `bytes` bytes that end at a PROT_NONE page, or (misaligned) one byte
// before it.
class I4Region {
 public:
  I4Region() {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_ = size_t{16} << 20;
    void* p = mmap(nullptr, size_ + page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    REQUIRE(p != MAP_FAILED);
    base_ = static_cast<uint8_t*>(p);
    REQUIRE(mprotect(base_ + size_, page_, PROT_NONE) == 0);
  }
  ~I4Region() { munmap(base_, size_ + page_); }
  uint8_t* Place(size_t n, bool misaligned) {
    REQUIRE(n + 1 <= size_);
    return base_ + size_ - n - (misaligned ? 1 : 0);
  }

 private:
  size_t page_ = 0, size_ = 0;
  uint8_t* base_ = nullptr;
};

I4Region& Region() {
  static I4Region region;
  return region;
}

// Scales of magnitude 1e-3..2e-2 as f16 bits (positive normals).
uint16_t RandomScale(std::mt19937& rng) {
  std::uniform_int_distribution<int> mantissa(0, 1023), exponent(5, 9);  // 2^-10 .. 2^-6
  return static_cast<uint16_t>(exponent(rng) << 10 | mantissa(rng));
}

// A kI4 layer with random nibbles (all 16 codes) and scales; the scales sit
// in a vector with `scale_offset` leading elements (odd offsets misalign).
struct I4Layer {
  std::vector<uint16_t> scale_storage;
  DenseWeights w;
  I4Layer(std::mt19937& rng, size_t in, size_t out, size_t group, bool misaligned,
          const float* bias) {
    const size_t bytes = in * out / 2;
    uint8_t* p = Region().Place(bytes, misaligned);
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t k = 0; k < bytes; ++k) p[k] = static_cast<uint8_t>(byte(rng));
    const size_t groups = in == 0 ? 0 : in / group;
    const size_t offset = misaligned ? 1 : 0;
    scale_storage.resize(offset + out * groups + 1);
    for (uint16_t& s : scale_storage) s = RandomScale(rng);
    w.weight = p;
    w.type = WeightType::kI4;
    w.group_scales = scale_storage.data() + offset;
    w.group = static_cast<uint32_t>(group);
    w.bias = bias;
    w.in = static_cast<uint32_t>(in);
    w.out = static_cast<uint32_t>(out);
  }
};

struct I4Case {
  size_t batch, in, out, group;
  size_t x_pad, y_pad, offset;
  bool bias, accumulate, misaligned;
};

#define RECUR_I4_INFO(c)                                                                     \
  INFO("batch=" << (c).batch << " in=" << (c).in << " out=" << (c).out << " group="          \
                << (c).group << " x_pad=" << (c).x_pad << " y_pad=" << (c).y_pad               \
                << " offset=" << (c).offset << " bias=" << (c).bias << " accumulate="         \
                << (c).accumulate << " misaligned=" << (c).misaligned)

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

enum class Path { kFloat, kPacked };

// f32 activations: Dense (or PackDense + DensePacked) against ref::Dense over
// the decoded weights, CheckDenseResult's 4·ε·√(in+2)·Σ|x·w| tolerance (the
// decode is exact: scale·q is one f32 product of a half and a small integer).
// The data, the reference and its tolerances once, the run on every target
// (ForEachTarget).
size_t CheckFloat(std::mt19937& rng, const I4Case& c, Path path) {
  const size_t x_stride = c.in + c.x_pad, y_stride = c.out + c.y_pad;
  Buffer x(c.batch * x_stride, c.offset % 4), bias(c.out, (c.offset + 2) % 4),
      y(c.batch * y_stride, (c.offset + 3) % 4);
  FillUniform(rng, x.data(), x.size(), -1.0f, 1.0f);
  FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
  FillY(rng, y, c.batch, c.out, y_stride, c.accumulate);
  I4Layer layer(rng, c.in, c.out, c.group, c.misaligned, c.bias ? bias.data() : nullptr);
  const DenseWeights& w = layer.w;
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
    if (path == Path::kPacked) {
      auto packed =
          hwy::AllocateAligned<float>(std::max<size_t>(1, DensePackedFloats(c.in, c.out)));
      PackDense(w, packed.get());
      const size_t panels = DensePanels(c.out), split = panels / 2;
      DensePacked(x.data(), x_stride, c.batch, packed.get(), w.bias, c.in, c.out, 0, split,
                  y.data(), y_stride, c.accumulate);
      DensePacked(x.data(), x_stride, c.batch, packed.get(), w.bias, c.in, c.out, split, panels,
                  y.data(), y_stride, c.accumulate);
    } else {
      Dense(x.data(), x_stride, c.batch, w, y.data(), y_stride, c.accumulate);
    }
    failures += CheckDenseWithin(c.batch, c.out, y_ref, tol, y, y_stride);
  });
  return failures;
}

// Integer path on quantised rows q (row stride q_stride, scales qs) against
// ref::DenseI4DotQuantized (exact). The group sums are exact in i32 on every
// target; what differs is f32: each group's sum (exact in f32: |Σ n·q| ≤
// 256·15·128 < 2^24) times its scale rounds once and is added into a lane
// accumulator (≤ groups roundings per lane), the lanes (≤ 16) are summed,
// multiplied by s_b, bias and y added: at most (groups + 16 + 3)·ε relative to
//   mag = s_b·Σ_g scale_g·(Σ_{i in g} n_i·|q_i| + 8·|Σ_{i in g} q_i|) + |bias| + |y_prev|
// (the tiles hold Σ n·q and −8·Σ q in different lanes; the scalar path's
// terms are smaller).
// QuantizedTolerances gives factor·mag per output (row stride y_stride);
// CompareQuantized checks y against y_ref within them.
std::vector<double> QuantizedTolerances(const I4Case& c, const int8_t* q, size_t q_stride,
                                        const float* qs, const DenseWeights& w,
                                        const std::vector<float>& y_prev, size_t y_stride) {
  const size_t groups = c.in == 0 ? 0 : c.in / c.group;
  const double factor = (double(groups) + 16 + 3) * kEps;
  std::vector<double> tol(y_prev.size());
  for (size_t b = 0; b < c.batch; ++b) {
    for (size_t o = 0; o < c.out; ++o) {
      const auto* row = static_cast<const uint8_t*>(w.weight) + o * (c.in / 2);
      double mag = 0;
      for (size_t g = 0; g < groups; ++g) {
        double nq = 0, sq = 0;
        for (size_t i = g * c.group; i < (g + 1) * c.group; ++i) {
          const int qi = q[b * q_stride + i];
          nq += double(I4Value(row, i) + 8) * std::abs(qi);
          sq += qi;
        }
        mag += ref::F16ToF32(w.group_scales[o * groups + g]) * (nq + 8 * std::fabs(sq));
      }
      mag *= qs[b];
      const size_t k = b * y_stride + o;
      if (w.bias) mag += std::fabs(w.bias[o]);
      if (c.accumulate) mag += std::fabs(y_prev[k]);
      tol[k] = factor * mag;
    }
  }
  return tol;
}

size_t CompareQuantized(const I4Case& c, const std::vector<float>& y_ref,
                        const std::vector<double>& tol, const Buffer& y, size_t y_stride) {
  size_t failures = 0;
  for (size_t b = 0; b < c.batch; ++b) {
    for (size_t o = 0; o < c.out; ++o) {
      const size_t k = b * y_stride + o;
      const double err = std::fabs(double{y[k]} - y_ref[k]);
      if (!(err <= tol[k]) && failures++ < 3) {
        FAIL_CHECK("b=" << b << " o=" << o << " got " << y[k] << " want " << y_ref[k] << " tol "
                        << tol[k]);
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

// run(q, q_stride, qs, w, y, y_stride) on random q in [-127, 127] (or
// `fill_q`) against the exact reference: the data and the reference once,
// the run on every target (ForEachTarget).
template <class FillQ, class Run>
size_t CheckQuantizedRun(std::mt19937& rng, const I4Case& c, const FillQ& fill_q, const Run& run) {
  const size_t q_stride = c.in + c.x_pad, y_stride = c.out + c.y_pad;
  Buffer qs(c.batch, c.offset % 4), bias(c.out, (c.offset + 2) % 4),
      y(c.batch * y_stride, (c.offset + 3) % 4);
  FillUniform(rng, qs.data(), qs.size(), 1e-3f, 2e-2f);
  FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
  FillY(rng, y, c.batch, c.out, y_stride, c.accumulate);
  std::vector<int8_t> q_storage(c.batch * q_stride + 1);
  int8_t* q = q_storage.data() + (c.misaligned ? 1 : 0);
  std::uniform_int_distribution<int> qdist(-127, 127);
  for (size_t k = 0; k < c.batch * q_stride; ++k) q[k] = static_cast<int8_t>(qdist(rng));
  fill_q(q, q_stride);
  I4Layer layer(rng, c.in, c.out, c.group, c.misaligned, c.bias ? bias.data() : nullptr);
  const std::vector<float> y_prev(y.data(), y.data() + y.size());
  std::vector<float> y_ref = y_prev;
  ref::DenseI4DotQuantized(q, q_stride, qs.data(), c.batch, layer.w, y_ref.data(), y_stride,
                           c.accumulate);
  const std::vector<double> tol =
      QuantizedTolerances(c, q, q_stride, qs.data(), layer.w, y_prev, y_stride);
  size_t failures = 0;
  ForEachTarget([&](const std::string&) {
    std::copy(y_prev.begin(), y_prev.end(), y.data());
    run(q, q_stride, qs.data(), layer.w, y.data(), y_stride);
    failures += CompareQuantized(c, y_ref, tol, y, y_stride);
  });
  return failures;
}

// DenseI4DotQuantized on random q in [-127, 127] (or `fill_q`).
template <class FillQ>
size_t CheckQuantized(std::mt19937& rng, const I4Case& c, const FillQ& fill_q) {
  return CheckQuantizedRun(rng, c, fill_q,
                           [&](const int8_t* q, size_t q_stride, const float* qs,
                               const DenseWeights& w, float* y, size_t y_stride) {
                             DenseI4DotQuantized(q, q_stride, qs, c.batch, w, y, y_stride,
                                                 c.accumulate);
                           });
}

size_t CheckQuantized(std::mt19937& rng, const I4Case& c) {
  return CheckQuantized(rng, c, [](int8_t*, size_t) {});
}

TEST_CASE("I4Value: the packed block layout of recur.fbs") {
  // Block b of a row: byte j = input 32b + j (low nibble), 32b + j + 16 (high).
  std::vector<uint8_t> row(32);
  for (size_t j = 0; j < 32; ++j) row[j] = static_cast<uint8_t>((j % 16) | ((15 - j % 16) << 4));
  for (size_t i = 0; i < 64; ++i) {
    const int low = static_cast<int>(i % 16), high = 15 - low;
    CHECK(I4Value(row.data(), i) == ((i % 32) < 16 ? low : high) - 8);
  }
  CHECK(WeightRowBytes(WeightType::kI4, 64) == 32);
}

TEST_CASE("Dense int4, f32 activations: in 0..512 by blocks, groups, odd shapes, all targets") {
  const size_t groups[] = {32, 64, 128, 256};
  std::mt19937 rng(41);
  size_t k = 0;
  for (size_t group : groups) {
    for (size_t in = 0; in <= 2 * 256; in += group) {
      for (size_t batch : {0, 1, 2, 3, 5, 9, 64, 65}) {
        for (size_t out : {1, 3, 4, 5, 9}) {
          ++k;
          const I4Case c{batch, in,    out,        group,      k % 3 * 5,
                         k % 4, k % 4, k % 2 == 0, k % 3 == 0, k % 5 < 2};
          RECUR_I4_INFO(c);
          CHECK(CheckFloat(rng, c, Path::kFloat) == 0);
        }
      }
    }
  }
  // Several decode passes (512 inputs each) with a partial last one; groups
  // the loader also accepts (a multiple of 32 that divides in) that straddle
  // a pass (96) or span several (1024).
  for (const I4Case& c : {I4Case{1, 1056, 7, 32, 0, 1, 1, true, false, true},
                          I4Case{7, 4096, 3, 256, 3, 0, 2, false, true, false},
                          I4Case{1, 256, 1024, 32, 0, 0, 0, true, false, false},
                          I4Case{3, 1152, 5, 96, 1, 2, 3, true, true, true},
                          I4Case{2, 2048, 6, 1024, 0, 1, 1, false, false, false}}) {
    RECUR_I4_INFO(c);
    CHECK(CheckFloat(rng, c, Path::kFloat) == 0);
  }
}

TEST_CASE("DensePacked int4: PackDense decodes the groups, all targets") {
  std::mt19937 rng(42);
  size_t k = 0;
  for (size_t batch : {1, 5, 29, 64}) {
    for (size_t in : {0, 32, 96, 256}) {
      for (size_t out : {1, 31, 33, 65}) {
        ++k;
        const I4Case c{batch,      in,        out,   size_t{in % 64 == 0 && in > 0 ? 64u : 32u},
                       k % 3,      k % 2,     k % 4, k % 2 == 0,
                       k % 3 == 0, k % 2 == 1};
        RECUR_I4_INFO(c);
        CHECK(CheckFloat(rng, c, Path::kPacked) == 0);
      }
    }
  }
}

TEST_CASE("DenseI4DotQuantized: in 0..512 by blocks, groups, batch 0..9, all targets") {
  // 96: an odd number of blocks per group, which the x86 two-block steps
  // leave to the block-by-block tile.
  const size_t groups[] = {32, 64, 96, 128, 256};
  std::mt19937 rng(43);
  size_t k = 0;
  for (size_t group : groups) {
    for (size_t in = 0; in <= 2 * 256; in += group) {
      for (size_t batch = 0; batch <= 9; ++batch) {
        for (size_t out : {1, 4, 5, 9}) {
          ++k;
          const I4Case c{batch, in,    out,        group,      k % 3 * 5,
                         k % 4, k % 4, k % 2 == 0, k % 3 == 0, k % 5 < 2};
          RECUR_I4_INFO(c);
          CHECK(CheckQuantized(rng, c) == 0);
        }
      }
    }
  }
}

// Batch 1, groups of 32 (on AVX512-VNNI: blocks of 16 rows run 8 side by
// side, 128 inputs a step, scales decoded 512 inputs at a time; the last step
// and the last 512 partial), and the widest layer that path takes.
TEST_CASE("DenseI4DotQuantized: batch 1, groups of 32, 16-row blocks, all targets") {
  std::mt19937 rng(45);
  size_t k = 0;
  for (size_t in :
       {32, 64, 96, 128, 160, 224, 256, 288, 480, 512, 544, 992, 1024, 1056, 4064, 4096, 4128}) {
    for (size_t out : {7, 8, 9, 15, 16, 17, 33, 40}) {
      ++k;
      const I4Case c{1, in, out, 32, k % 3 * 5, k % 4, k % 4, k % 2 == 0, k % 3 == 0, k % 5 < 2};
      RECUR_I4_INFO(c);
      CHECK(CheckQuantized(rng, c) == 0);
    }
  }
  for (int pattern = 0; pattern < 3; ++pattern) {
    const size_t in = pattern == 0 ? 4096 : 1024;
    const I4Case c{1, in, 20, 32, 0, 1, 1, true, pattern == 1, pattern == 2};
    RECUR_I4_INFO(c);
    auto fill_q = [&](int8_t* q, size_t) {
      for (size_t i = 0; i < in; ++i) q[i] = pattern == 1 ? -127 : 127;
    };
    CHECK(CheckQuantized(rng, c, fill_q) == 0);
  }
}

TEST_CASE("DenseI4DotQuantized: extreme activations, the widest layer, wide batches") {
  std::mt19937 rng(44);
  for (int pattern = 0; pattern < 3; ++pattern) {
    for (size_t in : {size_t{256}, kDenseI4DotMaxIn}) {
      const I4Case c{3, in, 6, 32, 0, 1, 1, true, pattern == 1, pattern == 2};
      RECUR_I4_INFO(c);
      INFO("pattern " << pattern);
      // ±127 everywhere (row 0), alternating (row 1), −127 or 0 (row 2):
      // the largest |Σ n·q| and |Σ q| per group.
      auto fill_q = [&](int8_t* q, size_t stride) {
        for (size_t i = 0; i < in; ++i) {
          q[i] = pattern == 1 ? -127 : 127;
          q[stride + i] = static_cast<int8_t>(i % 2 ? -127 : 127);
          q[2 * stride + i] = pattern == 2 ? 0 : -127;
        }
      };
      CHECK(CheckQuantized(rng, c, fill_q) == 0);
    }
  }
  for (const I4Case& c : {I4Case{64, 256, 1024, 32, 0, 3, 1, true, false, false},
                          I4Case{67, 1024, 36, 128, 7, 0, 2, false, true, true}}) {
    RECUR_I4_INFO(c);
    CHECK(CheckQuantized(rng, c) == 0);
  }
}

// From 16 rows the x86 targets run a GEMM (AVX512-VNNI: 32 weight rows and
// 6 activation rows a tile; AVX2: 16 and 3; packed blocks of whole groups up
// to 1024 inputs, so 1024 + group and 2080 end on a partial block; 64 rows
// per pass, fewer when a row has over 64 groups; groups over 1024: tiles).
TEST_CASE("DenseI4DotQuantized: batch 16 and up, groups, odd outputs, all targets") {
  std::mt19937 rng(47);
  size_t k = 0;
  for (size_t group : {32, 64, 96, 128, 256, 1024}) {
    for (size_t in : {group, 3 * group, 1024 + group, size_t{2080}}) {
      if (in % group != 0) continue;
      for (size_t batch : {16, 17, 33, 64}) {
        // Short sweeps (arm64): no GEMM there; the tiles take 4 rows at a time
        // (NEON; SVE2_128 and SVE run a scalar loop, a row at a time), so 33 and
        // 64 rows repeat 17 and 16.
        if (ShortSweeps() && batch > 17) continue;
        for (size_t out : {1, 7, 17, 33, 47}) {
          if (++k % 2 == 0 && in > 1024) continue;
          const I4Case c{batch, in,    out,        group,      k % 3 * 5,
                         k % 4, k % 4, k % 2 == 0, k % 3 == 0, k % 5 < 2};
          RECUR_I4_INFO(c);
          CHECK(CheckQuantized(rng, c) == 0);
        }
      }
    }
  }
  // Over 64 rows (two passes), and rows of 512 groups (passes of 8 rows).
  for (const I4Case& c : {I4Case{130, 256, 20, 32, 1, 3, 1, true, true, true},
                          I4Case{17, kDenseI4DotMaxIn, 5, 32, 0, 1, 2, true, false, true},
                          I4Case{16, 4096, 9, 2048, 3, 0, 3, false, true, false}}) {
    RECUR_I4_INFO(c);
    CHECK(CheckQuantized(rng, c) == 0);
  }
  // ±127 everywhere (the largest i16 sums of the AVX2 kernel), alternating.
  for (int pattern = 0; pattern < 3; ++pattern) {
    const I4Case c{17, 1024, 19, 32, 0, 1, 1, true, pattern == 1, pattern == 2};
    RECUR_I4_INFO(c);
    auto fill_q = [&](int8_t* q, size_t stride) {
      for (size_t b = 0; b < c.batch; ++b) {
        for (size_t i = 0; i < c.in; ++i) {
          q[b * stride + i] = pattern == 0   ? 127
                              : pattern == 1 ? -127
                                             : static_cast<int8_t>(i % 2 ? -127 : 127);
        }
      }
    };
    CHECK(CheckQuantized(rng, c, fill_q) == 0);
  }
}

TEST_CASE("DenseI4DotQuantized: several blocks of rows over output chunks, all targets") {
  // Between one block of tile rows and the GEMM's batch, wide layers run in
  // output chunks (kRowsChunkBytes of weights: 64 rows at 8,192 inputs, 32 at
  // 16,384), each chunk against every block of rows; the last chunk short.
  std::mt19937 rng(53);
  for (const I4Case& c : {I4Case{9, 8192, 70, 32, 1, 0, 1, true, false, true},
                          I4Case{6, kDenseI4DotMaxIn, 100, 32, 0, 2, 0, false, true, false},
                          I4Case{15, 8192, 129, 64, 3, 1, 2, true, true, true}}) {
    RECUR_I4_INFO(c);
    CHECK(CheckQuantized(rng, c) == 0);
  }
}

// DenseI4Dot on f32 rows: within the activation rounding of the exact
// product over the decoded weights. x_b = s_b·q_b + e with |e| ≤ s_b/2
// (QuantizeS8), so |y − Σ x·w| ≤ (s_b/2)·Σ_i |w_i| plus the f32 roundings
// bounded above (and ref::Dense's own: 4·ε·√(in+2)·Σ|x·w|).
// Row panels (groups of 32): PackDenseI4Panels into a buffer at an odd
// address, then DenseI4PanelsQuantized over two disjoint panel ranges,
// against the exact reference; in 32..2·512 by blocks, out 0..2·16+1, batch
// 0..2·4+1 (runs of kI4PanelMaxBatch rows).
size_t CheckPanels(std::mt19937& rng, const I4Case& c) {
  return CheckQuantizedRun(
      rng, c, [](int8_t*, size_t) {},
      [&](const int8_t* q, size_t q_stride, const float* qs, const DenseWeights& w, float* y,
          size_t y_stride) {
        const size_t bytes = DenseI4PanelBytes(w);
        REQUIRE(bytes == DenseI4Panels(c.out) * (c.in / 32) * 16 * 18);
        std::vector<uint8_t> storage(bytes + 1, 0xAB);
        uint8_t* panels = storage.data() + (c.misaligned ? 1 : 0);
        PackDenseI4Panels(w, panels);
        const size_t n = DenseI4Panels(c.out), split = n / 2;
        DenseI4PanelsQuantized(q, q_stride, qs, c.batch, panels, w, 0, split, y, y_stride,
                               c.accumulate);
        DenseI4PanelsQuantized(q, q_stride, qs, c.batch, panels, w, split, n + 3, y, y_stride,
                               c.accumulate);
      });
}

TEST_CASE("DenseI4PanelsQuantized: in 32..1024 by blocks, out 0..33, batch 0..9, all targets") {
  std::mt19937 rng(47);
  size_t k = 0;
  for (size_t in = 32; in <= 2 * 512; in += in < 256 ? 32 : 224) {
    for (size_t out = 0; out <= 2 * 16 + 1; out += out < 18 ? 1 : 5) {
      ++k;
      const I4Case c{1, in, out, 32, k % 3 * 5, k % 4, k % 4, k % 2 == 0, k % 3 == 0, k % 5 < 2};
      RECUR_I4_INFO(c);
      CHECK(CheckPanels(rng, c) == 0);
    }
  }
  for (size_t batch = 0; batch <= 2 * kI4PanelMaxBatch + 1; ++batch) {
    for (size_t in : {32, 96, 256}) {
      for (size_t out : {5, 16, 33}) {
        ++k;
        const I4Case c{batch, in,    out,        32,         k % 3 * 5,
                       k % 4, k % 4, k % 2 == 0, k % 3 == 0, k % 5 < 2};
        RECUR_I4_INFO(c);
        CHECK(CheckPanels(rng, c) == 0);
      }
    }
  }
  for (size_t in : {4096, 16384}) {  // the widest layer
    const I4Case c{1, in, 40, 32, 0, 1, 1, true, true, true};
    RECUR_I4_INFO(c);
    CHECK(CheckPanels(rng, c) == 0);
  }
}

TEST_CASE("DenseI4PanelBytes: layers without panels, and a wrong nibble shows") {
  std::mt19937 rng(48);
  I4Layer layer(rng, 64, 20, 32, false, nullptr);
  DenseWeights w = layer.w;
  CHECK(DenseI4PanelBytes(w) == 2 * 2 * 16 * 18);
  DenseWeights other = w;
  other.group = 64;
  CHECK(DenseI4PanelBytes(other) == 0);
  other = w;
  other.in = kDenseI4DotMaxIn + 32;
  CHECK(DenseI4PanelBytes(other) == 0);
  other = w;
  other.out = 0;
  CHECK(DenseI4PanelBytes(other) == 0);
  other = w;
  other.type = WeightType::kI8;
  CHECK(DenseI4PanelBytes(other) == 0);
  std::vector<uint8_t> untouched(64, 0x5A);
  PackDenseI4Panels(other, untouched.data());
  CHECK(std::all_of(untouched.begin(), untouched.end(), [](uint8_t b) { return b == 0x5A; }));
  // The kernel reads what the panels hold: one nibble changed after packing
  // (row 17, input 9) moves output 17 only.
  std::vector<uint8_t> panels(DenseI4PanelBytes(w));
  PackDenseI4Panels(w, panels.data());
  std::vector<int8_t> q(64, 1);
  ForEachTarget([&](const std::string&) {
    std::vector<float> y(20), y2(20);
    const float one = 1.0f;
    DenseI4PanelsQuantized(q.data(), 64, &one, 1, panels.data(), w, 0, 2, y.data(), 20, false);
    std::vector<uint8_t> changed = panels;
    // Panel 1, block 0, vector m = 1 (inputs 8..15), row 1, t = 1: input 9 low.
    uint8_t& byte = changed[2 * 16 * 18 + 1 * 64 + 4 * 1 + 1];
    byte = static_cast<uint8_t>((byte & 0xF0) | ((byte & 0x0F) == 15 ? 14 : (byte & 0x0F) + 1));
    DenseI4PanelsQuantized(q.data(), 64, &one, 1, changed.data(), w, 0, 2, y2.data(), 20, false);
    for (size_t o = 0; o < 20; ++o) {
      INFO("o=" << o);
      if (o == 17) {
        CHECK(y2[o] != y[o]);
      } else {
        CHECK(y2[o] == y[o]);
      }
    }
  });
}

// DenseI4Dot's double reference on f32 rows x (batch × in) and the sums its
// bound takes, made once for every target: ref::Dense's outputs, Σ_i |w[o, i]|
// and Σ_i |w[o, i]·x[b, i]|.
struct ActivationRoundingRef {
  std::vector<float> y_exact;  // (batch, out)
  std::vector<double> sum_w;   // (out)
  std::vector<double> sum_xw;  // (batch, out)
  ActivationRoundingRef(const std::vector<float>& x, size_t batch, const DenseWeights& w)
      : y_exact(batch * w.out), sum_w(w.out), sum_xw(batch * w.out) {
    const size_t in = w.in, out = w.out;
    const std::vector<double> decoded = DecodedWeights(w);
    RefDense(x.data(), in, batch, w, decoded, y_exact.data(), out, false);
    std::vector<double> abs_w(in);
    for (size_t o = 0; o < out; ++o) {
      for (size_t i = 0; i < in; ++i) {
        abs_w[i] = std::fabs(decoded[o * in + i]);
        sum_w[o] += abs_w[i];
      }
      for (size_t b = 0; b < batch; ++b) {
        double s = 0;
        for (size_t i = 0; i < in; ++i) s += abs_w[i] * std::fabs(x[b * in + i]);
        sum_xw[b * out + o] = s;
      }
    }
  }
};

// Checks y (DenseI4Dot of x, batch × in, against w with `bias`) against the
// double reference r: within half a step of each row's activation rounding
// (QuantizeS8 on the target in use) plus the f32 sums' rounding.
void CheckWithinActivationRounding(const ActivationRoundingRef& r, const std::vector<float>& x,
                                   size_t batch, const DenseWeights& w,
                                   const std::vector<float>& bias, const std::vector<float>& y) {
  const size_t in = w.in, out = w.out;
  size_t failures = 0;
  for (size_t b = 0; b < batch; ++b) {
    std::vector<int8_t> q(in);
    const float s = QuantizeS8(x.data() + b * in, q.data(), in);
    for (size_t o = 0; o < out; ++o) {
      const double sum_w = r.sum_w[o], sum_xw = r.sum_xw[b * out + o];
      const double groups = in == 0 ? 0 : double(in / w.group);
      // |n·q·s·scale| ≤ 15/7·|w|-ish per term: bounded by 4·(|x| + s)·Σ|w|.
      const double f32 = (groups + 19) * kEps * (4 * (sum_xw + s * sum_w) + std::fabs(bias[o])) +
                         4 * kEps * std::sqrt(in + 2.0) * (sum_xw + std::fabs(bias[o]));
      const double bound = s / 2 * sum_w + f32;
      const double err = std::fabs(double{y[b * out + o]} - r.y_exact[b * out + o]);
      if (!(err <= bound) && failures++ < 3) {
        FAIL_CHECK("b=" << b << " o=" << o << " err " << err << " bound " << bound);
      }
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("DenseI4Dot: f32 activations within the activation rounding, zero rows, all targets") {
  std::mt19937 rng(45);
  struct Shape {
    size_t batch, in, out, group;
  };
  for (const Shape& sh : {Shape{1, 256, 40, 32}, Shape{2, 96, 7, 32}, Shape{5, 1024, 12, 128},
                          Shape{64, 256, 36, 64}, Shape{3, 0, 4, 32}}) {
    INFO("batch=" << sh.batch << " in=" << sh.in << " out=" << sh.out);
    std::vector<float> x(sh.batch * sh.in), bias(sh.out);
    FillUniform(rng, x.data(), x.size(), -2.0f, 2.0f);
    FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
    if (sh.batch >= 2 && sh.in > 0) std::fill(x.begin(), x.begin() + sh.in, 0.0f);
    I4Layer layer(rng, sh.in, sh.out, sh.group, false, bias.data());
    const ActivationRoundingRef r(x, sh.batch, layer.w);
    ForEachTarget([&](const std::string&) {
      std::vector<float> y(sh.batch * sh.out);
      DenseI4Dot(x.data(), sh.in, sh.batch, layer.w, y.data(), sh.out, false);
      CheckWithinActivationRounding(r, x, sh.batch, layer.w, bias, y);
    });
  }
}

// A wide layer's rows are quantised in passes: 16 KiB on the stack hold 2
// rows of 8,192 inputs, the widening scratch (DenseScratchNeed plans it) up
// to 64, enough for the GEMM. Unbound, bound to what DenseScratchNeed asks
// and bound to nothing: each the bits of DenseI4DotQuantized in its passes.
TEST_CASE("DenseI4Dot: wide layers in passes of rows from the scratch or the stack, all targets") {
  std::mt19937 rng(46);
  struct Shape {
    size_t batch, in, out;
  };
  for (const Shape& sh :
       {Shape{40, 8192, 20}, Shape{70, 2048, 33}, Shape{17, kDenseI4DotMaxIn, 3}}) {
    INFO("batch=" << sh.batch << " in=" << sh.in << " out=" << sh.out);
    std::vector<float> x(sh.batch * sh.in), bias(sh.out);
    FillUniform(rng, x.data(), x.size(), -2.0f, 2.0f);
    FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
    I4Layer layer(rng, sh.in, sh.out, 32, false, bias.data());
    const ActivationRoundingRef r(x, sh.batch, layer.w);
    ForEachTarget([&](const std::string&) {
      std::vector<float> unbound(sh.batch * sh.out), bound(unbound.size()), stack(unbound.size());
      DenseI4Dot(x.data(), sh.in, sh.batch, layer.w, unbound.data(), sh.out, false);
      DenseScratch need = DenseScratchNeed(sh.batch, sh.in, sh.out, WeightType::kI4);
      CHECK(need.widen_floats > 0);
      auto widen = hwy::AllocateAligned<float>(need.widen_floats);
      need.widen = widen.get();
      {
        const ScopedDenseScratch bind(&need);
        DenseI4Dot(x.data(), sh.in, sh.batch, layer.w, bound.data(), sh.out, false);
      }
      const DenseScratch none;
      {
        const ScopedDenseScratch bind(&none);
        DenseI4Dot(x.data(), sh.in, sh.batch, layer.w, stack.data(), sh.out, false);
      }
      // DenseI4DotQuantized on the same rounded rows in the same passes: the same bits.
      std::vector<int8_t> q(sh.batch * sh.in);
      std::vector<float> qs(sh.batch);
      for (size_t b = 0; b < sh.batch; ++b) {
        qs[b] = QuantizeS8(x.data() + b * sh.in, q.data() + b * sh.in, sh.in);
      }
      auto in_passes = [&](size_t rows) {
        std::vector<float> y(sh.batch * sh.out);
        for (size_t b0 = 0; b0 < sh.batch; b0 += rows) {
          DenseI4DotQuantized(q.data() + b0 * sh.in, sh.in, qs.data() + b0,
                              std::min(rows, sh.batch - b0), layer.w, y.data() + b0 * sh.out,
                              sh.out, false);
        }
        return y;
      };
      const std::vector<float> scratch_passes = in_passes(64);
      const std::vector<float> stack_passes = in_passes((size_t{16} << 10) / sh.in);
      CHECK(std::memcmp(unbound.data(), scratch_passes.data(), unbound.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(bound.data(), scratch_passes.data(), bound.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(stack.data(), stack_passes.data(), stack.size() * sizeof(float)) == 0);
      CheckWithinActivationRounding(r, x, sh.batch, layer.w, bias, unbound);
      CheckWithinActivationRounding(r, x, sh.batch, layer.w, bias, stack);
    });
  }
}

TEST_CASE("Dense int4: Int8Activations picks the path, Rows() slices, wrong outputs show") {
  ForEachTarget([&](const std::string&) {
    std::mt19937 rng(46);
    const size_t batch = 3, in = 128, out = 77, y_stride = out + 3;
    std::vector<float> x(batch * in), bias(out);
    FillUniform(rng, x.data(), x.size(), -1.0f, 1.0f);
    FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
    I4Layer layer(rng, in, out, 32, false, bias.data());
    const DenseWeights& w = layer.w;
    CheckInt8ActivationsChoice(x, batch, w, DenseI4Dot, DenseI4DotPreferred(batch, in, out));
    std::vector<float> widened(batch * out), quantized(batch * out), y(batch * out);
    Dense(x.data(), in, batch, w, widened.data(), out, false);
    DenseI4Dot(x.data(), in, batch, w, quantized.data(), out, false);

    // Slices, as the threaded engine runs them, give the whole layer's bits.
    for (bool int8 : {false, true}) {
      Buffer ys(batch * y_stride, 1);
      const size_t cuts[] = {0, 5, 37, 40, out};
      for (size_t s = 0; s + 1 < std::size(cuts); ++s) {
        Dense(x.data(), in, batch, w.Rows(cuts[s], cuts[s + 1]), ys.data() + cuts[s], y_stride,
              false, int8 ? Int8Activations::kQuantized : Int8Activations::kFloat);
      }
      const std::vector<float>& whole = int8 ? quantized : widened;
      size_t differ = 0;
      for (size_t b = 0; b < batch; ++b) {
        differ += std::memcmp(ys.data() + b * y_stride, whole.data() + b * out, out * 4) != 0;
      }
      CHECK(differ == 0);
    }

    // One nibble one step off (row 3) moves output 3 beyond the tolerance
    // of CheckDenseResult and leaves output 2 within it.
    std::vector<float> y_ref(batch * out);
    ref::Dense(x.data(), in, batch, w, y_ref.data(), out, false);
    auto* bytes = const_cast<uint8_t*>(static_cast<const uint8_t*>(w.weight));
    const size_t e = 3 * (in / 2) + 5;
    const uint8_t saved = bytes[e];
    bytes[e] = static_cast<uint8_t>((saved & 0xF0) | ((saved & 0x0F) == 15 ? 14 : (saved & 0x0F) + 1));
    Dense(x.data(), in, batch, w, y.data(), out, false);
    bytes[e] = saved;
    for (size_t b = 0; b < batch; ++b) {
      double mag3 = std::fabs(bias[3]), mag2 = std::fabs(bias[2]);
      for (size_t i = 0; i < in; ++i) {
        mag3 += std::fabs(x[b * in + i] * ref::DecodeWeight(w, 3, i));
        mag2 += std::fabs(x[b * in + i] * ref::DecodeWeight(w, 2, i));
      }
      const double tol = 4.0 * kEps * std::sqrt(in + 2.0);
      // The change is scale·x[5] (one step of the nibble); x[5] is not tiny.
      if (std::fabs(x[b * in + 5]) > 0.05f) {
        CHECK(std::fabs(double{y[b * out + 3]} - y_ref[b * out + 3]) > tol * mag3);
      }
      CHECK(std::fabs(double{y[b * out + 2]} - y_ref[b * out + 2]) <= tol * mag2);
    }
  });
}

}  // namespace
}  // namespace recur::impl::kernels::test
