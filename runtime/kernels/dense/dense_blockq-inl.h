// Per-target DenseBlockQ8 (dense.h): quantised weights times activations
// quantised per block as llama.cpp's CPU backend quantises them (Q8_0 blocks
// of 32 for kQ8_0 and kI4 with groups of 32, Q8_K blocks of 256 for the
// K-quants).
//
// A chunk of up to kMaxRows activation rows is quantised into stack buffers
// (int8 codes, a scale per block, and for Q8_K the code sums of each
// sub-block of 32, which the K-quants' minimums multiply). Then each weight
// row is visited block by block: a Format decodes the block's codes into an
// int16 buffer, already multiplied by their sub-block's integer scale
// (|code·scale| ≤ 32·128), and every activation row of the chunk sums its
// products with them exactly in i32 (ReorderWidenMulAccumulate). The block's
// sum is converted to f32 and multiplied into the row's f32 accumulator with
// the block's two scales, as ggml does; the K-quants' minimum terms are
// summed per block in integers and applied in f32.
//
// The portable form is written in Highway operations, the same on every
// target; on x86 from AVX2 the types of a Q4_K_M, Q4_0 or Q8_0 file run
// forms of ggml's own operations (X86Rows, with the named operations of
// isa::x256; on AVX-512 q4_k, q6_k, and with VNNI q8_0, 512-bit forms of
// them), Q5_K the portable one. Batches of q4_k, q6_k and q8_0 rows
// on AVX-512 with VNNI run the GEMM of dense_blockq_gemm-inl.h.
#if defined(RECUR_KERNELS_DENSE_DENSE_BLOCKQ_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_BLOCKQ_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_BLOCKQ_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_BLOCKQ_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_blockq_gemm-inl.h"
#include "kernels/dense/dense_kquant-inl.h"
#include "kernels/dense/dense_ref.h"
#include "kernels/dispatch/target_limit.h"
#include "kernels/isa/isa-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace blockq_detail {

using D16 = hn::CappedTag<int16_t, 16>;
using D32 = hn::Repartition<int32_t, D16>;
using DF = hn::Rebind<float, D32>;
using V16 = hn::Vec<D16>;

// Activation rows quantised at a time, and the stack they take.
inline constexpr size_t kMaxRows = 4;
inline constexpr size_t kQBytes = 16384;
static_assert(kQBytes >= kDenseBlockQ8MaxIn, "a row must fit the quantisation buffer");
inline constexpr size_t kSubBlock = 32;  // Q8_K's sums are per 32 codes

// Half bits as f32 without ref::F16ToF32's ldexp (every block reads one).
HWY_INLINE float HalfToF32(uint16_t bits) {
  const uint8_t h[2] = {static_cast<uint8_t>(bits), static_cast<uint8_t>(bits >> 8)};
  return kquant_detail::HalfAt(h);
}

// Quantised activation rows: row r's codes at q + r·in, its block scales at
// d + r·blocks, its sub-block sums at sums + r·(in / 32).
struct QuantizedRows {
  HWY_ALIGN int8_t q[kQBytes];
  float d[kQBytes / 32];
  int32_t sums[kQBytes / kSubBlock];
};

// Stores the codes round(x·scale) (ties to even; at most 127) of n inputs
// (a multiple of the f32 lanes, or of 16) to q; returns their sum.
HWY_INLINE int32_t StoreCodes(const float* HWY_RESTRICT x, size_t n, float scale,
                              int8_t* HWY_RESTRICT q) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const size_t N = hn::Lanes(df);
  auto sum = hn::Zero(di);
  const auto s = hn::Set(df, scale);
  const auto top = hn::Set(di, 127);
  for (size_t i = 0; i < n; i += N) {
    const auto c = hn::Min(hn::NearestInt(hn::Mul(hn::LoadU(df, x + i), s)), top);
    sum = hn::Add(sum, c);
    hn::StoreU(hn::DemoteTo(d8, c), d8, q + i);
  }
  return hn::GetLane(hn::SumOfLanes(di, sum));
}

HWY_INLINE float MaxAbs(const float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  auto m = hn::Zero(df);
  for (size_t i = 0; i < n; i += N) m = hn::Max(m, hn::Abs(hn::LoadU(df, x + i)));
  return hn::GetLane(hn::MaxOfLanes(df, m));
}

// ggml's quantize_row_q8_0 (x86): blocks of 32.
HWY_INLINE void QuantizeQ8_0(const float* HWY_RESTRICT x, size_t in, int8_t* HWY_RESTRICT q,
                             float* HWY_RESTRICT d) {
  constexpr size_t kBlock = 32;
  if (hn::Lanes(hn::ScalableTag<float>()) > kBlock) {  // wider than a block: the spec
    for (size_t k = 0; k < in / kBlock; ++k) {
      d[k] = ref::QuantizeQ8_0Block(x + k * kBlock, q + k * kBlock);
    }
    return;
  }
  for (size_t k = 0; k < in / kBlock; ++k) {
    const float* xb = x + k * kBlock;
    const float amax = MaxAbs(xb, kBlock);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    StoreCodes(xb, kBlock, std::isfinite(id) ? id : 0.0f, q + k * kBlock);  // ref: overflow
    d[k] = ref::RoundToHalf(amax / 127.0f);
  }
}

// ggml's quantize_row_q8_K_ref: blocks of 256, and the sums of each 32 codes.
HWY_INLINE void QuantizeQ8_K(const float* HWY_RESTRICT x, size_t in, int8_t* HWY_RESTRICT q,
                             float* HWY_RESTRICT d, int32_t* HWY_RESTRICT sums) {
  for (size_t k = 0; k < in / kKQuantBlock; ++k) {
    const float* xb = x + k * kKQuantBlock;
    int8_t* qb = q + k * kKQuantBlock;
    const float amax = MaxAbs(xb, kKQuantBlock);
    size_t first = 0;  // ggml keeps the sign of the first x of largest |x|
    while (amax != 0.0f && std::fabs(xb[first]) != amax) ++first;
    const float iscale = amax != 0.0f ? -127.0f / xb[first] : 0.0f;
    if (!std::isfinite(iscale) || amax == 0.0f) {  // ref::QuantizeQ8_KBlock: zero codes
      std::fill(qb, qb + kKQuantBlock, int8_t{0});
      std::fill(sums + k * 8, sums + k * 8 + 8, 0);
      d[k] = amax != 0.0f ? 1.0f / iscale : 0.0f;
      continue;
    }
    for (size_t j = 0; j < kKQuantBlock / kSubBlock; ++j) {
      sums[k * 8 + j] = StoreCodes(xb + j * kSubBlock, kSubBlock, iscale, qb + j * kSubBlock);
    }
    d[k] = 1.0f / iscale;
  }
}

