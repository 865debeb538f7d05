// Per-target DenseI8Dot (dense.h): int8 weights × int8 activations, i32
// sums, f32 scales, bias and outputs.
//
// Tiles of kB activation rows × kI8O = 4 weight rows keep kB·4 vector
// accumulators of i32 lanes; each weight vector is loaded once per tile and
// used against every activation row in it. Per target, one step of kStep
// bytes of a row pair (q_x, q_w):
//   AVX2, SSSE3/SSE4: u = |w| (as u8: |-128| = 128), v = x with w's sign
//     (ApplySign; zero where w is), pairs of u·v summed to i16 by
//     maddubs (|x| ≤ 127 and |w| ≤ 128: a pair is at most 2·128·127 = 32512,
//     so it never saturates) and to i32 by madd with ones. AVX2 from
//     kAvx2GemmRows rows on: a GEMM on the same step (Avx2Gemm), w packed
//     per call with |w| precomputed, an activation row's 4 bytes broadcast.
//   AVX-512 with AVX512-VNNI (Avx512VnniEnabled): vpdpbusd of w + 128 (w
//     xor 0x80, unsigned) and x, four products a lane; the sums start at
//     −128·Σ x (I8DotStepVnni). From kVnniGemmRows rows on, a GEMM instead (Gemm):
//     panels of 16 weight rows packed per call, 4 inputs × 16 rows a vector,
//     against 4 bytes of an activation row broadcast, so the i32 lanes are 16
//     outputs and need no horizontal sums.
//   AVX-512 without VNNI: as AVX2 with w's sign applied by a masked
//     subtraction (NegateWhere: AVX-512 has no vpsignb).
//   NEON (arm64): sdot where the compiler targets the dot-product extension,
//     else vmull_s8 / vmlal_high_s8 into i16 (two products ≤ 32512) and
//     vpadalq_s16 into i32.
//   Other targets (SCALAR, EMU128, SVE, RVV): Highway ops, one output at a
//     time, both operands promoted to i32 (DenseI8DotPreferred is false
//     there, so Dense only runs this when asked to).
// The sums are exact while 128·127·in < 2^31 (kDenseI8DotMaxIn is far below).
// The steps are isa::I8DotStep (and isa::I8DotStepVnni) of kernels/isa/; the
// GEMMs and the VNNI mat-vec are written with the named operations of
// isa::x256 and isa::x512.
#if defined(RECUR_KERNELS_DENSE_DENSE_I8DOT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_I8DOT_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_I8DOT_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_I8DOT_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/common-inl.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_lowp-inl.h"
#include "kernels/dispatch/target_limit.h"
#include "kernels/elementwise/elementwise-inl.h"
#include "kernels/isa/isa-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace i8_detail {

inline constexpr size_t kO = 4;  // weight rows per tile
// int8 bytes of w per out-chunk when several batch blocks pass over it (L2).
inline constexpr size_t kChunkBytes = size_t{256} << 10;
// Quantised activation rows per block (on the stack: kQBytes at most).
inline constexpr size_t kQBytes = size_t{16} << 10;
inline constexpr size_t kQRows = 64;
static_assert(kQBytes >= kDenseI8DotMaxIn, "a row must fit the quantisation buffer");

#if RECUR_ISA_DOT_STEPS
#define RECUR_I8_TILES 1
using Ops = isa::I8DotStep;
// Activation rows per tile: 4 × kO accumulators take 16 of 32 registers;
// with 16 registers, 2 × kO (8 accumulators and the operands).
inline constexpr size_t kTileRows = isa::kVectorRegisters >= 32 ? 4 : 2;
#endif
#if RECUR_ISA_AVX3
#define RECUR_I8_VNNI 1
// Σ (w + 128)·x = Σ w·x + 128·Σ x: VnniRows subtracts 128·Σ x.
using VnniOps = isa::I8DotStepVnni;
namespace x512 = isa::x512;
#endif

