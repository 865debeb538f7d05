// Helpers shared by the kernel tests: per-target iteration, misaligned
// buffers with guard zones, random data.
#ifndef RECUR_TESTS_KERNELS_TEST_UTIL_H_
#define RECUR_TESTS_KERNELS_TEST_UTIL_H_

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hwy/highway.h"
#include "hwy/targets.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"
#include "kernels/dispatch/target_limit.h"
#include "tolerance.h"

namespace recur::impl::kernels::test {

// The environment variable naming Highway targets (comma-separated, as
// hwy::TargetName spells them) that the sweeps leave out: the aarch64 test
// preset leaves out SVE2, whose scalable code SVE also runs, to save time
// under the emulator (docs/testing.md).
inline constexpr char kSkipTargetsVariable[] = "RECUR_TEST_SKIP_TARGETS";

// Highway targets that are both compiled in (HWY_TARGETS) and supported by
// this CPU, less those kSkipTargetsVariable names. Read once, before any
// SetSupportedTargetsForTest call.
inline const std::vector<int64_t>& TestTargets() {
  static const std::vector<int64_t> targets = [] {
    const char* skip_env = std::getenv(kSkipTargetsVariable);
    const std::string skip = "," + std::string(skip_env ? skip_env : "") + ",";
    const int64_t supported = hwy::SupportedTargets();
    std::vector<int64_t> out;
    for (int64_t bits = supported & HWY_TARGETS; bits != 0; bits &= bits - 1) {
      const int64_t target = bits & -bits;
      if (skip.find("," + std::string(hwy::TargetName(target)) + ",") == std::string::npos) {
        out.push_back(target);
      }
    }
    return out;
  }();
  return targets;
}

// The environment variable that shortens the sweeps on arm64 (the aarch64
// test preset sets it: there the kernels run under qemu). A sweep then leaves
// out the cases that only repeat, on arm64's targets, code that another of its
// cases runs: shapes that exist for x86's GEMMs and batch panels, batches the
// arm64 tiles split into the same row blocks as smaller ones, flag
// combinations crossed with every input size. Each sweep says what it leaves
// out and why no arm64 path goes with it (docs/testing.md). Ignored on other
// architectures: the native presets run every case.
inline constexpr char kShortSweepsVariable[] = "RECUR_TEST_SHORT_SWEEPS";

// True on arm64 with kShortSweepsVariable set (not empty, not "0").
inline bool ShortSweeps() {
#if HWY_ARCH_ARM_A64
  static const bool on = [] {
    const char* v = std::getenv(kShortSweepsVariable);
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
#else
  return false;
#endif
}

// Runs f(target_name) once per target with dynamic dispatch pinned to it;
// AVX3 twice on a CPU with AVX512-VNNI: as AVX3_VNNI, then without VNNI.
template <class F>
void ForEachTarget(const F& f) {
  const std::vector<int64_t>& targets = TestTargets();
  REQUIRE(!targets.empty());
  for (int64_t t : targets) {
    hwy::SetSupportedTargetsForTest(t);
    const bool both = HWY_ARCH_X86 && t == HWY_AVX3 && CpuHasAvx512Vnni();
    for (int pass = both ? 0 : 1; pass < 2; ++pass) {
      SetAvx512VnniAllowed(pass == 0);
      const std::string name = pass == 0 ? kAvx3VnniName : hwy::TargetName(t);
      INFO("target ", name);
      f(name);
    }
    SetAvx512VnniAllowed(true);
  }
  hwy::SetSupportedTargetsForTest(0);
}

inline constexpr float kGuard = -12345.678f;
inline constexpr size_t kGuardLen = 32;

// n floats at a pointer `offset` floats past a 64-byte boundary, surrounded by
// kGuardLen guard floats on both sides.
class Buffer {
 public:
  Buffer(size_t n, size_t offset) : n_(n), storage_(n + offset + 2 * kGuardLen + 16, kGuard) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(storage_.data() + kGuardLen);
    const size_t skip = ((64 - addr % 64) % 64) / sizeof(float);
    data_ = storage_.data() + kGuardLen + skip + offset;
  }
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return n_; }
  float& operator[](size_t i) { return data_[i]; }
  float operator[](size_t i) const { return data_[i]; }
  // True if the kGuardLen floats before data() and after data() + size()
  // still hold kGuard.
  bool GuardsIntact() const {
    for (size_t i = 1; i <= kGuardLen; ++i) {
      if (!SameBits(data_[-static_cast<ptrdiff_t>(i)], kGuard)) return false;
      if (!SameBits(data_[n_ + i - 1], kGuard)) return false;
    }
    return true;
  }
  static bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

