// Per-target element-wise and row kernels (see elementwise.h for the
// contract). Every loop reads element i before writing element i, so y == x
// is allowed; pointers are not restrict-qualified for that reason.
#if defined(RECUR_KERNELS_ELEMENTWISE_ELEMENTWISE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_ELEMENTWISE_ELEMENTWISE_INL_H_
#undef RECUR_KERNELS_ELEMENTWISE_ELEMENTWISE_INL_H_
#else
#define RECUR_KERNELS_ELEMENTWISE_ELEMENTWISE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/common-inl.h"
#include "kernels/elementwise/elementwise.h"  // kQuantizeS8MinMax

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// erf(x), |error| < 1 ulp (≈6e-8 absolute) with FMA; ≲1.5e-7 without FMA
// (SSE4/SSSE3). N. Juffa's single-precision approximation: an odd minimax
// polynomial for |x| ≤ 0.9277, else 1 − exp(poly(|x|)) with the sign of x.
template <class D, class V>
HWY_INLINE V Erf(D d, V x) {
  const V t = hn::Abs(x);
  // Small branch: x + x·P(x²).
  const V s = hn::Mul(x, x);
  V r = hn::Set(d, -5.96761703e-4f);
  r = hn::MulAdd(r, s, hn::Set(d, 4.99119423e-3f));
  r = hn::MulAdd(r, s, hn::Set(d, -2.67681349e-2f));
  r = hn::MulAdd(r, s, hn::Set(d, 1.12819925e-1f));
  r = hn::MulAdd(r, s, hn::Set(d, -3.76125336e-1f));
  r = hn::MulAdd(r, s, hn::Set(d, 1.28379166e-1f));
  const V small = hn::MulAdd(r, x, x);
  // Large branch; erf(5) rounds to 1, the clamp keeps the polynomial finite.
  const V tc = hn::Min(t, hn::Set(d, 5.0f));
  const V sc = hn::Mul(tc, tc);
  V p = hn::MulAdd(hn::Set(d, -1.72853470e-5f), tc, hn::Set(d, 3.83197126e-4f));
  const V u = hn::MulAdd(hn::Set(d, -3.88396438e-3f), tc, hn::Set(d, 2.42546219e-2f));
  p = hn::MulAdd(p, sc, u);
  p = hn::MulAdd(p, tc, hn::Set(d, -1.06777877e-1f));
  p = hn::MulAdd(p, tc, hn::Set(d, -6.34846687e-1f));
  p = hn::MulAdd(p, tc, hn::Set(d, -1.28717512e-1f));
  p = hn::MulAdd(p, tc, hn::Neg(tc));
  const V large = hn::CopySign(hn::Sub(hn::Set(d, 1.0f), hn::Exp(d, p)), x);
  return hn::IfThenElse(hn::Gt(t, hn::Set(d, 0.927734375f)), large, small);
}

namespace ew_detail {

// y[i] = f(x[i]) over n elements; y may equal x.
template <class D, class F>
HWY_INLINE void Map(D d, const float* x, float* y, size_t n, const F& f) {
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(hn::LoadU(d, x + i)), d, y + i);
  if (i < n) StoreTail(f(LoadTail(d, x + i, n - i)), d, y + i, n - i);
}

