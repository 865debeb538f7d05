// Per-target Dense for reduced-precision weights stored an element at a time
// (f16, bf16, int8), with or without scales (per row or per group; see
// dense.h). Activations, sums and outputs stay f32. Include after
// dense-inl.h, whose row tiles and batch panels it reuses.
//
// Small batches (batch <= kMaxB: one batch block, in particular batch 1,
// which is memory-bound): the row tiles stream the narrow weights and widen
// them in registers (LoadWeights in dense-inl.h), so a step reads half
// (f16/bf16) or a quarter (int8) of the f32 bytes, and every weight is
// widened exactly once. Widening costs ALU ops (f16: vcvtph2ps, int8:
// sign-extend + convert, bf16: zero-extend + shift) that make L2-resident
// layers compute-bound; bf16 therefore loads pairs (LoadBf16Pairs: a shift
// and a mask per 2N weights) against a copy of x permuted to match, which
// measured 7-8% faster on the paper-MNIST step (524 vs 574 µs, AVX-512).
//
// Larger batches: every weight would be widened once per batch block, so
// instead a chunk of weight rows at a time is widened once into a
// per-thread f32 scratch (already multiplied by its scales) and the f32
// kernels run on it: from kPackedWidenMinBatch rows on AVX-512, the chunk
// packed into 32-wide panels for DensePacked's register tiles; otherwise
// (kWidenBytes of rows) the AVX-512 batch panels (x packed once per group
// of panels, not once per chunk) and the row tiles for the other rows and
// targets. Widening costs O(out·in) against O(batch·out·in) for the products.
#if defined(RECUR_KERNELS_DENSE_DENSE_LOWP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_LOWP_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_LOWP_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_LOWP_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/dense/dense-inl.h"
#include "kernels/dense/dense_packed-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace dense_detail {

// f32 bytes per widened chunk of rows (rounded down to a multiple of
// kWidenRows rows, the panel tile height, and at least that). Measured on
// AVX-512 at 64×256→1024: 8 KiB to 2 MiB chunks all run within noise of
// each other (widening costs ~10% over f32 there), so the small one keeps
// the per-thread scratch small and L1/L2-resident.
inline constexpr size_t kWidenBytes = size_t{64} << 10;
inline constexpr size_t kWidenRows = 8;
// Above this much scratch (kWidenRows rows of a very wide layer, or the
// permuted x rows of bf16 pairs) the plain in-register path is used instead.
inline constexpr size_t kMaxWidenBytes = size_t{4} << 20;

// Output rows widened per chunk on `batch` rows of an (in, out) layer; 0
// when the weights are widened in registers instead (a small batch, or a
// layer so wide that kWidenRows rows pass kMaxWidenBytes).
HWY_INLINE size_t WidenChunkRows(size_t batch, size_t in, size_t out) {
  if (batch <= kMaxB || in == 0 || kWidenRows * in * sizeof(float) > kMaxWidenBytes) return 0;
  size_t chunk = std::max(kWidenRows, kWidenBytes / (in * sizeof(float)));
  chunk -= chunk % kWidenRows;
  return std::min(chunk, out);
}

// Batches of kPackedWidenMinBatch rows or more on AVX-512: each 32 widened
// rows are packed as PackDense packs them (dense_packed-inl.h) and multiplied
// by DensePacked's register tiles, which read whole panels with no
// transposes: dense_bench at 64×256→1024, 95% of the FMA peak for packed
// f32 against 70% for the x panels over widened rows.
inline constexpr size_t kPackedWidenMinBatch = 32;
// Packed panels per widening pass: about kWidenPackedBytes of them.
inline constexpr size_t kWidenPackedBytes = size_t{256} << 10;

HWY_INLINE size_t WidenPackedPanels(size_t in) {
  return std::clamp<size_t>(kWidenPackedBytes / (kDensePanelWidth * in * sizeof(float)), 1, 8);
}

// Whether WidenedDense packs the widened rows (above) on `batch` rows.
HWY_INLINE bool WidensPacked(size_t batch, size_t in) {
#if RECUR_ISA_AVX3
  return batch >= kPackedWidenMinBatch && in > 0 &&
         (WidenPackedPanels(in) + 1) * kDensePanelWidth * in * sizeof(float) <= kMaxWidenBytes;
#else
  (void)batch;
  (void)in;
  return false;
#endif
}

