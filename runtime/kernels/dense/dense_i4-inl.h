// Per-target Dense for int4 weights (kI4, dense.h): the f32-activation path
// (I4Float: DenseI4Float) and the integer one (I4Dot: DenseI4Dot).
//
// Integer tiles: kB activation rows × kO = 4 weight rows, one 16-byte block
// (32 inputs) of each weight row per step. A block unpacks to its 32 stored
// nibbles n = q + 8 in input order (low nibbles are inputs 0..15, high
// nibbles 16..31). Per target:
//   AVX2 and AVX-512 (256-bit tiles; Zen 4 splits 512-bit ops in two, and
//     256 bits keep one group of 32 in one step): the block and a copy
//     shifted right by 4 form one 256-bit vector, masked to nibbles;
//     maddubs(n, q_x) sums pairs to i16 (n ≤ 15, |q_x| ≤ 128: a pair is at
//     most 3840), madd with ones to i32; with AVX512-VNNI
//     (Avx512VnniEnabled) vpdpbusd(n, q_x) sums fours to i32 in one step
//     (TilePairs only: groups of 32 or multiples of 64).
//   SSSE3/SSE4: the same on two 128-bit halves, their i16 pairs added first
//     (at most 7680).
//   NEON (arm64): n as s8 against q_x, sdot where the compiler targets the
//     dot-product extension, else vmull_s8/vmlal_high_s8 (two products ≤
//     3810) and vpadalq_s16.
//   Other targets (SCALAR, EMU128, SVE, RVV): a scalar loop, one output at a
//     time (DenseI4DotPreferred is false there).
// Σ n·q_x over a group less 8·Σ q_x (lane 0's starting value) is the group's
// exact Σ q_w·q_x; it is converted to f32 and multiplied by the group's scale
// into f32 lane accumulators, summed across lanes at the end of the row.
// From kGemmMinBatch rows AVX2 and AVX-512 run a packed GEMM instead
// (VnniGemm, Avx2Gemm below). The steps are isa::I4DotStep of kernels/isa/;
// the x86-only forms (TilePairs, the VNNI mat-vec, the GEMMs) are written
// with the named operations of isa::x256 and isa::x512.
#if defined(RECUR_KERNELS_DENSE_DENSE_I4_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_I4_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_I4_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_I4_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/common-inl.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_i4_decode-inl.h"
#include "kernels/dense/dense_lowp-inl.h"
#include "kernels/dense/dense_ref.h"
#include "kernels/dispatch/target_limit.h"
#include "kernels/elementwise/elementwise-inl.h"
#include "kernels/isa/isa-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace i4_detail {

inline constexpr size_t kO = 4;                      // weight rows per tile
inline constexpr size_t kQBytes = size_t{16} << 10;  // quantised rows on the stack
inline constexpr size_t kQRows = 64;
inline constexpr size_t kMaxGroups = kDenseI4DotMaxIn / kI4Block;
static_assert(kQBytes >= kDenseI4DotMaxIn, "a row must fit the quantisation buffer");
// f32-activation path: inputs decoded per pass over a weight row.
inline constexpr size_t kDecodeInputs = 512;

#if RECUR_ISA_DOT_STEPS
#define RECUR_I4_TILES 1
using Ops = isa::I4DotStep;
// Activation rows per tile: kO f32 and kO i32 sums per row, 4 rows in 32
// registers, 2 in 16.
inline constexpr size_t kTileRows = isa::kVectorRegisters >= 32 ? 4 : 2;
#endif
#if RECUR_ISA_AVX2
namespace x256 = isa::x256;
#endif
#if RECUR_ISA_AVX3
namespace x512 = isa::x512;
#endif


// One output: y (+)= bias + scale_x·sum.
// The weight rows and group scales of a tile of kO rows starting at w0 and sf;
// past the last of `rows` the last row repeats (its results are not stored).
HWY_INLINE void TileRows(const uint8_t* w0, const float* sf, size_t rows, size_t row_bytes,
                         size_t groups, const uint8_t* (&wr)[kO], const float* (&sr)[kO]) {
  for (size_t o = 0; o < kO; ++o) {
    wr[o] = w0 + std::min(o, rows - 1) * row_bytes;
    sr[o] = sf + std::min(o, rows - 1) * groups;
  }
}

HWY_INLINE void Finish(float sum, float scale_x, const float* bias, float* y, bool accumulate) {
  float s = sum * scale_x;
  if (bias != nullptr) s += *bias;
  *y = accumulate ? *y + s : s;
}

#if defined(RECUR_I4_TILES) && RECUR_ISA_AVX2
#define RECUR_I4_PAIRS 1
// Tile for AVX2 and AVX-512 when the group is 32 or a multiple of 64: two
// blocks (64 inputs) per 256-bit step. One load of 32 bytes masked to low
// nibbles holds inputs 0..15 of both blocks, shifted right by 4 inputs
// 16..31, so a step unpacks with three operations where block by block it
// takes six; the activations are loaded to match (x[0..15] | x[32..47] and
// x[16..31] | x[48..63]). Lanes 0..3 then sum block 0, lanes 4..7 block 1:
// groups of 32 take one f32 scale per half (two groups a step), larger
// groups sum whole steps in i32. maddubs pairs (≤ 3810) of the two halves
// are added in i16 (≤ 7620) before madd. Same sums as Tile: every group's
// Σ q_w·q_x exact in i32 (−8·Σ q_x in the group's first lane), one f32
// rounding per group and lane.
HWY_INLINE bool PairsFit(size_t group) { return group == kI4Block || group % (2 * kI4Block) == 0; }