 private:
  size_t n_;
  std::vector<float> storage_;
  float* data_;
};

inline void FillUniform(std::mt19937& rng, float* p, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  for (size_t i = 0; i < n; ++i) p[i] = dist(rng);
}

// f32 machine epsilon (2^-23) = 2u.
inline constexpr double kEps = 1.1920928955078125e-07;

// QuantizeS8 (s = max/127, q = round(x·(127/max)), all in f32) leaves
// |x − s·q| ≤ s/2 + s·|x/s − x·fl(127/max)|: the three roundings (s, 127/max,
// the product) move x·(127/max) by at most 3u·127 steps, so
// |x − s·q| ≤ (s/2)·(1 + 762u).
inline double QuantizeS8HalfStep(double s) { return 0.5 * s * (1 + 762 * 0x1p-24); }

// Roundings on the longest path of one Dense output's term: in − 1 adds (a
// single accumulator, the longest order a target may use), the product (none
// with FMA), the bias and the accumulate add; `extra` more for an int8
// weight widened to f32 (scale·q).
inline double DenseRoundings(size_t in, size_t extra = 0) { return double(in) + 2 + extra; }

// ref::DecodeWeight of every weight of w, row-major (out × in).
inline std::vector<double> DecodedWeights(const DenseWeights& w) {
  std::vector<double> decoded(size_t{w.out} * w.in);
  for (size_t o = 0; o < w.out; ++o) {
    for (size_t i = 0; i < w.in; ++i) decoded[o * w.in + i] = ref::DecodeWeight(w, o, i);
  }
  return decoded;
}

// ref::Dense(x, x_stride, batch, w, y, y_stride, accumulate) over w's weights
// decoded once (DecodedWeights), which the tolerances take too: the same
// per-output sums (ref::DenseOutput), so the same bits.
inline void RefDense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                     const std::vector<double>& decoded, float* y, size_t y_stride,
                     bool accumulate) {
  for (size_t o = 0; o < w.out; ++o) {
    ref::DenseOutput(x, x_stride, batch, w, o, decoded.data() + o * w.in, y, y_stride, accumulate);
  }
}

// The tolerance of each Dense output against its double reference:
// recur::impl::testing::Float32SumBound(DenseRoundings(in, extra))·mag, mag =
// Σ_i |x·w| + |bias| + |y_prev|; the reference's own rounding to f32 (u·|y|)
// is one more term of that sum. abs_w(o, i) gives |w[o, i]| as the kernel
// saw it. Indexed as y (row stride y_stride). It depends on the case's data
// only: a sweep makes it once and checks every target's run against it.
template <typename AbsWeight>
std::vector<double> DenseTolerances(const float* x, size_t x_stride, size_t batch, size_t in,
                                    size_t out, AbsWeight abs_w, const float* bias, bool accumulate,
                                    const std::vector<float>& y_prev, size_t y_stride,
                                    size_t extra_roundings = 0) {
  const double scale = recur::impl::testing::Float32SumBound(DenseRoundings(in, extra_roundings));
  std::vector<double> tol(batch * y_stride);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t o = 0; o < out; ++o) {
      const size_t k = b * y_stride + o;
      double mag = bias != nullptr ? std::fabs(bias[o]) : 0.0;
      if (accumulate) mag += std::fabs(y_prev[k]);
      for (size_t i = 0; i < in; ++i) mag += std::fabs(double{x[b * x_stride + i]}) * abs_w(o, i);
      tol[k] = scale * mag;
    }
  }
  return tol;
}

