// Per-target packed-weight GEMM (see dense.h: PackDenseWeights, DensePacked).
//
// Packed layout, the same on every target: panels of kDensePanelWidth (32)
// output features; panel p holds wp[p][k][j] = w[32p + j, k] (zero past
// `out`), k-major, as f32 (decoded, int8 scales folded in) or, for f16 and
// bf16 weights, as their stored values (widened in registers as they are
// loaded: the same numbers from half the bytes). A register tile of kR x
// rows × 32 outputs then accumulates outer products
//   acc[r][v] += x[r, k] (broadcast) · wp[p][k][v·N, v·N + N)
// with two weight loads per k on AVX-512 against 2·kR FMAs and no horizontal
// sums or transposes; y rows are written as whole 32-float pieces. This is
// the classic BLIS/oneDNN micro-kernel shape (12-14 × 32 with 32 registers).
//
// Loop order: row chunks whose x fits in L2 → panels (each streamed from
// memory once per chunk, then reused from L1/L2 by every row tile) → row
// tiles of near-equal height.
#if defined(RECUR_KERNELS_DENSE_DENSE_PACKED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_PACKED_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_PACKED_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_PACKED_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/common-inl.h"
#include "kernels/dense/dense-inl.h"  // LoadWeightRow
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_rounded-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace packed_detail {

// Scalable vectors (SVE, RVV) have no compile-time lane count; a 128-bit
// tag keeps the tile shape static there.
#if HWY_HAVE_SCALABLE
using PanelTag = hn::FixedTag<float, 4>;
#else
using PanelTag = hn::ScalableTag<float>;
#endif
inline constexpr size_t kLanes = hn::MaxLanes(PanelTag());
inline constexpr size_t kVecs = kDensePanelWidth / kLanes;  // vectors per tile row
static_assert(kDensePanelWidth % kLanes == 0, "panel must be whole vectors");
#if RECUR_ISA_AVX3
// 12 rows × 2 vectors = 24 accumulators + 2 weight vectors + broadcasts; k
// unrolled by 4. Measured (dense_bench, 64 rows): 12 rows 80-92% of peak, 14
// rows 78% (GCC reloads row pointers from the stack), 8 rows 77-82%.
inline constexpr size_t kMaxRows = 12;
#else
// 16 registers (or scalar): ~12 accumulators.
inline constexpr size_t kMaxRows = kVecs >= 12 ? 1 : 12 / kVecs;
#endif
// x floats per row chunk: the chunk stays in L2 while every panel passes.
inline constexpr size_t kChunkFloats = size_t{64} << 10;

// Cache lines of a panel's next part that each tile requests into L2 while
// it computes: the next panel then arrives while this one is reused from
// L1, instead of being fetched at memory speed by its own first tile.
struct Prefetch {
  const uint8_t* begin = nullptr;  // first line
  size_t lines = 0;                // one per k iteration, k < lines
};
inline constexpr size_t kLineBytes = 64;

#if HWY_HAVE_SCALABLE
// SVE vectors cannot be array elements: one row × 4 vectors per pass over k
// (named accumulators) instead of the kR × kVecs register tile below.
template <size_t kR, typename TW>
HWY_INLINE void Tile(const float* HWY_RESTRICT x, size_t x_stride, const TW* HWY_RESTRICT wp,
                     size_t in, const float* HWY_RESTRICT bias, size_t n, float* HWY_RESTRICT y,
                     size_t y_stride, bool accumulate, Prefetch) {
  static_assert(kVecs % 4 == 0, "groups of 4 vectors");
  const PanelTag d;
  using V = hn::Vec<PanelTag>;
  auto finish = [&](V acc, size_t j, float* HWY_RESTRICT yp) {
    if (j >= n) return;
    const size_t m = std::min(kLanes, n - j);
    if (bias) acc = hn::Add(acc, m == kLanes ? hn::LoadU(d, bias + j) : LoadTail(d, bias + j, m));
    if (m == kLanes) {
      if (accumulate) acc = hn::Add(acc, hn::LoadU(d, yp + j));
      hn::StoreU(acc, d, yp + j);
    } else {
      if (accumulate) acc = hn::Add(acc, LoadTail(d, yp + j, m));
      StoreTail(acc, d, yp + j, m);
    }
  };
  for (size_t r = 0; r < kR; ++r) {
    const float* HWY_RESTRICT xr = x + r * x_stride;
    for (size_t v = 0; v < kVecs && v * kLanes < n; v += 4) {
      V a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
      for (size_t k = 0; k < in; ++k) {
        const TW* HWY_RESTRICT wk = wp + k * kDensePanelWidth + v * kLanes;
        const V xb = hn::Set(d, xr[k]);
        a0 = hn::MulAdd(xb, dense_detail::LoadWeights(d, wk), a0);
        a1 = hn::MulAdd(xb, dense_detail::LoadWeights(d, wk + kLanes), a1);
        a2 = hn::MulAdd(xb, dense_detail::LoadWeights(d, wk + 2 * kLanes), a2);
        a3 = hn::MulAdd(xb, dense_detail::LoadWeights(d, wk + 3 * kLanes), a3);
      }
      float* HWY_RESTRICT yp = y + r * y_stride;
      finish(a0, v * kLanes, yp);
      finish(a1, (v + 1) * kLanes, yp);
      finish(a2, (v + 2) * kLanes, yp);
      finish(a3, (v + 3) * kLanes, yp);
    }
  }
}
#else
// y[r, 0, n) (+)= bias[0, n) + Σ_k x[r, k]·wp[k][0, n) for r < kR; n ≤ 32.
template <size_t kR, typename TW>
HWY_INLINE void Tile(const float* HWY_RESTRICT x, size_t x_stride, const TW* HWY_RESTRICT wp,
                     size_t in, const float* HWY_RESTRICT bias, size_t n, float* HWY_RESTRICT y,
                     size_t y_stride, bool accumulate, Prefetch pf) {
  const PanelTag d;
  using V = hn::Vec<PanelTag>;
  V acc[kR][kVecs];
  for (size_t r = 0; r < kR; ++r) {
    for (size_t v = 0; v < kVecs; ++v) acc[r][v] = hn::Zero(d);
  }
#pragma GCC unroll 4
  for (size_t k = 0; k < in; ++k) {
    if (k < pf.lines) __builtin_prefetch(pf.begin + k * kLineBytes, 0, 2);
    const TW* HWY_RESTRICT wk = wp + k * kDensePanelWidth;
    V w[kVecs];
    for (size_t v = 0; v < kVecs; ++v) w[v] = dense_detail::LoadWeights(d, wk + v * kLanes);
    for (size_t r = 0; r < kR; ++r) {
      const V xb = hn::Set(d, x[r * x_stride + k]);
      for (size_t v = 0; v < kVecs; ++v) acc[r][v] = hn::MulAdd(xb, w[v], acc[r][v]);
    }
  }
  for (size_t v = 0; v < kVecs; ++v) {
    const size_t j = v * kLanes;
    if (j >= n) break;
    const size_t m = std::min(kLanes, n - j);
    V b = hn::Zero(d);
    if (bias) b = m == kLanes ? hn::LoadU(d, bias + j) : LoadTail(d, bias + j, m);
    for (size_t r = 0; r < kR; ++r) {
      float* HWY_RESTRICT yp = y + r * y_stride + j;
      V s = hn::Add(acc[r][v], b);
      if (m == kLanes) {
        if (accumulate) s = hn::Add(s, hn::LoadU(d, yp));
        hn::StoreU(s, d, yp);
      } else {
        if (accumulate) s = hn::Add(s, LoadTail(d, yp, m));
        StoreTail(s, d, yp, m);
      }
    }
  }
}
#endif  // HWY_HAVE_SCALABLE

// Tile with a runtime row count rows ∈ [1, kR].
template <size_t kR, typename TW>
HWY_INLINE void TileN(size_t rows, const float* x, size_t x_stride, const TW* wp, size_t in,
                      const float* bias, size_t n, float* y, size_t y_stride, bool accumulate,
                      Prefetch pf) {
  if (rows == kR) return Tile<kR>(x, x_stride, wp, in, bias, n, y, y_stride, accumulate, pf);
  if constexpr (kR > 1) {
    TileN<kR - 1>(rows, x, x_stride, wp, in, bias, n, y, y_stride, accumulate, pf);
  }
}

}  // namespace packed_detail