// One step of TilePairs: inputs [i, i + 64) (kFull) or [i, i + 32), added to
// acc.
template <size_t kB, bool kFull, bool kVnni>
HWY_INLINE void PairStep(const int8_t* const* HWY_RESTRICT xr, const uint8_t* const* wr, size_t i,
                         x256::VecI (*acc)[kO]) {
  const x256::VecI nib = x256::SetI8(0x0F);
  x256::VecI xa[kB], xb[kB];
  for (size_t b = 0; b < kB; ++b) {
    if constexpr (kFull) {
      xa[b] = x256::LoadHalves(xr[b] + i, xr[b] + i + 32);
      xb[b] = x256::LoadHalves(xr[b] + i + 16, xr[b] + i + 48);
    } else {
      xa[b] = x256::LoadLower16(xr[b] + i);
      xb[b] = x256::LoadLower16(xr[b] + i + 16);
    }
  }
  for (size_t o = 0; o < kO; ++o) {
    x256::VecI v;
    if constexpr (kFull) {
      v = x256::LoadU(wr[o] + i / 2);
    } else {
      v = x256::LoadLower16(wr[o] + i / 2);
    }
    const x256::VecI lo = x256::And(v, nib);
    const x256::VecI hi = x256::And(x256::ShiftRightU16<4>(v), nib);
    for (size_t b = 0; b < kB; ++b) {
#if RECUR_ISA_AVX3
      if constexpr (kVnni) {
        acc[b][o] =
            x256::DotU8I8Accumulate(x256::DotU8I8Accumulate(acc[b][o], lo, xa[b]), hi, xb[b]);
        continue;
      }
#endif
      const x256::VecI p16 =
          x256::AddI16(x256::MulAddPairsU8I8(lo, xa[b]), x256::MulAddPairsU8I8(hi, xb[b]));
      acc[b][o] = x256::AddI32(acc[b][o], x256::SumPairsI16(p16));
    }
  }
}

// As Tile (xs: −8·Σ q_x per group), for PairsFit(group); kVnni: vpdpbusd
// of the nibbles (unsigned) and q_x for maddubs, add and madd.
template <size_t kB, bool kVnni>
HWY_INLINE void TilePairs(const int8_t* const* HWY_RESTRICT xr,
                          const int32_t* const* HWY_RESTRICT xs, const uint8_t* HWY_RESTRICT w0,
                          size_t row_bytes, const float* sf, size_t groups, size_t group,
                          size_t rows, float (*sums)[kO]) {
  const size_t in = row_bytes * 2;
  x256::VecF facc[kB][kO];
  for (size_t b = 0; b < kB; ++b) {
    for (size_t o = 0; o < kO; ++o) facc[b][o] = x256::ZeroF();
  }
  const uint8_t* wr[kO];
  const float* sr[kO];
  TileRows(w0, sf, rows, row_bytes, groups, wr, sr);
  [[maybe_unused]] const uintptr_t next = reinterpret_cast<uintptr_t>(w0 + kO * row_bytes);
  auto prefetch = [&](size_t i) {
    if constexpr (kB == 1) {  // batch 1 streams w: the next tile's rows at this pace
      hwy::Prefetch(reinterpret_cast<const uint8_t*>(next + kO * i / 2));
      hwy::Prefetch(reinterpret_cast<const uint8_t*>(next + kO * i / 2 + 64));
    }
  };
  x256::VecI acc[kB][kO];
  if (group == kI4Block) {
    // Groups g and g + 1 per step: their −8·Σ q_x into lanes 0 and 4, their
    // scales over lanes 0..3 and 4..7 (past the row's end: 0).
    auto step = [&](size_t i, auto full) {
      constexpr size_t kGroups = decltype(full)::value ? 2 : 1;
      const size_t g = i / kI4Block;
      for (size_t b = 0; b < kB; ++b) {
        const x256::VecI start = x256::LoadToLanes0And4<kGroups>(xs[b] + g);
        for (size_t o = 0; o < kO; ++o) acc[b][o] = start;
      }
      prefetch(i);
      PairStep<kB, decltype(full)::value, kVnni>(xr, wr, i, acc);
      for (size_t o = 0; o < kO; ++o) {
        const x256::VecF s = x256::LoadBroadcastToHalves<kGroups>(sr[o] + g);
        for (size_t b = 0; b < kB; ++b) {
          facc[b][o] = x256::MulAdd(x256::ToF32(acc[b][o]), s, facc[b][o]);
        }
      }
    };
    size_t i = 0;
    for (; i + 2 * kI4Block <= in; i += 2 * kI4Block) step(i, std::true_type());
    if (i < in) step(i, std::false_type());
  } else {
    for (size_t g = 0; g < groups; ++g) {
      for (size_t b = 0; b < kB; ++b) {
        const x256::VecI start = x256::Lane0I32(xs[b][g]);
        for (size_t o = 0; o < kO; ++o) acc[b][o] = start;
      }
      for (size_t i = g * group; i < (g + 1) * group; i += 2 * kI4Block) {
        prefetch(i);
        PairStep<kB, true, kVnni>(xr, wr, i, acc);
      }
      for (size_t o = 0; o < kO; ++o) {
        const x256::VecF s = x256::SetF32(sr[o][g]);
        for (size_t b = 0; b < kB; ++b) {
          facc[b][o] = x256::MulAdd(x256::ToF32(acc[b][o]), s, facc[b][o]);
        }
      }
    }
  }
  for (size_t b = 0; b < kB; ++b) {
    for (size_t o = 0; o < kO; ++o) sums[b][o] = x256::SumOfLanes(facc[b][o]);
  }
}
#endif

#if defined(RECUR_I4_TILES) && RECUR_ISA_AVX3
#define RECUR_I4_VNNI_MATVEC 1
// Batch 1 on AVX512-VNNI, groups of 32: blocks of 16 weight rows, a row's
// 64 bytes (4 blocks, 128 inputs) per step, the 16 rows' f32 lanes reduced
// and finished together. x is re-laid out once per call so
// that 128-bit lane L of a step's vector holds block L's inputs 0..15 (xa)
// and 16..31 (xb), the nibbles' order; a step's i32 accumulator starts at
// −8·Σ q_x of each block's group in the lane's first element (xc), takes two
// vpdpbusd, and is scaled per 128-bit lane by its group's f16 scale into f32
// lanes. 8 rows run side by side so that one load of x's three vectors
// serves all 8 (row by row they were reloaded per row: 17% slower a step),
// and each row's scales are converted 16 (4 steps) at a time. The loop is
// bound by its integer vector operations (two nibble masks, a shift, two
// vpdpbusd per 64 bytes), not by the weights' traffic. Widest layer:
// kVnniMatVecMaxIn (its x copies are on the stack).
inline constexpr size_t kVnniMatVecMaxIn = 4096;

