// Per-target Dense kernel (see dense.h for the contract). Two strategies,
// both accumulating in f32:
//
// Row tiles (every target; on AVX-512 for batch < 32 and leftover rows).
// They are templated on the weight element type and the kind of its scales:
// f16/bf16/int8 weights are widened in registers as they are loaded
// (LoadWeights; dense_lowp-inl.h), per-group scales multiplied in there too.
// Each output is a dot product of an x row and a w row, both contiguous over
// `in`, so a tile keeps kB×kO vector accumulators (kB batch rows × kO weight
// rows), streams both with unaligned loads and reduces horizontally at the end:
//   - batch == 1: a 1×8 tile (8 independent FMA chains) for layers that come
//     from L2; from 1 MiB of weights (L3 or DRAM), or from 16 KiB for the
//     layers of a model read from DRAM at every step (DenseWeights::
//     from_memory), StreamRows instead reads the rows one after the other
//     as one stream.
//   - batch >= 2: kMaxB×4 tiles (6×4 = 24 accumulators on AVX-512, 3×4 with
//     16 registers): kB + 4 loads per 4·kB FMAs. The final reduction costs
//     ~3 shuffle/add ops per output (~20% at in = 256).
//   Loop order: [out chunk of w that fits L2] → [kMaxB batch rows, in L1] →
//   [4 weight rows] → tile over `in`.
//
// Batch panels (AVX-512 only: full panels of 32 batch rows when out >= 32 and
// in <= 2·out). x is packed transposed, xt[k][l] = x[b0 + l][k], and an 8×32
// tile accumulates outer products
//   acc[r][j] += w[o + r][k] (broadcast) · xt[k][16j, 16j + 16)
// so there is no horizontal reduction; the result is transposed 4×4 within
// 128-bit blocks and written as 4-float pieces of y rows. Packing costs
// O(batch·in), against O(batch·out) reductions saved.
#if defined(RECUR_KERNELS_DENSE_DENSE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/common-inl.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"  // DecodeWeight

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace dense_detail {

// `floats` of a scratch region: the bound scratch's (kernels::ScopedDenseScratch)
// if any, else per-thread, per-target and per-region memory (grows, never
// shrinks). Returns nullptr if it is too small or allocation fails.
template <float* DenseScratch::*kRegion, size_t DenseScratch::*kFloats>
HWY_INLINE float* ScratchRegion(size_t floats) {
  if (const DenseScratch* bound = BoundDenseScratch()) {
    return floats <= bound->*kFloats ? bound->*kRegion : nullptr;
  }
  static thread_local hwy::AlignedFreeUniquePtr<float[]> buf;
  static thread_local size_t capacity = 0;
  if (capacity < floats) {
    buf = hwy::AllocateAligned<float>(floats);
    capacity = buf ? floats : 0;
  }
  return buf.get();
}

#if RECUR_ISA_AVX3
inline constexpr size_t kMaxB = 6;  // 32 vector registers
#else
inline constexpr size_t kMaxB = 3;  // 16 vector registers (or scalar)
#endif
// Weight rows per row tile when batch == 1 / batch >= 2.
inline constexpr size_t kOWide = 8;
inline constexpr size_t kONarrow = 4;
// Bytes of w per out-chunk, so the chunk stays in L2 while all batch blocks
// pass over it.
inline constexpr size_t kChunkBytes = size_t{512} << 10;

// ---------------------------------------------------------------------------
// Weight element types: float, hwy::float16_t, hwy::bfloat16_t and int8_t
// (StoredElement says which a WeightType is). Narrow weights are loaded at
// their own width (N/2 or N/4 bytes' worth of a vector) and widened in
// registers: bf16 by a 16-bit shift, f16 by PromoteTo (F16C on AVX2/AVX-512,
// bit arithmetic below), int8 by PromoteTo to i32 and ConvertTo f32 (exact).
// What the stored value is multiplied by is the type's WeightScales: with
// per-row scales the sums are multiplied by the row's scale at the end; with
// per-group scales each loaded vector (which lies within one group:
// kGroupLanes) by its group's.

// The element type the row tiles load a weight type's values as; one
// specialisation per type they run (kI4 has kernels of its own).
template <WeightType kType>
struct StoredElement;
template <>
struct StoredElement<WeightType::kF32> {
  using type = float;
};
template <>
struct StoredElement<WeightType::kF16> {
  using type = hwy::float16_t;
};
template <>
struct StoredElement<WeightType::kBF16> {
  using type = hwy::bfloat16_t;
};
template <>
struct StoredElement<WeightType::kI8> {
  using type = int8_t;
};
template <>
struct StoredElement<WeightType::kQ8_0> {
  using type = int8_t;
};

// The scales of the weights the row tiles read, from the first row they are
// given: one f32 per output row (kPerRow), or the f16 bits of one per group
// of group_size inputs, in / group_size of them a row (kPerGroup). Unused
// for kNone.
struct TileScales {
  const float* row = nullptr;
  const uint16_t* group = nullptr;
  size_t group_size = 0;

  // w's scales.
  static TileScales Of(const DenseWeights& w) { return {w.scales, w.group_scales, w.group}; }
  // The scales from row o on, rows of `in` inputs.
  TileScales From(size_t o, size_t in) const {
    TileScales s = *this;
    if (row) s.row += o;
    if (group) s.group += o * (in / group_size);
    return s;
  }
};

// Group scales the row tiles decode at a time, per weight row: a tile's
// whole rows up to 2,048 inputs in groups of 32 (with 16, a row of 24 groups
// ended in a tail copied through the stack, a store-forwarding stall perf
// put 14% of a q8_0 mat-vec's samples on).
inline constexpr size_t kScaleRun = 64;
// The most lanes of a vector that per-group scales are multiplied into, so
// that it lies within one group (groups are multiples of 32 inputs): the
// row tiles' vectors have at most 16, the others are capped at this.
inline constexpr size_t kGroupLanes = 32;
// Floats of a buffer DecodeGroupScales fills with up to kScaleRun scales on
// a tag of at most kGroupLanes lanes (a whole last vector is stored).
inline constexpr size_t kScaleBuffer = std::max(kScaleRun, kGroupLanes);

// w[0, N) as f32 lanes.
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, const float* HWY_RESTRICT w) {
  return hn::LoadU(d, w);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, const hwy::bfloat16_t* HWY_RESTRICT w) {
  const hn::Rebind<hwy::bfloat16_t, D> dw;
  return hn::PromoteTo(d, hn::LoadU(dw, w));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, const hwy::float16_t* HWY_RESTRICT w) {
  const hn::Rebind<hwy::float16_t, D> dw;
  return hn::PromoteTo(d, hn::LoadU(dw, w));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadWeights(D d, const int8_t* HWY_RESTRICT w) {
  const hn::Rebind<int8_t, D> dw;
  const hn::RebindToSigned<D> di;
  return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(dw, w)));
}