// See dense.h: panels of f32 (TW = float) or of w's own f16 / bf16 values.
template <typename TW>
HWY_INLINE void PackDense(const DenseWeights& w, TW* HWY_RESTRICT packed) {
  const size_t in = w.in, out = w.out;
  const size_t panels = (out + kDensePanelWidth - 1) / kDensePanelWidth;
  std::fill(packed, packed + panels * in * kDensePanelWidth, TW());
  auto panel_column = [&](size_t o) {
    return packed + (o / kDensePanelWidth) * in * kDensePanelWidth + o % kDensePanelWidth;
  };
  if constexpr (!std::is_same_v<TW, float>) {
    HWY_DASSERT(Traits(w.type).block_bytes == sizeof(TW));  // the stored values
    for (size_t o = 0; o < out; ++o) {
      const TW* HWY_RESTRICT src = static_cast<const TW*>(w.weight) + o * in;
      TW* HWY_RESTRICT dst = panel_column(o);
      for (size_t k = 0; k < in; ++k) dst[k * kDensePanelWidth] = src[k];
    }
  } else {
    const hn::ScalableTag<float> d;
    const size_t N = hn::Lanes(d);
    HWY_ALIGN float row[HWY_MAX_BYTES / sizeof(float)];
    for (size_t o = 0; o < out; ++o) {
      float* HWY_RESTRICT dst = panel_column(o);
      const float scale = Traits(w.type).scales == WeightScales::kPerRow ? w.scales[o] : 1.0f;
      for (size_t k0 = 0; k0 < in; k0 += N) {
        const size_t n = std::min(N, in - k0);
        const auto v = dense_detail::LoadWeightRow(d, w, o, k0, n, row);
        hn::Store(hn::Mul(v, hn::Set(d, scale)), d, row);
        for (size_t k = 0; k < n; ++k) dst[(k0 + k) * kDensePanelWidth] = row[k];
      }
    }
  }
}