HWY_NOINLINE void VnniMatVec(const int8_t* q, float qs, const DenseWeights& w, float* y,
                             bool accumulate) {
  constexpr size_t R = 16, kRows = 8;
  const size_t in = w.in, groups = in / kI4Block, row_bytes = in / 2, out = w.out;
  alignas(64) int8_t xa[kVnniMatVecMaxIn / 2 + 64], xb[kVnniMatVecMaxIn / 2 + 64];
  alignas(64) int32_t xc[kVnniMatVecMaxIn / 8 + 16];
  const size_t padded = (row_bytes + 63) / 64 * 64;  // whole steps, zero past the row
  std::memset(xa + row_bytes, 0, padded - row_bytes);
  std::memset(xb + row_bytes, 0, padded - row_bytes);
  std::memset(xc, 0, padded / 4 * sizeof(int32_t));
  for (size_t g = 0; g < groups; ++g) {
    std::memcpy(xa + 16 * g, q + 32 * g, 16);
    std::memcpy(xb + 16 * g, q + 32 * g + 16, 16);
    int32_t sum = 0;
    for (size_t i = 0; i < 32; ++i) sum += q[32 * g + i];
    xc[4 * g] = -8 * sum;
  }
  const x512::VecI nib = x512::SetI8(0x0F);
  // Step k of 4 takes scales 4k..4k+3 of the 16 decoded, one per 128-bit lane.
  x512::VecI spread[4];
  for (int k = 0; k < 4; ++k) spread[k] = x512::QuarterIndices(k);
  const auto* wb = static_cast<const uint8_t*>(w.weight);
  const size_t tail = row_bytes % 64;  // bytes of the last step (0: none partial)
  const x512::Mask64 tail_mask =
      x512::MaskFromBits(tail == 0 ? ~uint64_t{0} : ~uint64_t{0} >> (64 - tail));
  const size_t scale_lines = (R * groups * sizeof(uint16_t) + 63) / 64;
  for (size_t o = 0; o < out; o += R) {
    const size_t rows = std::min(R, out - o);
    if (o + R < out) {  // the next block's scales: not covered by the weights' prefetch
      const auto* ns = reinterpret_cast<const uint8_t*>(w.group_scales + (o + R) * groups);
      for (size_t l = 0; l < scale_lines; ++l) hwy::Prefetch(ns + 64 * l);
    }
    x512::VecF acc[R];
    // kRows rows side by side share each load of x's three vectors.
    for (size_t r0 = 0; r0 < R; r0 += kRows) {
      const uint8_t* wr[kRows];
      const uint16_t* sr[kRows];
      x512::VecF a[kRows], s16[kRows];
      for (size_t k = 0; k < kRows; ++k) {
        const size_t row = o + std::min(r0 + k, rows - 1);
        wr[k] = wb + row * row_bytes;
        sr[k] = w.group_scales + row * groups;
        a[k] = x512::ZeroF();
      }
      // The rows R below, prefetched only, never loaded.
      const uint8_t* next = wb + (o + r0 + R) * row_bytes;
      for (size_t c = 0; c < row_bytes; c += 256) {
        // 16 group scales (4 steps) of each row, decoded at once.
        const size_t g = c / 16, ng = std::min<size_t>(16, groups - g);
        const auto sm = static_cast<x512::Mask16>((1u << ng) - 1);
        for (size_t k = 0; k < kRows; ++k) s16[k] = x512::LoadF16ToF32Masked(sm, sr[k] + g);
        const size_t end = std::min(c + 256, row_bytes);
        for (size_t i = c, step = 0; i < end; i += 64, ++step) {
          const x512::Mask64 m = i + 64 > row_bytes ? tail_mask : x512::MaskFromBits(~uint64_t{0});
          const x512::VecI va = x512::Load(xa + i), vb = x512::Load(xb + i);
          const x512::VecI vc = x512::Load(xc + i / 4);
          for (size_t k = 0; k < kRows; ++k) {
            hwy::Prefetch(next + k * row_bytes + i);
            const x512::VecI v = x512::LoadMaskedI8(m, wr[k] + i);
            x512::VecI d = x512::DotU8I8Accumulate(vc, x512::And(v, nib), va);
            d = x512::DotU8I8Accumulate(d, x512::And(x512::ShiftRightU16<4>(v), nib), vb);
            const x512::VecF sc = x512::PermuteLanes(spread[step], s16[k]);
            a[k] = x512::MulAdd(x512::ToF32(d), sc, a[k]);
          }
        }
      }
      for (size_t k = 0; k < kRows; ++k) acc[r0 + k] = a[k];
    }
    const auto mask = static_cast<x512::Mask16>((1u << rows) - 1);
    x512::VecF v = x512::Mul(x512::LaneSumsOf16(acc), x512::SetF32(qs));
    if (w.bias) v = x512::Add(v, x512::LoadMasked(mask, w.bias + o));
    if (accumulate) v = x512::Add(x512::LoadMasked(mask, y + o), v);
    x512::StoreMasked(y + o, mask, v);
  }
}
#endif

#if defined(RECUR_I4_TILES) && RECUR_ISA_AVX2
#define RECUR_I4_GEMM 1
// GEMM from kGemmMinBatch rows: per block of weight rows and kGemmDepth
// inputs (whole groups), the nibbles are unpacked once per call into panels
// as the int8 GEMMs pack them (vector j of a panel: inputs 4j..4j+3 of its
// rows, unsigned n = q + 8) and the block's group scales decoded to f32 per
// panel lane, so the inner loop broadcasts 4 bytes of an activation row
// against the panels and needs no horizontal sums. Per group each (row,
// output) sum starts at −8·Σ q_x of the group and is exact in i32; it is
// converted once and FMAed by its scale into f32 lanes. Two kernels:
//   AVX512-VNNI (VnniGemm): 2 panels of 16 rows, vpdpbusd(n, q_x).
//   AVX2 and AVX-512 without VNNI (Avx2Gemm): 2 panels of 8 rows,
//     maddubs(n, q_x) pairs (≤ 2·15·128 = 3840) added in i16 over 32 inputs
//     (8 steps: ≤ 30720 < 2^15), then one madd with ones to i32.
inline constexpr size_t kGemmMinBatch = 16;
inline constexpr size_t kGemmDepth = 1024;  // inputs per packed block
inline constexpr size_t kGemmBatch = 64;    // rows whose f32 partial sums wait between blocks
inline constexpr size_t kGemmXs = 4096;     // −8·Σ q_x per row and group, on the stack
                                            // (unless the caller has them: GroupSums)