// Floats WidenedDense takes from WidenScratch on `batch` rows of an (in, out)
// layer: packed panels and the rows widened for them, or a chunk of rows;
// 0 when the weights are widened in registers instead.
template <class D>
HWY_INLINE size_t WidenFloats(D d, size_t batch, size_t in, size_t out) {
  const size_t chunk = WidenChunkRows(batch, in, out);
  if (chunk == 0) return 0;
  if (WidensPacked(batch, in)) {
    return (WidenPackedPanels(in) + 1) * kDensePanelWidth * in + hn::Lanes(d);
  }
  return chunk * in + hn::Lanes(d);
}

// Floats of x permuted for bf16 pairs (PermutePairs) on `batch` rows; 0 when
// the pairs path is not used.
template <typename TW, class D>
HWY_INLINE size_t PairsScratchFloats(D d, size_t batch, size_t in) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if constexpr (std::is_same_v<TW, hwy::bfloat16_t> && !HWY_HAVE_SCALABLE) {
    if (in >= 2 * hn::Lanes(d) && batch * in * sizeof(float) <= kMaxWidenBytes) return batch * in;
  }
#endif
  (void)d;
  (void)batch;
  (void)in;
  return 0;
}

// What WidenedDense asks of WidenScratch and PanelScratch on `batch` rows of
// an (in, out) layer: nothing when the weights are widened in registers
// instead (WidenChunkRows is 0).
template <class D>
HWY_INLINE DenseScratch WidenedScratchNeed(D d, size_t batch, size_t in, size_t out) {
  DenseScratch need;
  if (batch == 0 || out == 0) return need;
  need.widen_floats = WidenFloats(d, batch, in, out);
  if (need.widen_floats != 0 && !WidensPacked(batch, in)) {
    need.panel_floats = PanelScratchFloats(d, batch, in, out);
  }
  return need;
}

// What DenseNarrow<kType> asks of WidenScratch and PanelScratch (dense.h's
// DenseScratchNeed).
template <WeightType kType, class D>
HWY_INLINE DenseScratch NarrowScratchNeed(D d, size_t batch, size_t in, size_t out) {
  using TW = typename StoredElement<kType>::type;
  if (batch != 0 && out != 0 && WidenChunkRows(batch, in, out) == 0) {
    DenseScratch need;
    need.widen_floats = PairsScratchFloats<TW>(d, batch, in);
    return need;
  }
  return WidenedScratchNeed(d, batch, in, out);
}

// f32 scratch for widened weights (ScratchRegion).
HWY_INLINE float* WidenScratch(size_t floats) {
  return ScratchRegion<&DenseScratch::widen, &DenseScratch::widen_floats>(floats);
}

// Activation rows quantised to int8 per pass by the integer-dot paths (int4,
// int8): up to kQuantizedRows rows of `in` codes, their f32 scales and
// `sums_per_row` i32 the caller keeps beside them (int4: its groups' sums).
// On the stack the codes have 16 KiB, 2 rows of an 8,192-wide layer, too
// few for a GEMM; here they come from the widening scratch, which
// DenseScratchNeed plans for (QuantizedRowsFloats).
inline constexpr size_t kQuantizedRows = 64;

struct QuantizedRows {
  int8_t* q = nullptr;       // rows × in codes, 64-byte aligned
  float* scales = nullptr;   // rows
  int32_t* sums = nullptr;   // rows × sums_per_row, or null (none asked)
  size_t rows = 0;
};

// Floats of scratch for the quantised rows of a pass of `batch` rows.
HWY_INLINE size_t QuantizedRowsFloats(size_t batch, size_t in, size_t sums_per_row = 0) {
  const size_t rows = std::min(batch, kQuantizedRows);
  return (rows + 15) / 16 * 16 + (rows * sums_per_row + 15) / 16 * 16 + (rows * in + 3) / 4;
}

// The quantised rows of a pass of `batch` rows in the widening scratch;
// rows 0 where the scratch is not there (bound and too small).
HWY_INLINE QuantizedRows QuantizedRowsScratch(size_t batch, size_t in, size_t sums_per_row = 0) {
  const size_t rows = std::min(batch, kQuantizedRows);
  float* s = WidenScratch(QuantizedRowsFloats(batch, in, sums_per_row));
  if (s == nullptr || rows == 0) return {};
  QuantizedRows r;
  r.scales = s;
  s += (rows + 15) / 16 * 16;  // keeps the codes 64-byte aligned
  if (sums_per_row != 0) r.sums = reinterpret_cast<int32_t*>(s);
  r.q = reinterpret_cast<int8_t*>(s + (rows * sums_per_row + 15) / 16 * 16);
  r.rows = rows;
  return r;
}