// Σ x[i] (4 accumulators for ILP and a little pairwise accuracy).
template <class D, class F>
HWY_INLINE float SumMapped(D d, const float* x, size_t n, const F& f) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, f(hn::LoadU(d, x + i)));
    a1 = hn::Add(a1, f(hn::LoadU(d, x + i + N)));
    a2 = hn::Add(a2, f(hn::LoadU(d, x + i + 2 * N)));
    a3 = hn::Add(a3, f(hn::LoadU(d, x + i + 3 * N)));
  }
  for (; i + N <= n; i += N) a0 = hn::Add(a0, f(hn::LoadU(d, x + i)));
  if (i < n) {
    const size_t r = n - i;
    a1 = hn::Add(a1, hn::IfThenElseZero(hn::FirstN(d, r), f(LoadTail(d, x + i, r))));
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// max f(x[i]); -inf when n = 0.
template <class D, class F>
HWY_INLINE float MaxMapped(D d, const float* x, size_t n, const F& f) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const V ninf = hn::Set(d, -std::numeric_limits<float>::infinity());
  V m0 = ninf, m1 = ninf;
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    m0 = hn::Max(m0, f(hn::LoadU(d, x + i)));
    m1 = hn::Max(m1, f(hn::LoadU(d, x + i + N)));
  }
  for (; i + N <= n; i += N) m0 = hn::Max(m0, f(hn::LoadU(d, x + i)));
  if (i < n) {
    const size_t r = n - i;
    m1 = hn::Max(m1, hn::IfThenElse(hn::FirstN(d, r), f(LoadTail(d, x + i, r)), ninf));
  }
  return hn::GetLane(hn::MaxOfLanes(d, hn::Max(m0, m1)));
}

// max x[i]; requires n > 0.
template <class D>
HWY_INLINE float MaxOf(D d, const float* x, size_t n) {
  return MaxMapped(d, x, n, [](auto v) HWY_ATTR { return v; });
}

}  // namespace ew_detail

HWY_INLINE void Relu(const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const auto zero = hn::Zero(d);
  // Not Max: x86 max maps NaN to 0, this propagates it (as PyTorch does).
  ew_detail::Map(d, x, y, n,
                 [&](auto v) HWY_ATTR { return hn::IfThenZeroElse(hn::Lt(v, zero), v); });
}

HWY_INLINE void Gelu(const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const auto half = hn::Set(d, 0.5f);
  const auto inv_sqrt2 = hn::Set(d, 0.70710678118654752f);
  ew_detail::Map(d, x, y, n, [&](auto v) HWY_ATTR {
    const auto h = hn::Mul(half, v);
    return hn::MulAdd(h, Erf(d, hn::Mul(v, inv_sqrt2)), h);
  });
}

HWY_INLINE void EluPlusOne(const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const auto zero = hn::Zero(d);
  const auto one = hn::Set(d, 1.0f);
  // Min keeps Exp's argument ≤ 0; NaN takes the x + 1 branch and propagates.
  ew_detail::Map(d, x, y, n, [&](auto v) HWY_ATTR {
    return hn::IfThenElse(hn::Le(v, zero), hn::Exp(d, hn::Min(v, zero)), hn::Add(v, one));
  });
}

namespace ew_detail {
// The largest |argument| OnePlusExpNeg gives Exp (e^88 is finite in f32).
inline constexpr float kExpArgMax = 88.0f;
// 1 + e^(−v), Exp's argument kept within ±kExpArgMax.
template <class D, class V>
HWY_INLINE V OnePlusExpNeg(D d, V v) {
  const auto lo = hn::Set(d, -kExpArgMax), hi = hn::Set(d, kExpArgMax);
  return hn::Add(hn::Set(d, 1.0f), hn::Exp(d, hn::Min(hn::Max(hn::Neg(v), lo), hi)));
}
}  // namespace ew_detail

HWY_INLINE void Sigmoid(const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const auto one = hn::Set(d, 1.0f);
  // NaN passed on.
  ew_detail::Map(d, x, y, n, [&](auto v) HWY_ATTR {
    return hn::IfThenElse(hn::IsNaN(v), v, hn::Div(one, ew_detail::OnePlusExpNeg(d, v)));
  });
}

HWY_INLINE void Silu(const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const auto lo = hn::Set(d, -ew_detail::kExpArgMax);
  // Below −88, v·0 = −0; a NaN x gives NaN through the division.
  ew_detail::Map(d, x, y, n, [&](auto v) HWY_ATTR {
    return hn::IfThenElse(hn::Lt(v, lo), hn::Mul(v, hn::Zero(d)),
                          hn::Div(v, ew_detail::OnePlusExpNeg(d, v)));
  });
}