static_assert(kDenseI4DotMaxIn / kI4Block <= kGemmXs, "one row's group sums must fit");

HWY_INLINE bool GemmFits(size_t batch, size_t in, size_t group) {
  return batch >= kGemmMinBatch && in > 0 && group <= kGemmDepth;
}

// xs[b·groups + g] = −8·Σ q over group g of row b, b < nb.
HWY_INLINE void GroupSums(const int8_t* q, size_t q_stride, size_t nb, size_t in, size_t group,
                          int32_t* HWY_RESTRICT xs) {
  const size_t groups = in / group;
  for (size_t b = 0; b < nb; ++b) {
    const int8_t* qb = q + b * q_stride;
    for (size_t g = 0; g < groups; ++g) {
      int32_t sum = 0;
      for (size_t i = g * group; i < (g + 1) * group; ++i) sum += qb[i];
      xs[b * groups + g] = -8 * sum;
    }
  }
}

// sc[gl·cols + k] = scale of group g0 + gl of row min(o0 + k, out − 1), gl < ng, k < cols.
HWY_INLINE void GemmScales(const DenseWeights& w, size_t o0, size_t cols, size_t g0, size_t ng,
                           float* HWY_RESTRICT sc) {
  const size_t groups = w.in / w.group;
  HWY_ALIGN float row[kGemmDepth / kI4Block];
  for (size_t k = 0; k < cols; ++k) {
    const size_t o = std::min<size_t>(o0 + k, w.out - 1);
    DecodeScales(w.group_scales + o * groups + g0, ng, row);
    for (size_t gl = 0; gl < ng; ++gl) sc[gl * cols + k] = row[gl];
  }
}

inline constexpr size_t kAvx2GemmCols = 16;
inline constexpr size_t kAvx2GemmRows = 3;  // 6 f32 + 6 i16 sums, 2 panels, x, ones: 16 registers

// Packs rows [o0, o0 + 16) (past `out`: its last row), inputs [k0, k0 + kc)
// (kc a multiple of 32): per 4 inputs panel 0's 8 rows, then panel 1's.
HWY_INLINE void Avx2GemmPack(const uint8_t* w, size_t row_bytes, size_t out, size_t o0,
                             size_t k0, size_t kc, uint8_t* HWY_RESTRICT dst) {
  for (size_t c = 0; c < kc; c += kI4Block) {
    for (size_t p = 0; p < 2; ++p) {
      x256::VecI r[8];
      for (size_t i = 0; i < 8; ++i) {
        r[i] =
            x256::LoadNibbles16(w + std::min(o0 + 8 * p + i, out - 1) * row_bytes + (k0 + c) / 2);
      }
      x256::Transpose8x8(r);
      for (size_t j = 0; j < 8; ++j) x256::Store(dst + ((c / 4 + j) * 2 + p) * 32, r[j]);
    }
  }
}

// facc[r][p] += the block's groups, rows xr[r] (at the block's first input),
// xsr[r] (at its first group), r < kR.
template <size_t kR>
HWY_INLINE void Avx2GemmKernel(const int8_t* const* xr, const int32_t* const* xsr,
                               const uint8_t* HWY_RESTRICT packed, const float* HWY_RESTRICT sc,
                               size_t kc, size_t group, x256::VecF (*facc)[2]) {
  x256::VecF f0[kR], f1[kR];
  for (size_t r = 0; r < kR; ++r) {
    f0[r] = facc[r][0];
    f1[r] = facc[r][1];
  }
  for (size_t g = 0; g < kc / group; ++g) {
    x256::VecI a0[kR], a1[kR];
    for (size_t c = g * group; c < (g + 1) * group; c += kI4Block) {
      x256::VecI s0[kR], s1[kR];
      for (size_t r = 0; r < kR; ++r) s0[r] = s1[r] = x256::ZeroI();
      // Not unrolled: GCC then computes all 8 steps' products first and
      // spills them.
      HWY_UNROLL(1)
      for (size_t j = 0; j < 8; ++j) {
        const uint8_t* p = packed + (c / 4 + j) * 64;
        const x256::VecI u0 = x256::Load(p), u1 = x256::Load(p + 32);
        HWY_UNROLL(4)
        for (size_t r = 0; r < kR; ++r) {
          int32_t v;
          std::memcpy(&v, xr[r] + c + 4 * j, 4);
          const x256::VecI xb = x256::SetI32(v);
          s0[r] = x256::AddI16(s0[r], x256::MulAddPairsU8I8(u0, xb));
          s1[r] = x256::AddI16(s1[r], x256::MulAddPairsU8I8(u1, xb));
        }
      }
      HWY_UNROLL(4)
      for (size_t r = 0; r < kR; ++r) {
        const x256::VecI m0 = x256::SumPairsI16(s0[r]), m1 = x256::SumPairsI16(s1[r]);
        if (c == g * group) {
          const x256::VecI start = x256::SetI32(xsr[r][g]);
          a0[r] = x256::AddI32(m0, start);
          a1[r] = x256::AddI32(m1, start);
        } else {
          a0[r] = x256::AddI32(a0[r], m0);
          a1[r] = x256::AddI32(a1[r], m1);
        }
      }
    }
    const x256::VecF c0 = x256::Load(sc + g * 16), c1 = x256::Load(sc + g * 16 + 8);
    HWY_UNROLL(4)
    for (size_t r = 0; r < kR; ++r) {
      f0[r] = x256::MulAdd(x256::ToF32(a0[r]), c0, f0[r]);
      f1[r] = x256::MulAdd(x256::ToF32(a1[r]), c1, f1[r]);
    }
  }
  for (size_t r = 0; r < kR; ++r) {
    facc[r][0] = f0[r];
    facc[r][1] = f1[r];
  }
}