// The rows of a pass: the caller's stack buffer (stack_bytes of codes and
// room for max_rows scales), or, where the batch has more rows than that
// holds, QuantizedRowsScratch's when it holds more.
HWY_INLINE QuantizedRows PassRows(int8_t* stack_q, size_t stack_bytes, float* stack_scales,
                                  size_t max_rows, size_t batch, size_t in,
                                  size_t sums_per_row = 0) {
  QuantizedRows rows;
  rows.q = stack_q;
  rows.scales = stack_scales;
  rows.rows = std::min(max_rows, stack_bytes / std::max<size_t>(in, 1));
  if (batch > rows.rows) {
    const QuantizedRows more = QuantizedRowsScratch(batch, in, sums_per_row);
    if (more.rows > rows.rows) return more;
  }
  return rows;
}

// dst[r·in + i] = w[r, i] times its scale (of kind kS: scales from row 0
// on) for r < rows, i < in. dst has room for rows·in + Lanes(d) floats: a
// row's last vector may be stored whole (the next row, written after it,
// overwrites the excess).
template <WeightScales kS, class D, typename TW>
HWY_INLINE void Widen(D d, const TW* HWY_RESTRICT w, const TileScales& scales, size_t rows,
                      size_t in, float* HWY_RESTRICT dst) {
  const size_t N = hn::Lanes(d);
  if constexpr (kS == WeightScales::kNone) {
    (void)scales;
    // Rows are contiguous on both sides: one pass over rows·in values.
    const size_t n = rows * in;
    size_t i = 0;
    for (; i + 2 * N <= n; i += 2 * N) {
      const auto a = LoadWeights(d, w + i);
      const auto b = LoadWeights(d, w + i + N);
      hn::Store(a, d, dst + i);  // dst is aligned and i a multiple of N
      hn::Store(b, d, dst + i + N);
    }
    for (; i + N <= n; i += N) hn::Store(LoadWeights(d, w + i), d, dst + i);
    if (i < n) hn::Store(LoadWeightsTail(d, w + i, n - i), d, dst + i);
  } else if constexpr (kS == WeightScales::kPerGroup) {
    // Groups of G inputs, a multiple of 32, so of Ng: whole vectors.
    const hn::CappedTag<float, kGroupLanes> dg;
    const size_t Ng = hn::Lanes(dg);
    const size_t G = scales.group_size, groups = G == 0 ? 0 : in / G;
    HWY_ALIGN float sc[kScaleBuffer];
    for (size_t r = 0; r < rows; ++r) {
      const TW* HWY_RESTRICT wr = w + r * in;
      float* HWY_RESTRICT dr = dst + r * in;
      size_t i = 0;
      for (size_t g0 = 0; g0 < groups; g0 += kScaleRun) {
        const size_t ng = std::min(kScaleRun, groups - g0);
        DecodeGroupScales(dg, scales.group + r * groups + g0, ng, sc);
        for (size_t g = 0; g < ng; ++g) {
          const auto s = hn::Set(dg, sc[g]);
          for (size_t end = i + G; i < end; i += Ng) {
            hn::StoreU(hn::Mul(LoadWeights(dg, wr + i), s), dg, dr + i);
          }
        }
      }
    }
  } else {
    for (size_t r = 0; r < rows; ++r) {
      const TW* HWY_RESTRICT wr = w + r * in;
      float* HWY_RESTRICT dr = dst + r * in;
      const auto s = hn::Set(d, scales.row[r]);
      size_t i = 0;
      for (; i + N <= in; i += N) hn::StoreU(hn::Mul(LoadWeights(d, wr + i), s), d, dr + i);
      if (i < in) hn::StoreU(hn::Mul(LoadWeightsTail(d, wr + i, in - i), s), d, dr + i);
    }
  }
}

// x with each block of 2N values split into its even and odd elements, to
// match LoadBf16Pairs: xp[i + j] = x[i + 2j], xp[i + N + j] = x[i + 2j + 1]
// for j < N and i a multiple of 2N with i + 2N <= in; the rest as it is.
HWY_INLINE void PermutePairs(const float* HWY_RESTRICT x, size_t in, size_t N,
                             float* HWY_RESTRICT xp) {
  size_t i = 0;
  for (; i + 2 * N <= in; i += 2 * N) {
    for (size_t j = 0; j < N; ++j) {
      xp[i + j] = x[i + 2 * j];
      xp[i + N + j] = x[i + 2 * j + 1];
    }
  }
  for (; i < in; ++i) xp[i] = x[i];
}

