// The SIMD erf used by Gelu (elementwise-inl.h), checked directly against
// std::erf on every Highway target: |error| ≤ 2e-7 over a dense sample of all
// floats in [-6, 6] plus ±inf, ±0 and huge values. Compiled per target here
// (foreach_target) because Erf is internal to the -inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "erf_test.cc"  // found via this directory's include path
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/elementwise/elementwise-inl.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels::test {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Max |Erf(x) − erf(x)| over the sample; NaN if any lane is NaN.
double ErfMaxError() {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  HWY_ALIGN float in[HWY_MAX_BYTES / sizeof(float)];
  HWY_ALIGN float got[HWY_MAX_BYTES / sizeof(float)];
  double worst = 0;
  size_t fill = 0;
  auto flush = [&]() HWY_ATTR {
    hn::Store(recur::impl::kernels::HWY_NAMESPACE::Erf(d, hn::Load(d, in)), d, got);
    for (size_t i = 0; i < fill; ++i) {
      const double err = std::fabs(double{got[i]} - std::erf(double{in[i]}));
      worst = std::isnan(err) ? std::numeric_limits<double>::quiet_NaN() : std::max(worst, err);
    }
    fill = 0;
  };
  auto push = [&](float x) HWY_ATTR {
    in[fill++] = x;
    if (fill == N) flush();
  };
  const float specials[] = {0.0f, -0.0f, 1e-38f, -1e-38f, 1e-45f, 0.927734375f, -0.927734375f,
                            std::nextafter(0.927734375f, 1.0f), 4.0f, 10.0f, 1e10f, -1e30f,
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (float x : specials) push(x);
  // Every 401st float bit pattern up to 6, both signs (~5M values).
  for (uint32_t u = 0; u < 0x40C00000u; u += 401) {
    float x;
    std::memcpy(&x, &u, sizeof(x));
    push(x);
    push(-x);
  }
  for (size_t i = fill; i < N; ++i) in[i] = 0.0f;
  flush();
  return worst;
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels::test
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <doctest/doctest.h>

#include "test_util.h"

namespace recur::impl::kernels::test {
namespace {

HWY_EXPORT(ErfMaxError);

TEST_CASE("Erf used by Gelu: abs error <= 2e-7 against std::erf") {
  ForEachTarget([](const std::string& name) {
    const double worst = HWY_DYNAMIC_DISPATCH(ErfMaxError)();
    MESSAGE(name << ": max |erf error| = " << worst);
    CHECK(worst <= 2e-7);
  });
}

}  // namespace
}  // namespace recur::impl::kernels::test
#endif  // HWY_ONCE