HWY_NOINLINE void Avx2Gemm(const int8_t* q, size_t q_stride, const float* qs, const int32_t* sums,
                           size_t batch, const DenseWeights& w, float* y, size_t y_stride,
                           bool accumulate) {
  constexpr size_t R = kAvx2GemmRows, C = kAvx2GemmCols;
  const size_t in = w.in, out = w.out, group = w.group, groups = in / group;
  const size_t row_bytes = in / 2, depth = kGemmDepth / group * group;
  const auto* wb = static_cast<const uint8_t*>(w.weight);
  alignas(32) uint8_t packed[C * kGemmDepth];
  alignas(32) float sc[C * kGemmDepth / kI4Block];
  alignas(32) float part[kGemmBatch][C];
  int32_t xs_stack[kGemmXs];
  const size_t chunk = sums ? kGemmBatch : std::min(kGemmBatch, kGemmXs / groups);
  for (size_t b0 = 0; b0 < batch; b0 += chunk) {
    const size_t nb = std::min(chunk, batch - b0);
    const int32_t* xs = sums ? sums + b0 * groups : xs_stack;
    if (!sums) GroupSums(q + b0 * q_stride, q_stride, nb, in, group, xs_stack);
    for (size_t o0 = 0; o0 < out; o0 += C) {
      const size_t cols = std::min(C, out - o0);
      x256::MaskF mask[2];
      x256::VecF bv[2];
      for (size_t p = 0; p < 2; ++p) {
        const int n = static_cast<int>(cols > 8 * p ? std::min<size_t>(8, cols - 8 * p) : 0);
        mask[p] = x256::FirstLanes(n);
        bv[p] = w.bias ? x256::LoadMasked(w.bias + o0 + 8 * p, mask[p]) : x256::ZeroF();
      }
      for (size_t k0 = 0; k0 < in; k0 += depth) {
        const size_t kc = std::min(depth, in - k0);
        const bool last = k0 + kc >= in;
        Avx2GemmPack(wb, row_bytes, out, o0, k0, kc, packed);
        GemmScales(w, o0, C, k0 / group, kc / group, sc);
        for (size_t r0 = 0; r0 < nb; r0 += R) {
          const size_t nr = std::min(R, nb - r0);
          const int8_t* xr[R];
          const int32_t* xsr[R];
          x256::VecF facc[R][2];
          for (size_t r = 0; r < R; ++r) {
            const size_t b = r0 + std::min(r, nr - 1);  // rows past nb repeat the last
            xr[r] = q + (b0 + b) * q_stride + k0;
            xsr[r] = xs + b * groups + k0 / group;
            for (size_t p = 0; p < 2; ++p) {
              facc[r][p] = k0 == 0 ? x256::ZeroF() : x256::Load(part[b] + 8 * p);
            }
          }
          Avx2GemmKernel<R>(xr, xsr, packed, sc, kc, group, facc);
          for (size_t r = 0; r < nr; ++r) {
            const size_t b = r0 + r;
            for (size_t p = 0; p < 2; ++p) {
              if (!last) {
                x256::Store(part[b] + 8 * p, facc[r][p]);
                continue;
              }
              if (cols <= 8 * p) continue;
              // Finish's operations, 8 outputs at a time.
              float* yp = y + (b0 + b) * y_stride + o0 + 8 * p;
              x256::VecF v = x256::Mul(facc[r][p], x256::SetF32(qs[b0 + b]));
              if (w.bias) v = x256::Add(v, bv[p]);
              if (accumulate) v = x256::Add(x256::LoadMasked(yp, mask[p]), v);
              x256::StoreMasked(yp, mask[p], v);
            }
          }
        }
      }
    }
  }
}
#endif  // RECUR_I4_GEMM

#if defined(RECUR_I4_GEMM) && RECUR_ISA_AVX3
#define RECUR_I4_VNNI_GEMM 1
inline constexpr size_t kVnniGemmCols = 32;
inline constexpr size_t kVnniGemmRows = 6;  // 12 i32 + 12 f32 sums, 2 panels, x: 27 of 32 registers

// Packs rows [o0, o0 + 32) (past `out`: its last row), inputs [k0, k0 + kc)
// (kc a multiple of 32): per 4 inputs panel 0's 16 rows, then panel 1's.
HWY_INLINE void VnniGemmPack(const uint8_t* w, size_t row_bytes, size_t out, size_t o0, size_t k0,
                             size_t kc, uint8_t* HWY_RESTRICT dst) {
  for (size_t c = 0; c < kc; c += 64) {
    const bool half = kc - c == kI4Block;  // 32 inputs: the upper half zero
    for (size_t p = 0; p < 2; ++p) {
      x512::VecI r[16];
      for (size_t i = 0; i < 16; ++i) {
        const uint8_t* row = w + std::min(o0 + 16 * p + i, out - 1) * row_bytes + (k0 + c) / 2;
        r[i] = x512::InterleaveNibbles(half ? x256::LoadLower16(row) : x256::LoadU(row));
      }
      x512::Transpose16x16(r);
      for (size_t j = 0; j < (half ? 8 : 16); ++j) {
        x512::Store(dst + ((c / 4 + j) * 2 + p) * 64, r[j]);
      }
    }
  }
}

template <size_t kR>
HWY_INLINE void VnniGemmKernel(const int8_t* const* xr, const int32_t* const* xsr,
                               const uint8_t* HWY_RESTRICT packed, const float* HWY_RESTRICT sc,
                               size_t kc, size_t group, x512::VecF (*facc)[2]) {
  x512::VecF f0[kR], f1[kR];
  for (size_t r = 0; r < kR; ++r) {
    f0[r] = facc[r][0];
    f1[r] = facc[r][1];
  }
  for (size_t g = 0; g < kc / group; ++g) {
    x512::VecI a0[kR], a1[kR];
    HWY_UNROLL(8)
    for (size_t r = 0; r < kR; ++r) a0[r] = a1[r] = x512::SetI32(xsr[r][g]);
    for (size_t j = g * group / 4; j < (g + 1) * group / 4; ++j) {
      const x512::VecI w0 = x512::Load(packed + j * 128);
      const x512::VecI w1 = x512::Load(packed + j * 128 + 64);
      HWY_UNROLL(8)
      for (size_t r = 0; r < kR; ++r) {
        int32_t v;
        std::memcpy(&v, xr[r] + 4 * j, 4);
        const x512::VecI xb = x512::SetI32(v);
        a0[r] = x512::DotU8I8Accumulate(a0[r], w0, xb);
        a1[r] = x512::DotU8I8Accumulate(a1[r], w1, xb);
      }
    }
    const x512::VecF c0 = x512::Load(sc + g * 32), c1 = x512::Load(sc + g * 32 + 16);
    HWY_UNROLL(8)
    for (size_t r = 0; r < kR; ++r) {
      f0[r] = x512::MulAdd(x512::ToF32(a0[r]), c0, f0[r]);
      f1[r] = x512::MulAdd(x512::ToF32(a1[r]), c1, f1[r]);
    }
  }
  for (size_t r = 0; r < kR; ++r) {
    facc[r][0] = f0[r];
    facc[r][1] = f1[r];
  }
}

