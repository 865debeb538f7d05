#include "machine_limits.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "machine_limits.cc"
#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/isa/isa-inl.h"

HWY_BEFORE_NAMESPACE();
namespace bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
// The kernels' named per-ISA operations: the int8 dot peak below is
// measured on the steps the int8 kernels take.
namespace isa = recur::impl::kernels::HWY_NAMESPACE::isa;

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

// kN independent chains a = step(a) of vectors V, `iterations` times;
// returns the sum of the chains' first lanes (to keep them live).
template <size_t kN, class V, class Start, class Step>
HWY_INLINE int32_t Chains(size_t iterations, const Start& start, const Step& step) {
  V a[kN];
  HWY_UNROLL(12)
  for (size_t c = 0; c < kN; ++c) a[c] = start(static_cast<int>(c));
  for (size_t i = 0; i < iterations; ++i) {
    HWY_UNROLL(12)
    for (size_t c = 0; c < kN; ++c) a[c] = step(a[c]);
  }
  int32_t sum = 0;
  for (size_t c = 0; c < kN; ++c) {
    int32_t lane;
    std::memcpy(&lane, &a[c], sizeof(lane));
    sum += lane;
  }
  return sum;
}

// As FmaChains for the int8 kernels' step (MeasureInt8DotPeak), in `form`:
// 0 the sign trick on 128 or 256 bits (x86) or the NEON step, 1 the sign
// trick on 512 bits, 2 vpdpbusd; returns 0 for a form this target lacks.
// Each chain's next activations are its sums (nothing is loop-invariant).
double Int8DotChains(size_t iterations, int form, int32_t* sink) {
  [[maybe_unused]] constexpr int32_t kW = 0x7F03FD81;  // weights 127, 3, -3, -127
  [[maybe_unused]] auto seed = [](int c) { return 0x01020304 + 0x01010101 * c; };
#if RECUR_ISA_AVX2
  if (form == 0) {
    namespace x = isa::x256;
    const x::VecI w = x::SetI32(kW), abs_w = x::AbsI8(w);
    *sink = Chains<12, x::VecI>(
        iterations, [&](int c) HWY_ATTR { return x::SetI32(seed(c)); },
        [&](x::VecI a) HWY_ATTR {
          const x::VecI p = x::MulAddPairsU8I8(abs_w, x::ApplySign(a, w));
          return x::AddI32(a, x::SumPairsI16(p));
        });
    return 2.0 * 12 * 32 * double(iterations);
  }
#endif
#if RECUR_ISA_AVX3
  namespace x = isa::x512;
  const x::VecI w = x::SetI32(kW);
  auto start = [&](int c) HWY_ATTR { return x::SetI32(seed(c)); };
  if (form == 1) {
    const x::VecI abs_w = x::AbsI8(w);
    const x::Mask64 neg = x::NegativeLanes(w);
    *sink = Chains<12, x::VecI>(iterations, start, [&](x::VecI a) HWY_ATTR {
      const x::VecI p = x::MulAddPairsU8I8(abs_w, x::NegateWhere(neg, a));
      return x::AddI32(a, x::SumPairsI16(p));
    });
    return 2.0 * 12 * 64 * double(iterations);
  }
  if (form == 2) {  // vpdpbusd, as the kernels have it
    *sink = Chains<12, x::VecI>(iterations, start,
                                [&](x::VecI a) HWY_ATTR { return x::DotU8I8Accumulate(a, a, w); });
    return 2.0 * 12 * 64 * double(iterations);
  }
#elif RECUR_ISA_SSSE3
  if (form == 0) {
    namespace x = isa::x128;
    const x::VecI w = x::SetI32(kW), abs_w = x::AbsI8(w);
    *sink = Chains<12, x::VecI>(
        iterations, [&](int c) HWY_ATTR { return x::SetI32(seed(c)); },
        [&](x::VecI a) HWY_ATTR {
          const x::VecI p = x::MulAddPairsU8I8(abs_w, x::ApplySign(a, w));
          return x::AddI32(a, x::SumPairsI16(p));
        });
    return 2.0 * 12 * 16 * double(iterations);
  }
#elif RECUR_ISA_NEON
  if (form == 0) {
    namespace x = isa::neon;
    const x::VecI8 w = x::AsI8(x::SetI32(kW));
    *sink = Chains<12, x::VecI32>(
        iterations, [&](int c) HWY_ATTR { return x::SetI32(seed(c)); },
        [&](x::VecI32 a) HWY_ATTR { return x::DotI8I8Accumulate(a, w, x::AsI8(a)); });
    return 2.0 * 12 * 16 * double(iterations);
  }
#endif
  (void)iterations;
  (void)form;
  *sink = 0;
  return 0.0;
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
}  // namespace bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace bench {

HWY_EXPORT(FmaChains);
HWY_EXPORT(Int8DotChains);
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

double MeasureInt8DotPeak(bool vnni) {
  double best = 0;
  for (int form = 0; form <= (vnni ? 2 : 1); ++form) {
    int32_t sink = 0;
    double ops = 0;
    const double seconds = BestSeconds(20, [&] {
      ops = HWY_DYNAMIC_DISPATCH(Int8DotChains)(1 << 19, form, &sink);
    });
    if (ops > 0 && sink != 12345) best = std::max(best, ops / seconds);
  }
  return best;
}

double MeasureReadBandwidth(size_t bytes, unsigned threads) {
  threads = std::max(threads, 1u);
  const size_t n = std::max<size_t>(bytes / sizeof(float) / threads, 1024);
  std::vector<hwy::AlignedFreeUniquePtr<float[]>> buffers;
  for (unsigned t = 0; t < threads; ++t) {
    buffers.push_back(hwy::AllocateAligned<float>(n));
    if (!buffers.back()) return 0.0;
    std::fill(buffers.back().get(), buffers.back().get() + n, 1.0f);
  }
  if (threads == 1) {
    volatile float sink = 0;
    const double seconds = BestSeconds(
        20, [&] { sink = sink + HWY_DYNAMIC_DISPATCH(SumBuffer)(buffers[0].get(), n); });
    return double(n * sizeof(float)) / seconds;
  }
  // Rounds: every thread waits at `arrived` until all are there, then sums its
  // buffer; the round takes as long as the slowest.
  constexpr int kRounds = 10;
  std::atomic<unsigned> arrived{0};
  std::vector<double> seconds(size_t(threads) * kRounds);
  std::vector<float> sinks(threads);
  auto run = [&](unsigned t) {
    for (int round = 0; round < kRounds; ++round) {
      arrived.fetch_add(1);
      while (arrived.load() < unsigned(round + 1) * threads) {
      }
      const auto t0 = std::chrono::steady_clock::now();
      sinks[t] += HWY_DYNAMIC_DISPATCH(SumBuffer)(buffers[t].get(), n);
      seconds[size_t(round) * threads + t] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  };
  std::vector<std::thread> workers;
  for (unsigned t = 1; t < threads; ++t) workers.emplace_back(run, t);
  run(0);
  for (std::thread& w : workers) w.join();
  double best = 1e30;
  for (int round = 0; round < kRounds; ++round) {
    const double* s = seconds.data() + size_t(round) * threads;
    best = std::min(best, *std::max_element(s, s + threads));
  }
  return sinks[0] == 12345.0f ? 0.0 : double(n * sizeof(float)) * threads / best;
}

}  // namespace bench
#endif  // HWY_ONCE