#if RECUR_ISA_AVX3
// dst = PackDense's panel of the row-major f32 rows src[r·in + k], r < rows
// ≤ 32: dst[k·32 + r] = src[r·in + k], zero for r ≥ rows. dst 64-byte aligned.
HWY_INLINE void PackPanel(const float* HWY_RESTRICT src, size_t rows, size_t in,
                          float* HWY_RESTRICT dst) {
  namespace x512 = isa::x512;
  size_t k = 0;
  for (; k + 16 <= in; k += 16) {
    for (size_t h = 0; h < kDensePanelWidth / 16; ++h) {
      x512::VecI r[16];
      for (size_t i = 0; i < 16; ++i) {
        const size_t row = 16 * h + i;
        r[i] = row < rows ? x512::LoadU(src + row * in + k) : x512::ZeroI();
      }
      x512::Transpose16x16(r);
      for (size_t j = 0; j < 16; ++j) {
        x512::Store(static_cast<void*>(dst + (k + j) * kDensePanelWidth + 16 * h), r[j]);
      }
    }
  }
  for (; k < in; ++k) {
    for (size_t r = 0; r < kDensePanelWidth; ++r) {
      dst[k * kDensePanelWidth + r] = r < rows ? src[r * in + k] : 0.0f;
    }
  }
}
#endif

// Dense on `batch` rows (batch > kMaxB) for weights that widen(o0, rows,
// dst) writes as f32, rows [o0, o0 + rows) of the layer into dst (room for
// rows·in + Lanes(d) floats), into wf (WidenScratch(WidenFloats(...))):
// packed panels (WidensPacked), or a chunk of WidenChunkRows rows at a time
// for the AVX-512 batch panels (x packed once per group of panels, not once
// per chunk) and the row tiles for the other rows and targets.
template <class D, class WidenRows>
HWY_INLINE void WidenedDense(D d, const float* x, size_t x_stride, size_t batch,
                             const WidenRows& widen, const float* bias, size_t in, size_t out,
                             float* HWY_RESTRICT wf, float* y, size_t y_stride, bool accumulate) {
  [[maybe_unused]] const size_t N = hn::Lanes(d);
#if RECUR_ISA_AVX3
  if (WidensPacked(batch, in)) {
    const size_t panels = WidenPackedPanels(in), width = panels * kDensePanelWidth;
    float* HWY_RESTRICT rows_f32 = wf + width * in;  // one panel's rows, row-major
    for (size_t o0 = 0; o0 < out; o0 += width) {
      const size_t n = std::min(width, out - o0), used = (n + kDensePanelWidth - 1) / kDensePanelWidth;
      for (size_t p = 0; p < used; ++p) {
        const size_t o = o0 + p * kDensePanelWidth, rows = std::min(kDensePanelWidth, out - o);
        widen(o, rows, rows_f32);
        PackPanel(rows_f32, rows, in, wf + p * kDensePanelWidth * in);
      }
      DensePacked(x, x_stride, batch, wf, bias ? bias + o0 : nullptr, in, n, 0, used, y + o0,
                  y_stride, accumulate);
    }
    return;
  }
#endif
  const size_t chunk = WidenChunkRows(batch, in, out);
  size_t panel_rows = 0;  // leading batch rows done by panels
  size_t group = 1;       // panels packed per pass over the weights
  size_t P = 1;
  [[maybe_unused]] float* xt = nullptr;
#if RECUR_ISA_AVX3
  P = kPanelV * N;
  if (const size_t panel_floats = PanelScratchFloats(d, batch, in, out)) {
    group = PanelGroup(P, in);
    xt = PanelScratch(panel_floats);
    if (xt != nullptr) panel_rows = batch / P * P;
  }
#endif
  const size_t total = panel_rows / P;  // panels
  const size_t rest = batch - panel_rows;

  // One pass per group of panels; the last pass also does the rest rows.
  for (size_t p0 = 0;; p0 += group) {
    const size_t panels = std::min(group, total - std::min(total, p0));
    const bool last = p0 + group >= total;
    const float* xg = x + p0 * P * x_stride;
    float* yg = y + p0 * P * y_stride;
#if RECUR_ISA_AVX3
    for (size_t p = 0; p < panels; ++p) {
      PackTransposed(d, xg + p * P * x_stride, x_stride, P, in, xt + p * P * in);
    }
#endif
    for (size_t o0 = 0; o0 < out; o0 += chunk) {
      const size_t rows = std::min(chunk, out - o0);
      widen(o0, rows, wf);
      const float* bias0 = bias ? bias + o0 : nullptr;
#if RECUR_ISA_AVX3
      for (size_t p = 0; p < panels; ++p) {
        PanelRows(d, xt + p * P * in, wf, in, 0, rows, bias0, yg + p * P * y_stride + o0,
                  y_stride, accumulate);
      }
#else
      (void)panels;
      (void)xg;
      (void)yg;
#endif
      if (last && rest > 0) {
        RowTiles<WeightScales::kNone>(d, x + panel_rows * x_stride, x_stride, rest, wf,
                                      TileScales(), bias0, in, rows, y + panel_rows * y_stride + o0,
                                      y_stride, accumulate, false);
      }
    }
    if (last) break;
  }
}

}  // namespace dense_detail

