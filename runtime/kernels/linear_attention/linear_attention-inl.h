// Per-target LinearAttentionStep (see linear_attention.h for the contract).
// Vectorised over m (S rows are contiguous): for each row j of S one pass
// does S[j,:] += φk[j]·v (compensated) and num += φq[j]·S[j,:], with v and
// num for up to kBlock vectors of columns held in registers across all c rows.
#if defined(RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_INL_H_) == \
    defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_INL_H_
#undef RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_INL_H_
#else
#define RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cstddef>

#include "hwy/highway.h"
#include "kernels/common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace la_detail {

inline constexpr size_t kBlock = 4;  // full vectors of columns per pass over S

// Columns [m0, m0 + kV·N + tail) of S (tail < N): update S and write
// out = num / denom for them.
template <size_t kV, class D>
HWY_INLINE void ColumnBlock(D d, const float* HWY_RESTRICT phi_q,
                            const float* HWY_RESTRICT phi_k, const float* HWY_RESTRICT v,
                            size_t c, size_t m, size_t m0, size_t tail, hn::Vec<D> denom,
                            float* HWY_RESTRICT s, float* HWY_RESTRICT s_comp,
                            float* HWY_RESTRICT out) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V vv[kV + 1], acc[kV + 1];
  for (size_t t = 0; t < kV; ++t) {
    vv[t] = hn::LoadU(d, v + m0 + t * N);
    acc[t] = hn::Zero(d);
  }
  const size_t mt = m0 + kV * N;  // first tail column
  vv[kV] = tail ? LoadTail(d, v + mt, tail) : hn::Zero(d);
  acc[kV] = hn::Zero(d);
  for (size_t j = 0; j < c; ++j) {
    const V kj = hn::Set(d, phi_k[j]);
    const V qj = hn::Set(d, phi_q[j]);
    float* HWY_RESTRICT row = s + j * m;
    float* HWY_RESTRICT comp_row = s_comp + j * m;
    for (size_t t = 0; t < kV; ++t) {
      V comp = hn::LoadU(d, comp_row + m0 + t * N);
      const V y = hn::MulSub(kj, vv[t], comp);
      const V sv = CompensatedUpdate(hn::LoadU(d, row + m0 + t * N), y, &comp);
      hn::StoreU(sv, d, row + m0 + t * N);
      hn::StoreU(comp, d, comp_row + m0 + t * N);
      acc[t] = hn::MulAdd(qj, sv, acc[t]);
    }
    if (tail) {
      V comp = LoadTail(d, comp_row + mt, tail);
      const V y = hn::MulSub(kj, vv[kV], comp);
      const V sv = CompensatedUpdate(LoadTail(d, row + mt, tail), y, &comp);
      StoreTail(sv, d, row + mt, tail);
      StoreTail(comp, d, comp_row + mt, tail);
      acc[kV] = hn::MulAdd(qj, sv, acc[kV]);
    }
  }
  for (size_t t = 0; t < kV; ++t) hn::StoreU(hn::Div(acc[t], denom), d, out + m0 + t * N);
  if (tail) StoreTail(hn::Div(acc[kV], denom), d, out + mt, tail);
}