// Checks a Dense result y against its double reference y_ref: every output
// within tol (DenseTolerances; NaN fails), the stride padding of y still
// kGuard, nothing written outside y. Returns the number of failures.
inline size_t CheckDenseWithin(size_t batch, size_t out, const std::vector<float>& y_ref,
                               const std::vector<double>& tol, const Buffer& y, size_t y_stride) {
  size_t failures = 0;
  for (size_t b = 0; b < batch; ++b) {
    for (size_t o = 0; o < out; ++o) {
      const size_t k = b * y_stride + o;
      const double err = std::fabs(double{y[k]} - y_ref[k]);
      if (!(err <= tol[k])) {  // also catches NaN
        if (failures++ < 3) {
          FAIL_CHECK("b=" << b << " o=" << o << " got " << y[k] << " want " << y_ref[k] << " tol "
                          << tol[k]);
        }
      }
    }
    for (size_t o = out; o < y_stride; ++o) {
      if (!Buffer::SameBits(y[b * y_stride + o], kGuard)) {
        if (failures++ < 3) FAIL_CHECK("wrote stride padding b=" << b << " col " << o);
      }
    }
  }
  if (!y.GuardsIntact()) {
    ++failures;
    FAIL_CHECK("wrote outside y");
  }
  return failures;
}

// Checks a Dense result against its double reference: DenseTolerances, then
// CheckDenseWithin. Returns the number of failures.
template <typename AbsWeight>
size_t CheckDenseResult(const float* x, size_t x_stride, size_t batch, size_t in, size_t out,
                        AbsWeight abs_w, const float* bias, bool accumulate,
                        const std::vector<float>& y_prev, const std::vector<float>& y_ref,
                        const Buffer& y, size_t y_stride, size_t extra_roundings = 0) {
  return CheckDenseWithin(batch, out, y_ref,
                          DenseTolerances(x, x_stride, batch, in, out, abs_w, bias, accumulate,
                                          y_prev, y_stride, extra_roundings),
                          y, y_stride);
}

// Dense(..., Int8Activations) on a kI8 or kI4 layer runs the path it names:
// kFloat gives Dense's bits (weights widened), kQuantized those of `dot`
// (DenseI8Dot or DenseI4Dot), kAuto the one `dot_preferred` says; the two
// differ (quantising x rounds it). Exact: the same call on the same shapes.
template <class DotFn>
void CheckInt8ActivationsChoice(const std::vector<float>& x, size_t batch, const DenseWeights& w,
                                DotFn dot, bool dot_preferred) {
  const size_t in = w.in, out = w.out;
  std::vector<float> widened(batch * out), quantized(batch * out), y(batch * out);
  Dense(x.data(), in, batch, w, widened.data(), out, false);
  dot(x.data(), in, batch, w, quantized.data(), out, false);
  CHECK(std::memcmp(widened.data(), quantized.data(), y.size() * 4) != 0);
  auto same = [&](const std::vector<float>& a) {
    return std::memcmp(a.data(), y.data(), y.size() * sizeof(float)) == 0;
  };
  Dense(x.data(), in, batch, w, y.data(), out, false, Int8Activations::kFloat);
  CHECK(same(widened));
  Dense(x.data(), in, batch, w, y.data(), out, false, Int8Activations::kQuantized);
  CHECK(same(quantized));
  Dense(x.data(), in, batch, w, y.data(), out, false, Int8Activations::kAuto);
  CHECK(same(dot_preferred ? quantized : widened));
}

}  // namespace recur::impl::kernels::test

#endif  // RECUR_TESTS_KERNELS_TEST_UTIL_H_