#ifdef RECUR_I8_TILES
// sums[b][o] = Σ_i xr[b][i]·w[o', i] for b < kB, o < kO, where w row o' =
// min(o, rows − 1) (rows past the layer repeat its last row; their sums are
// not used). w0: the tile's first row; rows in [1, kO].
template <size_t kB, class O = Ops>
HWY_INLINE void Tile(const int8_t* const* HWY_RESTRICT xr, const int8_t* HWY_RESTRICT w0,
                     size_t in, size_t rows, int32_t (*sums)[kO]) {
  constexpr size_t S = O::kStep;
  typename O::Acc acc[kB][kO];
  for (size_t b = 0; b < kB; ++b) {
    for (size_t o = 0; o < kO; ++o) acc[b][o] = O::Zero();
  }
  const int8_t* wr[kO];
  for (size_t o = 0; o < kO; ++o) wr[o] = w0 + std::min(o, rows - 1) * in;
  // Batch 1 streams w: prefetch the next tile's rows (contiguous after
  // this one's) at the pace this tile reads its own; never loaded.
  [[maybe_unused]] const uintptr_t next = reinterpret_cast<uintptr_t>(w0 + kO * in);
  size_t i = 0;
  for (; i + S <= in; i += S) {
    if constexpr (kB == 1) {
      for (size_t k = 0; k < kO * S; k += 64) {
        hwy::Prefetch(reinterpret_cast<const uint8_t*>(next + kO * i + k));
      }
    }
    for (size_t o = 0; o < kO; ++o) {
      const typename O::W wv = O::LoadWeights(wr[o] + i);
      for (size_t b = 0; b < kB; ++b) acc[b][o] = O::DotAccumulate(acc[b][o], wv, xr[b] + i);
    }
  }
  if (i < in) {  // the last in − i < S columns, zero-padded copies
    const size_t n = in - i;
    alignas(64) int8_t wt[kO][S];
    alignas(64) int8_t xt[kB][S];
    std::memset(wt, 0, sizeof(wt));
    std::memset(xt, 0, sizeof(xt));
    for (size_t o = 0; o < kO; ++o) std::memcpy(wt[o], wr[o] + i, n);
    for (size_t b = 0; b < kB; ++b) std::memcpy(xt[b], xr[b] + i, n);
    for (size_t o = 0; o < kO; ++o) {
      const typename O::W wv = O::LoadWeights(wt[o]);
      for (size_t b = 0; b < kB; ++b) acc[b][o] = O::DotAccumulate(acc[b][o], wv, xt[b]);
    }
  }
  for (size_t b = 0; b < kB; ++b) O::SumLanesOf4(acc[b], sums[b]);
}
#endif  // RECUR_I8_TILES

// One output: y (+)= bias + scale_w·scale_x·sum. The same f32 operations on
// every target (the sum is exact), so targets differ only where the
// compiler contracts them into an FMA.
HWY_INLINE void Finish(int32_t sum, float scale_w, float scale_x, const float* bias, float* y,
                       bool accumulate) {
  float s = static_cast<float>(sum) * (scale_w * scale_x);
  if (bias != nullptr) s += *bias;
  *y = accumulate ? *y + s : s;
}

// kB activation rows (q, row stride q_stride, scales qs) against weight rows
// [o_begin, o_end); y points at row 0, column 0.
template <size_t kB>
HWY_NOINLINE void Rows(const int8_t* q, size_t q_stride, const float* qs, const int8_t* w,
                       const float* scales, const float* bias, size_t in, size_t o_begin,
                       size_t o_end, float* y, size_t y_stride, bool accumulate) {
#ifdef RECUR_I8_TILES
  const int8_t* xr[kB];
  for (size_t b = 0; b < kB; ++b) xr[b] = q + b * q_stride;
  int32_t sums[kB][kO];
  for (size_t o = o_begin; o < o_end; o += kO) {
    const size_t rows = std::min(kO, o_end - o);
    Tile<kB>(xr, w + o * in, in, rows, sums);
    for (size_t b = 0; b < kB; ++b) {
      for (size_t r = 0; r < rows; ++r) {
        Finish(sums[b][r], scales[o + r], qs[b], bias ? bias + o + r : nullptr,
               y + b * y_stride + o + r, accumulate);
      }
    }
  }
#else
  const hn::ScalableTag<int32_t> di;
  const hn::Rebind<int8_t, decltype(di)> d8;
  const size_t N = hn::Lanes(di);
  for (size_t o = o_begin; o < o_end; ++o) {
    const int8_t* HWY_RESTRICT wo = w + o * in;
    for (size_t b = 0; b < kB; ++b) {
      const int8_t* HWY_RESTRICT xb = q + b * q_stride;
      auto a0 = hn::Zero(di), a1 = hn::Zero(di);
      size_t i = 0;
      for (; i + 2 * N <= in; i += 2 * N) {
        a0 = hn::Add(a0, hn::Mul(hn::PromoteTo(di, hn::LoadU(d8, xb + i)),
                                 hn::PromoteTo(di, hn::LoadU(d8, wo + i))));
        a1 = hn::Add(a1, hn::Mul(hn::PromoteTo(di, hn::LoadU(d8, xb + i + N)),
                                 hn::PromoteTo(di, hn::LoadU(d8, wo + i + N))));
      }
      int32_t sum = hn::GetLane(hn::SumOfLanes(di, hn::Add(a0, a1)));
      for (; i < in; ++i) sum += int32_t{xb[i]} * int32_t{wo[i]};
      Finish(sum, scales[o], qs[b], bias ? bias + o : nullptr, y + b * y_stride + o, accumulate);
    }
  }
#endif
}