HWY_INLINE void CausalConvSilu(const float* const* in, const float* weight, const float* bias,
                               size_t kernel, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t c = 0;
  if (kernel == 4) {
    for (; c + N <= n; c += N) {
      hn::Vec<decltype(d)> w0, w1, w2, w3;  // taps 0-3 of channels [c, c + N)
      hn::LoadInterleaved4(d, weight + 4 * c, w0, w1, w2, w3);
      auto acc = bias ? hn::LoadU(d, bias + c) : hn::Zero(d);
      acc = hn::MulAdd(w0, hn::LoadU(d, in[0] + c), acc);
      acc = hn::MulAdd(w1, hn::LoadU(d, in[1] + c), acc);
      acc = hn::MulAdd(w2, hn::LoadU(d, in[2] + c), acc);
      acc = hn::MulAdd(w3, hn::LoadU(d, in[3] + c), acc);
      hn::StoreU(acc, d, y + c);
    }
  }
  for (; c < n; ++c) {
    float acc = bias ? bias[c] : 0.0f;
    for (size_t j = 0; j < kernel; ++j) acc += weight[c * kernel + j] * in[j][c];
    y[c] = acc;
  }
  Silu(y, y, n);
}

HWY_INLINE void AffineExp(const float* x, float a, float b, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const auto av = hn::Set(d, a), bv = hn::Set(d, b);
  ew_detail::Map(d, x, y, n, [&](auto v) HWY_ATTR { return hn::Exp(d, hn::MulAdd(av, v, bv)); });
}

HWY_INLINE void AffineMax(const float* x, float a, float b, float* m, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto av = hn::Set(d, a), bv = hn::Set(d, b);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto l = hn::MulAdd(av, hn::LoadU(d, x + i), bv);
    hn::StoreU(hn::Max(hn::LoadU(d, m + i), l), d, m + i);
  }
  if (i < n) {
    const size_t r = n - i;
    const auto l = hn::MulAdd(av, LoadTail(d, x + i, r), bv);
    StoreTail(hn::Max(LoadTail(d, m + i, r), l), d, m + i, r);
  }
}

HWY_INLINE void AffineExpAccumulate(const float* x, float a, float b, const float* m,
                                    const float* v, float* num, float* den, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto av = hn::Set(d, a), bv = hn::Set(d, b);
  auto step = [&](size_t i, size_t r) HWY_ATTR {
    const bool full = r == N;
    const auto xv = full ? hn::LoadU(d, x + i) : LoadTail(d, x + i, r);
    const auto mv = full ? hn::LoadU(d, m + i) : LoadTail(d, m + i, r);
    const auto vv = full ? hn::LoadU(d, v + i) : LoadTail(d, v + i, r);
    const auto e = hn::Exp(d, hn::Sub(hn::MulAdd(av, xv, bv), mv));
    const auto nv = hn::MulAdd(e, vv, full ? hn::LoadU(d, num + i) : LoadTail(d, num + i, r));
    const auto dv = hn::Add(e, full ? hn::LoadU(d, den + i) : LoadTail(d, den + i, r));
    if (full) {
      hn::StoreU(nv, d, num + i);
      hn::StoreU(dv, d, den + i);
    } else {
      StoreTail(nv, d, num + i, r);
      StoreTail(dv, d, den + i, r);
    }
  };
  size_t i = 0;
  for (; i + N <= n; i += N) step(i, N);
  if (i < n) step(i, n - i);
}

HWY_INLINE void Scale(const float* x, float a, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const auto av = hn::Set(d, a);
  ew_detail::Map(d, x, y, n, [&](auto v) HWY_ATTR { return hn::Mul(av, v); });
}

