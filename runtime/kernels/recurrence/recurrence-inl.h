// Per-target RecurrenceStep (see recurrence.h for the contract). Vectorised
// over dk (a row of S is contiguous), one row at a time, or four when S is
// warm: per row, one pass for S a when the step has a low-rank term (the row
// is then in L1 for the next), and one that updates the rows and accumulates
// y_i = S'·r.
#if defined(RECUR_KERNELS_RECURRENCE_RECURRENCE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_RECURRENCE_RECURRENCE_INL_H_
#undef RECUR_KERNELS_RECURRENCE_RECURRENCE_INL_H_
#else
#define RECUR_KERNELS_RECURRENCE_RECURRENCE_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"
#include "kernels/common-inl.h"
#include "kernels/recurrence/recurrence.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace rec_detail {

// Σ_j row[j]·a[j] over dk.
template <class D>
HWY_INLINE float Dot(D d, const float* HWY_RESTRICT row, const float* HWY_RESTRICT a,
                     size_t dk) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V acc0 = hn::Zero(d), acc1 = hn::Zero(d);
  size_t j = 0;
  for (; j + 2 * N <= dk; j += 2 * N) {
    acc0 = hn::MulAdd(hn::LoadU(d, row + j), hn::LoadU(d, a + j), acc0);
    acc1 = hn::MulAdd(hn::LoadU(d, row + j + N), hn::LoadU(d, a + j + N), acc1);
  }
  for (; j + N <= dk; j += N) acc0 = hn::MulAdd(hn::LoadU(d, row + j), hn::LoadU(d, a + j), acc0);
  if (j < dk) {
    acc1 = hn::MulAdd(LoadTail(d, row + j, dk - j), LoadTail(d, a + j, dk - j), acc1);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1)));
}

// S'[j] = S[j]·w[j] + v_i·k[j] (+ (S a)·b[j] with kLowRank), lane by lane.
template <bool kLowRank, class V>
HWY_INLINE V Next(V s, V w, V vi, V k, V sa, V b) {
  V next = hn::MulAdd(vi, k, hn::Mul(s, w));
  if constexpr (kLowRank) next = hn::MulAdd(sa, b, next);
  return next;
}

// Row i of S updated in place; y_i = S'_i·r.
template <bool kVectorDecay, bool kLowRank, class D>
HWY_INLINE void OneRow(D d, const RecurrenceStepArgs& p, size_t i, float* HWY_RESTRICT s,
                       float* HWY_RESTRICT y) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d), dk = p.dk;
  const V w_scalar = hn::Set(d, p.w_scalar);
  float* HWY_RESTRICT row = s + i * dk;
  const V sa = kLowRank ? hn::Set(d, Dot(d, row, p.a, dk)) : hn::Zero(d);
  const V vi = hn::Set(d, p.v[i]);
  V acc = hn::Zero(d);
  size_t j = 0;
  for (; j + N <= dk; j += N) {
    const V w = kVectorDecay ? hn::LoadU(d, p.w + j) : w_scalar;
    const V b = kLowRank ? hn::LoadU(d, p.b + j) : hn::Zero(d);
    const V next = Next<kLowRank>(hn::LoadU(d, row + j), w, vi, hn::LoadU(d, p.k + j), sa, b);
    hn::StoreU(next, d, row + j);
    acc = hn::MulAdd(next, hn::LoadU(d, p.r + j), acc);
  }
  if (j < dk) {
    const size_t n = dk - j;
    const V w = kVectorDecay ? LoadTail(d, p.w + j, n) : w_scalar;
    const V b = kLowRank ? LoadTail(d, p.b + j, n) : hn::Zero(d);
    const V next = Next<kLowRank>(LoadTail(d, row + j, n), w, vi, LoadTail(d, p.k + j, n), sa, b);
    StoreTail(next, d, row + j, n);
    acc = hn::MulAdd(next, LoadTail(d, p.r + j, n), acc);
  }
  y[i] = hn::GetLane(hn::SumOfLanes(d, acc));
}