// bf16 pairs: w[0, 2N) loaded as N u32 lanes (little-endian: lane j holds
// w[2j] in its low half and w[2j + 1] in its high half) and split into the
// even elements (a 16-bit shift) and the odd ones (a mask): one load and
// two ALU ops per 2N weights instead of two widening loads and two shifts.
// The x rows must be permuted to match (PermutePairs).
template <class D>
HWY_INLINE void LoadBf16Pairs(D d, const hwy::bfloat16_t* HWY_RESTRICT w, hn::Vec<D>& even,
                              hn::Vec<D>& odd) {
  const hn::RebindToUnsigned<D> du;
  const auto u = hn::LoadU(du, reinterpret_cast<const uint32_t*>(w));
  even = hn::BitCast(d, hn::ShiftLeft<16>(u));
  odd = hn::BitCast(d, hn::And(u, hn::Set(du, 0xFFFF0000u)));
}

// w[0, n) as f32 lanes, zeros elsewhere; n < Lanes(d). Reads nothing at or
// past w + n.
template <class D>
HWY_INLINE hn::Vec<D> LoadWeightsTail(D d, const float* HWY_RESTRICT w, size_t n) {
  return LoadTail(d, w, n);
}
template <class D, typename TW>
HWY_INLINE hn::Vec<D> LoadWeightsTail(D d, const TW* HWY_RESTRICT w, size_t n) {
  HWY_ALIGN TW buf[HWY_MAX_BYTES / sizeof(float)];
  std::memset(buf, 0, sizeof(buf));
  std::memcpy(buf, w, n * sizeof(TW));
  return LoadWeights(d, buf);
}

// dst[k] = the f32 value of the f16 bits src[k] for k < n (exact); dst has
// room for n rounded up to a multiple of Lanes(d). Reads nothing at or past
// src + n.
template <class D>
HWY_INLINE void DecodeGroupScales(D d, const uint16_t* HWY_RESTRICT src, size_t n,
                                  float* HWY_RESTRICT dst) {
  const size_t N = hn::Lanes(d);
  const auto* h = reinterpret_cast<const hwy::float16_t*>(src);
  size_t k = 0;
  for (; k + N <= n; k += N) hn::StoreU(LoadWeights(d, h + k), d, dst + k);
  if constexpr (hn::MaxLanes(D()) > 1) {  // (one lane leaves no tail)
    if (k < n) hn::StoreU(LoadWeightsTail(d, h + k, n - k), d, dst + k);
  }
}

// Weights [k0, k0 + n) of row o of `w` as f32 lanes (n ≤ Lanes(d), zeros
// past n), before the per-row scale of kI8; with their group scales
// otherwise (kI4 and vectors past a group's end by the reference decode:
// for packing, once per session); the K-quants by the reference decode too.
// row: Lanes(d) aligned floats of scratch.
template <class D>
HWY_INLINE hn::Vec<D> LoadWeightRow(D d, const DenseWeights& w, size_t o, size_t k0, size_t n,
                                    float* HWY_RESTRICT row) {
  const bool full = n == hn::Lanes(d);
  const size_t at = o * w.in + k0;
  switch (w.type) {
    case WeightType::kF32: {
      const float* src = static_cast<const float*>(w.weight) + at;
      return full ? hn::LoadU(d, src) : LoadTail(d, src, n);
    }
    case WeightType::kF16: {
      const auto* src = static_cast<const hwy::float16_t*>(w.weight) + at;
      return full ? LoadWeights(d, src) : LoadWeightsTail(d, src, n);
    }
    case WeightType::kBF16: {
      const auto* src = static_cast<const hwy::bfloat16_t*>(w.weight) + at;
      return full ? LoadWeights(d, src) : LoadWeightsTail(d, src, n);
    }
    case WeightType::kI8: {
      const auto* src = static_cast<const int8_t*>(w.weight) + at;
      return full ? LoadWeights(d, src) : LoadWeightsTail(d, src, n);
    }
    case WeightType::kQ8_0: {
      const size_t g = k0 / w.group;
      if (!full || (k0 + n - 1) / w.group != g) break;
      DecodeGroupScales(d, w.group_scales + o * (w.in / w.group) + g, 1, row);
      const auto* src = static_cast<const int8_t*>(w.weight) + at;
      return hn::Mul(LoadWeights(d, src), hn::Set(d, row[0]));
    }
    case WeightType::kI4:
    case WeightType::kQ4_K:
    case WeightType::kQ6_K:
    case WeightType::kQ5_K:
      break;
  }
  for (size_t k = 0; k < n; ++k) row[k] = static_cast<float>(ref::DecodeWeight(w, o, k0 + k));
  return hn::Load(d, row);
}

// ---------------------------------------------------------------------------
// Row tiles

#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
// p[0, n) (n ≤ 4) as lanes, zeros past n: the scales, biases or outputs of
// up to four consecutive outputs.
HWY_INLINE hn::Vec128<float> LoadOutputs(hn::Full128<float> d4, const float* HWY_RESTRICT p,
                                         size_t n) {
  return n == 4 ? hn::LoadU(d4, p) : LoadTail(d4, p, n);
}