// The int16 vectors of a block's codes: visit(i, codes) for the block's
// inputs [i, i + Lanes(D16)), codes already times the sub-block's scale.
// Q8_0-type formats have one scale per block, which Rows applies in f32.

struct Q8_0Format {
  static constexpr size_t kBlock = 32;
  template <class Visit>
  static HWY_INLINE void Block(const uint8_t* HWY_RESTRICT w, const Visit& visit) {
    const D16 d16;
    const hn::Rebind<int8_t, D16> d8;
    for (size_t i = 0; i < kBlock; i += hn::Lanes(d16)) {
      visit(i, hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const int8_t*>(w) + i)));
    }
  }
};

// kI4 with groups of 32: byte j of a block holds inputs j (low nibble) and
// j + 16 (high), q = nibble − 8.
struct I4Format {
  static constexpr size_t kBlock = 32;
  template <class Visit>
  static HWY_INLINE void Block(const uint8_t* HWY_RESTRICT w, const Visit& visit) {
    const D16 d16;
    const hn::Rebind<uint8_t, D16> du8;
    const auto mask = hn::Set(d16, 0xF), eight = hn::Set(d16, 8);
    for (size_t i = 0; i < kBlock / 2; i += hn::Lanes(d16)) {
      const auto bytes = hn::PromoteTo(d16, hn::LoadU(du8, w + i));
      visit(i, hn::Sub(hn::And(bytes, mask), eight));
      visit(i + kBlock / 2, hn::Sub(hn::ShiftRight<4>(bytes), eight));
    }
  }
};

// Q4_K and (kFifth) Q5_K: chunk c of 64 inputs is 32 bytes of nibbles, low
// ones sub-block 2c, high ones 2c + 1; Q5_K's fifth bit of input 32j + l is
// bit j of qh[l].
template <bool kFifth>
struct Q4Or5KFormat {
  static constexpr size_t kBlock = kKQuantBlock;
  template <class Visit>
  static HWY_INLINE void Block(const uint8_t* HWY_RESTRICT w, const Visit& visit) {
    const D16 d16;
    const hn::Rebind<uint8_t, D16> du8;
    const auto mask = hn::Set(d16, 0xF), one = hn::Set(d16, 1);
    int sc[8], mn[8];
    for (size_t j = 0; j < 8; ++j) ref::KQuantScaleMin(w + ref::kQ4KScales, j, &sc[j], &mn[j]);
    const uint8_t* HWY_RESTRICT qs = w + (kFifth ? ref::kQ5KQs : ref::kQ4KQs);
    for (size_t c = 0; c < 4; ++c) {
      const auto lo_scale = hn::Set(d16, static_cast<int16_t>(sc[2 * c]));
      const auto hi_scale = hn::Set(d16, static_cast<int16_t>(sc[2 * c + 1]));
      for (size_t l = 0; l < 32; l += hn::Lanes(d16)) {
        const auto bytes = hn::PromoteTo(d16, hn::LoadU(du8, qs + 32 * c + l));
        auto lo = hn::And(bytes, mask), hi = hn::ShiftRight<4>(bytes);
        if (kFifth) {
          const auto h = hn::PromoteTo(d16, hn::LoadU(du8, w + ref::kQ5KQh + l));
          lo = hn::Or(lo, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, int(2 * c)), one)));
          hi = hn::Or(hi, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, int(2 * c + 1)), one)));
        }
        visit(64 * c + l, hn::Mul(lo, lo_scale));
        visit(64 * c + 32 + l, hn::Mul(hi, hi_scale));
      }
    }
  }
  // Σ_j m_j·Σ_{i in j} q[i] (the minimums' term, without dmin).
  static HWY_INLINE int32_t MinTerm(const uint8_t* HWY_RESTRICT w, const int32_t* sums) {
    int32_t s = 0;
    for (size_t j = 0; j < 8; ++j) {
      int sc, m;
      ref::KQuantScaleMin(w + ref::kQ4KScales, j, &sc, &m);
      s += m * sums[j];
    }
    return s;
  }
  static HWY_INLINE float D(const uint8_t* w) { return ref::HalfAt(w); }
  static HWY_INLINE float Dmin(const uint8_t* w) { return ref::HalfAt(w + 2); }
};