#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
// Rows [i0, i0 + 4) of S as OneRow each, sharing the loads of w, k, b and r,
// their y summed together (Sum4) instead of one horizontal sum each. Not on
// scalable targets: their vectors cannot be array elements.
template <bool kVectorDecay, bool kLowRank, class D>
HWY_INLINE void FourRows(D d, const RecurrenceStepArgs& p, size_t i0, float* HWY_RESTRICT s,
                         float* HWY_RESTRICT y) {
  using V = hn::Vec<D>;
  constexpr size_t kRows = 4;
  const size_t N = hn::Lanes(d), dk = p.dk;
  const V w_scalar = hn::Set(d, p.w_scalar);
  float* HWY_RESTRICT row[kRows];
  V sa[kRows], vi[kRows], acc[kRows];
  for (size_t r = 0; r < kRows; ++r) {
    row[r] = s + (i0 + r) * dk;
    sa[r] = kLowRank ? hn::Set(d, Dot(d, row[r], p.a, dk)) : hn::Zero(d);
    vi[r] = hn::Set(d, p.v[i0 + r]);
    acc[r] = hn::Zero(d);
  }
  size_t j = 0;
  for (; j + N <= dk; j += N) {
    const V w = kVectorDecay ? hn::LoadU(d, p.w + j) : w_scalar;
    const V b = kLowRank ? hn::LoadU(d, p.b + j) : hn::Zero(d);
    const V k = hn::LoadU(d, p.k + j), rv = hn::LoadU(d, p.r + j);
    for (size_t r = 0; r < kRows; ++r) {
      const V next = Next<kLowRank>(hn::LoadU(d, row[r] + j), w, vi[r], k, sa[r], b);
      hn::StoreU(next, d, row[r] + j);
      acc[r] = hn::MulAdd(next, rv, acc[r]);
    }
  }
  if (j < dk) {
    const size_t n = dk - j;
    const V w = kVectorDecay ? LoadTail(d, p.w + j, n) : w_scalar;
    const V b = kLowRank ? LoadTail(d, p.b + j, n) : hn::Zero(d);
    const V k = LoadTail(d, p.k + j, n), rv = LoadTail(d, p.r + j, n);
    for (size_t r = 0; r < kRows; ++r) {
      const V next = Next<kLowRank>(LoadTail(d, row[r] + j, n), w, vi[r], k, sa[r], b);
      StoreTail(next, d, row[r] + j, n);
      acc[r] = hn::MulAdd(next, rv, acc[r]);
    }
  }
  hn::StoreU(Sum4(d, acc[0], acc[1], acc[2], acc[3]), hn::Full128<float>(), y + i0);
}
#endif

template <bool kVectorDecay, bool kLowRank, class D>
HWY_INLINE void Rows(D d, const RecurrenceStepArgs& p, float* HWY_RESTRICT s,
                     float* HWY_RESTRICT y) {
  size_t i = 0;
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
  if (p.warm) {
    for (; i + 4 <= p.dv; i += 4) FourRows<kVectorDecay, kLowRank>(d, p, i, s, y);
  }
#endif
  for (; i < p.dv; ++i) OneRow<kVectorDecay, kLowRank>(d, p, i, s, y);
}

}  // namespace rec_detail

// One kernel entry; the update rule picks the loop (no per-element branches).
HWY_INLINE void RecurrenceStep(const RecurrenceStepArgs& p, float* HWY_RESTRICT s,
                               float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> d;
  const bool vector_decay = p.w != nullptr, low_rank = p.a != nullptr && p.b != nullptr;
  if (vector_decay && low_rank) return rec_detail::Rows<true, true>(d, p, s, y);
  if (vector_decay) return rec_detail::Rows<true, false>(d, p, s, y);
  if (low_rank) return rec_detail::Rows<false, true>(d, p, s, y);
  rec_detail::Rows<false, false>(d, p, s, y);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_RECURRENCE_RECURRENCE_INL_H_ toggle
