// Per-target LinearAttentionStep (see linear_attention.h for the contract).
// Vectorised over m (S rows are contiguous): for each row j of S one pass
// does S[j,:] += φk[j]·v and num += φq[j]·S[j,:], with v and num for up to
// kBlock vectors of columns held in registers across all c rows. kComp: the
// sums are compensated (Kahan; comp arrays read and written) or plain.
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
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace la_detail {

inline constexpr size_t kBlock = 4;  // full vectors of columns per pass over S

// sum + term, compensated (*comp updated; term − comp formed by `y`) or plain.
template <bool kComp, class V, class MakeY, class Plain>
HWY_INLINE V AddTerm(V sum, V* comp, MakeY y, Plain plain) {
  if constexpr (kComp) {
    return CompensatedUpdate(sum, y(*comp), comp);
  } else {
    return plain(sum);
  }
}

// Columns [m0, m0 + kV·N + tail) of S (tail < N): update S and write
// out = num / denom for them.
template <size_t kV, bool kComp, class D>
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
    float* HWY_RESTRICT comp_row = kComp ? s_comp + j * m : nullptr;
    for (size_t t = 0; t < kV; ++t) {
      V comp;
      if constexpr (kComp) comp = hn::LoadU(d, comp_row + m0 + t * N);
      const V sv = AddTerm<kComp>(
          hn::LoadU(d, row + m0 + t * N), &comp, [&](V cv) HWY_ATTR { return hn::MulSub(kj, vv[t], cv); },
          [&](V sum) HWY_ATTR { return hn::MulAdd(kj, vv[t], sum); });
      hn::StoreU(sv, d, row + m0 + t * N);
      if constexpr (kComp) hn::StoreU(comp, d, comp_row + m0 + t * N);
      acc[t] = hn::MulAdd(qj, sv, acc[t]);
    }
    if (tail) {
      V comp;
      if constexpr (kComp) comp = LoadTail(d, comp_row + mt, tail);
      const V sv = AddTerm<kComp>(
          LoadTail(d, row + mt, tail), &comp, [&](V cv) HWY_ATTR { return hn::MulSub(kj, vv[kV], cv); },
          [&](V sum) HWY_ATTR { return hn::MulAdd(kj, vv[kV], sum); });
      StoreTail(sv, d, row + mt, tail);
      if constexpr (kComp) StoreTail(comp, d, comp_row + mt, tail);
      acc[kV] = hn::MulAdd(qj, sv, acc[kV]);
    }
  }
  for (size_t t = 0; t < kV; ++t) hn::StoreU(hn::Div(acc[t], denom), d, out + m0 + t * N);
  if (tail) StoreTail(hn::Div(acc[kV], denom), d, out + mt, tail);
}

#if HWY_HAVE_SCALABLE
// SVE vectors cannot be array elements (ColumnBlock's vv/acc): one vector of
// columns [m0, m0 + count), count <= N, per pass over S.
template <bool kComp, class D>
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
    float* HWY_RESTRICT comp_row = kComp ? s_comp + j * m + m0 : nullptr;
    const V kj = hn::Set(d, phi_k[j]);
    V comp;
    if constexpr (kComp) comp = LoadTail(d, comp_row, count);
    const V sv = AddTerm<kComp>(
        LoadTail(d, row, count), &comp, [&](V cv) HWY_ATTR { return hn::MulSub(kj, vv, cv); },
        [&](V sum) HWY_ATTR { return hn::MulAdd(kj, vv, sum); });
    StoreTail(sv, d, row, count);
    if constexpr (kComp) StoreTail(comp, d, comp_row, count);
    acc = hn::MulAdd(hn::Set(d, phi_q[j]), sv, acc);
  }
  StoreTail(hn::Div(acc, denom), d, out + m0, count);
}
#endif