// Q6_K: half h (128 inputs) has 64 bytes of low nibbles ql, 32 of high bit
// pairs qh and 8 int8 scales of 16 inputs each; input 128h + 32t + l
// (t < 4, l < 32) is (ql[l + 32(t & 1)] nibble t / 2) | (qh[l] bits 2t) << 4,
// minus 32.
struct Q6KFormat {
  static constexpr size_t kBlock = kKQuantBlock;
  template <class Visit>
  static HWY_INLINE void Block(const uint8_t* HWY_RESTRICT w, const Visit& visit) {
    const D16 d16;
    const hn::Rebind<uint8_t, D16> du8;
    const auto mask = hn::Set(d16, 0xF), two_bits = hn::Set(d16, 3), bias = hn::Set(d16, 32);
    const auto* HWY_RESTRICT scales = reinterpret_cast<const int8_t*>(w + ref::kQ6KScales);
    for (size_t h = 0; h < 2; ++h) {
      const uint8_t* HWY_RESTRICT ql = w + 64 * h;
      const uint8_t* HWY_RESTRICT qh = w + ref::kQ6KQh + 32 * h;
      for (size_t l = 0; l < 32; l += hn::Lanes(d16)) {
        const auto a = hn::PromoteTo(d16, hn::LoadU(du8, ql + l));
        const auto b = hn::PromoteTo(d16, hn::LoadU(du8, ql + 32 + l));
        const auto c = hn::PromoteTo(d16, hn::LoadU(du8, qh + l));
        const auto codes = [&](hn::Vec<D16> nibble, int shift) {
          const auto high = hn::And(hn::ShiftRightSame(c, shift), two_bits);
          return hn::Sub(hn::Or(nibble, hn::ShiftLeft<4>(high)), bias);
        };
        const size_t s = 8 * h + l / 16;
        visit(128 * h + l, hn::Mul(codes(hn::And(a, mask), 0), hn::Set(d16, scales[s])));
        visit(128 * h + 32 + l, hn::Mul(codes(hn::And(b, mask), 2), hn::Set(d16, scales[s + 2])));
        visit(128 * h + 64 + l,
              hn::Mul(codes(hn::ShiftRight<4>(a), 4), hn::Set(d16, scales[s + 4])));
        visit(128 * h + 96 + l,
              hn::Mul(codes(hn::ShiftRight<4>(b), 6), hn::Set(d16, scales[s + 6])));
      }
    }
  }
  static HWY_INLINE int32_t MinTerm(const uint8_t*, const int32_t*) { return 0; }
  static HWY_INLINE float D(const uint8_t* w) { return ref::HalfAt(w + ref::kQ6KD); }
  static HWY_INLINE float Dmin(const uint8_t*) { return 0.0f; }
};

template <class Format>
inline constexpr bool kIsKQuant = Format::kBlock == kKQuantBlock;

// Σ_i codes[i]·q[i] over n inputs (a multiple of 16), exactly.
HWY_INLINE int32_t BlockSum(const int16_t* HWY_RESTRICT codes, const int8_t* HWY_RESTRICT q,
                            size_t n) {
  const D16 d16;
  const D32 d32;
  const hn::Rebind<int8_t, D16> d8;
  auto s0 = hn::Zero(d32), s1 = hn::Zero(d32);
  for (size_t i = 0; i < n; i += hn::Lanes(d16)) {
    s0 = hn::ReorderWidenMulAccumulate(d32, hn::Load(d16, codes + i),
                                       hn::PromoteTo(d16, hn::LoadU(d8, q + i)), s0, s1);
  }
  return hn::GetLane(hn::SumOfLanes(d32, hn::Add(s0, s1)));
}

// y rows [0, rows) of the formula in dense.h for every output row, from the
// quantised activation rows `a`: each block's codes decoded once (scaled by
// their sub-blocks' scales) and summed against every row; the blocks' sums
// are converted to f32 and accumulated in block order.
template <class Format>
HWY_NOINLINE void Rows(size_t rows, const QuantizedRows& a, const DenseWeights& w,
                       float* HWY_RESTRICT y, size_t y_stride, bool accumulate) {
  const D16 d16;
  constexpr size_t kBlock = Format::kBlock;
  const size_t in = w.in, blocks = in / kBlock;
  const size_t row_bytes = WeightRowBytes(w.type, in);
  const size_t block_bytes = Traits(w.type).block_bytes;
  HWY_ALIGN int16_t codes[kBlock];
  for (size_t o = 0; o < w.out; ++o) {
    const uint8_t* HWY_RESTRICT row = static_cast<const uint8_t*>(w.weight) + o * row_bytes;
    float acc[kMaxRows] = {}, mins[kMaxRows] = {};
    for (size_t k = 0; k < blocks; ++k) {
      const uint8_t* HWY_RESTRICT block = row + k * block_bytes;
      Format::Block(block, [&](size_t i, V16 c) { hn::Store(c, d16, codes + i); });
      float dw;
      if constexpr (kIsKQuant<Format>) {
        dw = Format::D(block);
      } else {
        dw = HalfToF32(w.group_scales[o * blocks + k]);
      }
      for (size_t r = 0; r < rows; ++r) {
        const float dx = a.d[r * blocks + k];
        const int32_t sum = BlockSum(codes, a.q + r * in + k * kBlock, kBlock);
        acc[r] += (dw * dx) * static_cast<float>(sum);
        if constexpr (kIsKQuant<Format>) {
          const int32_t m = Format::MinTerm(block, a.sums + r * (in / kSubBlock) + k * 8);
          mins[r] += (dx * Format::Dmin(block)) * static_cast<float>(m);
        }
      }
    }
    for (size_t r = 0; r < rows; ++r) {
      float s = acc[r] - mins[r];
      if (w.bias != nullptr) s += w.bias[o];
      float& yo = y[r * y_stride + o];
      yo = accumulate ? yo + s : s;
    }
  }
}

#if RECUR_ISA_AVX2
// The x86 forms (AVX2 and every AVX-512 target): one activation row against
// one weight row, a block at a time, with ggml's operations: products of
// unsigned codes and signed activations summed in pairs (maddubs; the sign
// trick for q8_0, Σ 8·x subtracted for int4's nibbles, Σ 32·x for Q6_K's
// codes), multiplied by the sub-blocks' scales in pairs (madd), f32 lane by
// lane over blocks. Each returns Σ_b d_b·(…) of dense.h for the row, the
// minimums' term apart (*mins).
namespace x256 = isa::x256;

// The K-quant row forms prefetch the bytes this far ahead of the block they
// read (the next rows' when a row is shorter): the hardware prefetchers stop
// at 4 KiB pages. dense_bench 8192 × 8192 from DRAM on Zen 5 (AVX3_VNNI, the
// other vCPU busy): q4_k blocks 25–29 → 30–34 GB/s, q6_k 13–30 → 26–42 with
// 4 KiB (1 KiB: slower; 2 KiB: no change; 8 and 16 KiB as 4).
inline constexpr size_t kPrefetchAhead = 4096;

// Prefetches the cache lines of [p + kPrefetchAhead, … + kBytes).
template <size_t kBytes>
HWY_INLINE void PrefetchAhead(const uint8_t* p) {
  for (size_t i = 0; i < kBytes; i += 64) hwy::Prefetch(p + kPrefetchAhead + i);
  if (kBytes % 64 != 0) hwy::Prefetch(p + kPrefetchAhead + kBytes - 1);
}