#ifdef RECUR_I8_TILES
inline constexpr size_t kMaxB = kTileRows;
#else
inline constexpr size_t kMaxB = 1;
#endif

// The lines of a block of weight rows, in order, from
// (row, col), row_lines per row; `left` of them still to prefetch.
struct LineCursor {
  const int8_t* row;  // at the block's first input
  size_t in, row_lines, col, left;
  HWY_INLINE void PrefetchNext() {
    hwy::Prefetch(row + col * 64);
    --left;
    if (++col == row_lines) {
      col = 0;
      row += in;
    }
  }
};

#ifdef RECUR_I8_VNNI
// Σ_i x[i], n < 2^24.
HWY_INLINE int32_t SumS8(const int8_t* x, size_t n) {
  const x512::VecI ones = x512::SetI8(1);
  x512::VecI acc = x512::ZeroI();
  size_t i = 0;
  for (; i + 64 <= n; i += 64) acc = x512::DotU8I8Accumulate(acc, ones, x512::LoadU(x + i));
  if (i < n) {
    const x512::Mask64 m = x512::MaskFromBits(~uint64_t{0} >> (64 - (n - i)));
    acc = x512::DotU8I8Accumulate(acc, ones, x512::LoadMaskedI8(m, x + i));
  }
  return x512::SumOfLanesI32(acc);
}

// Rows on VnniOps tiles.
template <size_t kB>
HWY_NOINLINE void VnniRows(const int8_t* q, size_t q_stride, const float* qs, const int8_t* w,
                           const float* scales, const float* bias, size_t in, size_t o_begin,
                           size_t o_end, float* y, size_t y_stride, bool accumulate) {
  const int8_t* xr[kB];
  int32_t start[kB];
  for (size_t b = 0; b < kB; ++b) {
    xr[b] = q + b * q_stride;
    start[b] = -128 * SumS8(xr[b], in);
  }
  int32_t sums[kB][kO];
  for (size_t o = o_begin; o < o_end; o += kO) {
    const size_t rows = std::min(kO, o_end - o);
    Tile<kB, VnniOps>(xr, w + o * in, in, rows, sums);
    for (size_t b = 0; b < kB; ++b) {
      for (size_t r = 0; r < rows; ++r) {
        Finish(sums[b][r] + start[b], scales[o + r], qs[b], bias ? bias + o + r : nullptr,
               y + b * y_stride + o + r, accumulate);
      }
    }
  }
}

// Finish's operations on 16 outputs (mask: those that exist).
HWY_INLINE void Finish16(x512::VecI sums, x512::VecF scale_wx, const float* bias, float* y,
                         x512::Mask16 mask, bool accumulate) {
  x512::VecF v = x512::Mul(x512::ToF32(sums), scale_wx);
  if (bias) v = x512::Add(v, x512::LoadMasked(mask, bias));
  if (accumulate) v = x512::Add(x512::LoadMasked(mask, y), v);
  x512::StoreMasked(y, mask, v);
}

// Batch 1: 16 weight rows at a time against x (one load per 64 inputs for
// all 16), their sums reduced to one vector and finished together; the next
// 16 rows (contiguous) prefetched a line per row and step (measured: no
// prefetch 16% slower, half of the lines or two blocks ahead 7-9%).
HWY_NOINLINE void VnniMatVec(const int8_t* x, float qs, const int8_t* w, const float* scales,
                             const float* bias, size_t in, size_t o_begin, size_t o_end,
                             float* y, bool accumulate) {
  constexpr size_t R = 16;
  const x512::VecI k80 = x512::SetI8(-128);
  const x512::VecI start = x512::SetI32(-128 * SumS8(x, in));
  const size_t full = in / 64 * 64;
  const x512::Mask64 tail = x512::MaskFromBits(in % 64 == 0 ? 0 : ~uint64_t{0} >> (64 - in % 64));
  for (size_t o = o_begin; o < o_end; o += R) {
    const size_t rows = std::min(R, o_end - o);
    const int8_t* wr[R];
    for (size_t r = 0; r < R; ++r) wr[r] = w + (o + std::min(r, rows - 1)) * in;
    const int8_t* next = w + (o + R) * in;  // prefetched only, never loaded
    x512::VecI acc[R];
    for (size_t r = 0; r < R; ++r) acc[r] = x512::ZeroI();
    for (size_t i = 0; i < full; i += 64) {
      for (size_t k = 0; k < R * 64; k += 64) hwy::Prefetch(next + R * i + k);
      const x512::VecI xv = x512::LoadU(x + i);
      for (size_t r = 0; r < R; ++r) {
        acc[r] = x512::DotU8I8Accumulate(acc[r], x512::Xor(x512::LoadU(wr[r] + i), k80), xv);
      }
    }
    if (full < in) {  // x is 0 past the row: w's padding adds nothing
      const x512::VecI xv = x512::LoadMaskedI8(tail, x + full);
      for (size_t r = 0; r < R; ++r) {
        acc[r] = x512::DotU8I8Accumulate(
            acc[r], x512::Xor(x512::LoadMaskedI8(tail, wr[r] + full), k80), xv);
      }
    }
    const auto mask = static_cast<x512::Mask16>((1u << rows) - 1);
    const x512::VecF scale_wx = x512::Mul(x512::LoadMasked(mask, scales + o), x512::SetF32(qs));
    Finish16(x512::AddI32(x512::LaneSumsOf16(acc), start), scale_wx, bias ? bias + o : nullptr,
             y + o, mask, accumulate);
  }
}