HWY_NOINLINE void VnniGemm(const int8_t* q, size_t q_stride, const float* qs, const int32_t* sums,
                           size_t batch, const DenseWeights& w, float* y, size_t y_stride,
                           bool accumulate) {
  constexpr size_t R = kVnniGemmRows, C = kVnniGemmCols;
  const size_t in = w.in, out = w.out, group = w.group, groups = in / group;
  const size_t row_bytes = in / 2, depth = kGemmDepth / group * group;
  const auto* wb = static_cast<const uint8_t*>(w.weight);
  alignas(64) uint8_t packed[C * kGemmDepth];
  alignas(64) float sc[C * kGemmDepth / kI4Block];
  alignas(64) float part[kGemmBatch][C];
  int32_t xs_stack[kGemmXs];
  const size_t chunk = sums ? kGemmBatch : std::min(kGemmBatch, kGemmXs / groups);
  for (size_t b0 = 0; b0 < batch; b0 += chunk) {
    const size_t nb = std::min(chunk, batch - b0);
    const int32_t* xs = sums ? sums + b0 * groups : xs_stack;
    if (!sums) GroupSums(q + b0 * q_stride, q_stride, nb, in, group, xs_stack);
    for (size_t o0 = 0; o0 < out; o0 += C) {
      const size_t cols = std::min(C, out - o0);
      x512::Mask16 mask[2];
      x512::VecF bv[2];
      for (size_t p = 0; p < 2; ++p) {
        const size_t n = cols > 16 * p ? std::min<size_t>(16, cols - 16 * p) : 0;
        mask[p] = static_cast<x512::Mask16>((1u << n) - 1);
        bv[p] = w.bias ? x512::LoadMasked(mask[p], w.bias + o0 + 16 * p) : x512::ZeroF();
      }
      for (size_t k0 = 0; k0 < in; k0 += depth) {
        const size_t kc = std::min(depth, in - k0);
        const bool last = k0 + kc >= in;
        VnniGemmPack(wb, row_bytes, out, o0, k0, kc, packed);
        GemmScales(w, o0, C, k0 / group, kc / group, sc);
        for (size_t r0 = 0; r0 < nb; r0 += R) {
          const size_t nr = std::min(R, nb - r0);
          const int8_t* xr[R];
          const int32_t* xsr[R];
          x512::VecF facc[R][2];
          for (size_t r = 0; r < R; ++r) {
            const size_t b = r0 + std::min(r, nr - 1);  // rows past nb repeat the last
            xr[r] = q + (b0 + b) * q_stride + k0;
            xsr[r] = xs + b * groups + k0 / group;
            for (size_t p = 0; p < 2; ++p) {
              facc[r][p] = k0 == 0 ? x512::ZeroF() : x512::Load(part[b] + 16 * p);
            }
          }
          VnniGemmKernel<R>(xr, xsr, packed, sc, kc, group, facc);
          for (size_t r = 0; r < nr; ++r) {
            const size_t b = r0 + r;
            for (size_t p = 0; p < 2; ++p) {
              if (!last) {
                x512::Store(part[b] + 16 * p, facc[r][p]);
                continue;
              }
              if (mask[p] == 0) continue;
              // Finish's operations, 16 outputs at a time.
              float* yp = y + (b0 + b) * y_stride + o0 + 16 * p;
              x512::VecF v = x512::Mul(facc[r][p], x512::SetF32(qs[b0 + b]));
              if (w.bias) v = x512::Add(v, bv[p]);
              if (accumulate) v = x512::Add(x512::LoadMasked(mask[p], yp), v);
              x512::StoreMasked(yp, mask[p], v);
            }
          }
        }
      }
    }
  }
}
#endif  // RECUR_I4_VNNI_GEMM

#ifdef RECUR_I4_TILES
// sums[b][o] = Σ_g sf[o'][g]·Σ_{i in g} q_w[o', i]·xr[b][i] for b < kB,
// o < kO, o' = min(o, rows − 1); w0: the tile's first row; xs[b][g]: −8·Σ
// of xr[b] over group g.
template <size_t kB>
HWY_INLINE void Tile(const int8_t* const* HWY_RESTRICT xr, const int32_t* const* HWY_RESTRICT xs,
                     const uint8_t* HWY_RESTRICT w0, size_t row_bytes, const float* sf,
                     size_t groups, size_t group, size_t rows, float (*sums)[kO]) {
  const size_t blocks = group / kI4Block;
  typename Ops::F facc[kB][kO];
  for (size_t b = 0; b < kB; ++b) {
    for (size_t o = 0; o < kO; ++o) facc[b][o] = Ops::ZeroSums();
  }
  const uint8_t* wr[kO];
  const float* sr[kO];
  TileRows(w0, sf, rows, row_bytes, groups, wr, sr);
  [[maybe_unused]] const uintptr_t next = reinterpret_cast<uintptr_t>(w0 + kO * row_bytes);
  for (size_t g = 0; g < groups; ++g) {
    // Each accumulator starts at −8·Σ q_x (lane 0): one vector per activation
    // row for all kO weight rows.
    typename Ops::Acc acc[kB][kO];
    for (size_t b = 0; b < kB; ++b) {
      const typename Ops::Acc start = Ops::StartSum(xs[b][g]);
      for (size_t o = 0; o < kO; ++o) acc[b][o] = start;
    }
    for (size_t k = 0; k < blocks; ++k) {
      const size_t byte = (g * blocks + k) * kBlockBytes;
      const size_t i = byte * 2;
      if constexpr (kB == 1) {  // batch 1 streams w: the next tile's rows at this pace
        hwy::Prefetch(reinterpret_cast<const uint8_t*>(next + kO * byte));
      }
      for (size_t o = 0; o < kO; ++o) {
        const typename Ops::W wv = Ops::LoadNibbles(wr[o] + byte);
        for (size_t b = 0; b < kB; ++b) acc[b][o] = Ops::DotAccumulate(acc[b][o], wv, xr[b] + i);
      }
    }
    for (size_t b = 0; b < kB; ++b) {
      for (size_t o = 0; o < kO; ++o) {
        facc[b][o] = Ops::MulAddScaled(acc[b][o], sr[o][g], facc[b][o]);
      }
    }
  }
  for (size_t b = 0; b < kB; ++b) {
    for (size_t o = 0; o < kO; ++o) sums[b][o] = Ops::SumOfLanes(facc[b][o]);
  }
}
#endif  // RECUR_I4_TILES