// dd[k] = f32(scales[k])·d[k] for k < blocks: the two scales of each block.
HWY_INLINE void BlockScales(const uint16_t* HWY_RESTRICT scales, const float* HWY_RESTRICT d,
                            size_t blocks, float* HWY_RESTRICT dd) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const size_t N = hn::Lanes(df);
  size_t k = 0;
  for (; k + N <= blocks; k += N) {
    const auto h = hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(scales + k));
    hn::StoreU(hn::Mul(hn::PromoteTo(df, h), hn::LoadU(df, d + k)), df, dd + k);
  }
  // A row of 768 inputs has 24 blocks: 16 and then 8 on AVX-512.
  const hn::CappedTag<float, 8> df8;
  const hn::Rebind<hwy::float16_t, decltype(df8)> dh8;
  for (; k + hn::Lanes(df8) <= blocks; k += hn::Lanes(df8)) {
    const auto h = hn::LoadU(dh8, reinterpret_cast<const hwy::float16_t*>(scales + k));
    hn::StoreU(hn::Mul(hn::PromoteTo(df8, h), hn::LoadU(df8, d + k)), df8, dd + k);
  }
  for (; k < blocks; ++k) dd[k] = HalfToF32(scales[k]) * d[k];
}

// Σ_k dd[k]·Σ (block k's products), two blocks a step on two accumulators;
// Products(k) gives block k's 16 i16 pair sums.
template <class Products>
HWY_INLINE float SumBlocks32(size_t blocks, const float* HWY_RESTRICT dd,
                             const Products& products) {
  x256::VecF acc0 = x256::ZeroF(), acc1 = x256::ZeroF();
  size_t k = 0;
  for (; k + 2 <= blocks; k += 2) {
    acc0 = x256::MulAdd(x256::ToF32(x256::SumPairsI16(products(k))), x256::SetF32(dd[k]), acc0);
    acc1 = x256::MulAdd(x256::ToF32(x256::SumPairsI16(products(k + 1))), x256::SetF32(dd[k + 1]),
                        acc1);
  }
  if (k < blocks) {
    acc0 = x256::MulAdd(x256::ToF32(x256::SumPairsI16(products(k))), x256::SetF32(dd[k]), acc0);
  }
  return x256::SumOfLanes(x256::Add(acc0, acc1));
}

HWY_INLINE float Q8_0Row(const uint8_t* HWY_RESTRICT w, size_t blocks,
                         const int8_t* HWY_RESTRICT q, const float* HWY_RESTRICT dd) {
  return SumBlocks32(blocks, dd, [&](size_t k) {
    const x256::VecI wk = x256::LoadU(w + 32 * k);
    return x256::MulAddPairsU8I8(x256::AbsI8(wk), x256::ApplySign(x256::LoadU(q + 32 * k), wk));
  });
}

HWY_INLINE float I4Row(const uint8_t* HWY_RESTRICT w, size_t blocks, const int8_t* HWY_RESTRICT q,
                       const float* HWY_RESTRICT dd) {
  const x256::VecI eight = x256::SetI8(8);
  return SumBlocks32(blocks, dd, [&](size_t k) {
    const x256::VecI x = x256::LoadU(q + 32 * k);
    return x256::SubI16(x256::MulAddPairsU8I8(x256::LoadNibbles16(w + 16 * k), x),
                        x256::MulAddPairsU8I8(eight, x));
  });
}

HWY_INLINE float Q4KRow(const uint8_t* HWY_RESTRICT w, size_t blocks, const int8_t* HWY_RESTRICT q,
                        const float* HWY_RESTRICT d, const int32_t* HWY_RESTRICT sums,
                        float* mins) {
  constexpr size_t kBytes = Traits(WeightType::kQ4_K).block_bytes;
  x256::VecF acc = x256::ZeroF();
  const x256::VecI low = x256::SetI8(0x0F);
  float m_sum = 0.0f;
  for (size_t k = 0; k < blocks; ++k) {
    const uint8_t* HWY_RESTRICT block = w + k * kBytes;
    PrefetchAhead<kBytes>(block);
    const int8_t* HWY_RESTRICT x = q + k * kKQuantBlock;
    HWY_ALIGN uint8_t codes[16];  // scales [0, 8), minimums [8, 16)
    kquant_detail::UnpackScalesQ4K(block + ref::kQ4KScales, codes);
    const x256::VecI scales = x256::LoadU8x8ToI16Halves(codes);
    x256::VecI sum = x256::ZeroI();
    // Chunk c: 32 bytes, low nibbles sub-block 2c, high ones 2c + 1.
    const auto chunk = [&](auto c, x256::VecI s_lo, x256::VecI s_hi) {
      const x256::VecI b = x256::LoadU(block + ref::kQ4KQs + 32 * c);
      const x256::VecI lo = x256::MulAddPairsU8I8(x256::And(b, low), x256::LoadU(x + 64 * c));
      const x256::VecI hi = x256::MulAddPairsU8I8(x256::And(x256::ShiftRightU16<4>(b), low),
                                                  x256::LoadU(x + 64 * c + 32));
      sum = x256::AddI32(sum, x256::MulAddPairsI16(lo, s_lo));
      sum = x256::AddI32(sum, x256::MulAddPairsI16(hi, s_hi));
    };
    chunk(0, x256::BroadcastI16Lane<0>(scales), x256::BroadcastI16Lane<1>(scales));
    chunk(1, x256::BroadcastI16Lane<2>(scales), x256::BroadcastI16Lane<3>(scales));
    chunk(2, x256::BroadcastI16Lane<4>(scales), x256::BroadcastI16Lane<5>(scales));
    chunk(3, x256::BroadcastI16Lane<6>(scales), x256::BroadcastI16Lane<7>(scales));
    acc = x256::MulAdd(x256::ToF32(sum), x256::SetF32(d[k] * x256::HalfToF32(block)), acc);
    int32_t m = 0;
    for (size_t j = 0; j < 8; ++j) m += codes[8 + j] * sums[8 * k + j];
    m_sum += (d[k] * x256::HalfToF32(block + 2)) * static_cast<float>(m);
  }
  *mins = m_sum;
  return x256::SumOfLanes(acc);
}