// y[0, n) = s's first n lanes (n ≤ 4), or += with accumulate.
HWY_INLINE void StoreOutputs(hn::Full128<float> d4, hn::Vec128<float> s, size_t n,
                             float* HWY_RESTRICT y, bool accumulate) {
  if (accumulate) s = hn::Add(s, LoadOutputs(d4, y, n));
  if (n == 4) {
    hn::StoreU(s, d4, y);
  } else {
    StoreTail(s, d4, y, n);
  }
}
#endif

// y[b, o0 + o] (+)= bias[o0 + o] + Σ_i x[b, i]·w[o0 + o, i] for b < kB,
// o < kO, w the weights of element type TW with scales of kind kS (kPerRow:
// the sum times the row's scale; kPerGroup: each stored value times its
// group's). xr[b]: x row b; w0: weight row o0; scales0: the scales from row
// o0 on; bias0: bias + o0 or null; yr[b]: y row b + o0.
template <WeightScales kS, size_t kB, size_t kO, bool kPairs, class D, typename TW>
HWY_INLINE void Tile(D d, const float* const* HWY_RESTRICT xr, const TW* HWY_RESTRICT w0, size_t in,
                     const TileScales& scales0, const float* HWY_RESTRICT bias0,
                     float* const* HWY_RESTRICT yr, bool accumulate) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V acc[kB][kO];
  for (size_t b = 0; b < kB; ++b) {
    for (size_t o = 0; o < kO; ++o) acc[b][o] = hn::Zero(d);
  }
  const TW* wr[kO];
  for (size_t o = 0; o < kO; ++o) wr[o] = w0 + o * in;

  // Prefetch the next tile's rows (contiguous after this tile's) at the pace
  // this tile consumes its own; past the last row the addresses are only
  // prefetched, never loaded. Measured on the paper-MNIST step (weights
  // streamed from L3): batch 1, Intel Xeon AVX-512, int8 292 vs 415 µs, f16
  // 513 vs 548, bf16 502 vs 508, f32 no difference; AMD EPYC (Zen 4), f32
  // 527-564 vs 689-728 µs (four alternating runs of recur-bench --batch 1);
  // batches 2-6 on the Zen 4 (docs/performance.md "Small batches"): f32 batch
  // 2 0.95-1.31 vs 1.41-1.96 ms, batch 6 (packing off) 1.32-1.70 vs 3.14-3.84
  // ms, bf16 batch 2 296-319 vs 617-753 µs.
  constexpr bool kPrefetch = true;
  [[maybe_unused]] const uintptr_t next = reinterpret_cast<uintptr_t>(w0 + kO * in);
  size_t i = 0;
  if constexpr (kS == WeightScales::kPerGroup) {
    static_assert(!kPairs, "bf16 pairs have no group scales");
    // Groups of G inputs, whole blocks of kGroupLanes = 32 (so whole
    // vectors: in is a multiple of N and no vector straddles two groups),
    // a block at a time. The scales are decoded kScaleRun groups of each
    // row at a time (the tile's at once when a row has no more: they are
    // contiguous), a group's then a broadcast from there. One batch row
    // (the mat-vec): per weight row a block's products are summed, then
    // multiplied by the scale into the accumulator (32/N + 1 multiply-adds
    // a block, against 32/N unscaled); measured with dense_bench at
    // 1×2048→2048 (Zen 5), AVX2 31 GB/s against 21 with each weight
    // vector scaled first, AVX-512 the same (52). More batch rows: each
    // weight vector times its scale, then the products, as other types.
    constexpr size_t kV = kGroupLanes / hn::MaxLanes(D());  // vectors a block
    static_assert(kV * hn::MaxLanes(D()) == kGroupLanes, "whole vectors a block");
    const size_t G = scales0.group_size, groups = G == 0 ? 0 : in / G;
    HWY_ALIGN float sc[kO * kScaleRun + hn::MaxLanes(D())];
    for (size_t g0 = 0; g0 < groups; g0 += kScaleRun) {
      const size_t ng = std::min(kScaleRun, groups - g0);
      if (ng == groups) {
        DecodeGroupScales(d, scales0.group, kO * ng, sc);
      } else {
        for (size_t o = 0; o < kO; ++o) {
          DecodeGroupScales(d, scales0.group + o * groups + g0, ng, sc + o * ng);
        }
      }
      for (size_t g = 0; g < ng; ++g) {
        for (size_t end = i + G; i < end; i += kGroupLanes) {
          if constexpr (kPrefetch) {
            for (size_t k = 0; k < kO * kGroupLanes * sizeof(TW); k += 64) {
              isa::PrefetchOnce(reinterpret_cast<const uint8_t*>(next + kO * i * sizeof(TW) + k));
            }
          }
          if constexpr (kB == 1) {
            V xv[kV];
            for (size_t j = 0; j < kV; ++j) xv[j] = hn::LoadU(d, xr[0] + i + j * N);
            for (size_t o = 0; o < kO; ++o) {
              V t = hn::Mul(xv[0], LoadWeights(d, wr[o] + i));
              for (size_t j = 1; j < kV; ++j) {
                t = hn::MulAdd(xv[j], LoadWeights(d, wr[o] + i + j * N), t);
              }
              acc[0][o] = hn::MulAdd(t, hn::Set(d, sc[o * ng + g]), acc[0][o]);
            }
          } else {
            for (size_t j = 0; j < kV; ++j) {
              V wv[kO];
              for (size_t o = 0; o < kO; ++o) {
                wv[o] = hn::Mul(LoadWeights(d, wr[o] + i + j * N), hn::Set(d, sc[o * ng + g]));
              }
              for (size_t b = 0; b < kB; ++b) {
                const V xv = hn::LoadU(d, xr[b] + i + j * N);
                for (size_t o = 0; o < kO; ++o) acc[b][o] = hn::MulAdd(xv, wv[o], acc[b][o]);
              }
            }
          }
        }
      }
    }
  } else {
    if constexpr (kPairs) {
      for (; i + 2 * N <= in; i += 2 * N) {
        if constexpr (kPrefetch) {
          for (size_t k = 0; k < kO * 2 * N * sizeof(TW); k += 64) {
            isa::PrefetchOnce(reinterpret_cast<const uint8_t*>(next + kO * i * sizeof(TW) + k));
          }
        }
        V we[kO], wo[kO];
        for (size_t o = 0; o < kO; ++o) LoadBf16Pairs(d, wr[o] + i, we[o], wo[o]);
        for (size_t b = 0; b < kB; ++b) {
          const V xe = hn::LoadU(d, xr[b] + i);
          const V xo = hn::LoadU(d, xr[b] + i + N);
          for (size_t o = 0; o < kO; ++o) {
            acc[b][o] = hn::MulAdd(xo, wo[o], hn::MulAdd(xe, we[o], acc[b][o]));
          }
        }
      }
    }
    for (; i + N <= in; i += N) {
      if constexpr (kPrefetch) {
        for (size_t k = 0; k < kO * N * sizeof(TW); k += 64) {
          isa::PrefetchOnce(reinterpret_cast<const uint8_t*>(next + kO * i * sizeof(TW) + k));
        }
      }
      V wv[kO];
      for (size_t o = 0; o < kO; ++o) wv[o] = LoadWeights(d, wr[o] + i);
      for (size_t b = 0; b < kB; ++b) {
        const V xv = hn::LoadU(d, xr[b] + i);
        for (size_t o = 0; o < kO; ++o) acc[b][o] = hn::MulAdd(xv, wv[o], acc[b][o]);
      }
    }
    if (i < in) {
      const size_t n = in - i;
      V wv[kO];
      for (size_t o = 0; o < kO; ++o) wv[o] = LoadWeightsTail(d, wr[o] + i, n);
      for (size_t b = 0; b < kB; ++b) {
        const V xv = LoadTail(d, xr[b] + i, n);
        for (size_t o = 0; o < kO; ++o) acc[b][o] = hn::MulAdd(xv, wv[o], acc[b][o]);
      }
    }
  }

  constexpr bool kRowScaled = kS == WeightScales::kPerRow;