// The GEMM. Per block of kGemmCols weight rows and kGemmDepth inputs, w is
// packed (PackBlock) into 16-row panels: vector j of a panel holds inputs
// 4j..4j+3 of its 16 rows (w + 128, unsigned), the two panels' vectors
// interleaved. kGemmRows activation rows × the two panels of i32 lanes stay
// in registers (16 of 32) while the block's inputs pass.
inline constexpr size_t kVnniGemmRows = 16;  // batch from which Gemm runs (below: row tiles)
inline constexpr size_t kGemmCols = 32;
inline constexpr size_t kGemmDepth = 1024;  // 32 KiB packed
inline constexpr size_t kGemmRows = 8;
inline constexpr size_t kGemmBatch = 64;  // rows whose partial sums wait between depth blocks

// Packs rows [o0, o0 + kGemmCols) of w (rows past `out` repeat its last;
// their sums are not used), inputs [k0, k0 + kc), into dst; inputs past kc
// are 0, so they add nothing whatever the activations there.
HWY_INLINE void PackBlock(const int8_t* w, size_t in, size_t out, size_t o0, size_t k0,
                          size_t kc, uint8_t* HWY_RESTRICT dst) {
  const x512::VecI bias = x512::SetI8(-128);
  for (size_t c = 0; c < kc; c += 64) {
    const size_t n = std::min<size_t>(64, kc - c);
    const x512::Mask64 m = x512::MaskFromBits(~uint64_t{0} >> (64 - n));
    for (size_t p = 0; p < 2; ++p) {
      x512::VecI r[16];
      for (size_t i = 0; i < 16; ++i) {
        const int8_t* row = w + std::min(o0 + 16 * p + i, out - 1) * in + k0 + c;
        r[i] = n == 64 ? x512::Xor(x512::LoadU(row), bias)
                       : x512::ZeroOutsideI8(m, x512::Xor(x512::LoadMaskedI8(m, row), bias));
      }
      x512::Transpose16x16(r);
      for (size_t j = 0; j < 16; ++j) x512::Store(dst + ((c / 4 + j) * 2 + p) * 64, r[j]);
    }
  }
}

// acc[r][p] += Σ over the block's inputs, rows xr[r] (at the block's first
// input), r < kGemmRows; the sums in registers while the inputs pass. One
// line of `npf` from pf is prefetched per step of 4 inputs.
HWY_INLINE void GemmKernel(const int8_t* const* xr, const uint8_t* HWY_RESTRICT packed, size_t kc,
                           x512::VecI (*acc)[2], LineCursor& pf, size_t npf) {
  constexpr size_t R = kGemmRows;
  x512::VecI a0[R], a1[R];
  const int8_t* x[R];
  HWY_UNROLL(8)
  for (size_t r = 0; r < R; ++r) {
    a0[r] = acc[r][0];
    a1[r] = acc[r][1];
    x[r] = xr[r];
  }
  const size_t full = kc / 4;
  for (size_t j = 0; j < full; ++j) {
    if (j < npf) pf.PrefetchNext();
    const x512::VecI w0 = x512::Load(packed + j * 128);
    const x512::VecI w1 = x512::Load(packed + j * 128 + 64);
    HWY_UNROLL(8)
    for (size_t r = 0; r < R; ++r) {
      int32_t v;
      std::memcpy(&v, x[r] + 4 * j, 4);
      const x512::VecI xb = x512::SetI32(v);
      a0[r] = x512::DotU8I8Accumulate(a0[r], w0, xb);
      a1[r] = x512::DotU8I8Accumulate(a1[r], w1, xb);
    }
  }
  for (size_t j = full; j < npf; ++j) pf.PrefetchNext();
  if (full * 4 < kc) {  // the last 1..3 inputs, read without passing the row
    const x512::VecI w0 = x512::Load(packed + full * 128);
    const x512::VecI w1 = x512::Load(packed + full * 128 + 64);
    for (size_t r = 0; r < R; ++r) {
      int32_t v = 0;
      std::memcpy(&v, x[r] + 4 * full, kc - full * 4);
      const x512::VecI xb = x512::SetI32(v);
      a0[r] = x512::DotU8I8Accumulate(a0[r], w0, xb);
      a1[r] = x512::DotU8I8Accumulate(a1[r], w1, xb);
    }
  }
  HWY_UNROLL(8)
  for (size_t r = 0; r < R; ++r) {
    acc[r][0] = a0[r];
    acc[r][1] = a1[r];
  }
}