HWY_INLINE float Q6KRow(const uint8_t* HWY_RESTRICT w, size_t blocks, const int8_t* HWY_RESTRICT q,
                        const float* HWY_RESTRICT d, float* mins) {
  constexpr size_t kBytes = Traits(WeightType::kQ6_K).block_bytes;
  x256::VecF acc = x256::ZeroF();
  const x256::VecI low = x256::SetI8(0x0F), high = x256::SetI8(0x30), bias = x256::SetI8(32);
  for (size_t k = 0; k < blocks; ++k) {
    const uint8_t* HWY_RESTRICT block = w + k * kBytes;
    PrefetchAhead<kBytes>(block);
    const int8_t* HWY_RESTRICT x = q + k * kKQuantBlock;
    const auto* HWY_RESTRICT sc = reinterpret_cast<const int8_t*>(block + ref::kQ6KScales);
    x256::VecI sum = x256::ZeroI();
    for (size_t h = 0; h < 2; ++h) {
      const x256::VecI a = x256::LoadU(block + 64 * h);
      const x256::VecI b = x256::LoadU(block + 64 * h + 32);
      const x256::VecI c = x256::LoadU(block + ref::kQ6KQh + 32 * h);
      // The 2 high bits of code t: bits 2t, 2t + 1 of c, moved to bits 4-5.
      const x256::VecI codes[4] = {
          x256::Or(x256::And(a, low), x256::And(x256::ShiftLeftU16<4>(c), high)),
          x256::Or(x256::And(b, low), x256::And(x256::ShiftLeftU16<2>(c), high)),
          x256::Or(x256::And(x256::ShiftRightU16<4>(a), low), x256::And(c, high)),
          x256::Or(x256::And(x256::ShiftRightU16<4>(b), low),
                   x256::And(x256::ShiftRightU16<2>(c), high))};
      // Inputs 16 a scale: scales 8h + 2t and 8h + 2t + 1 for the two 128-bit halves.
      const x256::VecI scales = x256::LoadI8x8ToI16Halves(sc + 8 * h);
      const x256::VecI pair_scales[4] = {x256::BroadcastI16Lanes<0, 1>(scales),
                                         x256::BroadcastI16Lanes<2, 3>(scales),
                                         x256::BroadcastI16Lanes<4, 5>(scales),
                                         x256::BroadcastI16Lanes<6, 7>(scales)};
      for (size_t t = 0; t < 4; ++t) {
        const x256::VecI xt = x256::LoadU(x + 128 * h + 32 * t);
        const x256::VecI p = x256::SubI16(x256::MulAddPairsU8I8(codes[t], xt),
                                          x256::MulAddPairsU8I8(bias, xt));
        sum = x256::AddI32(sum, x256::MulAddPairsI16(p, pair_scales[t]));
      }
    }
    acc = x256::MulAdd(x256::ToF32(sum),
                       x256::SetF32(d[k] * x256::HalfToF32(block + ref::kQ6KD)), acc);
  }
  *mins = 0.0f;
  return x256::SumOfLanes(acc);
}

#if RECUR_ISA_AVX3
// 512-bit forms of Q4KRow and Q6KRow for the AVX-512 targets: 64 codes a
// vector, products summed in pairs (maddubs) and by the sub-blocks' scales
// permuted to their lanes (vpermw, madd; vpdpwssd where Avx512VnniEnabled).
// Their activations come prepared once per call (Prepared512).
namespace x512 = isa::x512;

// Per activation row: q4_k's codes in Q4KRow512's order (per block, inputs
// [0,32) [64,96) [32,64) [96,128) [128,160) [192,224) [160,192) [224,256):
// the low and the high nibbles of 64 weight bytes beside their inputs) and
// its sums per 32 as i16; q6_k's sums per 16 as i16 (|Σ| ≤ 32·127).
struct Prepared512 {
  HWY_ALIGN int8_t q[kQBytes];
  int16_t sums[kQBytes / 16];
};

HWY_INLINE void Prepare512(WeightType type, size_t rows, const QuantizedRows& a, size_t in,
                           Prepared512* p) {
  static constexpr size_t kFrom[8] = {0, 64, 32, 96, 128, 192, 160, 224};
  for (size_t r = 0; r < rows; ++r) {
    const int8_t* q = a.q + r * in;
    if (type == WeightType::kQ4_K) {
      for (size_t k = 0; k < in / kKQuantBlock; ++k) {
        for (size_t s = 0; s < 8; ++s) {
          std::memcpy(p->q + r * in + kKQuantBlock * k + 32 * s, q + kKQuantBlock * k + kFrom[s],
                      32);
        }
      }
      for (size_t j = 0; j < in / 32; ++j) {
        p->sums[r * (in / 32) + j] = static_cast<int16_t>(a.sums[r * (in / kSubBlock) + j]);
      }
    } else {
      for (size_t j = 0; j < in / 16; ++j) {
        int32_t sum = 0;
        for (size_t i = 0; i < 16; ++i) sum += q[16 * j + i];
        p->sums[r * (in / 16) + j] = static_cast<int16_t>(sum);
      }
    }
  }
}

// i16 lanes 0..15 = a, 16..31 = b.
HWY_INLINE x512::VecI HalvesI16(int16_t a, int16_t b) {
  return _mm512_mask_set1_epi16(x512::SetI16(a), 0xFFFF0000u, b);
}

// sum + Σ pairs a·b (i16 lanes into i32): one vpdpwssd with VNNI, else
// vpmaddwd and an add (the same sums: no pair reaches the one vpmaddwd wraps).
// dense_bench, 1×4,096² with blocks (AMD Zen 5, three rounds each): q6_k
// 52 → 55.5 GB/s, q4_k 40.6 → 41.4.
template <bool kVnni>
HWY_INLINE x512::VecI AddPairProducts(x512::VecI sum, x512::VecI a, x512::VecI b) {
  if constexpr (kVnni) {
    return x512::DotI16Accumulate(sum, a, b);
  } else {
    return x512::AddI32(sum, x512::MulAddPairsI16(a, b));
  }
}