#if HWY_TARGET == HWY_SCALAR || HWY_HAVE_SCALABLE  // (never instantiated on scalable targets)
  for (size_t b = 0; b < kB; ++b) {
    for (size_t o = 0; o < kO; ++o) {
      float s = hn::GetLane(acc[b][o]);
      if constexpr (kRowScaled) s *= scales0.row[o];
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
    if (bias_g) bv = LoadOutputs(d4, bias_g, n);
    [[maybe_unused]] hn::Vec128<float> sv = hn::Set(d4, 1.0f);
    if constexpr (kRowScaled) {
      sv = LoadOutputs(d4, scales0.row + g, n);
    }
    for (size_t b = 0; b < kB; ++b) {
      const V z = hn::Zero(d);
      const auto a0 = acc[b][g];
      const auto a1 = g + 1 < kO ? acc[b][g + 1] : z;
      const auto a2 = g + 2 < kO ? acc[b][g + 2] : z;
      const auto a3 = g + 3 < kO ? acc[b][g + 3] : z;
      auto s = Sum4(d, a0, a1, a2, a3);
      if constexpr (kRowScaled) s = hn::Mul(s, sv);
      s = hn::Add(s, bv);
      StoreOutputs(d4, s, n, yr[b] + g, accumulate);
    }
  }
#endif
}

// Bytes of a batch-1 call's weights from which it reads them as one stream
// (StreamRows) rather than by row tiles: layers this large are not in L2
// and come from L3 or DRAM, where one sequential stream runs at the memory's
// rate; from L2 the tiles (x loaded once for kOWide rows) are faster.
inline constexpr size_t kStreamBytes = size_t{1} << 20;
// The same for layers that come from DRAM whatever their size (DenseWeights::
// from_memory): RWKV-7's low-rank layers (49-196 KiB, f32 and f16) in a
// 0.1B model's step ran 4-6% faster as streams (docs/performance.md).
inline constexpr size_t kStreamBytesFromMemory = size_t{16} << 10;
// Bytes ahead of its reads that StreamRows prefetches rows with group
// scales (their per-block work leaves the hardware prefetchers behind:
// 46-58% of the read probe without it, 66-99% with it, `dense_bench rows`
// q8_0 on f32 activations, AMD Zen 4). Rows without group scales are not
// prefetched: the hardware keeps up, and the step ran faster without
// (docs/performance.md).
inline constexpr size_t kStreamAhead = 8192;
// Bytes of x up to which StreamRows runs (each row reads all of x, which
// must stay in L1 beside the stream).
inline constexpr size_t kStreamMaxX = size_t{16} << 10;

// Whether one row of an (in, out) layer of `weight_bytes` bytes a weight
// runs StreamRows (on targets that have it); from_memory: DenseWeights'.
HWY_INLINE bool StreamsRows(size_t in, size_t out, size_t weight_bytes, bool from_memory) {
  const size_t from = from_memory ? kStreamBytesFromMemory : kStreamBytes;
  return in * out * weight_bytes >= from && in * sizeof(float) <= kStreamMaxX;
}

// Prefetches the lines of [ahead + b, ahead + b + n) once (b: a multiple of
// 64 bytes from where the stream started; n: a multiple of 64).
HWY_INLINE void PrefetchAhead(const uint8_t* ahead, size_t b, size_t n) {
  for (size_t k = 0; k < n; k += 64) isa::PrefetchOnce(ahead + b + k);
}