// Dense (dense.h) for w of type kType, a type stored an element at a time
// (its StoredElement) with any kind of scales.
template <WeightType kType>
HWY_INLINE void DenseNarrow(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                            float* y, size_t y_stride, bool accumulate) {
  namespace dd = dense_detail;
  using TW = typename dd::StoredElement<kType>::type;
  constexpr WeightScales kS = Traits(kType).scales;
  if (batch == 0 || w.out == 0) return;
  const TW* wt = static_cast<const TW*>(w.weight);
  const dd::TileScales scales = dd::TileScales::Of(w);
  const float* bias = w.bias;
  const size_t in = w.in, out = w.out;
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t widen_floats = dd::WidenFloats(d, batch, in, out);
  float* wf = widen_floats == 0 ? nullptr : dd::WidenScratch(widen_floats);
  if (wf == nullptr) {  // small batch (or no scratch): widen in registers
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if constexpr (std::is_same_v<TW, hwy::bfloat16_t> && !HWY_HAVE_SCALABLE) {
      // bf16 in pairs (LoadBf16Pairs) against x permuted to match.
      const size_t pair_floats = dd::PairsScratchFloats<TW>(d, batch, in);
      float* xp = pair_floats == 0 ? nullptr : dd::WidenScratch(pair_floats);
      if (xp != nullptr) {
        for (size_t b = 0; b < batch; ++b) dd::PermutePairs(x + b * x_stride, in, N, xp + b * in);
        dd::RowTiles<kS, true>(d, xp, in, batch, wt, scales, bias, in, out, y, y_stride, accumulate,
                               w.from_memory);
        return;
      }
    }
#endif
    dd::RowTiles<kS>(d, x, x_stride, batch, wt, scales, bias, in, out, y, y_stride, accumulate,
                     w.from_memory);
    return;
  }

  dd::WidenedDense(
      d, x, x_stride, batch,
      [&](size_t o0, size_t rows, float* HWY_RESTRICT dst) HWY_ATTR {
        dd::Widen<kS>(d, wt + o0 * in, scales.From(o0, in), rows, in, dst);
      },
      bias, in, out, wf, y, y_stride, accumulate);
}

// DenseBlockQ8 (dense.h) for w of type kType, f16 or bf16: the activations
// rounded as ggml rounds them for those weights, then DenseNarrow on them;
// a step's f16 stream reads them as f16.
template <WeightType kType>
HWY_INLINE void DenseRounded(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                             float* y, size_t y_stride, bool accumulate) {
  namespace dd = dense_detail;
  if (batch == 0 || w.out == 0) return;
  const hn::ScalableTag<float> d;
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
  if constexpr (kType == WeightType::kF16) {
    if (batch == 1 && dd::StreamsRows(w.in, w.out, sizeof(hwy::float16_t), w.from_memory)) {
      HWY_ALIGN hwy::float16_t xh[dd::kStreamMaxX / sizeof(float)];
      dd::RoundRowToF16(d, x, w.in, xh);
      dd::StreamRows<WeightScales::kNone>(d, static_cast<const hwy::float16_t*>(xh),
                                          static_cast<const hwy::float16_t*>(w.weight),
                                          dd::TileScales(), w.bias, w.in, w.out, y, accumulate);
      return;
    }
  }
#endif
  dd::ForRoundedRows(d, ActivationBlocksOf(kType, 0), x, x_stride, batch, w.in,
                     [&](const float* xr, size_t b0, size_t nb) HWY_ATTR {
                       DenseNarrow<kType>(xr, w.in, nb, w, y + b0 * y_stride, y_stride, accumulate);
                     });
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_LOWP_INL_H_ toggle
