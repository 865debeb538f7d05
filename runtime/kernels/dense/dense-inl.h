// Per-target Dense kernel (see dense.h for the contract).
//
// Each output is a dot product of an x row with a w row (both contiguous over
// `in`), so the kernel keeps a kB×kO tile of vector accumulators (kB batch
// rows × kO weight rows), streams both operands over `in` with unaligned
// loads, and reduces the tile horizontally once at the end:
//   - batch == 1: a 1×8 tile (8 independent FMA chains; weight-stream bound).
//   - batch >= 2: kMaxB×4 tiles (6×4 = 24 accumulators on AVX-512, 3×4 on
//     16-register targets): kB + 4 loads per 4·kB FMAs, so it is FMA bound.
// Loop order: [out chunk that fits L2] → [kMaxB batch rows, kept in L1] →
// [4 weight rows streamed from L2] → tile over `in`.
#if defined(RECUR_KERNELS_DENSE_DENSE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_INL_H_
#endif

#include <algorithm>
#include <cstddef>

#include "hwy/highway.h"
#include "kernels/common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace dense_detail {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
inline constexpr size_t kMaxB = 6;  // 32 vector registers
#else
inline constexpr size_t kMaxB = 3;  // 16 vector registers (or scalar)
#endif
// Weight rows per tile when batch == 1 / batch >= 2.
inline constexpr size_t kOWide = 8;
inline constexpr size_t kONarrow = 4;
// Bytes of w per out-chunk, so the chunk stays in L2 while all batch blocks
// pass over it.
inline constexpr size_t kChunkBytes = size_t{512} << 10;

#if HWY_TARGET != HWY_SCALAR
// Adds the 128-bit blocks of v: returns a 4-lane vector.
template <class D>
HWY_INLINE auto SumBlocks(D, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::Half<D> dh;
    return SumBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  } else {
    return v;
  }
}

// Returns {Σa, Σb, Σc, Σe} (sums over all lanes of each input).
template <class D>
HWY_INLINE hn::Vec128<float> Sum4(D d, hn::Vec<D> a, hn::Vec<D> b, hn::Vec<D> c,
                                  hn::Vec<D> e) {
  // Per 128-bit block: t0 = [a0+a2, b0+b2, a1+a3, b1+b3], likewise t1 for c, e.
  const auto t0 = hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));
  const auto t1 = hn::Add(hn::InterleaveLower(d, c, e), hn::InterleaveUpper(d, c, e));
  // 64-bit interleave: per block [Σa, Σb, Σc, Σe] over that block's lanes.
  const hn::Repartition<uint64_t, D> d64;
  const auto w0 = hn::BitCast(d64, t0);
  const auto w1 = hn::BitCast(d64, t1);
  const auto s = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, w0, w1)),
                         hn::BitCast(d, hn::InterleaveUpper(d64, w0, w1)));
  return SumBlocks(d, s);
}
#endif

// y[b, o0 + o] (+)= bias[o0 + o] + Σ_i x[b, i]·w[o0 + o, i] for b < kB, o < kO.
// xr[b]: x row b; w0: weight row o0; bias0: bias + o0 or null; yr[b]: y row
// b + o0.
template <size_t kB, size_t kO, class D>
HWY_INLINE void Tile(D d, const float* const* HWY_RESTRICT xr, const float* HWY_RESTRICT w0,
                     size_t in, const float* HWY_RESTRICT bias0, float* const* HWY_RESTRICT yr,
                     bool accumulate) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V acc[kB][kO];
  for (size_t b = 0; b < kB; ++b) {
    for (size_t o = 0; o < kO; ++o) acc[b][o] = hn::Zero(d);
  }
  const float* wr[kO];
  for (size_t o = 0; o < kO; ++o) wr[o] = w0 + o * in;

  size_t i = 0;
  for (; i + N <= in; i += N) {
    V wv[kO];
    for (size_t o = 0; o < kO; ++o) wv[o] = hn::LoadU(d, wr[o] + i);
    for (size_t b = 0; b < kB; ++b) {
      const V xv = hn::LoadU(d, xr[b] + i);
      for (size_t o = 0; o < kO; ++o) acc[b][o] = hn::MulAdd(xv, wv[o], acc[b][o]);
    }
  }
  if (i < in) {
    const size_t n = in - i;
    V wv[kO];
    for (size_t o = 0; o < kO; ++o) wv[o] = LoadTail(d, wr[o] + i, n);
    for (size_t b = 0; b < kB; ++b) {
      const V xv = LoadTail(d, xr[b] + i, n);
      for (size_t o = 0; o < kO; ++o) acc[b][o] = hn::MulAdd(xv, wv[o], acc[b][o]);
    }
  }

#if HWY_TARGET == HWY_SCALAR
  for (size_t b = 0; b < kB; ++b) {
    for (size_t o = 0; o < kO; ++o) {
      float s = hn::GetLane(acc[b][o]);
      if (bias0) s += bias0[o];
      if (accumulate) s += yr[b][o];
      yr[b][o] = s;
    }
  }