// Σ_i x[i]·w[i] over one weight row of `in` inputs, as lanes still to be
// summed: each block times its group's scale for kPerGroup (group: the
// row's f16 scale bits, groups of G inputs), without the row's scale for
// kPerRow; kPerGroup rows prefetched kStreamAhead bytes ahead. x: f32, or
// f16 values (activations rounded for f16 weights), widened as weights are.
template <WeightScales kS, class D, typename TW, typename TX>
HWY_INLINE hn::Vec<D> StreamRowDot(D d, const TX* HWY_RESTRICT x, const TW* HWY_RESTRICT w,
                                   size_t in, const uint16_t* HWY_RESTRICT group, size_t G) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  V a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  size_t i = 0;
  if constexpr (kS == WeightScales::kPerGroup) {
    constexpr size_t kV = kGroupLanes / hn::MaxLanes(D());  // vectors a block
    static_assert(kV * hn::MaxLanes(D()) == kGroupLanes, "whole vectors a block");
    constexpr size_t kQuad = 4 * kGroupLanes;  // inputs of four blocks
    const auto block = [&](size_t at) HWY_ATTR {
      V t = hn::Mul(LoadWeights(d, x + at), LoadWeights(d, w + at));
      for (size_t j = 1; j < kV; ++j) {
        t = hn::MulAdd(LoadWeights(d, x + at + j * N), LoadWeights(d, w + at + j * N), t);
      }
      return t;
    };
    const uint8_t* ahead = reinterpret_cast<const uint8_t*>(w) + kStreamAhead;
    HWY_ALIGN float sc[kScaleBuffer + hn::MaxLanes(D())];
    const size_t groups = G == 0 ? 0 : in / G;
    for (size_t g0 = 0; g0 < groups; g0 += kScaleRun) {
      const size_t ng = std::min(kScaleRun, groups - g0);
      DecodeGroupScales(d, group + g0, ng, sc);
      const size_t end = i + ng * G;
      if (G == kGroupLanes) {  // a scale a block: four blocks, four chains
        for (; i + kQuad <= end; i += kQuad) {
          PrefetchAhead(ahead, i * sizeof(TW), kQuad * sizeof(TW));
          const float* s = sc + (i - g0 * G) / kGroupLanes;
          a0 = hn::MulAdd(block(i), hn::Set(d, s[0]), a0);
          a1 = hn::MulAdd(block(i + kGroupLanes), hn::Set(d, s[1]), a1);
          a2 = hn::MulAdd(block(i + 2 * kGroupLanes), hn::Set(d, s[2]), a2);
          a3 = hn::MulAdd(block(i + 3 * kGroupLanes), hn::Set(d, s[3]), a3);
        }
      }
      for (; i < end; i += kGroupLanes) {
        if ((i * sizeof(TW)) % 64 == 0) PrefetchAhead(ahead, i * sizeof(TW), 64);
        a0 = hn::MulAdd(block(i), hn::Set(d, sc[(i - g0 * G) / G]), a0);
      }
    }
  } else {
    for (; i + 4 * N <= in; i += 4 * N) {
      a0 = hn::MulAdd(LoadWeights(d, x + i), LoadWeights(d, w + i), a0);
      a1 = hn::MulAdd(LoadWeights(d, x + i + N), LoadWeights(d, w + i + N), a1);
      a2 = hn::MulAdd(LoadWeights(d, x + i + 2 * N), LoadWeights(d, w + i + 2 * N), a2);
      a3 = hn::MulAdd(LoadWeights(d, x + i + 3 * N), LoadWeights(d, w + i + 3 * N), a3);
    }
    for (; i + N <= in; i += N) a0 = hn::MulAdd(LoadWeights(d, x + i), LoadWeights(d, w + i), a0);
    if (i < in) {
      a1 = hn::MulAdd(LoadWeightsTail(d, x + i, in - i), LoadWeightsTail(d, w + i, in - i), a1);
    }
  }
  return hn::Add(hn::Add(a0, a1), hn::Add(a2, a3));
}

#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
// One batch row against weight rows [0, out) (as Rows on one batch row),
// the rows read one after the other as one stream (group-scaled rows
// prefetched kStreamAhead bytes ahead). The tiles read kOWide rows side by
// side, a stream per row, each too short for the hardware prefetchers to
// reach the memory's rate.
// `dense_bench rows` (layers streamed from DRAM, AMD Zen 5, AVX3_VNNI), of
// the read probe's rate: f16 82-96% against 67-84% for the tiles, q8_0
// 80-90% against 60-76%, at 1,024-4,096 inputs (docs/performance.md).
template <WeightScales kS, class D, typename TW, typename TX>
HWY_NOINLINE void StreamRows(D d, const TX* HWY_RESTRICT x, const TW* HWY_RESTRICT w,
                             TileScales scales, const float* HWY_RESTRICT bias, size_t in,
                             size_t out, float* HWY_RESTRICT y, bool accumulate) {
  const hn::Full128<float> d4;
  const size_t G = scales.group_size;
  const auto row_dot = [&](size_t o) HWY_ATTR {
    const TW* row = w + o * in;
    const uint16_t* group = kS == WeightScales::kPerGroup ? scales.group + o * (in / G) : nullptr;
    return StreamRowDot<kS>(d, x, row, in, group, G);
  };
  const auto finish = [&](hn::Vec<decltype(d4)> s, size_t o, size_t n) HWY_ATTR {
    if constexpr (kS == WeightScales::kPerRow) {
      s = hn::Mul(s, LoadOutputs(d4, scales.row + o, n));
    }
    if (bias) s = hn::Add(s, LoadOutputs(d4, bias + o, n));
    StoreOutputs(d4, s, n, y + o, accumulate);
  };
  // A store whose data still waits on loads from DRAM holds back the later
  // loads that share its address bits below 4 KiB until the data is there,
  // and the memory idles meanwhile (x spans all such bits, the weights pass
  // them every 4 KiB; docs/performance.md). So the four sums stay in
  // registers, and each group's outputs are stored after the next group's
  // rows have been read, when its sums are long done.
  size_t o = 0;
  auto pending = hn::Zero(d4);
  for (; o + 4 <= out; o += 4) {
    const auto a0 = row_dot(o), a1 = row_dot(o + 1), a2 = row_dot(o + 2), a3 = row_dot(o + 3);
    if (o != 0) finish(pending, o - 4, 4);
    pending = Sum4(d, a0, a1, a2, a3);
  }
  if (o != 0) finish(pending, o - 4, 4);
  if (o < out) {
    const size_t n = out - o;
    const auto z = hn::Zero(d);
    const auto a0 = row_dot(o), a1 = n > 1 ? row_dot(o + 1) : z, a2 = n > 2 ? row_dot(o + 2) : z;
    finish(Sum4(d, a0, a1, a2, z), o, n);
  }
}
#endif

