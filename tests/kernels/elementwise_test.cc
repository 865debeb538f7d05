// Element-wise kernels vs the double-precision references on every Highway
// target, for n = 0..64 (2 × 2 × 16 f32 lanes of AVX-512) and 255, 256, 1023,
// 1024, 1031, misaligned by 0..3 floats, out of place and in place (y == x).
//
// Tolerances, derived at each test (u = 2⁻²⁴; the references run in double
// and round once to f32, u·|ref|; tests/common/tolerance.h):
//   Relu, Add, Scale, CompensatedAdd   exact: the same single f32 operations
//   Gelu, EluPlusOne, AffineExp        the function's stated error plus the
//                                      argument's roundings
//   LayerNorm, RmsNorm, Softmax, LogSoftmax, Dot   Float32SumBound for the sums
//   AffineMax, AffineExpAccumulate   see their test
//   CausalConvSilu                   the sum's roundings through silu, and Silu's
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch/target_limit.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/elementwise_ref.h"
#include "test_util.h"

namespace recur::impl::kernels::test {
namespace {

std::vector<size_t> Sizes() {
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 64; ++n) sizes.push_back(n);
  for (size_t n : {255, 256, 1023, 1024, 1031}) sizes.push_back(n);
  return sizes;
}

using Kernel = std::function<void(const float*, float*, size_t)>;
using Fill = std::function<void(std::mt19937&, float*, size_t)>;
// Allowed |got − want| given the input x[i] and the reference value.
using Tol = std::function<double(const float* x, size_t n, size_t i, double want)>;

// Runs kernel and reference on the same input for every size, offset and
// in/out-of-place; returns the number of failures.
size_t CheckRowKernel(const Kernel& kernel, const Kernel& reference, const Fill& fill,
                      const Tol& tol) {
  std::mt19937 rng(42);
  size_t failures = 0;
  for (size_t n : Sizes()) {
    for (size_t offset = 0; offset < 4; ++offset) {
      for (bool in_place : {false, true}) {
        Buffer x(n, offset), y(n, (offset + 1) % 4);
        fill(rng, x.data(), n);
        std::vector<float> x0(x.data(), x.data() + n), want(n);
        reference(x0.data(), want.data(), n);
        float* out = in_place ? x.data() : y.data();
        kernel(x.data(), out, n);
        for (size_t i = 0; i < n; ++i) {
          const double err = std::fabs(double{out[i]} - want[i]);
          const bool both_nan = std::isnan(out[i]) && std::isnan(want[i]);
          if (!both_nan && !(err <= tol(x0.data(), n, i, want[i]))) {
            if (failures++ < 3) {
              FAIL_CHECK("n=" << n << " offset=" << offset << " in_place=" << in_place
                              << " i=" << i << " x=" << x0[i] << " got " << out[i]
                              << " want " << want[i]);
            }
          }
        }
        if (!in_place) {
          for (size_t i = 0; i < n; ++i) {
            if (!Buffer::SameBits(x[i], x0[i])) {
              ++failures;
              FAIL_CHECK("input modified, n=" << n);
              break;
            }
          }
        }
        if (!x.GuardsIntact() || !y.GuardsIntact()) {
          ++failures;
          FAIL_CHECK("wrote outside the row, n=" << n << " offset=" << offset);
        }
      }
    }
  }
  return failures;
}

// Uniform in [lo, hi] with a few special values sprinkled in.
Fill UniformWith(float lo, float hi, std::vector<float> specials = {}) {
  return [=](std::mt19937& rng, float* p, size_t n) {
    FillUniform(rng, p, n, lo, hi);
    for (size_t k = 0; k < specials.size() && k < n; ++k) p[(k * 7 + 3) % n] = specials[k];
  };
}

// Relu, Add and Scale: one f32 operation (compare/select, add, multiply),
// the same one in the kernel and the reference: the same bits.
double Exact(const float*, size_t, size_t, double) { return 0.0; }

constexpr double kU = recur::impl::testing::kFloat32Unit;
// |Erf − erf| ≤ 2e-7: Erf's stated accuracy (elementwise-inl.h), which
// erf_test.cc checks over ~5M arguments on every target.
constexpr double kErfAbsError = 2e-7;
// Highway's Exp is within kExpUlps for normal results; a result below
// FLT_MIN (x < −87.3) may be flushed to 0.
constexpr double kExpAbsFloor = 1.1754943508222875e-38;

TEST_CASE("Relu") {
  ForEachTarget([](const std::string&) {
    CHECK(CheckRowKernel(Relu, ref::Relu, UniformWith(-1, 1, {0.0f, -0.0f, 1e-30f}), Exact) ==
          0);
  });
}

TEST_CASE("Gelu (exact erf)") {
  const std::vector<float> specials = {0.0f,     -0.0f, 1e-20f, -1e-20f, 30.0f, -30.0f,
                                       1.31201f, -1.312f, 1.3120f, -8.5f, 1e30f, -1e30f};
  ForEachTarget([&](const std::string&) {
    // y = h·Erf(x·c) + h, h = x/2 exact, c = fl(1/√2): Erf's error and the
    // argument's two roundings (2u·|z|, erf'(z)·|z| ≤ 0.49) give
    // |h|·(kErfAbsError + u); h·Erf + h rounds once or twice (u·|h| + u·|y|),
    // the reference once (u·|y|).
    CHECK(CheckRowKernel(Gelu, ref::Gelu, UniformWith(-8, 8, specials),
                         [](const float* x, size_t, size_t i, double want) {
                           return (kErfAbsError / 2 + kU) * std::fabs(x[i]) +
                                  2 * kU * std::fabs(want);
                         }) == 0);
  });
}

TEST_CASE("EluPlusOne") {
  const std::vector<float> specials = {0.0f, -0.0f, 1e-30f, -1e-30f, -100.0f, -200.0f, 80.0f};
  ForEachTarget([&](const std::string&) {
    // x ≤ 0: Exp within kExpUlps (2u·|y| each), the reference within half an
    // ulp; x > 0: x + 1, one rounding in both.
    CHECK(CheckRowKernel(EluPlusOne, ref::EluPlusOne, UniformWith(-10, 10, specials),
                         [](const float*, size_t, size_t, double want) {
                           return (2 * recur::impl::testing::kExpUlps + 1) * kU * std::fabs(want) +
                                  kExpAbsFloor;
                         }) == 0);
  });
}

// Sigmoid and Silu, which share 1 + e^(−x): Exp of −x within kExpUlps (2u·e
// each), 1 + e and the division one rounding each (Silu's x is exact), the
// reference within half an ulp; below −88 the kernels' argument is clamped (a
// result under FLT_MIN, the floor). NaN propagates.
template <class Kernel, class Ref>
void CheckOverOnePlusExp(Kernel kernel, Ref reference, const std::vector<float>& specials) {
  CHECK(CheckRowKernel(kernel, reference, UniformWith(-30, 30, specials),
                       [](const float*, size_t, size_t, double want) {
                         return (2 * recur::impl::testing::kExpUlps + 3) * kU * std::fabs(want) +
                                kExpAbsFloor;
                       }) == 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float y = 0.0f;
  kernel(&nan, &y, 1);
  CHECK(std::isnan(y));
}

TEST_CASE("Sigmoid") {
  const std::vector<float> specials = {0.0f,   -0.0f, 1e-30f, -1e-30f, -87.0f, -88.0f,
                                       -89.0f, -200.0f, 17.0f, 88.0f,  89.0f,  200.0f};
  ForEachTarget([&](const std::string&) { CheckOverOnePlusExp(Sigmoid, ref::Sigmoid, specials); });
}

TEST_CASE("Silu") {
  const std::vector<float> specials = {0.0f,  -0.0f, 1e-30f, -1e-30f, -20.0f, -87.0f, -88.0f,
                                       17.0f, 88.0f, 89.0f,  200.0f};
  ForEachTarget([&](const std::string&) {
    CheckOverOnePlusExp(Silu, ref::Silu, specials);
    // Below −88: −0 (|x·σ(x)| < 6e-37 there).
    float y = 1.0f;
    for (float x : {-88.5f, -200.0f, -std::numeric_limits<float>::max()}) {
      CAPTURE(x);
      Silu(&x, &y, 1);
      CHECK(y == 0.0f);
      CHECK(std::signbit(y));
    }
  });
}

// The convolution's sum s = bias + Σ_j w_j·x_j rounds at most kernel + 1
// times (u·(|bias| + Σ|w_j·x_j|) each), |silu'(s)| ≤ 1.1 carries that to y, and
// silu itself is Silu's error above.
TEST_CASE("CausalConvSilu: kernels of 1 to 5 taps, with and without bias, all targets") {
  std::mt19937 rng(8);
  for (size_t kernel = 1; kernel <= 5; ++kernel) {
    for (size_t n : Sizes()) {
      for (bool with_bias : {false, true}) {
        std::vector<Buffer> rows;
        rows.reserve(kernel);
        for (size_t j = 0; j < kernel; ++j) rows.emplace_back(n, (j + n) % 4);
        Buffer weight(n * kernel, n % 4), bias(n, (n + 1) % 4), y(n, (n + 2) % 4);
        const float* in[5];
        for (size_t j = 0; j < kernel; ++j) {
          FillUniform(rng, rows[j].data(), n, -3.0f, 3.0f);
          in[j] = rows[j].data();
        }
        FillUniform(rng, weight.data(), n * kernel, -1.0f, 1.0f);
        FillUniform(rng, bias.data(), n, -1.0f, 1.0f);
        const float* b = with_bias ? bias.data() : nullptr;
        std::vector<float> want(n);
        ref::CausalConvSilu(in, weight.data(), b, kernel, want.data(), n);
        std::vector<double> tol(n);
        for (size_t c = 0; c < n; ++c) {
          double mag = b ? std::fabs(double{b[c]}) : 0.0;
          for (size_t j = 0; j < kernel; ++j) {
            mag += std::fabs(double{weight.data()[c * kernel + j]} * in[j][c]);
          }
          tol[c] = 1.1 * double(kernel + 1) * kU * mag +
                   (2 * recur::impl::testing::kExpUlps + 3) * kU * std::fabs(double{want[c]}) +
                   kExpAbsFloor;
        }
        ForEachTarget([&](const std::string&) {
          CausalConvSilu(in, weight.data(), b, kernel, y.data(), n);
          size_t failures = 0;
          for (size_t c = 0; c < n; ++c) {
            if (!(std::fabs(double{y.data()[c]} - want[c]) <= tol[c]) && failures++ < 3) {
              FAIL_CHECK("kernel=" << kernel << " n=" << n << " bias=" << with_bias << " c=" << c
                                   << " got " << y.data()[c] << " want " << want[c]);
            }
          }
          CHECK(failures == 0);
          CHECK(y.GuardsIntact());
        });
      }
    }
  }
}

TEST_CASE("AffineExp and Scale") {
  const std::vector<float> specials = {0.0f, -0.0f, 1e-30f, -1e-30f, -40.0f, 40.0f};
  ForEachTarget([&](const std::string&) {
    for (const auto& ab : {std::pair{1.0f, 0.0f}, {-1.0f, -2.5f}, {0.35f, 1.75f}}) {
      // Not a structured binding: C++17 lambdas (CAPTURE) cannot capture those (clang).
      const float a = ab.first, b = ab.second;
      CAPTURE(a);
      CAPTURE(b);
      const auto kernel = [a = a, b = b](const float* x, float* y, size_t n) {
        AffineExp(x, a, b, y, n);
      };
      const auto reference = [a = a, b = b](const float* x, float* y, size_t n) {
        ref::AffineExp(x, a, b, y, n);
      };
      // Exp within kExpUlps plus the reference's half ulp, and a·x + b
      // rounded once (FMA) or twice: an absolute error ≤ 2u·(|a·x| + |b|) in
      // the exponent is that relative error in the result.
      CHECK(CheckRowKernel(kernel, reference, UniformWith(-20, 20, specials),
                           [a = a, b = b](const float* x, size_t, size_t i, double want) {
                             const double arg = std::fabs(double{a} * x[i]) + std::fabs(b);
                             return ((2 * recur::impl::testing::kExpUlps + 1) * kU + 2 * kU * arg) *
                                        std::fabs(want) +
                                    kExpAbsFloor;
                           }) == 0);
      const auto scale = [a = a](const float* x, float* y, size_t n) { Scale(x, a, y, n); };
      const auto scale_ref = [a = a](const float* x, float* y, size_t n) {
        ref::Scale(x, a, y, n);
      };
      CHECK(CheckRowKernel(scale, scale_ref, UniformWith(-20, 20, specials), Exact) == 0);
    }
  });
}

// QuantizeS8 equals the reference exactly (the same f32 operations: max,
// 127/max, x·inv, round to nearest even, max/127) and meets its contract:
// |x − s·q| ≤ QuantizeS8HalfStep(s) = (s/2)·(1 + 762u) (test_util.h),
// max|x| maps to ±127, a zero row to s = 0.
TEST_CASE("QuantizeS8") {
  const std::vector<float> specials = {0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f, -0.5f};
  ForEachTarget([&](const std::string&) {
    std::mt19937 rng(7);
    size_t failures = 0;
    for (size_t n : Sizes()) {
      for (size_t offset = 0; offset < 4; ++offset) {
        for (float range : {1e-3f, 1.0f, 300.0f}) {
          Buffer x(n, offset);
          UniformWith(-range, range, specials)(rng, x.data(), n);
          std::vector<int8_t> storage(n + offset + 32, int8_t{99}), want(n);
          int8_t* q = storage.data() + offset + 16;
          const float s = QuantizeS8(x.data(), q, n);
          const float want_s = ref::QuantizeS8(x.data(), want.data(), n);
          if (s != want_s) ++failures;
          float max = 0.0f;
          for (size_t i = 0; i < n; ++i) {
            max = std::max(max, std::fabs(x[i]));
            if (q[i] != want[i]) ++failures;
            if (!(std::fabs(x[i] - double{s} * q[i]) <= QuantizeS8HalfStep(s))) ++failures;
          }
          for (size_t i = 0; i < offset + 16; ++i) failures += storage[i] != 99;
          for (size_t i = offset + 16 + n; i < storage.size(); ++i) failures += storage[i] != 99;
          if (max > 0.0f && s != max / 127.0f) ++failures;
        }
      }
    }
    CHECK(failures == 0);
    std::vector<float> zeros(40, 0.0f);
    std::vector<int8_t> q(40, int8_t{5});
    CHECK(QuantizeS8(zeros.data(), q.data(), zeros.size()) == 0.0f);
    CHECK(std::all_of(q.begin(), q.end(), [](int8_t v) { return v == 0; }));
    const float edge[3] = {-2.0f, 1.0f, 2.0f};
    int8_t qe[3];
    CHECK(QuantizeS8(edge, qe, 3) == 2.0f / 127.0f);
    CHECK(qe[0] == -127);
    CHECK(qe[1] == 64);  // 63.5 rounds to even
    CHECK(qe[2] == 127);
    // So small that 127 / max overflows: a zero row, as the reference.
    const float tiny[3] = {1e-38f, 0.0f, -2e-39f};
    int8_t qt[3] = {5, 5, 5};
    int8_t qt_ref[3] = {7, 7, 7};
    CHECK(QuantizeS8(tiny, qt, 3) == 0.0f);
    CHECK(ref::QuantizeS8(tiny, qt_ref, 3) == 0.0f);
    CHECK((qt[0] == 0 && qt[1] == 0 && qt[2] == 0));
    CHECK((qt_ref[0] == 0 && qt_ref[1] == 0 && qt_ref[2] == 0));
  });
}

// AffineMax: the kernel rounds a·x + b once (FMA) or as the reference does
// (a·x, then + b); the two differ by at most u·|a·x + b| + (u·|a·x| +
// u·|a·x + b|) ≤ 3u·l, l = |a·x| + |b|, and max keeps that. So m is at least
// a·x + b − 2u·l: e = exp(a·x + b − m) ≤ exp(2u·l). The accumulation: the
// exponent fl(fl(a·x + b) − m) is off by ≤ 2u·l + u·(l + |m|) ≤ 3u·(l + |m|),
// Exp by kExpUlps (2u each) — both relative in e; e·v rounds once without FMA
// (u·e·|v|), the add onto num/den once (u·|result|); the reference is double.
TEST_CASE("AffineMax and AffineExpAccumulate (AFT's sums)") {
  ForEachTarget([](const std::string&) {
    std::mt19937 rng(11);
    size_t failures = 0;
    for (const auto& [a, b] : {std::pair{1.0f, 0.0f}, {1.0f, -0.75f}, {-0.6f, 0.0f}}) {
      for (size_t n : Sizes()) {
        for (size_t offset = 0; offset < 4; ++offset) {
          Buffer x(n, offset), v(n, (offset + 1) % 4), m(n, (offset + 2) % 4),
              num(n, (offset + 3) % 4), den(n, offset);
          FillUniform(rng, x.data(), n, -8, 8);
          FillUniform(rng, v.data(), n, -2, 2);
          FillUniform(rng, m.data(), n, -8, 8);
          FillUniform(rng, num.data(), n, -1, 1);
          FillUniform(rng, den.data(), n, 0, 2);
          std::vector<float> m_want(m.data(), m.data() + n);
          ref::AffineMax(x.data(), a, b, m_want.data(), n);
          AffineMax(x.data(), a, b, m.data(), n);
          std::vector<double> num_want(num.data(), num.data() + n),
              den_want(den.data(), den.data() + n);
          ref::AffineExpAccumulate(x.data(), a, b, m.data(), v.data(), num_want.data(),
                                   den_want.data(), n);
          AffineExpAccumulate(x.data(), a, b, m.data(), v.data(), num.data(), den.data(), n);
          for (size_t i = 0; i < n; ++i) {
            const double l = std::fabs(double{a} * x[i]) + std::fabs(b);
            const double e = std::exp(double{a} * x[i] + b - m[i]);  // ≤ 1: m is the max
            const double e_rel =
                2 * recur::impl::testing::kExpUlps * kU + 3 * kU * (l + std::fabs(m[i]));
            const bool ok = std::fabs(m[i] - m_want[i]) <= 3 * kU * l &&
                            e <= std::exp(2 * kU * l) * (1 + kU) &&
                            std::fabs(num[i] - num_want[i]) <=
                                (e_rel + kU) * e * std::fabs(v[i]) + kU * std::fabs(num_want[i]) &&
                            std::fabs(den[i] - den_want[i]) <=
                                e_rel * e + kU * std::fabs(den_want[i]);
            if (!ok && failures++ < 3) {
              FAIL_CHECK("a=" << a << " b=" << b << " n=" << n << " i=" << i << " num "
                              << num[i] << " want " << num_want[i] << " den " << den[i]
                              << " want " << den_want[i]);
            }
          }
          for (const Buffer* buf : {&x, &v, &m, &num, &den}) {
            if (!buf->GuardsIntact()) {
              ++failures;
              FAIL_CHECK("wrote outside the row, n=" << n);
            }
          }
        }
      }
    }
    CHECK(failures == 0);
  });
}

TEST_CASE("Relu, Gelu and EluPlusOne propagate NaN") {
  ForEachTarget([](const std::string&) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (const Kernel& f : {Kernel(Relu), Kernel(Gelu), Kernel(EluPlusOne)}) {
      float x[5] = {-1.0f, nan, 2.0f, -nan, 0.5f};
      float y[5];
      f(x, y, 5);
      CHECK(std::isnan(y[1]));
      CHECK(std::isnan(y[3]));
      CHECK(!std::isnan(y[0]));
    }
  });
}

TEST_CASE("CompensatedAdd: equals the reference, and keeps long sums exact") {
  ForEachTarget([&](const std::string&) {
    std::mt19937 rng(11);
    for (size_t n = 0; n <= 40; ++n) {
      CAPTURE(n);
      Buffer x(n, n % 4), sum(n, (n + 1) % 4), comp(n, (n + 2) % 4);
      std::vector<float> sum_ref(n), comp_ref(n);
      FillUniform(rng, sum.data(), n, 1e3f, 1e4f);
      FillUniform(rng, comp.data(), n, -1e-4f, 1e-4f);
      std::copy(sum.data(), sum.data() + n, sum_ref.begin());
      std::copy(comp.data(), comp.data() + n, comp_ref.begin());
      for (int rep = 0; rep < 3; ++rep) {
        FillUniform(rng, x.data(), n, -1.0f, 1.0f);
        ref::CompensatedAdd(x.data(), sum_ref.data(), comp_ref.data(), n);
        CompensatedAdd(x.data(), sum.data(), comp.data(), n);
      }
      // The reference's f32 operations, in its order: the same bits.
      for (size_t i = 0; i < n; ++i) {
        CHECK(sum[i] == sum_ref[i]);
        CHECK(comp[i] == comp_ref[i]);
      }
      CHECK(x.GuardsIntact());
      CHECK(sum.GuardsIntact());
      CHECK(comp.GuardsIntact());
    }
    // 10^6 additions of 0.1f: a plain float sum is off by ~1%, the compensated
    // one by (2u + O(n·u²))·Σ|x| (Kahan; n·u² = 0.06u here): within 3u.
    float sum = 0, comp = 0, plain = 0;
    const float tenth = 0.1f;
    for (int i = 0; i < 1000000; ++i) {
      CompensatedAdd(&tenth, &sum, &comp, 1);
      plain += tenth;
    }
    const double exact = 1e6 * double{tenth};
    CHECK(std::fabs(sum - exact) <= 3 * kU * exact);
    CHECK(std::fabs(plain - exact) > 1e-3 * exact);  // what the compensation is for
  });
}

TEST_CASE("Add, including y aliasing a or b") {
  ForEachTarget([](const std::string&) {
    std::mt19937 rng(3);
    size_t failures = 0;
    for (size_t n : Sizes()) {
      for (size_t offset = 0; offset < 4; ++offset) {
        for (int alias = 0; alias < 3; ++alias) {  // 0: none, 1: y == a, 2: y == b
          Buffer a(n, offset), b(n, (offset + 1) % 4), y(n, (offset + 2) % 4);
          FillUniform(rng, a.data(), n, -1, 1);
          FillUniform(rng, b.data(), n, -1, 1);
          std::vector<float> want(n);
          ref::Add(a.data(), b.data(), want.data(), n);
          float* out = alias == 0 ? y.data() : alias == 1 ? a.data() : b.data();
          Add(a.data(), b.data(), out, n);
          for (size_t i = 0; i < n; ++i) {
            if (out[i] != want[i] && failures++ < 3) {
              FAIL_CHECK("n=" << n << " i=" << i << " alias=" << alias);
            }
          }
          if (!a.GuardsIntact() || !b.GuardsIntact() || !y.GuardsIntact()) {
            ++failures;
            FAIL_CHECK("wrote outside, n=" << n);
          }
        }
      }
    }
    CHECK(failures == 0);
  });
}

TEST_CASE("LayerNorm, with and without gamma/beta, large mean") {
  ForEachTarget([](const std::string&) {
    std::mt19937 rng(11);
    size_t failures = 0;
    for (size_t n : Sizes()) {
      for (int variant = 0; variant < 8; ++variant) {
        const bool use_gamma = variant & 1, use_beta = variant & 2;
        const float center = (variant & 4) ? 1000.0f : 0.0f;  // ill-conditioned mean
        const size_t offset = (n + variant) % 4;
        const bool in_place = (n + variant / 4) % 2 == 0;
        Buffer x(n, offset), y(n, (offset + 1) % 4), g(n, (offset + 2) % 4),
            bt(n, (offset + 3) % 4);
        FillUniform(rng, x.data(), n, center - 1.0f, center + 1.0f);
        FillUniform(rng, g.data(), n, 0.5f, 1.5f);
        FillUniform(rng, bt.data(), n, -1.0f, 1.0f);
        const float* gamma = use_gamma ? g.data() : nullptr;
        const float* beta = use_beta ? bt.data() : nullptr;
        const float eps = 1e-5f;
        std::vector<float> x0(x.data(), x.data() + n), want(n);
        ref::LayerNorm(x0.data(), gamma, beta, eps, want.data(), n);
        float* out = in_place ? x.data() : y.data();
        LayerNorm(x.data(), gamma, beta, eps, out, n);
        // The kernel: μ = Σx·fl(1/n), v = Σ(x − μ)²·fl(1/n), r = 1/√(v + eps),
        // y = (x − μ)·r·g + b, in f32. Its mean is off by
        // Δμ ≤ Float32SumBound(n + 2)·mean|x|; its variance (a sum of
        // positive terms, each rounded 3 times before it: x − μ, the square)
        // by δv ≤ Float32SumBound(n + 5) relative (Δμ moves it only to second
        // order: Σ(x − μ) = 0); r by δv/2 + 3u (add, sqrt, divide). So
        // |Δy| ≤ |g|·r·(Δμ + u·|x − μ|) + |y − b|·(δv/2 + 5u) (the r error and
        // ·r, ·g) + 2u·|y| (+ b, the reference's rounding).
        double mean = 0, mean_abs = 0, var = 0;
        for (float v : x0) mean += v;
        for (float v : x0) mean_abs += std::fabs(v);
        mean = n ? mean / n : 0;
        mean_abs = n ? mean_abs / n : 0;
        for (float v : x0) var += (v - mean) * (v - mean);
        const double rstd = n ? 1 / std::sqrt(var / n + eps) : 1.0;
        const double d_mean = recur::impl::testing::Float32SumBound(n + 2.0) * mean_abs;
        const double d_var = recur::impl::testing::Float32SumBound(n + 5.0);
        for (size_t i = 0; i < n; ++i) {
          const double gi = gamma ? std::fabs(gamma[i]) : 1.0, bi = beta ? beta[i] : 0.0;
          const double tol = gi * rstd * (d_mean + kU * std::fabs(x0[i] - mean)) +
                             std::fabs(want[i] - bi) * (d_var / 2 + 5 * kU) +
                             2 * kU * std::fabs(want[i]);
          const double err = std::fabs(double{out[i]} - want[i]);
          if (!(err <= tol) && failures++ < 3) {
            FAIL_CHECK("n=" << n << " variant=" << variant << " i=" << i << " got " << out[i]
                            << " want " << want[i]);
          }
        }
        if (!x.GuardsIntact() || !y.GuardsIntact()) {
          ++failures;
          FAIL_CHECK("wrote outside, n=" << n);
        }
      }
    }
    CHECK(failures == 0);
  });
}

TEST_CASE("RmsNorm, with and without gamma, large and tiny magnitudes") {
  ForEachTarget([](const std::string&) {
    std::mt19937 rng(12);
    size_t failures = 0;
    for (size_t n : Sizes()) {
      for (int variant = 0; variant < 6; ++variant) {
        const bool use_gamma = variant & 1;
        // x around 0, around 1000 (all one sign) and tiny (eps dominates).
        const float scale = variant / 2 == 1 ? 1000.0f : variant / 2 == 2 ? 1e-3f : 1.0f;
        const float lo = variant / 2 == 1 ? scale : -scale;
        const size_t offset = (n + variant) % 4;
        const bool in_place = (n + variant / 2) % 2 == 0;
        Buffer x(n, offset), y(n, (offset + 1) % 4), g(n, (offset + 2) % 4);
        FillUniform(rng, x.data(), n, lo, lo + 2.0f * scale);
        FillUniform(rng, g.data(), n, 0.5f, 1.5f);
        const float* gamma = use_gamma ? g.data() : nullptr;
        const float eps = 1e-5f;
        std::vector<float> x0(x.data(), x.data() + n), want(n);
        ref::RmsNorm(x0.data(), gamma, eps, want.data(), n);
        float* out = in_place ? x.data() : y.data();
        RmsNorm(x.data(), gamma, eps, out, n);
        // The kernel: m = Σx²/n (positive terms, each squared: a relative
        // error δm ≤ Float32SumBound(n + 2)), r = 1/√(m + eps) off by
        // δm/2 + 3u (add, sqrt, divide), y = x·r·g two more roundings; the
        // reference rounds once: |Δy| ≤ |y|·(δm/2 + 6u).
        const double d_sum = recur::impl::testing::Float32SumBound(n + 2.0);
        for (size_t i = 0; i < n; ++i) {
          const double tol = std::fabs(want[i]) * (d_sum / 2 + 6 * kU);
          const double err = std::fabs(double{out[i]} - want[i]);
          if (!(err <= tol) && failures++ < 3) {
            FAIL_CHECK("n=" << n << " variant=" << variant << " i=" << i << " got " << out[i]
                            << " want " << want[i]);
          }
        }
        if (!x.GuardsIntact() || !y.GuardsIntact()) {
          ++failures;
          FAIL_CHECK("wrote outside, n=" << n);
        }
      }
    }
    CHECK(failures == 0);
  });
}

TEST_CASE("Softmax") {
  ForEachTarget([](const std::string&) {
    // y_i = e_i·fl(1/Σe), e_i = Exp(fl(x_i − max)): e_i is off by kExpUlps
    // (2u each) and by the rounding of x_i − max (u·|x_i − max|, relative in
    // e_i); the sum of positive terms by Float32SumBound(n + 1) relative, plus
    // its terms' largest relative error; then 1/Σ and the product (2u), the
    // reference (u). Results below FLT_MIN may flush: kExpAbsFloor.
    double max = 0, spread = 0;  // of the row being checked: max_j x_j, max_j |x_j − max|
    auto tol = [&max, &spread](const float* x, size_t n, size_t i, double want) {
      if (i == 0) {  // CheckRowKernel asks for i = 0, 1, … of each row in turn
        max = *std::max_element(x, x + n);
        spread = 0;
        for (size_t j = 0; j < n; ++j) spread = std::max(spread, max - x[j]);
      }
      const double e_rel = 2 * recur::impl::testing::kExpUlps * kU;
      const double rel = e_rel + kU * (max - x[i]) + e_rel + kU * spread +
                         recur::impl::testing::Float32SumBound(n + 1.0) + 3 * kU;
      return rel * std::fabs(want) + kExpAbsFloor;
    };
    CHECK(CheckRowKernel(Softmax, ref::Softmax, UniformWith(-10, 10), tol) == 0);
    // Large logits: only correct with the max subtracted.
    CHECK(CheckRowKernel(Softmax, ref::Softmax, UniformWith(990, 1010), tol) == 0);
    CHECK(CheckRowKernel(Softmax, ref::Softmax, UniformWith(-1010, -990), tol) == 0);
  });
}

TEST_CASE("LogSoftmax") {
  ForEachTarget([](const std::string&) {
    // y_i = fl(fl(x_i − max) − fl(log s)), s = Σ Exp(x_j − max) ∈ [1, n]:
    // x_i − max rounds by u·|x_i − max|; s is off by δs = Float32SumBound(n)
    // + 2u·kExpUlps + u·max_j|x_j − max| relative, which log turns into δs
    // absolute, plus log's kLogUlps (2u·log n each); then the subtraction and
    // the reference round by u·|y| each.
    double max = 0, spread = 0;  // of the row being checked: max_j x_j, max_j |x_j − max|
    auto tol = [&max, &spread](const float* x, size_t n, size_t i, double want) {
      if (i == 0) {  // CheckRowKernel asks for i = 0, 1, … of each row in turn
        max = *std::max_element(x, x + n);
        spread = 0;
        for (size_t j = 0; j < n; ++j) spread = std::max(spread, max - x[j]);
      }
      const double d_s = recur::impl::testing::Float32SumBound(n) +
                         2 * recur::impl::testing::kExpUlps * kU + kU * spread;
      return kU * (max - x[i]) + d_s +
             2 * recur::impl::testing::kLogUlps * kU * std::log(double(n)) +
             2 * kU * std::fabs(want);
    };
    CHECK(CheckRowKernel(LogSoftmax, ref::LogSoftmax, UniformWith(-10, 10), tol) == 0);
    CHECK(CheckRowKernel(LogSoftmax, ref::LogSoftmax, UniformWith(990, 1010), tol) == 0);
    CHECK(CheckRowKernel(LogSoftmax, ref::LogSoftmax, UniformWith(-200, 50), tol) == 0);
  });
}

TEST_CASE("Dot") {
  ForEachTarget([](const std::string&) {
    std::mt19937 rng(17);
    size_t failures = 0;
    for (size_t n : Sizes()) {
      for (size_t offset = 0; offset < 4; ++offset) {
        Buffer a(n, offset), b(n, (offset + 3) % 4);
        FillUniform(rng, a.data(), n, -1, 1);
        FillUniform(rng, b.data(), n, -1, 1);
        const double want = ref::Dot(a.data(), b.data(), n);
        double mag = 0;
        for (size_t i = 0; i < n; ++i) mag += std::fabs(double{a[i]} * b[i]);
        const double got = Dot(a.data(), b.data(), n);
        // Four FMA accumulators, then their sum: at most n + 2 roundings per term.
        if (!(std::fabs(got - want) <= recur::impl::testing::Float32SumBound(n + 2.0) * mag) &&
            failures++ < 3) {
          FAIL_CHECK("n=" << n << " got " << got << " want " << want);
        }
      }
    }
    CHECK(failures == 0);
  });
}

TEST_CASE("SimdTargetName follows dynamic dispatch") {
  const std::string best = SimdTargetName();
  CHECK(!best.empty());
  ForEachTarget([](const std::string& name) { CHECK(name == SimdTargetName()); });
  CHECK(best == SimdTargetName());
  MESSAGE("dispatch picks " << best);
}

TEST_CASE("AVX3_VNNI: a ceiling of AVX3 turns VNNI off, AVX3_VNNI and none keep it") {
  const std::string best = SimdTargetName();
  const char* env = std::getenv(kMaxSimdTargetVariable);
  if (!HWY_ARCH_X86 || !CpuHasAvx512Vnni() || best != kAvx3VnniName) {
    MESSAGE("not an AVX-512 VNNI CPU at full width here: " << best);
    return;
  }
  REQUIRE(SetMaxSimdTarget("avx3").ok());
  CHECK(std::string(SimdTargetName()) == "AVX3");
  CHECK(!Avx512VnniEnabled());
  REQUIRE(SetMaxSimdTarget("AVX3_VNNI").ok());
  CHECK(std::string(SimdTargetName()) == kAvx3VnniName);
  REQUIRE(SetMaxSimdTarget("AVX2").ok());
  CHECK(std::string(SimdTargetName()) == "AVX2");
  REQUIRE(SetMaxSimdTarget(nullptr).ok());
  CHECK(std::string(SimdTargetName()) == kAvx3VnniName);
  CHECK(Avx512VnniEnabled());
  CHECK(TargetNamesOfBuild().find("AVX3_VNNI, AVX3,") != std::string::npos);
  REQUIRE(SetMaxSimdTarget(env).ok());
}

}  // namespace
}  // namespace recur::impl::kernels::test