// Q8_0Row on AVX-512 with VNNI, its sum as lanes still to be added (one
// horizontal sum, or Q8_0Rows512's tree for 16 rows): two blocks a vector,
// |w| against x with w's signs summed by vpdpbusd into 8 i32 lanes a block,
// each lane's sum times its block's scale (lanes 0-7 dd[k], 8-15 dd[k + 1]),
// so no block needs a horizontal sum; an odd last block with the upper half
// masked off. The codes are prefetched into L2 (isa::PrefetchOnce) as the
// GEMM's single rows prefetch theirs (blockq_gemm::kStreamAhead), a line (two
// blocks) at a time.
HWY_INLINE x512::VecF Q8_0Row512(const uint8_t* HWY_RESTRICT w, size_t blocks,
                                 const int8_t* HWY_RESTRICT q, const float* HWY_RESTRICT dd) {
  constexpr size_t kAhead = blockq_gemm::kStreamAhead;
  const x512::VecI halves = x512::SetI32Halves(0, 1);  // lane j: block j / 8 of the pair
  // acc + each lane's block sum times its block's scale; scales: 3 for a pair, 1 for a last
  // block alone (its upper lanes' sums are 0, their scale 0 rather than past dd's end).
  const auto pair = [&](x512::VecF acc, const x512::VecI wk, const x512::VecI xk, const float* d2,
                        x512::Mask16 scales) HWY_ATTR {
    const x512::VecI s = x512::DotU8I8Accumulate(x512::ZeroI(), x512::AbsI8(wk),
                                                 x512::NegateWhere(x512::NegativeLanes(wk), xk));
    const x512::VecF scale = x512::PermuteLanes(halves, x512::LoadMasked(scales, d2));
    return x512::MulAdd(x512::ToF32(s), scale, acc);
  };
  x512::VecF acc0 = x512::ZeroF(), acc1 = x512::ZeroF();
  size_t k = 0;
  for (; k + 4 <= blocks; k += 4) {
    isa::PrefetchOnce(w + 32 * k + kAhead);
    isa::PrefetchOnce(w + 32 * k + 64 + kAhead);
    acc0 = pair(acc0, x512::LoadU(w + 32 * k), x512::LoadU(q + 32 * k), dd + k, 3);
    acc1 = pair(acc1, x512::LoadU(w + 32 * k + 64), x512::LoadU(q + 32 * k + 64), dd + k + 2, 3);
  }
  for (; k < blocks; k += 2) {
    const bool two = blocks - k >= 2;
    const x512::Mask64 m = x512::MaskFromBits(two ? ~uint64_t{0} : 0xFFFFFFFFu);
    acc0 = pair(acc0, x512::LoadMaskedI8(m, w + 32 * k), x512::LoadMaskedI8(m, q + 32 * k), dd + k,
                two ? 3 : 1);
  }
  return x512::Add(acc0, acc1);
}

// The widest q8_0 rows (inputs) that X86Rows runs through Q8_0Rows512: a
// horizontal sum a row costs most on short rows. dense_bench rows from DRAM
// (Zen 4, AVX3_VNNI, three rounds): 768 -> 65,536 25.6-25.9 -> 30.2-30.5 GB/s;
// 1,024 inputs level there, but RWKV-7 0.4B Q8_0 steps (1,024) 3% slower in
// six alternating rounds; 2,048 and more 3-5% slower.
inline constexpr size_t kQ8_0RowsTogetherMaxIn = 768;

// X86Rows' q8_0 rows for one activation row on AVX-512 with VNNI: the rows in
// order, 16 rows' lanes summed together by one tree (LaneSumsOf16) rather than
// a horizontal sum a row, then bias and y added as X86Rows adds them.
HWY_INLINE void Q8_0Rows512(const QuantizedRows& a, const DenseWeights& w, size_t blocks,
                            float* HWY_RESTRICT y, bool accumulate) {
  const size_t row_bytes = WeightRowBytes(w.type, w.in);
  HWY_ALIGN float dd[kQBytes / 32];
  x512::VecF lanes[16];
  for (size_t o0 = 0; o0 < w.out; o0 += 16) {
    const size_t n = std::min<size_t>(16, w.out - o0);
    for (size_t i = 0; i < 16; ++i) {
      lanes[i] = x512::ZeroF();
      if (i >= n) continue;
      const size_t o = o0 + i;
      BlockScales(w.group_scales + o * blocks, a.d, blocks, dd);
      lanes[i] = Q8_0Row512(static_cast<const uint8_t*>(w.weight) + o * row_bytes, blocks, a.q, dd);
    }
    const x512::Mask16 m = static_cast<x512::Mask16>((uint32_t{1} << n) - 1);
    x512::VecF s = x512::LaneSumsOf16(lanes);
    if (w.bias != nullptr) s = x512::Add(s, x512::LoadMasked(m, w.bias + o0));
    if (accumulate) s = x512::Add(x512::LoadMasked(m, y + o0), s);
    x512::StoreMasked(y + o0, m, s);
  }
}