#else
  const hn::Full128<float> d4;
  for (size_t g = 0; g < kO; g += 4) {  // groups of 4 consecutive outputs
    const size_t n = std::min<size_t>(4, kO - g);
    const float* bias_g = bias0 ? bias0 + g : nullptr;
    hn::Vec128<float> bv = hn::Zero(d4);
    if (bias_g) bv = (n == 4) ? hn::LoadU(d4, bias_g) : LoadTail(d4, bias_g, n);
    for (size_t b = 0; b < kB; ++b) {
      const V z = hn::Zero(d);
      const auto a0 = acc[b][g];
      const auto a1 = g + 1 < kO ? acc[b][g + 1] : z;
      const auto a2 = g + 2 < kO ? acc[b][g + 2] : z;
      const auto a3 = g + 3 < kO ? acc[b][g + 3] : z;
      auto s = hn::Add(Sum4(d, a0, a1, a2, a3), bv);
      float* HWY_RESTRICT yp = yr[b] + g;
      if (n == 4) {
        if (accumulate) s = hn::Add(s, hn::LoadU(d4, yp));
        hn::StoreU(s, d4, yp);
      } else {
        if (accumulate) s = hn::Add(s, LoadTail(d4, yp, n));
        StoreTail(s, d4, yp, n);
      }
    }
  }
#endif
}

// Tile with a runtime number of weight rows r in [1, kMax].
template <size_t kB, size_t kMax, class D>
HWY_INLINE void TileTail(D d, size_t r, const float* const* xr, const float* w0, size_t in,
                         const float* bias0, float* const* yr, bool accumulate) {
  if constexpr (kMax >= 1) {
    if (r == kMax) return Tile<kB, kMax>(d, xr, w0, in, bias0, yr, accumulate);
    if constexpr (kMax > 1) TileTail<kB, kMax - 1>(d, r, xr, w0, in, bias0, yr, accumulate);
  }
}

// kB batch rows starting at x/y against weight rows [o_begin, o_end).
template <size_t kB, class D>
HWY_NOINLINE void Rows(D d, const float* x, size_t x_stride, const float* w, const float* bias,
                       size_t in, size_t o_begin, size_t o_end, float* y, size_t y_stride,
                       bool accumulate) {
  constexpr size_t kO = kB == 1 ? kOWide : kONarrow;
  const float* xr[kB];
  float* yr[kB];
  size_t o = o_begin;
  for (; o + kO <= o_end; o += kO) {
    for (size_t b = 0; b < kB; ++b) {
      xr[b] = x + b * x_stride;
      yr[b] = y + b * y_stride + o;
    }
    Tile<kB, kO>(d, xr, w + o * in, in, bias ? bias + o : nullptr, yr, accumulate);
  }
  if (o < o_end) {
    for (size_t b = 0; b < kB; ++b) {
      xr[b] = x + b * x_stride;
      yr[b] = y + b * y_stride + o;
    }
    TileTail<kB, kO - 1>(d, o_end - o, xr, w + o * in, in, bias ? bias + o : nullptr, yr,
                         accumulate);
  }
}

template <size_t kB, class D>
HWY_INLINE void RowsN(D d, size_t nb, const float* x, size_t x_stride, const float* w,
                      const float* bias, size_t in, size_t o_begin, size_t o_end, float* y,
                      size_t y_stride, bool accumulate) {
  if constexpr (kB >= 1) {
    if (nb == kB) {
      return Rows<kB>(d, x, x_stride, w, bias, in, o_begin, o_end, y, y_stride, accumulate);
    }
    if constexpr (kB > 1) {
      RowsN<kB - 1>(d, nb, x, x_stride, w, bias, in, o_begin, o_end, y, y_stride, accumulate);
    }
  }
}

}  // namespace dense_detail

// See dense.h.
HWY_INLINE void Dense(const float* x, size_t x_stride, size_t batch, const float* w,
                      const float* bias, size_t in, size_t out, float* y, size_t y_stride,
                      bool accumulate) {
  namespace dd = dense_detail;
  if (batch == 0 || out == 0) return;
  const hn::ScalableTag<float> d;
  // With one batch block every weight is read once anyway; otherwise limit
  // the out-chunk so it is reused from L2 by every batch block.
  size_t chunk = out;
  if (batch > dd::kMaxB && in > 0) {
    chunk = std::max<size_t>(dd::kONarrow, dd::kChunkBytes / (in * sizeof(float)));
    chunk -= chunk % dd::kONarrow;
  }
  for (size_t o0 = 0; o0 < out; o0 += chunk) {
    const size_t o1 = std::min(out, o0 + chunk);
    // Batch blocks of near-equal size (8 = 4 + 4 rather than 6 + 2).
    const size_t blocks = (batch + dd::kMaxB - 1) / dd::kMaxB;
    for (size_t k = 0, b0 = 0; k < blocks; ++k) {
      const size_t nb = (batch - b0 + (blocks - k) - 1) / (blocks - k);
      dd::RowsN<dd::kMaxB>(d, nb, x + b0 * x_stride, x_stride, w, bias, in, o0, o1,
                           y + b0 * y_stride, y_stride, accumulate);
      b0 += nb;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_INL_H_ toggle