HWY_NOINLINE void Gemm(const int8_t* q, size_t q_stride, const float* qs, size_t batch,
                       const int8_t* w, const float* scales, const float* bias, size_t in,
                       size_t out, float* y, size_t y_stride, bool accumulate) {
  alignas(64) uint8_t packed[kGemmCols * kGemmDepth];
  alignas(64) int32_t part[kGemmBatch][kGemmCols];
  int32_t start[kGemmBatch];
  for (size_t b0 = 0; b0 < batch; b0 += kGemmBatch) {
    const size_t nb = std::min(kGemmBatch, batch - b0);
    for (size_t b = 0; b < nb; ++b) start[b] = -128 * SumS8(q + (b0 + b) * q_stride, in);
    for (size_t o0 = 0; o0 < out; o0 += kGemmCols) {
      const size_t cols = std::min(kGemmCols, out - o0);
      x512::Mask16 mask[2];
      x512::VecF sw[2], bv[2];
      for (size_t p = 0; p < 2; ++p) {
        const size_t n = cols > 16 * p ? std::min<size_t>(16, cols - 16 * p) : 0;
        mask[p] = static_cast<x512::Mask16>((1u << n) - 1);
        sw[p] = x512::LoadMasked(mask[p], scales + o0 + 16 * p);
        bv[p] = bias ? x512::LoadMasked(mask[p], bias + o0 + 16 * p) : x512::ZeroF();
      }
      for (size_t k0 = 0; k0 < in || k0 == 0; k0 += kGemmDepth) {
        const size_t kc = std::min(kGemmDepth, in - k0);
        const bool last = k0 + kc >= in;
        PackBlock(w, in, out, o0, k0, kc, packed);
        // The next block's weights, a share of its lines per row block, so
        // that packing it finds them in cache (packing 16 rows at a time
        // defeats the hardware prefetchers: measured 25% of this function).
        const size_t nk0 = last ? 0 : k0 + kc, no0 = last ? o0 + kGemmCols : o0;
        const size_t row_lines = (std::min(kGemmDepth, in - nk0) + 63) / 64;
        const size_t next_rows = no0 < out ? std::min(kGemmCols, out - no0) : 0;
        const size_t row_blocks = (nb + kGemmRows - 1) / kGemmRows;
        LineCursor pf{next_rows > 0 ? w + no0 * in + nk0 : w, in, row_lines, 0,
                      row_lines * next_rows};
        const size_t per_block = (pf.left + row_blocks - 1) / row_blocks;
        for (size_t r0 = 0; r0 < nb; r0 += kGemmRows) {
          const size_t nr = std::min(kGemmRows, nb - r0);
          const int8_t* xr[kGemmRows];
          x512::VecI acc[kGemmRows][2];
          for (size_t r = 0; r < kGemmRows; ++r) {
            const size_t b = r0 + std::min(r, nr - 1);  // rows past nb repeat the last
            xr[r] = q + (b0 + b) * q_stride + k0;
            for (size_t p = 0; p < 2; ++p) {
              acc[r][p] = k0 == 0 ? x512::SetI32(start[b]) : x512::Load(part[b] + 16 * p);
            }
          }
          GemmKernel(xr, packed, kc, acc, pf, std::min(per_block, pf.left));
          for (size_t r = 0; r < nr; ++r) {
            const size_t b = r0 + r;
            for (size_t p = 0; p < 2; ++p) {
              if (!last) {
                x512::Store(part[b] + 16 * p, acc[r][p]);
                continue;
              }
              if (mask[p] == 0) continue;
              // Finish's operations, 16 outputs at a time.
              float* yp = y + (b0 + b) * y_stride + o0 + 16 * p;
              x512::VecF v =
                  x512::Mul(x512::ToF32(acc[r][p]), x512::Mul(sw[p], x512::SetF32(qs[b0 + b])));
              if (bias) v = x512::Add(v, bv[p]);
              if (accumulate) v = x512::Add(x512::LoadMasked(mask[p], yp), v);
              x512::StoreMasked(yp, mask[p], v);
            }
          }
        }
        if (in == 0) break;
      }
    }
  }
}
#endif  // RECUR_I8_VNNI