// kB activation rows (q, row stride q_stride, scales qs, group sums xs of
// stride groups) against weight rows [o_begin, o_end); y at row 0, column 0.
template <size_t kB, bool kVnni>
HWY_NOINLINE void Rows(const int8_t* q, size_t q_stride, const float* qs, const int32_t* xs,
                       const DenseWeights& w, size_t o_begin, size_t o_end, float* y,
                       size_t y_stride, bool accumulate) {
  const size_t in = w.in, group = w.group, groups = in / group, row_bytes = in / 2;
  const auto* wb = static_cast<const uint8_t*>(w.weight);
#ifdef RECUR_I4_TILES
  const int8_t* xr[kB];
  const int32_t* xsr[kB];
  for (size_t b = 0; b < kB; ++b) {
    xr[b] = q + b * q_stride;
    xsr[b] = xs + b * groups;
  }
  HWY_ALIGN float sf[kO * kMaxGroups];
  float sums[kB][kO];
  for (size_t o = o_begin; o < o_end; o += kO) {
    const size_t rows = std::min(kO, o_end - o);
    DecodeScales(w.group_scales + o * groups, rows * groups, sf);
#ifdef RECUR_I4_PAIRS
    if (PairsFit(group)) {
      TilePairs<kB, kVnni>(xr, xsr, wb + o * row_bytes, row_bytes, sf, groups, group, rows,
                           sums);
    } else {
      Tile<kB>(xr, xsr, wb + o * row_bytes, row_bytes, sf, groups, group, rows, sums);
    }
#else
    Tile<kB>(xr, xsr, wb + o * row_bytes, row_bytes, sf, groups, group, rows, sums);
#endif
    for (size_t b = 0; b < kB; ++b) {
      for (size_t r = 0; r < rows; ++r) {
        Finish(sums[b][r], qs[b], w.bias ? w.bias + o + r : nullptr, y + b * y_stride + o + r,
               accumulate);
      }
    }
  }
#else
  (void)xs;
  for (size_t o = o_begin; o < o_end; ++o) {
    const uint8_t* row = wb + o * row_bytes;
    for (size_t b = 0; b < kB; ++b) {
      const int8_t* xb = q + b * q_stride;
      float s = 0.0f;
      for (size_t g = 0; g < groups; ++g) {
        int32_t sum = 0;
        for (size_t i = g * group; i < (g + 1) * group; ++i) sum += I4Value(row, i) * xb[i];
        s += static_cast<float>(sum) * ref::F16ToF32(w.group_scales[o * groups + g]);
      }
      Finish(s, qs[b], w.bias ? w.bias + o : nullptr, y + b * y_stride + o, accumulate);
    }
  }
#endif
}

#ifdef RECUR_I4_TILES
inline constexpr size_t kMaxB = kTileRows;
#else
inline constexpr size_t kMaxB = 1;
#endif
// Weight bytes per output chunk of several blocks of rows (I4DotQuantized).
inline constexpr size_t kRowsChunkBytes = size_t{256} << 10;

template <size_t kB, bool kVnni>
HWY_INLINE void RowsN(size_t nb, const int8_t* q, size_t q_stride, const float* qs,
                      const int32_t* xs, const DenseWeights& w, size_t o_begin, size_t o_end,
                      float* y, size_t y_stride, bool accumulate) {
  if constexpr (kB >= 1) {
    if (nb == kB) {
      return Rows<kB, kVnni>(q, q_stride, qs, xs, w, o_begin, o_end, y, y_stride, accumulate);
    }
    if constexpr (kB > 1) {
      RowsN<kB - 1, kVnni>(nb, q, q_stride, qs, xs, w, o_begin, o_end, y, y_stride, accumulate);
    }
  }
}


}  // namespace i4_detail

// See dense.h (DenseI4DotQuantized): w is kI4, in <= kDenseI4DotMaxIn.
// sums: null, or the rows' GroupSums (stride in / w.group), which lets the
// GEMM take kGemmBatch rows a pass at any width.
HWY_INLINE void I4DotQuantized(const int8_t* q, size_t q_stride, const float* q_scales,
                               size_t batch, const DenseWeights& w, float* y, size_t y_stride,
                               bool accumulate, const int32_t* sums = nullptr) {
  namespace id = i4_detail;
  if (batch == 0 || w.out == 0) return;
  const size_t in = w.in, groups = in == 0 ? 0 : in / w.group;
#ifdef RECUR_I4_VNNI_MATVEC
  if (batch == 1 && w.group == kI4Block && in > 0 && in <= id::kVnniMatVecMaxIn &&
      Avx512VnniEnabled()) {
    return id::VnniMatVec(q, q_scales[0], w, y, accumulate);
  }
#endif
#ifdef RECUR_I4_GEMM
  if (id::GemmFits(batch, in, w.group)) {
#ifdef RECUR_I4_VNNI_GEMM
    if (Avx512VnniEnabled()) {
      return id::VnniGemm(q, q_stride, q_scales, sums, batch, w, y, y_stride, accumulate);
    }
#endif
    return id::Avx2Gemm(q, q_stride, q_scales, sums, batch, w, y, y_stride, accumulate);
  }
#else
  (void)sums;
#endif
  // Output chunks whose weights stay in the L2 across the blocks of rows, when
  // there is more than one block (each block would stream w from DRAM again).
  size_t chunk = w.out;
  if (batch > id::kMaxB && in > 0) {
    chunk = std::max<size_t>(16, id::kRowsChunkBytes / (in / 2));
    chunk -= chunk % 16;
  }
  // −8·Σ q_b over each group, for blocks of rows (on the stack).
  int32_t xs[id::kMaxGroups * id::kMaxB];
  for (size_t o0 = 0; o0 < w.out; o0 += chunk) {
    const size_t o1 = std::min<size_t>(w.out, o0 + chunk);
    for (size_t b0 = 0; b0 < batch; b0 += id::kMaxB) {
      const size_t nb = std::min(id::kMaxB, batch - b0);
      for (size_t b = 0; b < nb; ++b) {
        const int8_t* qb = q + (b0 + b) * q_stride;
        for (size_t g = 0; g < groups; ++g) {
          int32_t sum = 0;
          for (size_t i = g * w.group; i < (g + 1) * w.group; ++i) sum += qb[i];
          xs[b * groups + g] = -8 * sum;
        }
      }
      if (in == 0) {  // y = bias (+ y)
        for (size_t b = 0; b < nb; ++b) {
          for (size_t o = o0; o < o1; ++o) {
            id::Finish(0.0f, 0.0f, w.bias ? w.bias + o : nullptr, y + (b0 + b) * y_stride + o,
                       accumulate);
          }
        }
        continue;
      }
#if RECUR_ISA_AVX3
      if (Avx512VnniEnabled()) {
        id::RowsN<id::kMaxB, true>(nb, q + b0 * q_stride, q_stride, q_scales + b0, xs, w, o0, o1,
                                   y + b0 * y_stride, y_stride, accumulate);
        continue;
      }
#endif
      id::RowsN<id::kMaxB, false>(nb, q + b0 * q_stride, q_stride, q_scales + b0, xs, w, o0, o1,
                                  y + b0 * y_stride, y_stride, accumulate);
    }
  }
}

