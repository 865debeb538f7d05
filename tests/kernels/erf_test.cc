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

// The sample: specials, then every 401st float bit pattern up to 6, both
// signs (~5M values).
std::vector<float> ErfSample() {
  std::vector<float> xs = {0.0f,
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
  for (uint32_t u = 0; u < 0x40C00000u; u += 401) {
    float x;
    std::memcpy(&x, &u, sizeof(x));
    xs.push_back(x);
    xs.push_back(-x);
  }
  xs.resize((xs.size() + kChunkAlign - 1) / kChunkAlign * kChunkAlign, 0.0f);
  return xs;
}

TEST_CASE("Erf used by Gelu: abs error <= 2e-7 against std::erf") {
  // std::erf once per value, every target's Erf against it (max |error|; NaN
  // if any lane is NaN).
  const std::vector<float> xs = ErfSample();
  const size_t chunk = size_t{1} << 16;
  std::vector<double> want(chunk);
  std::vector<float> got(chunk);
  std::map<std::string, double> worst;
  for (size_t c0 = 0; c0 < xs.size(); c0 += chunk) {
    const size_t n = std::min(chunk, xs.size() - c0);
    for (size_t i = 0; i < n; ++i) want[i] = std::erf(double{xs[c0 + i]});
    ForEachTarget([&](const std::string& name) {
      HWY_DYNAMIC_DISPATCH(ErfOf)(xs.data() + c0, n, got.data());
      double& w = worst[name];
      for (size_t i = 0; i < n; ++i) {
        const double err = std::fabs(double{got[i]} - want[i]);
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
