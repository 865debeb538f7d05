#include "machine_limits.h"

#include <algorithm>
#include <chrono>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "machine_limits.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"

HWY_BEFORE_NAMESPACE();
namespace recur::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Runs `iterations` × 12 independent FMA chains; returns FLOPs done. Each
// chain starts from its own value: chains that start equal are provably
// identical, and GCC merges them into one (the first version of this
// function did, and reported 4/3 of the real peak's throughput on one chain).
double FmaChains(size_t iterations, float* sink) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  constexpr size_t kChains = 12;
  V a[kChains];
  for (size_t c = 0; c < kChains; ++c) a[c] = hn::Set(d, 1.0f + 0.001f * float(c));
  const auto m = hn::Set(d, 0.999999f), c = hn::Set(d, 1e-7f);
  for (size_t i = 0; i < iterations; ++i) {
    for (size_t k = 0; k < kChains; ++k) a[k] = hn::MulAdd(a[k], m, c);
  }
  V sum = a[0];
  for (size_t k = 1; k < kChains; ++k) sum = hn::Add(sum, a[k]);
  *sink = hn::GetLane(hn::SumOfLanes(d, sum));
  return 2.0 * double(kChains) * double(hn::Lanes(d)) * double(iterations);
}

float SumBuffer(const float* data, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    s0 = hn::Add(s0, hn::LoadU(d, data + i));
    s1 = hn::Add(s1, hn::LoadU(d, data + i + lanes));
    s2 = hn::Add(s2, hn::LoadU(d, data + i + 2 * lanes));
    s3 = hn::Add(s3, hn::LoadU(d, data + i + 3 * lanes));
  }
  float total = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) total += data[i];
  return total;
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::bench {

HWY_EXPORT(FmaChains);
HWY_EXPORT(SumBuffer);

namespace {
template <typename F>
double BestSeconds(int runs, F&& fn) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}
}  // namespace

double MeasureFmaPeak() {
  float sink = 0;
  double flops = 0;
  const double seconds = BestSeconds(20, [&] {
    flops = HWY_DYNAMIC_DISPATCH(FmaChains)(1 << 20, &sink);
  });
  return sink == 12345.0f ? 0.0 : flops / seconds;
}

double MeasureReadBandwidth(size_t bytes) {
  const size_t n = std::max<size_t>(bytes / sizeof(float), 1024);
  auto buffer = hwy::AllocateAligned<float>(n);
  if (!buffer) return 0.0;
  std::fill(buffer.get(), buffer.get() + n, 1.0f);
  volatile float sink = 0;
  const double seconds = BestSeconds(20, [&] {
    sink = sink + HWY_DYNAMIC_DISPATCH(SumBuffer)(buffer.get(), n);
  });
  return double(n * sizeof(float)) / seconds;
}

}  // namespace recur::bench
#endif  // HWY_ONCE