// Tile with a runtime number of weight rows r in [1, kMax].
template <WeightScales kS, size_t kB, size_t kMax, bool kPairs, class D, typename TW>
HWY_INLINE void TileTail(D d, size_t r, const float* const* xr, const TW* w0, size_t in,
                         const TileScales& scales0, const float* bias0, float* const* yr,
                         bool accumulate) {
  if constexpr (kMax >= 1) {
    if (r == kMax) {
      return Tile<kS, kB, kMax, kPairs>(d, xr, w0, in, scales0, bias0, yr, accumulate);
    }
    if constexpr (kMax > 1) {
      TileTail<kS, kB, kMax - 1, kPairs>(d, r, xr, w0, in, scales0, bias0, yr, accumulate);
    }
  }
}

// kB batch rows starting at x/y against weight rows [o_begin, o_end).
// scales: from row 0 on (TileScales), as kS says.
template <WeightScales kS, size_t kB, bool kPairs, class D, typename TW>
HWY_NOINLINE void Rows(D d, const float* x, size_t x_stride, const TW* w, TileScales scales,
                       const float* bias, size_t in, size_t o_begin, size_t o_end, float* y,
                       size_t y_stride, bool accumulate) {
  constexpr size_t kO = kB == 1 ? kOWide : kONarrow;
  const float* xr[kB];
  float* yr[kB];
  size_t o = o_begin;
  for (; o + kO <= o_end; o += kO) {
    for (size_t b = 0; b < kB; ++b) {
      xr[b] = x + b * x_stride;
      yr[b] = y + b * y_stride + o;
    }
    Tile<kS, kB, kO, kPairs>(d, xr, w + o * in, in, scales.From(o, in), bias ? bias + o : nullptr,
                             yr, accumulate);
  }
  if (o < o_end) {
    for (size_t b = 0; b < kB; ++b) {
      xr[b] = x + b * x_stride;
      yr[b] = y + b * y_stride + o;
    }
    TileTail<kS, kB, kO - 1, kPairs>(d, o_end - o, xr, w + o * in, in, scales.From(o, in),
                                     bias ? bias + o : nullptr, yr, accumulate);
  }
}

template <WeightScales kS, size_t kB, bool kPairs, class D, typename TW>
HWY_INLINE void RowsN(D d, size_t nb, const float* x, size_t x_stride, const TW* w,
                      const TileScales& scales, const float* bias, size_t in, size_t o_begin,
                      size_t o_end, float* y, size_t y_stride, bool accumulate) {
  if constexpr (kB >= 1) {
    if (nb == kB) {
      return Rows<kS, kB, kPairs>(d, x, x_stride, w, scales, bias, in, o_begin, o_end, y, y_stride,
                                  accumulate);
    }
    if constexpr (kB > 1) {
      RowsN<kS, kB - 1, kPairs>(d, nb, x, x_stride, w, scales, bias, in, o_begin, o_end, y,
                                y_stride, accumulate);
    }
  }
}

// Row tiles over every batch row: out-chunks of w that stay in L2 (when
// there is more than one batch block) × batch blocks of near-equal size
// (8 = 4 + 4 rather than 6 + 2).
#if HWY_HAVE_SCALABLE
// Scalable vectors (SVE) cannot be array elements, so the tiles above (kB×kO
// accumulators in arrays) do not compile there. Instead: one output at a
// time, as a dot product with two FMA chains; w rows are re-read from L1 by
// every batch row. Correct on every vector length; not tuned (no SVE hardware
// here, only qemu). scales: row o's (TileScales::From).
template <WeightScales kS, class D, typename TW>
HWY_INLINE float DotRow(D d, const float* HWY_RESTRICT x, const TW* HWY_RESTRICT w, size_t in,
                        const TileScales& scales) {
  if constexpr (kS == WeightScales::kPerGroup) {
    const hn::CappedTag<float, kGroupLanes> dc;  // a vector within a group
    const size_t N = hn::Lanes(dc), G = scales.group_size;
    auto a = hn::Zero(dc);
    for (size_t i = 0, g = 0; i < in; ++g) {
      const auto s = hn::Set(dc, ref::F16ToF32(scales.group[g]));
      for (size_t end = i + G; i < end; i += N) {
        a = hn::MulAdd(hn::LoadU(dc, x + i), hn::Mul(LoadWeights(dc, w + i), s), a);
      }
    }
    (void)d;
    return hn::GetLane(hn::SumOfLanes(dc, a));
  } else {
    const size_t N = hn::Lanes(d);
    auto a0 = hn::Zero(d), a1 = hn::Zero(d);
    size_t i = 0;
    for (; i + 2 * N <= in; i += 2 * N) {
      a0 = hn::MulAdd(hn::LoadU(d, x + i), LoadWeights(d, w + i), a0);
      a1 = hn::MulAdd(hn::LoadU(d, x + i + N), LoadWeights(d, w + i + N), a1);
    }
    for (; i + N <= in; i += N) a0 = hn::MulAdd(hn::LoadU(d, x + i), LoadWeights(d, w + i), a0);
    if (i < in) a1 = hn::MulAdd(LoadTail(d, x + i, in - i), LoadWeightsTail(d, w + i, in - i), a1);
    float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
    if constexpr (kS == WeightScales::kPerRow) s *= scales.row[0];
    return s;
  }
}
#endif