template <bool kComp>
HWY_INLINE void Step(const float* HWY_RESTRICT phi_q, const float* HWY_RESTRICT phi_k,
                     const float* HWY_RESTRICT v, size_t c, size_t m, float eps,
                     float* HWY_RESTRICT s, float* HWY_RESTRICT s_comp, float* HWY_RESTRICT z,
                     float* HWY_RESTRICT z_comp, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t N = hn::Lanes(d);

  // z += φk and den = φq·z (the updated z).
  V a0 = hn::Zero(d), a1 = hn::Zero(d);
  size_t i = 0;
  for (; i + N <= c; i += N) {
    const V k = hn::LoadU(d, phi_k + i);
    V comp;
    if constexpr (kComp) comp = hn::LoadU(d, z_comp + i);
    const V zv = AddTerm<kComp>(
        hn::LoadU(d, z + i), &comp, [&](V cv) HWY_ATTR { return hn::Sub(k, cv); },
        [&](V sum) HWY_ATTR { return hn::Add(sum, k); });
    hn::StoreU(zv, d, z + i);
    if constexpr (kComp) hn::StoreU(comp, d, z_comp + i);
    a0 = hn::MulAdd(hn::LoadU(d, phi_q + i), zv, a0);
  }
  if (i < c) {
    const size_t r = c - i;
    const V k = LoadTail(d, phi_k + i, r);
    V comp;
    if constexpr (kComp) comp = LoadTail(d, z_comp + i, r);
    const V zv = AddTerm<kComp>(
        LoadTail(d, z + i, r), &comp, [&](V cv) HWY_ATTR { return hn::Sub(k, cv); },
        [&](V sum) HWY_ATTR { return hn::Add(sum, k); });
    StoreTail(zv, d, z + i, r);
    if constexpr (kComp) StoreTail(comp, d, z_comp + i, r);
    a1 = hn::MulAdd(LoadTail(d, phi_q + i, r), zv, a1);
  }
  const float den = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  const V denom = hn::Set(d, den + eps);

#if HWY_HAVE_SCALABLE
  for (size_t m0 = 0; m0 < m; m0 += N) {
    ColumnVector<kComp>(d, phi_q, phi_k, v, c, m, m0, std::min(N, m - m0), denom, s, s_comp, out);
  }
#else
  size_t m0 = 0;
  for (; m0 + kBlock * N <= m; m0 += kBlock * N) {
    ColumnBlock<kBlock, kComp>(d, phi_q, phi_k, v, c, m, m0, 0, denom, s, s_comp, out);
  }
  const size_t rest = m - m0;
  const size_t tail = rest % N;
  switch (rest / N) {
    case 0:
      if (tail) ColumnBlock<0, kComp>(d, phi_q, phi_k, v, c, m, m0, tail, denom, s, s_comp, out);
      break;
    case 1:
      ColumnBlock<1, kComp>(d, phi_q, phi_k, v, c, m, m0, tail, denom, s, s_comp, out);
      break;
    case 2:
      ColumnBlock<2, kComp>(d, phi_q, phi_k, v, c, m, m0, tail, denom, s, s_comp, out);
      break;
    default:
      static_assert(kBlock == 4, "cases cover rest / N < kBlock");
      ColumnBlock<3, kComp>(d, phi_q, phi_k, v, c, m, m0, tail, denom, s, s_comp, out);
      break;
  }
#endif  // HWY_HAVE_SCALABLE
}

}  // namespace la_detail

// See linear_attention.h.
HWY_INLINE void LinearAttentionStep(const float* HWY_RESTRICT phi_q,
                                    const float* HWY_RESTRICT phi_k,
                                    const float* HWY_RESTRICT v, size_t c, size_t m, float eps,
                                    float* HWY_RESTRICT s, float* HWY_RESTRICT s_comp,
                                    float* HWY_RESTRICT z, float* HWY_RESTRICT z_comp,
                                    float* HWY_RESTRICT out) {
  if (z_comp != nullptr) {  // (s_comp may be null when m = 0)
    la_detail::Step<true>(phi_q, phi_k, v, c, m, eps, s, s_comp, z, z_comp, out);
  } else {
    la_detail::Step<false>(phi_q, phi_k, v, c, m, eps, s, nullptr, z, nullptr, out);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_INL_H_ toggle