template <bool kVnni>
HWY_INLINE float Q4KRow512(const uint8_t* HWY_RESTRICT w, size_t blocks,
                           const int8_t* HWY_RESTRICT xo, const float* HWY_RESTRICT d,
                           const int16_t* HWY_RESTRICT sums, float* mins) {
  constexpr size_t kBytes = Traits(WeightType::kQ4_K).block_bytes;
  const x512::VecI low = x512::SetI8(0x0F);
  // Sub-blocks (0, 2), (1, 3), (4, 6), (5, 7) for the halves of the 4 code vectors.
  const x512::VecI idx[4] = {HalvesI16(0, 2), HalvesI16(1, 3), HalvesI16(4, 6), HalvesI16(5, 7)};
  x512::VecF acc = x512::ZeroF(), m_acc = x512::ZeroF();
  for (size_t k = 0; k < blocks; ++k) {
    const uint8_t* HWY_RESTRICT block = w + k * kBytes;
    PrefetchAhead<kBytes>(block);
    const int8_t* HWY_RESTRICT x = xo + k * kKQuantBlock;
    HWY_ALIGN uint8_t codes[16];  // scales [0, 8), minimums [8, 16)
    kquant_detail::UnpackScalesQ4K(block + ref::kQ4KScales, codes);
    const x512::VecI scales = x512::LoadU8x8ToI16(codes);
    x512::VecI sum = x512::ZeroI();
    for (size_t h = 0; h < 2; ++h) {
      const x512::VecI b = x512::LoadU(block + ref::kQ4KQs + 64 * h);
      const x512::VecI lo = x512::MulAddPairsU8I8(x512::And(b, low), x512::LoadU(x + 128 * h));
      const x512::VecI hi = x512::MulAddPairsU8I8(x512::And(x512::ShiftRightU16<4>(b), low),
                                                  x512::LoadU(x + 128 * h + 64));
      sum = AddPairProducts<kVnni>(sum, lo, x512::PermuteI16(idx[2 * h], scales));
      sum = AddPairProducts<kVnni>(sum, hi, x512::PermuteI16(idx[2 * h + 1], scales));
    }
    acc = x512::MulAdd(x512::ToF32(sum), x512::SetF32(d[k] * x256::HalfToF32(block)), acc);
    // Σ_j m_j·Σ_{i in j} x_i in lanes 0..3 (the others zero), as ggml's acc_m.
    const x512::VecI m = x512::MulAddPairsI16(x512::LoadU8x8ToI16(codes + 8),
                                              x512::LoadLower16(sums + 8 * k));
    m_acc = x512::MulAdd(x512::ToF32(m), x512::SetF32(d[k] * x256::HalfToF32(block + 2)),
                         m_acc);
  }
  *mins = x512::SumOfLanes(m_acc);
  return x512::SumOfLanes(acc);
}

template <bool kVnni>
HWY_INLINE float Q6KRow512(const uint8_t* HWY_RESTRICT w, size_t blocks,
                           const int8_t* HWY_RESTRICT q, const float* HWY_RESTRICT d,
                           const int16_t* HWY_RESTRICT sums) {
  constexpr size_t kBytes = Traits(WeightType::kQ6_K).block_bytes;
  const x512::VecI low = x512::SetI8(0x0F);
  // Code vector e of half h holds inputs 128h + 64e + [0, 64): lane l of its
  // pair sums takes scale 8h + 4e + l / 8.
  x512::VecI idx[4];
  for (size_t e = 0; e < 4; ++e) {
    HWY_ALIGN int16_t lanes[32];
    for (size_t l = 0; l < 32; ++l) lanes[l] = static_cast<int16_t>(4 * e + l / 8);
    idx[e] = x512::LoadU(lanes);
  }
  x512::VecF acc = x512::ZeroF();
  const x512::VecI minus32 = x512::SetI16(-32);
  // The high 2 bits of e0's (e1's) codes: the 32 qh bytes' bits 0-1 (4-5)
  // in the lower 256 bits, bits 2-3 (6-7) in the upper, moved to bits 4-5.
  const x512::VecI high = x512::SetI8(0x30), e0_shifts = HalvesI16(4, 2),
                   e1_shifts = HalvesI16(0, 2);
  for (size_t k = 0; k < blocks; ++k) {
    const uint8_t* HWY_RESTRICT block = w + k * kBytes;
    PrefetchAhead<kBytes>(block);
    const int8_t* HWY_RESTRICT x = q + k * kKQuantBlock;
    const x512::VecI scales =
        x512::LoadI8x16ToI16(reinterpret_cast<const int8_t*>(block + ref::kQ6KScales));
    // Σ_j sc_j·(Σ q·x − 32·Σ x) over the block's 16 sub-blocks of 16.
    x512::VecI sum = x512::MulAddPairsI16(x512::MulLoI16(scales, minus32),
                                          x512::LoadLower32(sums + 16 * k));
    for (size_t h = 0; h < 2; ++h) {
      const x512::VecI ql = x512::LoadU(block + 64 * h);
      const x512::VecI qh = x512::LoadBroadcast256(block + ref::kQ6KQh + 32 * h);
      const x512::VecI e0 =
          x512::Or(x512::And(ql, low), x512::And(x512::ShiftLeftU16By(qh, e0_shifts), high));
      const x512::VecI e1 = x512::Or(x512::And(x512::ShiftRightU16<4>(ql), low),
                                     x512::And(x512::ShiftRightU16By(qh, e1_shifts), high));
      sum = AddPairProducts<kVnni>(sum, x512::MulAddPairsU8I8(e0, x512::LoadU(x + 128 * h)),
                                   x512::PermuteI16(idx[2 * h], scales));
      sum = AddPairProducts<kVnni>(sum, x512::MulAddPairsU8I8(e1, x512::LoadU(x + 128 * h + 64)),
                                   x512::PermuteI16(idx[2 * h + 1], scales));
    }
    acc = x512::MulAdd(x512::ToF32(sum),
                       x512::SetF32(d[k] * x256::HalfToF32(block + ref::kQ6KD)), acc);
  }
  return x512::SumOfLanes(acc);
}
#endif  // RECUR_ISA_AVX3