#if defined(RECUR_I8_TILES) && RECUR_ISA_AVX2 && !RECUR_ISA_AVX3
#define RECUR_I8_AVX2_GEMM 1
namespace x256 = isa::x256;
// The GEMM on AVX2 (no integer dot product: sign, maddubs, madd, add per 32
// products). Per block of kAvx2Cols weight rows and kAvx2Depth inputs, w is
// packed (Avx2PackBlock) into two panels of 8 rows: vector j of a panel holds
// inputs 4j..4j+3 of its 8 rows, once as |w| (maddubs' unsigned operand) and
// once as w (whose signs ApplySign puts on the activations), so the inner
// loop broadcasts 4 bytes of an activation row against both panels and needs
// no abs and no horizontal sums. kAvx2TileRows rows × 2 panels of i32 sums
// stay in registers (8 of 16) while the block's inputs pass.
inline constexpr size_t kAvx2GemmRows = 16;  // batch from which Avx2Gemm runs
inline constexpr size_t kAvx2Cols = 16;
inline constexpr size_t kAvx2Depth = 512;  // 16 KiB packed
inline constexpr size_t kAvx2TileRows = 4;
inline constexpr size_t kAvx2Batch = 64;  // rows whose partial sums wait between depth blocks

// Packs rows [o0, o0 + kAvx2Cols) of w (rows past `out` repeat its last;
// their sums are not used), inputs [k0, k0 + kc), into dst: per 4 inputs
// |w| and w of panel 0, then of panel 1 (128 bytes); inputs past kc are 0.
HWY_INLINE void Avx2PackBlock(const int8_t* w, size_t in, size_t out, size_t o0, size_t k0,
                              size_t kc, uint8_t* HWY_RESTRICT dst) {
  alignas(32) int8_t tail[8][32];
  for (size_t c = 0; c < kc; c += 32) {
    const size_t n = std::min<size_t>(32, kc - c);
    for (size_t p = 0; p < 2; ++p) {
      x256::VecI r[8];
      for (size_t i = 0; i < 8; ++i) {
        const int8_t* row = w + std::min(o0 + 8 * p + i, out - 1) * in + k0 + c;
        if (n == 32) {
          r[i] = x256::LoadU(row);
        } else {
          std::memset(tail[i], 0, 32);
          std::memcpy(tail[i], row, n);
          r[i] = x256::Load(tail[i]);
        }
      }
      x256::Transpose8x8(r);
      for (size_t j = 0; j < 8; ++j) {
        uint8_t* d = dst + ((c / 4 + j) * 2 + p) * 64;
        x256::Store(d, x256::AbsI8(r[j]));
        x256::Store(d + 32, r[j]);
      }
    }
  }
}

// acc[r][p] += Σ over the block's inputs, rows xr[r] (at the block's first
// input), r < kR.
template <size_t kR>
HWY_INLINE void Avx2GemmKernel(const int8_t* const* xr, const uint8_t* HWY_RESTRICT packed,
                               size_t kc, x256::VecI (*acc)[2], LineCursor& pf, size_t npf) {
  x256::VecI a0[kR], a1[kR];
  for (size_t r = 0; r < kR; ++r) {
    a0[r] = acc[r][0];
    a1[r] = acc[r][1];
  }
  auto step = [&](size_t j, const int32_t* v) {
    const uint8_t* p = packed + j * 128;
    const x256::VecI u0 = x256::Load(p), s0 = x256::Load(p + 32);
    const x256::VecI u1 = x256::Load(p + 64), s1 = x256::Load(p + 96);
    for (size_t r = 0; r < kR; ++r) {
      const x256::VecI xb = x256::SetI32(v[r]);
      a0[r] = x256::AddI32(a0[r],
                           x256::SumPairsI16(x256::MulAddPairsU8I8(u0, x256::ApplySign(xb, s0))));
      a1[r] = x256::AddI32(a1[r],
                           x256::SumPairsI16(x256::MulAddPairsU8I8(u1, x256::ApplySign(xb, s1))));
    }
  };
  const size_t full = kc / 4;
  for (size_t j = 0; j < full; ++j) {
    if (j < npf) pf.PrefetchNext();
    int32_t v[kR];
    for (size_t r = 0; r < kR; ++r) std::memcpy(&v[r], xr[r] + 4 * j, 4);
    step(j, v);
  }
  for (size_t j = full; j < npf; ++j) pf.PrefetchNext();
  if (full * 4 < kc) {  // the last 1..3 inputs, read without passing the row
    int32_t v[kR] = {};
    for (size_t r = 0; r < kR; ++r) std::memcpy(&v[r], xr[r] + 4 * full, kc - full * 4);
    step(full, v);
  }
  for (size_t r = 0; r < kR; ++r) {
    acc[r][0] = a0[r];
    acc[r][1] = a1[r];
  }
}