HWY_INLINE float QuantizeS8(const float* HWY_RESTRICT x, int8_t* HWY_RESTRICT q, size_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const size_t N = hn::Lanes(d);
  const float max = ew_detail::MaxMapped(d, x, n, [](auto v) HWY_ATTR { return hn::Abs(v); });
  if (max < kQuantizeS8MinMax) {  // n = 0 (-inf), or 127 / max would overflow
    std::fill(q, q + n, int8_t{0});
    return 0.0f;
  }
  const auto inv = hn::Set(d, 127.0f / max);
  const auto lo = hn::Set(d, -127.0f), hi = hn::Set(d, 127.0f);
  auto quantize = [&](auto v) HWY_ATTR {
    return hn::DemoteTo(d8, hn::NearestInt(hn::Clamp(hn::Mul(v, inv), lo, hi)));
  };
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(quantize(hn::LoadU(d, x + i)), d8, q + i);
  if (i < n) {
    HWY_ALIGN int8_t tail[HWY_MAX_BYTES / sizeof(float)];
    hn::Store(quantize(LoadTail(d, x + i, n - i)), d8, tail);
    std::copy(tail, tail + (n - i), q + i);
  }
  return max / 127.0f;
}

HWY_INLINE void Add(const float* a, const float* b, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::Add(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, y + i);
  }
  if (i < n) {
    const size_t r = n - i;
    StoreTail(hn::Add(LoadTail(d, a + i, r), LoadTail(d, b + i, r)), d, y + i, r);
  }
}

HWY_INLINE void CompensatedAdd(const float* x, float* sum, float* comp, size_t n) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    V cv = hn::LoadU(d, comp + i);
    const V y = hn::Sub(hn::LoadU(d, x + i), cv);
    hn::StoreU(CompensatedUpdate(hn::LoadU(d, sum + i), y, &cv), d, sum + i);
    hn::StoreU(cv, d, comp + i);
  }
  if (i < n) {
    const size_t r = n - i;
    V cv = LoadTail(d, comp + i, r);
    const V y = hn::Sub(LoadTail(d, x + i, r), cv);
    StoreTail(CompensatedUpdate(LoadTail(d, sum + i, r), y, &cv), d, sum + i, r);
    StoreTail(cv, d, comp + i, r);
  }
}

// Two-pass: mean, then the biased variance of (x − mean), both in f32.
HWY_INLINE void LayerNorm(const float* x, const float* gamma, const float* beta, float eps,
                          float* y, size_t n) {
  if (n == 0) return;
  const hn::ScalableTag<float> d;
  const float inv_n = 1.0f / static_cast<float>(n);
  const float mean = ew_detail::SumMapped(d, x, n, [](auto v) HWY_ATTR { return v; }) * inv_n;
  const auto mean_v = hn::Set(d, mean);
  const float var = ew_detail::SumMapped(d, x, n, [&](auto v) HWY_ATTR {
                      const auto c = hn::Sub(v, mean_v);
                      return hn::Mul(c, c);
                    }) * inv_n;
  const auto rstd = hn::Set(d, 1.0f / std::sqrt(var + eps));
  const size_t N = hn::Lanes(d);
  // y = (x − mean)·rstd·gamma + beta; gamma/beta are read with the same
  // (possibly partial) loads as x.
  auto norm = [&](auto v, const float* g, const float* b, size_t r) HWY_ATTR {
    auto c = hn::Mul(hn::Sub(v, mean_v), rstd);
    if (g) c = hn::Mul(c, r == N ? hn::LoadU(d, g) : LoadTail(d, g, r));
    if (b) c = hn::Add(c, r == N ? hn::LoadU(d, b) : LoadTail(d, b, r));
    return c;
  };
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(norm(hn::LoadU(d, x + i), gamma ? gamma + i : nullptr, beta ? beta + i : nullptr, N),
               d, y + i);
  }
  if (i < n) {
    const size_t r = n - i;
    StoreTail(norm(LoadTail(d, x + i, r), gamma ? gamma + i : nullptr, beta ? beta + i : nullptr, r),
              d, y + i, r);
  }
}