// Dense on weights of element type TW with scales of kind kS (see Tile).
template <WeightScales kS, bool kPairs = false, class D, typename TW>
HWY_INLINE void RowTiles(D d, const float* x, size_t x_stride, size_t batch, const TW* w,
                         const TileScales& scales, const float* bias, size_t in, size_t out,
                         float* y, size_t y_stride, bool accumulate,
                         [[maybe_unused]] bool from_memory) {
#if HWY_HAVE_SCALABLE
  static_assert(!kPairs, "bf16 pairs need fixed-size vectors");
  for (size_t o = 0; o < out; ++o) {
    const TileScales so = scales.From(o, in);
    for (size_t b = 0; b < batch; ++b) {
      float s = DotRow<kS>(d, x + b * x_stride, w + o * in, in, so);
      if (bias) s += bias[o];
      float& yo = y[b * y_stride + o];
      yo = accumulate ? yo + s : s;
    }
  }
  return;
#else
#if HWY_TARGET != HWY_SCALAR
  if (batch == 1 && !kPairs && StreamsRows(in, out, sizeof(TW), from_memory)) {
    return StreamRows<kS>(d, x, w, scales, bias, in, out, y, accumulate);
  }
#endif
  size_t chunk = out;
  if (batch > kMaxB && in > 0) {
    chunk = std::max<size_t>(kONarrow, kChunkBytes / (in * sizeof(TW)));
    chunk -= chunk % kONarrow;
  }
  for (size_t o0 = 0; o0 < out; o0 += chunk) {
    const size_t o1 = std::min(out, o0 + chunk);
    const size_t blocks = (batch + kMaxB - 1) / kMaxB;
    for (size_t k = 0, b0 = 0; k < blocks; ++k) {
      const size_t nb = (batch - b0 + (blocks - k) - 1) / (blocks - k);
      RowsN<kS, kMaxB, kPairs>(d, nb, x + b0 * x_stride, x_stride, w, scales, bias, in, o0, o1,
                               y + b0 * y_stride, y_stride, accumulate);
      b0 += nb;
    }
  }
#endif  // HWY_HAVE_SCALABLE
}

#if RECUR_ISA_AVX3
#define RECUR_DENSE_PANELS 1
// ---------------------------------------------------------------------------
// Batch panels (AVX-512 only: with 16 registers, 4×2 tiles measured slower
// than row tiles on AVX2 and SSE4).

// kPanelR weight rows × kPanelV batch vectors of accumulators (16 of 32
// registers; 8×3 made GCC spill).
inline constexpr size_t kPanelR = 8;
inline constexpr size_t kPanelV = 2;
// Packing x costs O(in) per batch row and the row tiles' reductions O(out),
// so panels only win for out >= 32 and in <= 2·out (measured on AVX-512: at
// in = 4·out both run at the same speed; at in = out/4 panels are 25% faster).
inline constexpr size_t kPanelMinOut = 32;
inline constexpr size_t kPanelMaxInPerOut = 2;
static_assert(kPanelR % 4 == 0, "the output transpose works on groups of 4 rows");

// Panels packed per pass over the weights: about 1 MiB of packed x.
HWY_INLINE size_t PanelGroup(size_t P, size_t in) {
  return std::clamp<size_t>((size_t{1} << 20) / (P * in * sizeof(float)), 1, 8);
}

// Floats of packed x the panels ask for on `batch` rows of an (in, out)
// layer; 0 when this shape does not use them.
template <class D>
HWY_INLINE size_t PanelScratchFloats(D d, size_t batch, size_t in, size_t out) {
  const size_t P = kPanelV * hn::Lanes(d);
  const size_t total = batch / P;
  if (total == 0 || out < kPanelMinOut || in == 0 || in > kPanelMaxInPerOut * out) return 0;
  return std::min(total, PanelGroup(P, in)) * P * in;
}

// Scratch for the packed x (ScratchRegion).
HWY_INLINE float* PanelScratch(size_t floats) {
  return ScratchRegion<&DenseScratch::panel, &DenseScratch::panel_floats>(floats);
}

// Transposes, within each 128-bit block, the 4×4 matrix whose row c is that
// block of a_c: afterwards that block of a_m is {a0[m], a1[m], a2[m], a3[m]}
// (lane m of the block, original vectors).
template <class D, class V = hn::Vec<D>>
HWY_INLINE void Transpose4x4Blocks(D d, V& a0, V& a1, V& a2, V& a3) {
  const hn::Repartition<uint64_t, D> d64;
  const auto t0 = hn::BitCast(d64, hn::InterleaveLower(d, a0, a1));  // a0_0 a1_0 a0_1 a1_1
  const auto t1 = hn::BitCast(d64, hn::InterleaveUpper(d, a0, a1));  // a0_2 a1_2 a0_3 a1_3
  const auto t2 = hn::BitCast(d64, hn::InterleaveLower(d, a2, a3));
  const auto t3 = hn::BitCast(d64, hn::InterleaveUpper(d, a2, a3));
  a0 = hn::BitCast(d, hn::InterleaveLower(d64, t0, t2));
  a1 = hn::BitCast(d, hn::InterleaveUpper(d64, t0, t2));
  a2 = hn::BitCast(d, hn::InterleaveLower(d64, t1, t3));
  a3 = hn::BitCast(d, hn::InterleaveUpper(d64, t1, t3));
}

// xt[k·P + l] = x[l·x_stride + k] for l < P (P a multiple of 4), k < in.
// Four rows at a time: load N columns of each, transpose 4×4 within 128-bit
// blocks, write 4-float pieces.
template <class D>
HWY_INLINE void PackTransposed(D d, const float* HWY_RESTRICT x, size_t x_stride, size_t P,
                               size_t in, float* HWY_RESTRICT xt) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const hn::Full128<float> d4;
  HWY_ALIGN float tmp[4 * HWY_MAX_BYTES / sizeof(float)];
  for (size_t k0 = 0; k0 < in; k0 += N) {
    const size_t n = std::min(N, in - k0);
    for (size_t l = 0; l < P; l += 4) {
      V r[4];
      for (size_t c = 0; c < 4; ++c) {
        const float* src = x + (l + c) * x_stride + k0;
        r[c] = n == N ? hn::LoadU(d, src) : LoadTail(d, src, n);
      }
      Transpose4x4Blocks(d, r[0], r[1], r[2], r[3]);
      for (size_t m = 0; m < 4; ++m) hn::Store(r[m], d, tmp + m * N);
      // Column k0 + kk, kk = 4·blk + m, is block blk of r[m].
      for (size_t kk = 0; kk < n; ++kk) {
        hn::Store(hn::Load(d4, tmp + (kk % 4) * N + (kk / 4) * 4), d4, xt + (k0 + kk) * P + l);
      }
    }
  }
}