// See dense.h; panels of element type TW (PackDense).
template <typename TW>
HWY_INLINE void DensePacked(const float* x, size_t x_stride, size_t rows, const TW* packed,
                            const float* bias, size_t in, size_t out, size_t panel_begin,
                            size_t panel_end, float* y, size_t y_stride, bool accumulate,
                            ActivationBlocks rounding = ActivationBlocks::kNone) {
  namespace pd = packed_detail;
  if (RoundsActivations(rounding) && rows != 0 && in != 0) {
    const hn::ScalableTag<float> d;
    dense_detail::ForRoundedRows(d, rounding, x, x_stride, rows, in,
                                 [&](const float* xr, size_t b0, size_t nb) HWY_ATTR {
                                   DensePacked(xr, in, nb, packed, bias, in, out, panel_begin,
                                               panel_end, y + b0 * y_stride, y_stride, accumulate);
                                 });
    return;
  }
  if (rows == 0 || in == 0) {
    // Σ over nothing: y = bias (+ y).
    for (size_t r = 0; r < rows; ++r) {
      for (size_t o = panel_begin * kDensePanelWidth;
           o < std::min(out, panel_end * kDensePanelWidth); ++o) {
        const float b = bias ? bias[o] : 0.0f;
        y[r * y_stride + o] = accumulate ? y[r * y_stride + o] + b : b;
      }
    }
    return;
  }
  const size_t chunk = std::max<size_t>(pd::kMaxRows, pd::kChunkFloats / in);
  for (size_t r0 = 0; r0 < rows; r0 += chunk) {
    const size_t chunk_rows = std::min(chunk, rows - r0);
    const size_t tiles = (chunk_rows + pd::kMaxRows - 1) / pd::kMaxRows;
    for (size_t p = panel_begin; p < panel_end; ++p) {
      const size_t o = p * kDensePanelWidth;
      const size_t n = std::min(kDensePanelWidth, out - o);
      const TW* wp = packed + p * in * kDensePanelWidth;
      // The next panel's lines, split evenly over this panel's tiles.
      const size_t next_lines =
          p + 1 < panel_end ? in * kDensePanelWidth * sizeof(TW) / pd::kLineBytes : 0;
      const auto* next = reinterpret_cast<const uint8_t*>(wp + in * kDensePanelWidth);
      for (size_t t = 0, r = r0; t < tiles; ++t) {
        const size_t h = (r0 + chunk_rows - r + (tiles - t) - 1) / (tiles - t);
        const size_t l0 = next_lines * t / tiles, l1 = next_lines * (t + 1) / tiles;
        const pd::Prefetch pf{next + l0 * pd::kLineBytes, std::min(l1 - l0, in)};
        pd::TileN<pd::kMaxRows>(h, x + r * x_stride, x_stride, wp, in, bias ? bias + o : nullptr,
                                n, y + r * y_stride + o, y_stride, accumulate, pf);
        r += h;
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_PACKED_INL_H_ toggle
