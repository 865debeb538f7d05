// The SIMD erf used by Gelu (elementwise-inl.h), checked directly against
// std::erf on every Highway target: |error| ≤ 2e-7 over a dense sample of all
// floats in [-6, 6] plus ±inf, ±0 and huge values. Compiled per target here
// (foreach_target) because Erf is internal to the -inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "erf_test.cc"  // found via this directory's include path
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/elementwise/elementwise-inl.h"

#ifndef RECUR_TESTS_KERNELS_ERF_TEST_CHUNK_
#define RECUR_TESTS_KERNELS_ERF_TEST_CHUNK_
namespace recur::impl::kernels::test {
// Inputs per call of ErfOf: a multiple of every target's lane count.
inline constexpr size_t kChunkAlign = 64;
}  // namespace recur::impl::kernels::test
#endif

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels::test {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// out[i] = Erf(in[i]) for i < n, n a multiple of kChunkAlign (every
// target's lane count divides it).
void ErfOf(const float* HWY_RESTRICT in, size_t n, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  for (size_t i = 0; i < n; i += N) {
    hn::StoreU(recur::impl::kernels::HWY_NAMESPACE::Erf(d, hn::LoadU(d, in + i)), d, out + i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels::test
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <doctest/doctest.h>

#include "test_util.h"

namespace recur::impl::kernels::test {
namespace {

HWY_EXPORT(ErfOf);

// The sample's first values: zeros, tiny, huge and infinite ones, and
// where erf's approximation changes form (0.927734375).
const std::vector<float> kSpecials = {0.0f,
                                      -0.0f,
                                      1e-38f,
                                      -1e-38f,
                                      1e-45f,
                                      0.927734375f,
                                      -0.927734375f,
                                      std::nextafter(0.927734375f, 1.0f),
                                      4.0f,
                                      10.0f,
                                      1e10f,
                                      -1e30f,
                                      std::numeric_limits<float>::max(),
                                      std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::infinity()};

// The sample: the specials, then every 401st float bit pattern up to 6,
// both signs (~5M values).
std::vector<float> ErfSample() {
  std::vector<float> xs = kSpecials;
  for (uint32_t u = 0; u < 0x40C00000u; u += 401) {
    float x;
    std::memcpy(&x, &u, sizeof(x));
    xs.push_back(x);
    xs.push_back(-x);
  }
  return xs;
}

TEST_CASE("Erf used by Gelu: abs error <= 2e-7 against std::erf") {
  // std::erf once per value, every target's Erf against it (max |error|; NaN
  // if any lane is NaN). Short sweeps (arm64): each of the T targets takes
  // the specials and every T-th value of the rest (T = 3 there: every
  // 1,203rd bit pattern, still thousands in each binade of [2^-126, 6]), the
  // targets together the whole sample.
  const std::vector<float> xs = ErfSample();
  const size_t targets = TestTargets().size();
  const size_t chunk = size_t{1} << 16;
  std::vector<double> want(chunk), want_part(chunk + kChunkAlign);
  std::vector<float> part(chunk + kChunkAlign), got(chunk + kChunkAlign);
  std::map<std::string, double> worst;
  for (size_t c0 = 0; c0 < xs.size(); c0 += chunk) {
    const size_t n = std::min(chunk, xs.size() - c0);
    for (size_t i = 0; i < n; ++i) want[i] = std::erf(double{xs[c0 + i]});
    size_t t = 0;
    ForEachTarget([&](const std::string& name) {
      size_t m = 0;
      for (size_t i = 0; i < n; ++i) {
        const size_t at = c0 + i;
        if (!ShortSweeps() || at < kSpecials.size() || (at - kSpecials.size()) % targets == t) {
          part[m] = xs[at];
          want_part[m++] = want[i];
        }
      }
      ++t;
      for (; m % kChunkAlign != 0; ++m) part[m] = 0.0f, want_part[m] = 0.0;
      HWY_DYNAMIC_DISPATCH(ErfOf)(part.data(), m, got.data());
      double& w = worst[name];
      for (size_t i = 0; i < m; ++i) {
        const double err = std::fabs(double{got[i]} - want_part[i]);
        w = std::isnan(err) || std::isnan(w) ? std::numeric_limits<double>::quiet_NaN()
                                             : std::max(w, err);
      }
    });
  }
  CHECK(!worst.empty());
  for (const auto& [name, w] : worst) {
    INFO("target " << name);
    MESSAGE(name << ": max |erf error| = " << w);
    CHECK(w <= 2e-7);
  }
}

}  // namespace
}  // namespace recur::impl::kernels::test
#endif  // HWY_ONCE