HWY_NOINLINE void Avx2Gemm(const int8_t* q, size_t q_stride, const float* qs, size_t batch,
                           const int8_t* w, const float* scales, const float* bias, size_t in,
                           size_t out, float* y, size_t y_stride, bool accumulate) {
  constexpr size_t R = kAvx2TileRows;
  alignas(32) uint8_t packed[kAvx2Cols * kAvx2Depth * 2];
  alignas(32) int32_t part[kAvx2Batch][kAvx2Cols];
  for (size_t b0 = 0; b0 < batch; b0 += kAvx2Batch) {
    const size_t nb = std::min(kAvx2Batch, batch - b0);
    for (size_t o0 = 0; o0 < out; o0 += kAvx2Cols) {
      const size_t cols = std::min(kAvx2Cols, out - o0);
      x256::MaskF mask[2];
      x256::VecF sw[2], bv[2];
      for (size_t p = 0; p < 2; ++p) {
        const int n = static_cast<int>(cols > 8 * p ? std::min<size_t>(8, cols - 8 * p) : 0);
        mask[p] = x256::FirstLanes(n);
        sw[p] = x256::LoadMasked(scales + o0 + 8 * p, mask[p]);
        bv[p] = bias ? x256::LoadMasked(bias + o0 + 8 * p, mask[p]) : x256::ZeroF();
      }
      for (size_t k0 = 0; k0 < in || k0 == 0; k0 += kAvx2Depth) {
        const size_t kc = std::min(kAvx2Depth, in - k0);
        const bool last = k0 + kc >= in;
        Avx2PackBlock(w, in, out, o0, k0, kc, packed);
        // The next block's weights, a share of its lines per row tile (as
        // Gemm does: packing 16 rows at a time defeats the hardware prefetchers).
        const size_t nk0 = last ? 0 : k0 + kc, no0 = last ? o0 + kAvx2Cols : o0;
        const size_t row_lines = (std::min(kAvx2Depth, in - nk0) + 63) / 64;
        const size_t next_rows = no0 < out ? std::min(kAvx2Cols, out - no0) : 0;
        const size_t tiles = (nb + R - 1) / R;
        LineCursor pf{next_rows > 0 ? w + no0 * in + nk0 : w, in, row_lines, 0,
                      row_lines * next_rows};
        const size_t per_tile = (pf.left + tiles - 1) / tiles;
        for (size_t r0 = 0; r0 < nb; r0 += R) {
          const size_t nr = std::min(R, nb - r0);
          const int8_t* xr[R];
          x256::VecI acc[R][2];
          for (size_t r = 0; r < R; ++r) {
            const size_t b = r0 + std::min(r, nr - 1);  // rows past nb repeat the last
            xr[r] = q + (b0 + b) * q_stride + k0;
            for (size_t p = 0; p < 2; ++p) {
              acc[r][p] = k0 == 0 ? x256::ZeroI() : x256::Load(part[b] + 8 * p);
            }
          }
          Avx2GemmKernel<R>(xr, packed, kc, acc, pf, std::min(per_tile, pf.left));
          for (size_t r = 0; r < nr; ++r) {
            const size_t b = r0 + r;
            for (size_t p = 0; p < 2; ++p) {
              if (!last) {
                x256::Store(part[b] + 8 * p, acc[r][p]);
                continue;
              }
              if (cols <= 8 * p) continue;
              // Finish's operations, 8 outputs at a time.
              float* yp = y + (b0 + b) * y_stride + o0 + 8 * p;
              x256::VecF v =
                  x256::Mul(x256::ToF32(acc[r][p]), x256::Mul(sw[p], x256::SetF32(qs[b0 + b])));
              if (bias) v = x256::Add(v, bv[p]);
              if (accumulate) v = x256::Add(x256::LoadMasked(yp, mask[p]), v);
              x256::StoreMasked(yp, mask[p], v);
            }
          }
        }
        if (in == 0) break;
      }
    }
  }
}
#endif  // RECUR_I8_AVX2_GEMM

template <size_t kB, bool kVnni = false>
HWY_INLINE void RowsN(size_t nb, const int8_t* q, size_t q_stride, const float* qs,
                      const int8_t* w, const float* scales, const float* bias, size_t in,
                      size_t o_begin, size_t o_end, float* y, size_t y_stride, bool accumulate) {
  if constexpr (kB >= 1) {
    if (nb == kB) {
#ifdef RECUR_I8_VNNI
      if constexpr (kVnni) {
        return VnniRows<kB>(q, q_stride, qs, w, scales, bias, in, o_begin, o_end, y, y_stride,
                            accumulate);
      }
#endif
      return Rows<kB>(q, q_stride, qs, w, scales, bias, in, o_begin, o_end, y, y_stride,
                      accumulate);
    }
    if constexpr (kB > 1) {
      RowsN<kB - 1, kVnni>(nb, q, q_stride, qs, w, scales, bias, in, o_begin, o_end, y,
                           y_stride, accumulate);
    }
  }
}

}  // namespace i8_detail