// See dense.h (DenseI4Dot); w is kI4, in <= kDenseI4DotMaxIn.
HWY_INLINE void I4Dot(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                           float* y, size_t y_stride, bool accumulate) {
  namespace id = i4_detail;
  if (batch == 0 || w.out == 0) return;
  const size_t in = w.in;
  alignas(64) int8_t stack_q[id::kQBytes];
  float stack_qs[id::kQRows];
  const dense_detail::QuantizedRows rows = dense_detail::PassRows(
      stack_q, id::kQBytes, stack_qs, id::kQRows, batch, in, in / kI4Block);
  for (size_t b0 = 0; b0 < batch; b0 += rows.rows) {
    const size_t n = std::min(rows.rows, batch - b0);
    for (size_t b = 0; b < n; ++b) {
      rows.scales[b] = QuantizeS8(x + (b0 + b) * x_stride, rows.q + b * in, in);
    }
#ifdef RECUR_I4_GEMM
    if (rows.sums != nullptr && id::GemmFits(n, in, w.group)) {
      id::GroupSums(rows.q, in, n, in, w.group, rows.sums);
    }
#endif
    I4DotQuantized(rows.q, in, rows.scales, n, w, y + b0 * y_stride, y_stride, accumulate,
                   rows.sums);
  }
}

// See dense.h (DenseI4DotPreferred).
HWY_INLINE bool I4DotPreferred(size_t batch, size_t in, size_t out) {
  (void)batch;
  (void)out;
#ifdef RECUR_I4_TILES
  return in <= kDenseI4DotMaxIn;
#else
  (void)in;
  return false;
#endif
}

// DenseI4Float (dense.h): Dense for kI4 weights with f32 activations: per output row,
// kDecodeInputs inputs at a time decoded into a stack buffer and multiplied
// with every activation row (f32 lane accumulators, summed per pass).
HWY_INLINE void I4Float(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                             float* y, size_t y_stride, bool accumulate) {
  namespace id = i4_detail;
  if (batch == 0 || w.out == 0) return;
  const hn::CappedTag<float, id::kBlockBytes> df;
  const size_t N = hn::Lanes(df);
  const size_t in = w.in, group = w.group, groups = in == 0 ? 0 : in / group;
  const auto* wb = static_cast<const uint8_t*>(w.weight);
  HWY_ALIGN float wd[id::kDecodeInputs];
  float sc[id::kDecodeInputs / kI4Block + 1];  // the pass's group scales
  constexpr size_t kRows = 64;  // activation rows per pass
  float sums[kRows];
  for (size_t b0 = 0; b0 < batch; b0 += kRows) {
    const size_t nb = std::min(kRows, batch - b0);
    for (size_t o = 0; o < w.out; ++o) {
      const uint8_t* row = wb + o * (in / 2);
      std::fill(sums, sums + nb, 0.0f);
      for (size_t i0 = 0; i0 < in; i0 += id::kDecodeInputs) {
        const size_t n = std::min(id::kDecodeInputs, in - i0);  // a multiple of kI4Block
        // The scales of the groups this pass touches (blocks never straddle
        // groups: the group is a multiple of kI4Block).
        const size_t g0 = i0 / group, ng = (i0 + n - 1) / group - g0 + 1;
        id::DecodeScales(w.group_scales + o * groups + g0, ng, sc);
        for (size_t i = i0; i < i0 + n; i += kI4Block) {
          id::DecodeBlocks(row + i / 2, 1, sc[i / group - g0], wd + (i - i0));
        }
        for (size_t b = 0; b < nb; ++b) {
          const float* xb = x + (b0 + b) * x_stride + i0;
          auto a0 = hn::Zero(df), a1 = hn::Zero(df);
          for (size_t i = 0; i < n; i += 2 * N) {  // n is a multiple of 32 ≥ 2N
            a0 = hn::MulAdd(hn::LoadU(df, xb + i), hn::Load(df, wd + i), a0);
            a1 = hn::MulAdd(hn::LoadU(df, xb + i + N), hn::Load(df, wd + i + N), a1);
          }
          sums[b] += hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
        }
      }
      for (size_t b = 0; b < nb; ++b) {
        id::Finish(sums[b], 1.0f, w.bias ? w.bias + o : nullptr, y + (b0 + b) * y_stride + o,
                   accumulate);
      }
    }
  }
}

#undef RECUR_I4_TILES
#undef RECUR_I4_PAIRS
#undef RECUR_I4_VNNI_MATVEC
#undef RECUR_I4_GEMM
#undef RECUR_I4_VNNI_GEMM

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_I4_INL_H_ toggle