// The rows of `a` against every weight row with the forms above; false for
// a type they do not cover (Q5_K), which the portable Rows then runs.
HWY_INLINE bool X86Rows(size_t rows, const QuantizedRows& a, const DenseWeights& w,
                        float* HWY_RESTRICT y, size_t y_stride, bool accumulate) {
  const size_t in = w.in, row_bytes = WeightRowBytes(w.type, in);
  const size_t blocks = in / (IsKQuant(w.type) ? kKQuantBlock : 32);
  switch (w.type) {
    case WeightType::kQ8_0:
    case WeightType::kI4:
    case WeightType::kQ4_K:
    case WeightType::kQ6_K:
      break;
    default:
      return false;
  }
  HWY_ALIGN float dd[kQBytes / 32];
#if RECUR_ISA_AVX3
  const bool wide = w.type == WeightType::kQ4_K || w.type == WeightType::kQ6_K;
  const bool vnni = Avx512VnniEnabled();
  if (w.type == WeightType::kQ8_0 && vnni && rows == 1 && in <= kQ8_0RowsTogetherMaxIn) {
    Q8_0Rows512(a, w, blocks, y, accumulate);
    return true;
  }
  Prepared512 prepared;
  if (wide) Prepare512(w.type, rows, a, in, &prepared);
#endif
  for (size_t o = 0; o < w.out; ++o) {
    const uint8_t* HWY_RESTRICT row = static_cast<const uint8_t*>(w.weight) + o * row_bytes;
    for (size_t r = 0; r < rows; ++r) {
      const int8_t* q = a.q + r * in;
      const float* d = a.d + r * blocks;
      if (w.group_scales != nullptr) BlockScales(w.group_scales + o * blocks, d, blocks, dd);
      float mins = 0.0f, s = 0.0f;
#if RECUR_ISA_AVX3
      if (w.type == WeightType::kQ8_0 && vnni) {
        s = x512::SumOfLanes(Q8_0Row512(row, blocks, q, dd));
        if (w.bias != nullptr) s += w.bias[o];
        float& yo = y[r * y_stride + o];
        yo = accumulate ? yo + s : s;
        continue;
      }
      if (wide) {
        const int16_t* sums = prepared.sums + r * (in / (w.type == WeightType::kQ4_K ? 32 : 16));
        if (w.type == WeightType::kQ4_K) {
          s = vnni ? Q4KRow512<true>(row, blocks, prepared.q + r * in, d, sums, &mins)
                   : Q4KRow512<false>(row, blocks, prepared.q + r * in, d, sums, &mins);
        } else {
          s = vnni ? Q6KRow512<true>(row, blocks, q, d, sums) : Q6KRow512<false>(row, blocks, q, d, sums);
        }
        s -= mins;
        if (w.bias != nullptr) s += w.bias[o];
        float& yo = y[r * y_stride + o];
        yo = accumulate ? yo + s : s;
        continue;
      }
#endif
      switch (w.type) {
        case WeightType::kQ8_0: s = Q8_0Row(row, blocks, q, dd); break;
        case WeightType::kI4: s = I4Row(row, blocks, q, dd); break;
        case WeightType::kQ4_K:
          s = Q4KRow(row, blocks, q, d, a.sums + r * (in / kSubBlock), &mins);
          break;
        default: s = Q6KRow(row, blocks, q, d, &mins); break;
      }
      s -= mins;
      if (w.bias != nullptr) s += w.bias[o];
      float& yo = y[r * y_stride + o];
      yo = accumulate ? yo + s : s;
    }
  }
  return true;
}
#endif  // RECUR_ISA_AVX2

}  // namespace blockq_detail

#if RECUR_ISA_AVX3
// blockq_gemm::Run on rows rounded to Q8_K blocks (Q8_0 blocks for q8_0;
// the tiles' records from `packed`, or packed per call where that is null).
HWY_INLINE bool BlockQ8Gemm(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                            const uint8_t* packed, size_t tile_begin, size_t tile_end, float* y,
                            size_t y_stride, bool accumulate) {
  namespace bd = blockq_detail;
  const size_t in = w.in;
  if (ActivationBlocksOf(w.type, w.group) == ActivationBlocks::kQ8_0) {
    const auto quantize_q8_0 = [in](const float* xr, int8_t* q, float* d) {
      bd::QuantizeQ8_0(xr, in, q, d);
    };
    return blockq_gemm::Run(x, x_stride, batch, w, y, y_stride, accumulate, quantize_q8_0, packed,
                            tile_begin, tile_end);
  }
  const auto quantize_q8_k = [in](const float* xr, int8_t* q, float* d) {
    int32_t sums[bd::kQBytes / bd::kSubBlock];
    bd::QuantizeQ8_K(xr, in, q, d, sums);
  };
  return blockq_gemm::Run(x, x_stride, batch, w, y, y_stride, accumulate, quantize_q8_k, packed,
                          tile_begin, tile_end);
}
#endif

HWY_INLINE void BlockQ8Dense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                             float* y, size_t y_stride, bool accumulate) {
  namespace bd = blockq_detail;
  const ActivationBlocks kind = ActivationBlocksOf(w.type, w.group);
  const size_t in = w.in;
#if RECUR_ISA_AVX3
  if (BlockQ8Gemm(x, x_stride, batch, w, nullptr, 0, blockq_gemm::Tiles(w.out), y, y_stride,
                  accumulate)) {
    return;
  }
#endif
  const size_t chunk = std::min(bd::kMaxRows, bd::kQBytes / std::max<size_t>(in, 1));
  bd::QuantizedRows a;
  for (size_t b0 = 0; b0 < batch; b0 += chunk) {
    const size_t rows = std::min(chunk, batch - b0);
    for (size_t r = 0; r < rows; ++r) {
      const float* xr = x + (b0 + r) * x_stride;
      if (kind == ActivationBlocks::kQ8_0) {
        bd::QuantizeQ8_0(xr, in, a.q + r * in, a.d + r * (in / 32));
      } else {
        bd::QuantizeQ8_K(xr, in, a.q + r * in, a.d + r * (in / kKQuantBlock),
                         a.sums + r * (in / bd::kSubBlock));
      }
    }
    float* yb = y + b0 * y_stride;
#if RECUR_ISA_AVX2
    if (bd::X86Rows(rows, a, w, yb, y_stride, accumulate)) continue;
#endif
    switch (w.type) {
      case WeightType::kQ8_0:
        bd::Rows<bd::Q8_0Format>(rows, a, w, yb, y_stride, accumulate);
        break;
      case WeightType::kI4:
        bd::Rows<bd::I4Format>(rows, a, w, yb, y_stride, accumulate);
        break;
      case WeightType::kQ4_K:
        bd::Rows<bd::Q4Or5KFormat<false>>(rows, a, w, yb, y_stride, accumulate);
        break;
      case WeightType::kQ5_K:
        bd::Rows<bd::Q4Or5KFormat<true>>(rows, a, w, yb, y_stride, accumulate);
        break;
      case WeightType::kQ6_K:
        bd::Rows<bd::Q6KFormat>(rows, a, w, yb, y_stride, accumulate);
        break;
      default:
        break;
    }
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_BLOCKQ_INL_H_ toggle