// See dense.h (DenseI8DotQuantized). w: (out, in) int8, scales (out).
HWY_INLINE void DenseI8DotQuantized(const int8_t* q, size_t q_stride, const float* q_scales,
                                    size_t batch, const int8_t* w, const float* scales,
                                    const float* bias, size_t in, size_t out, float* y,
                                    size_t y_stride, bool accumulate) {
  namespace id = i8_detail;
  if (batch == 0 || out == 0) return;
  // Out-chunks of w that stay in L2 while every batch block passes over
  // them, and batch blocks of near-equal size (5 = 3 + 2, not 4 + 1).
  size_t chunk = out;
  if (batch > id::kMaxB && in > 0) {
    chunk = std::max(id::kO, id::kChunkBytes / in);
    chunk -= chunk % id::kO;
  }
  const size_t blocks = (batch + id::kMaxB - 1) / id::kMaxB;
#ifdef RECUR_I8_AVX2_GEMM
  if (batch >= id::kAvx2GemmRows) {
    return id::Avx2Gemm(q, q_stride, q_scales, batch, w, scales, bias, in, out, y, y_stride,
                        accumulate);
  }
#endif
#ifdef RECUR_I8_VNNI
  const bool vnni = Avx512VnniEnabled();
  if (vnni && batch >= id::kVnniGemmRows) {
    return id::Gemm(q, q_stride, q_scales, batch, w, scales, bias, in, out, y, y_stride,
                    accumulate);
  }
  if (vnni && batch == 1) {
    return id::VnniMatVec(q, q_scales[0], w, scales, bias, in, 0, out, y, accumulate);
  }
#endif
  for (size_t o0 = 0; o0 < out; o0 += chunk) {
    const size_t o1 = std::min(out, o0 + chunk);
    for (size_t k = 0, b0 = 0; k < blocks; ++k) {
      const size_t nb = (batch - b0 + (blocks - k) - 1) / (blocks - k);
#ifdef RECUR_I8_VNNI
      if (vnni) {
        id::RowsN<id::kMaxB, true>(nb, q + b0 * q_stride, q_stride, q_scales + b0, w, scales,
                                   bias, in, o0, o1, y + b0 * y_stride, y_stride, accumulate);
        b0 += nb;
        continue;
      }
#endif
      id::RowsN<id::kMaxB>(nb, q + b0 * q_stride, q_stride, q_scales + b0, w, scales, bias, in,
                           o0, o1, y + b0 * y_stride, y_stride, accumulate);
      b0 += nb;
    }
  }
}

// See dense.h (DenseI8Dot); in <= kDenseI8DotMaxIn.
HWY_INLINE void DenseI8Dot(const float* x, size_t x_stride, size_t batch, const int8_t* w,
                           const float* scales, const float* bias, size_t in, size_t out,
                           float* y, size_t y_stride, bool accumulate) {
  namespace id = i8_detail;
  if (batch == 0 || out == 0) return;
  alignas(64) int8_t stack_q[id::kQBytes];
  float stack_qs[id::kQRows];
  const dense_detail::QuantizedRows rows =
      dense_detail::PassRows(stack_q, id::kQBytes, stack_qs, id::kQRows, batch, in);
  for (size_t b0 = 0; b0 < batch; b0 += rows.rows) {
    const size_t n = std::min(rows.rows, batch - b0);
    for (size_t b = 0; b < n; ++b) {
      rows.scales[b] = QuantizeS8(x + (b0 + b) * x_stride, rows.q + b * in, in);
    }
    DenseI8DotQuantized(rows.q, in, rows.scales, n, w, scales, bias, in, out, y + b0 * y_stride,
                        y_stride, accumulate);
  }
}

// Whether DenseI8Dot beats the widening kernels here (dense.h).
HWY_INLINE bool DenseI8DotPreferred(size_t batch, size_t in, size_t out) {
  (void)batch;
  (void)out;
#ifdef RECUR_I8_TILES
  return in >= 16 && in <= kDenseI8DotMaxIn;
#else
  (void)in;
  return false;
#endif
}

#undef RECUR_I8_TILES
#undef RECUR_I8_VNNI
#undef RECUR_I8_AVX2_GEMM

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_I8DOT_INL_H_ toggle