#if HWY_HAVE_SCALABLE
// SVE vectors cannot be array elements (ColumnBlock's vv/acc): one vector of
// columns [m0, m0 + count), count <= N, per pass over S.
template <class D>
HWY_INLINE void ColumnVector(D d, const float* HWY_RESTRICT phi_q,
                             const float* HWY_RESTRICT phi_k, const float* HWY_RESTRICT v,
                             size_t c, size_t m, size_t m0, size_t count, hn::Vec<D> denom,
                             float* HWY_RESTRICT s, float* HWY_RESTRICT s_comp,
                             float* HWY_RESTRICT out) {
  using V = hn::Vec<D>;
  const V vv = LoadTail(d, v + m0, count);
  V acc = hn::Zero(d);
  for (size_t j = 0; j < c; ++j) {
    float* HWY_RESTRICT row = s + j * m + m0;
    float* HWY_RESTRICT comp_row = s_comp + j * m + m0;
    V comp = LoadTail(d, comp_row, count);
    const V y = hn::MulSub(hn::Set(d, phi_k[j]), vv, comp);
    const V sv = CompensatedUpdate(LoadTail(d, row, count), y, &comp);
    StoreTail(sv, d, row, count);
    StoreTail(comp, d, comp_row, count);
    acc = hn::MulAdd(hn::Set(d, phi_q[j]), sv, acc);
  }
  StoreTail(hn::Div(acc, denom), d, out + m0, count);
}
#endif

}  // namespace la_detail

// See linear_attention.h.
HWY_INLINE void LinearAttentionStep(const float* HWY_RESTRICT phi_q,
                                    const float* HWY_RESTRICT phi_k,
                                    const float* HWY_RESTRICT v, size_t c, size_t m, float eps,
                                    float* HWY_RESTRICT s, float* HWY_RESTRICT s_comp,
                                    float* HWY_RESTRICT z, float* HWY_RESTRICT z_comp,
                                    float* HWY_RESTRICT out) {
  namespace ld = la_detail;
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);

  // z += φk (compensated) and den = φq·z (the updated z).
  V a0 = hn::Zero(d), a1 = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= c; i += N) {
    V comp = hn::LoadU(d, z_comp + i);
    const V y = hn::Sub(hn::LoadU(d, phi_k + i), comp);
    const V zv = CompensatedUpdate(hn::LoadU(d, z + i), y, &comp);
    hn::StoreU(zv, d, z + i);
    hn::StoreU(comp, d, z_comp + i);
    a0 = hn::MulAdd(hn::LoadU(d, phi_q + i), zv, a0);
  }
  if (i < c) {
    const size_t r = c - i;
    V comp = LoadTail(d, z_comp + i, r);
    const V y = hn::Sub(LoadTail(d, phi_k + i, r), comp);
    const V zv = CompensatedUpdate(LoadTail(d, z + i, r), y, &comp);
    StoreTail(zv, d, z + i, r);
    StoreTail(comp, d, z_comp + i, r);
    a1 = hn::MulAdd(LoadTail(d, phi_q + i, r), zv, a1);
  }
  const float den = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  const V denom = hn::Set(d, den + eps);

#if HWY_HAVE_SCALABLE
  for (size_t m0 = 0; m0 < m; m0 += N) {
    ld::ColumnVector(d, phi_q, phi_k, v, c, m, m0, std::min(N, m - m0), denom, s, s_comp, out);
  }
#else
  size_t m0 = 0;
  for (; m0 + ld::kBlock * N <= m; m0 += ld::kBlock * N) {
    ld::ColumnBlock<ld::kBlock>(d, phi_q, phi_k, v, c, m, m0, 0, denom, s, s_comp, out);
  }
  const size_t rest = m - m0;
  const size_t tail = rest % N;
  switch (rest / N) {
    case 0:
      if (tail) ld::ColumnBlock<0>(d, phi_q, phi_k, v, c, m, m0, tail, denom, s, s_comp, out);
      break;
    case 1:
      ld::ColumnBlock<1>(d, phi_q, phi_k, v, c, m, m0, tail, denom, s, s_comp, out);
      break;
    case 2:
      ld::ColumnBlock<2>(d, phi_q, phi_k, v, c, m, m0, tail, denom, s, s_comp, out);
      break;
    default:
      static_assert(ld::kBlock == 4, "cases cover rest / N < kBlock");
      ld::ColumnBlock<3>(d, phi_q, phi_k, v, c, m, m0, tail, denom, s, s_comp, out);
      break;
  }
#endif  // HWY_HAVE_SCALABLE
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_INL_H_ toggle
