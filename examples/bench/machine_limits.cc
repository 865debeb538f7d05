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
  constexpr size_t kChains = 12;  // named, not an array: SVE vectors cannot be array elements
  auto start = [&](int c) { return hn::Set(d, 1.0f + 0.001f * float(c)); };
  auto a0 = start(0), a1 = start(1), a2 = start(2), a3 = start(3), a4 = start(4), a5 = start(5);
  auto a6 = start(6), a7 = start(7), a8 = start(8), a9 = start(9), a10 = start(10), a11 = start(11);
  const auto m = hn::Set(d, 0.999999f), c = hn::Set(d, 1e-7f);
  for (size_t i = 0; i < iterations; ++i) {
    a0 = hn::MulAdd(a0, m, c), a1 = hn::MulAdd(a1, m, c), a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c), a4 = hn::MulAdd(a4, m, c), a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c), a7 = hn::MulAdd(a7, m, c), a8 = hn::MulAdd(a8, m, c);
    a9 = hn::MulAdd(a9, m, c), a10 = hn::MulAdd(a10, m, c), a11 = hn::MulAdd(a11, m, c);
  }
  const auto sum = hn::Add(hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)),
                                   hn::Add(hn::Add(a4, a5), hn::Add(a6, a7))),
                           hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
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
