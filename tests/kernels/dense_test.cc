// Dense vs the double-precision reference on every Highway target.
//
// Tolerance (test_util.h, CheckDenseResult): |y − ref| ≤ 8·√(in + 2)·u·mag,
// u = 2⁻²⁴, mag = Σ_i |x_i·w_i| + |bias| + |y_prev|: the probabilistic
// bound on a sum whose terms pass through at most in + 2 roundings
// (tests/common/tolerance.h, Float32SumBound).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"
#include "test_util.h"

namespace recur::impl::kernels::test {
namespace {

struct DenseCase {
  size_t batch, in, out;
  size_t x_pad, y_pad;  // row stride minus row width
  size_t offset;        // misalignment of x (w, bias, y use offset+1, +2, +3) in floats
  bool bias, accumulate;
};

// One case: random data, the reference and its tolerances once, then Dense
// on every target (ForEachTarget), compared. Returns the number of failed
// outputs (0 = pass).
size_t CheckDense(std::mt19937& rng, const DenseCase& c) {
  const size_t x_stride = c.in + c.x_pad;
  const size_t y_stride = c.out + c.y_pad;
  Buffer x(c.batch * x_stride, c.offset % 4);
  Buffer w(c.out * c.in, (c.offset + 1) % 4);
  Buffer bias(c.out, (c.offset + 2) % 4);
  Buffer y(c.batch * y_stride, (c.offset + 3) % 4);
  FillUniform(rng, x.data(), x.size(), -1.0f, 1.0f);
  FillUniform(rng, w.data(), w.size(), -1.0f, 1.0f);
  FillUniform(rng, bias.data(), bias.size(), -1.0f, 1.0f);
  // y: previous values (read only when accumulating; NaN otherwise so a
  // stray read shows up), kGuard in the stride padding.
  for (size_t b = 0; b < c.batch; ++b) {
    float* row = y.data() + b * y_stride;
    if (c.accumulate) {
      FillUniform(rng, row, c.out, -1.0f, 1.0f);
    } else {
      std::fill(row, row + c.out, std::numeric_limits<float>::quiet_NaN());
    }
    std::fill(row + c.out, row + y_stride, kGuard);
  }
  const std::vector<float> y_prev(y.data(), y.data() + y.size());
  std::vector<float> y_ref = y_prev;
  const float* bias_ptr = c.bias ? bias.data() : nullptr;
  ref::Dense(x.data(), x_stride, c.batch, w.data(), bias_ptr, c.in, c.out, y_ref.data(),
             y_stride, c.accumulate);
  const float* wp = w.data();
  const std::vector<double> tol = DenseTolerances(
      x.data(), x_stride, c.batch, c.in, c.out,
      [&](size_t o, size_t i) { return std::fabs(double{wp[o * c.in + i]}); }, bias_ptr,
      c.accumulate, y_prev, y_stride);
  size_t failures = 0;
  ForEachTarget([&](const std::string&) {
    std::copy(y_prev.begin(), y_prev.end(), y.data());
    Dense(x.data(), x_stride, c.batch, w.data(), bias_ptr, c.in, c.out, y.data(), y_stride,
          c.accumulate);
    failures += CheckDenseWithin(c.batch, c.out, y_ref, tol, y, y_stride);
  });
  return failures;
}

#define RECUR_CHECK_DENSE(rng, c)                                                     \
  do {                                                                                \
    INFO("batch=" << (c).batch << " in=" << (c).in << " out=" << (c).out              \
                  << " x_pad=" << (c).x_pad << " y_pad=" << (c).y_pad                 \
                  << " offset=" << (c).offset << " bias=" << (c).bias                 \
                  << " accumulate=" << (c).accumulate);                               \
    CHECK(CheckDense(rng, c) == 0);                                                   \
  } while (0)

TEST_CASE("Dense: odd shapes, strides, bias and accumulate, all targets") {
  const size_t batches[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 64};
  const size_t ins[] = {0, 1, 3, 17, 33, 255, 257};
  const size_t outs[] = {1, 3, 17, 33, 255, 257};
  const size_t pads[] = {0, 1, 5, 16};
  std::mt19937 rng(1234);
  size_t k = 0;
  for (size_t batch : batches) {
    for (size_t in : ins) {
      for (size_t out : outs) {
        ++k;
        // Cycle the flags, pads and offsets through the shapes (a full product
        // would be 64× the work for no extra code paths).
        DenseCase c{batch,     in, out, pads[k % 4], pads[(k / 4) % 4], k % 4, (k / 2) % 2 == 0,
                    k % 2 == 0};
        RECUR_CHECK_DENSE(rng, c);
      }
    }
  }
}

TEST_CASE("Dense: in swept 0..64 plus 256 and 1024, every flag combination") {
  std::vector<size_t> ins;
  for (size_t i = 0; i <= 64; ++i) ins.push_back(i);
  ins.push_back(256);
  ins.push_back(1024);
  const size_t batches[] = {1, 2, 6, 7};
  const size_t outs[] = {1, 4, 5, 8, 9, 13};
  std::mt19937 rng(99);
  size_t k = 0;
  for (size_t in : ins) {
    for (size_t batch : batches) {
      for (size_t out : outs) {
        ++k;
        for (int flags = 0; flags < 4; ++flags) {
          DenseCase c{batch, in, out, 3, 2, (k + flags) % 4, (flags & 1) != 0, (flags & 2) != 0};
          RECUR_CHECK_DENSE(rng, c);
        }
      }
    }
  }
}

TEST_CASE("Dense: large batches (AVX-512 batch panels plus leftover rows)") {
  // On AVX-512, full panels of 32 rows with out >= 32 take the packed
  // outer-product path (8 packed at a time: 290 rows = 8 + 1 panels + 2 rows);
  // leftover rows and other targets use row tiles.
  const size_t batches[] = {16, 31, 32, 33, 47, 63, 64, 65, 96, 100, 290};
  const size_t ins[] = {0, 1, 3, 17, 64, 255};
  const size_t outs[] = {8, 32, 33, 39, 64, 100};
  std::mt19937 rng(31);
  size_t k = 0;
  for (size_t batch : batches) {
    for (size_t in : ins) {
      for (size_t out : outs) {
        ++k;
        DenseCase c{batch,     in, out, (k % 3) * 3, (k / 3) % 3 * 5, k % 4, (k / 2) % 2 == 0,
                    k % 2 == 0};
        RECUR_CHECK_DENSE(rng, c);
      }
    }
  }
}

TEST_CASE("Dense: real sizes and L2 out-chunking") {
  std::mt19937 rng(7);
  // Paper-MNIST-like and benchmark shapes.
  RECUR_CHECK_DENSE(rng, (DenseCase{64, 256, 1024, 0, 0, 0, true, false}));
  RECUR_CHECK_DENSE(rng, (DenseCase{64, 1024, 256, 0, 0, 1, true, true}));
  RECUR_CHECK_DENSE(rng, (DenseCase{1, 1024, 1000, 0, 0, 2, true, false}));
  // batch > rows-per-tile and in large enough that `out` is split into
  // several L2 chunks (512 KiB of w each), including a partial last one.
  RECUR_CHECK_DENSE(rng, (DenseCase{13, 2048, 150, 8, 4, 3, true, true}));
  RECUR_CHECK_DENSE(rng, (DenseCase{9, 4096, 71, 0, 1, 1, false, false}));
  RECUR_CHECK_DENSE(rng, (DenseCase{70, 2048, 75, 1, 3, 2, true, true}));
}

TEST_CASE("Dense: never writes outside y rows, even with wide stride padding") {
  std::mt19937 rng(5);
  for (size_t out = 1; out <= 20; ++out) {
    for (size_t batch : {1, 3, 7}) {
      RECUR_CHECK_DENSE(rng,
                        (DenseCase{batch, 19, out, 1, 37, out % 4, out % 2 == 0, out % 3 == 0}));
    }
  }
}

TEST_CASE("Dense: the harness detects a wrong output") {
  // Sanity check of the harness itself: a wrong answer must fail it. Perturb
  // one weight after the reference and expect a mismatch in that output.
  const size_t in = 64, out = 8;
  std::vector<float> x(in, 1.0f), w(out * in, 0.5f), y(out), y_ref(out);
  ref::Dense(x.data(), in, 1, w.data(), nullptr, in, out, y_ref.data(), out, false);
  w[3 * in + 5] += 0.01f;
  Dense(x.data(), in, 1, w.data(), nullptr, in, out, y.data(), out, false);
  const double tol = recur::impl::testing::Float32SumBound(DenseRoundings(in)) * (0.5 * in);
  CHECK(std::fabs(double{y[3]} - y_ref[3]) > tol);
  CHECK(std::fabs(double{y[2]} - y_ref[2]) <= tol);
}

}  // namespace
}  // namespace recur::impl::kernels::test