// y = x / sqrt(mean(x²) + eps) · gamma (gamma may be null: 1).
HWY_INLINE void RmsNorm(const float* x, const float* gamma, float eps, float* y, size_t n) {
  if (n == 0) return;
  const hn::ScalableTag<float> d;
  const float mean_sq =
      ew_detail::SumMapped(d, x, n, [](auto v) HWY_ATTR { return hn::Mul(v, v); }) /
      static_cast<float>(n);
  const auto rstd = hn::Set(d, 1.0f / std::sqrt(mean_sq + eps));
  const size_t N = hn::Lanes(d);
  auto norm = [&](auto v, const float* g, size_t r) HWY_ATTR {
    auto c = hn::Mul(v, rstd);
    if (g) c = hn::Mul(c, r == N ? hn::LoadU(d, g) : LoadTail(d, g, r));
    return c;
  };
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(norm(hn::LoadU(d, x + i), gamma ? gamma + i : nullptr, N), d, y + i);
  }
  if (i < n) {
    const size_t r = n - i;
    StoreTail(norm(LoadTail(d, x + i, r), gamma ? gamma + i : nullptr, r), d, y + i, r);
  }
}

HWY_INLINE void Softmax(const float* x, float* y, size_t n) {
  if (n == 0) return;
  const hn::ScalableTag<float> d;
  const auto max_v = hn::Set(d, ew_detail::MaxOf(d, x, n));
  // y = exp(x − max), accumulating the sum of the n valid lanes (4 sums).
  const size_t N = hn::Lanes(d);
  using V = hn::Vec<decltype(d)>;
  V s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  auto exp_store = [&](size_t i) HWY_ATTR {
    const V e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), max_v));
    hn::StoreU(e, d, y + i);
    return e;
  };
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::Add(s0, exp_store(i));
    s1 = hn::Add(s1, exp_store(i + N));
    s2 = hn::Add(s2, exp_store(i + 2 * N));
    s3 = hn::Add(s3, exp_store(i + 3 * N));
  }
  for (; i + N <= n; i += N) s0 = hn::Add(s0, exp_store(i));
  if (i < n) {
    const size_t r = n - i;
    const V e = hn::Exp(d, hn::Sub(LoadTail(d, x + i, r), max_v));
    s1 = hn::Add(s1, hn::IfThenElseZero(hn::FirstN(d, r), e));
    StoreTail(e, d, y + i, r);
  }
  const V sum = hn::Add(hn::Add(s0, s1), hn::Add(s2, s3));
  const auto inv = hn::Set(d, 1.0f / hn::GetLane(hn::SumOfLanes(d, sum)));
  ew_detail::Map(d, y, y, n, [&](auto v) HWY_ATTR { return hn::Mul(v, inv); });
}

HWY_INLINE void LogSoftmax(const float* x, float* y, size_t n) {
  if (n == 0) return;
  const hn::ScalableTag<float> d;
  const auto max_v = hn::Set(d, ew_detail::MaxOf(d, x, n));
  const float sum = ew_detail::SumMapped(
      d, x, n, [&](auto v) HWY_ATTR { return hn::Exp(d, hn::Sub(v, max_v)); });
  const auto log_sum = hn::Set(d, std::log(sum));
  // (x − max) − log Σ: x − max is exact near the max, where it matters.
  ew_detail::Map(d, x, y, n,
                 [&](auto v) HWY_ATTR { return hn::Sub(hn::Sub(v, max_v), log_sum); });
}

HWY_INLINE float Dot(const float* x, const float* y, size_t n) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);
  V a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::MulAdd(hn::LoadU(d, x + i), hn::LoadU(d, y + i), a0);
    a1 = hn::MulAdd(hn::LoadU(d, x + i + N), hn::LoadU(d, y + i + N), a1);
    a2 = hn::MulAdd(hn::LoadU(d, x + i + 2 * N), hn::LoadU(d, y + i + 2 * N), a2);
    a3 = hn::MulAdd(hn::LoadU(d, x + i + 3 * N), hn::LoadU(d, y + i + 3 * N), a3);
  }
  for (; i + N <= n; i += N) a0 = hn::MulAdd(hn::LoadU(d, x + i), hn::LoadU(d, y + i), a0);
  if (i < n) {
    const size_t r = n - i;
    a1 = hn::MulAdd(LoadTail(d, x + i, r), LoadTail(d, y + i, r), a1);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_ELEMENTWISE_ELEMENTWISE_INL_H_ toggle