// y[l, o + r] (+)= bias[o + r] + Σ_k xt[k·P + l]·w[o + r, k] for l < P = kV·N,
// r < rows (≤ kR). y points at the panel's first row.
template <size_t kR, size_t kV, class D>
HWY_INLINE void PanelTile(D d, const float* HWY_RESTRICT xt, const float* HWY_RESTRICT w,
                          size_t in, size_t o, size_t rows, const float* HWY_RESTRICT bias,
                          float* HWY_RESTRICT y, size_t y_stride, bool accumulate) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const size_t P = kV * N;
  V acc[kR][kV];
  for (size_t r = 0; r < kR; ++r) {
    for (size_t j = 0; j < kV; ++j) acc[r][j] = hn::Zero(d);
  }
  // Rows past `out` repeat the last valid row (never stored) to stay in bounds.
  const float* wr[kR];
  for (size_t r = 0; r < kR; ++r) wr[r] = w + (o + std::min(r, rows - 1)) * in;

  for (size_t k = 0; k < in; ++k) {
    const float* HWY_RESTRICT xk = xt + k * P;
    V xv[kV];
    for (size_t j = 0; j < kV; ++j) xv[j] = hn::Load(d, xk + j * N);
    for (size_t r = 0; r < kR; ++r) {
      const V wb = hn::Set(d, wr[r][k]);
      for (size_t j = 0; j < kV; ++j) acc[r][j] = hn::MulAdd(wb, xv[j], acc[r][j]);
    }
  }

  const hn::Full128<float> d4;
  HWY_ALIGN float tmp[4 * HWY_MAX_BYTES / sizeof(float)];
  for (size_t g = 0; g < kR && g < rows; g += 4) {
    const size_t nr = std::min<size_t>(4, rows - g);
    V bv[4];
    for (size_t c = 0; c < 4; ++c) {
      bv[c] = (bias && c < nr) ? hn::Set(d, bias[o + g + c]) : hn::Zero(d);
    }
    for (size_t j = 0; j < kV; ++j) {
      V q0 = hn::Add(acc[g][j], bv[0]), q1 = hn::Add(acc[g + 1][j], bv[1]);
      V q2 = hn::Add(acc[g + 2][j], bv[2]), q3 = hn::Add(acc[g + 3][j], bv[3]);
      Transpose4x4Blocks(d, q0, q1, q2, q3);
      hn::Store(q0, d, tmp);
      hn::Store(q1, d, tmp + N);
      hn::Store(q2, d, tmp + 2 * N);
      hn::Store(q3, d, tmp + 3 * N);
      // Batch lane l = 4·blk + m: its 4 outputs are block blk of q_m.
      for (size_t l = 0; l < N; ++l) {
        StoreOutputs(d4, hn::Load(d4, tmp + (l % 4) * N + (l / 4) * 4), nr,
                     y + (j * N + l) * y_stride + o + g, accumulate);
      }
    }
  }
}

template <class D>
HWY_NOINLINE void PanelRows(D d, const float* xt, const float* w, size_t in, size_t o_begin,
                            size_t o_end, const float* bias, float* y, size_t y_stride,
                            bool accumulate) {
  for (size_t o = o_begin; o < o_end; o += kPanelR) {
    PanelTile<kPanelR, kPanelV>(d, xt, w, in, o, std::min(kPanelR, o_end - o), bias, y,
                                y_stride, accumulate);
  }
}

// Handles the first (batch / P)·P rows, P = kPanelV·N; returns how many rows
// it did (0 if it declined: shape not worth it, or no scratch memory). Packs
// up to 8 panels at a time, at most ~1 MiB of scratch unless one panel
// (P·in floats) is larger.
template <class D>
HWY_INLINE size_t DensePanels(D d, const float* x, size_t x_stride, size_t batch,
                              const float* w, const float* bias, size_t in, size_t out,
                              float* y, size_t y_stride, bool accumulate) {
  const size_t floats = PanelScratchFloats(d, batch, in, out);
  float* xt = floats == 0 ? nullptr : PanelScratch(floats);
  if (!xt) return 0;
  const size_t P = kPanelV * hn::Lanes(d);
  const size_t total = batch / P;
  const size_t group = PanelGroup(P, in);
  for (size_t p0 = 0; p0 < total; p0 += group) {
    const size_t panels = std::min(group, total - p0);
    const float* xg = x + p0 * P * x_stride;
    float* yg = y + p0 * P * y_stride;
    for (size_t p = 0; p < panels; ++p) {
      PackTransposed(d, xg + p * P * x_stride, x_stride, P, in, xt + p * P * in);
    }
    // Out-chunks of w that stay in L2 while every panel passes over them.
    size_t chunk = out;
    if (panels > 1) {
      chunk = std::max<size_t>(kPanelR, kChunkBytes / (in * sizeof(float)));
      chunk -= chunk % kPanelR;
    }
    for (size_t o0 = 0; o0 < out; o0 += chunk) {
      const size_t o1 = std::min(out, o0 + chunk);
      for (size_t p = 0; p < panels; ++p) {
        PanelRows(d, xt + p * P * in, w, in, o0, o1, bias, yg + p * P * y_stride, y_stride,
                  accumulate);
      }
    }
  }
  return total * P;
}
#else
template <class D>
HWY_INLINE size_t PanelScratchFloats(D, size_t, size_t, size_t) {
  return 0;  // no panels on this target
}
#endif  // RECUR_ISA_AVX3

}  // namespace dense_detail

// See dense.h.
// from_memory: DenseWeights'.
HWY_INLINE void Dense(const float* x, size_t x_stride, size_t batch, const float* w,
                      const float* bias, size_t in, size_t out, float* y, size_t y_stride,
                      bool accumulate, bool from_memory) {
  namespace dd = dense_detail;
  if (batch == 0 || out == 0) return;
  const hn::ScalableTag<float> d;
#ifdef RECUR_DENSE_PANELS
  const size_t done =
      dd::DensePanels(d, x, x_stride, batch, w, bias, in, out, y, y_stride, accumulate);
  x += done * x_stride;
  y += done * y_stride;
  batch -= done;
  if (batch == 0) return;
#endif
#undef RECUR_DENSE_PANELS
  dd::RowTiles<WeightScales::kNone>(d, x, x_stride, batch, w, dd::TileScales(), bias, in, out, y,
                                    y_stride, accumulate, from_memory);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_INL_H_ toggle
