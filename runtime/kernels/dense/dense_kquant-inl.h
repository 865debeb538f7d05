// Per-target Dense for K-quant weights (kQ4_K, kQ6_K, kQ5_K; dense.h,
// DenseKQuant):
// ggml's blocks as the file stores them, 256 inputs a block, activations,
// sums and outputs f32.
//
// Every weight is decoded to exactly the f32 value of ggml's
// dequantize_row_* (the scalar spec, ref::KQuantValue): a block's codes are
// widened to i32 lanes (N bytes loaded and zero-extended), masked and
// shifted into q, converted to f32 (exact) and scaled in one multiply-add,
// q·f32(d·sc) − f32(dmin·m) for Q4_K and Q5_K (the product is exact, so the
// one rounding is the subtraction's, as in ggml) and q·f32(d·scale) −
// 32·f32(d·scale) for Q6_K (exact). Vectors are at most 16 lanes, so that
// one sub-block's inputs (32 for Q4_K and Q5_K, 16 for Q6_K) are whole vectors with
// one scale.
//
// Small batches (batch ≤ kMaxB, in particular batch 1, which is
// memory-bound): one weight row at a time, each block read once and its
// decoded vectors multiplied into every activation row's accumulators (two
// chains per row, four for one row). Larger batches: a chunk of weight rows
// at a time is decoded into the f32 widening scratch and the f32 kernels run
// on it (WidenedDense, dense_lowp-inl.h); without scratch, and on targets
// with scalable vectors (which cannot be array elements), a row's blocks are
// decoded kDecodeBlocks at a time into a stack buffer and multiplied with
// every activation row.
#if defined(RECUR_KERNELS_DENSE_DENSE_KQUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_KQUANT_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_KQUANT_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_KQUANT_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_lowp-inl.h"
#include "kernels/dense/dense_ref.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace kquant_detail {

// Vectors of at most 16 f32 lanes: whole sub-blocks.
using DF = hn::CappedTag<float, 16>;
template <size_t k>
using Slot = std::integral_constant<size_t, k>;

// How far ahead of the block it decodes FusedRows prefetches the weights.
inline constexpr size_t kPrefetchBytes = 8192;

// Blocks decoded per pass by DecodedRows.
inline constexpr size_t kDecodeBlocks = 2;

// Little-endian half bits at p as f32, as ref::HalfAt but without its
// ldexp (every half is an f32: normals rebias the exponent, subnormals are
// mantissa·2^-24 exactly).
HWY_INLINE float HalfAt(const uint8_t* p) {
  const uint32_t h = static_cast<uint32_t>(p[0] | p[1] << 8);
  const uint32_t sign = (h & 0x8000u) << 16, magnitude = h & 0x7FFFu;
  uint32_t bits;
  if (magnitude < 0x400u) {  // ±0, subnormal
    const float m = static_cast<float>(magnitude) * (1.0f / 16777216.0f);
    hwy::CopySameSize(&m, &bits);
  } else if (magnitude >= 0x7C00u) {  // Inf, NaN
    bits = 0x7F800000u | (magnitude & 0x3FFu) << 13;
  } else {
    bits = (magnitude << 13) + 0x38000000u;
  }
  bits |= sign;
  float f;
  hwy::CopySameSize(&bits, &f);
  return f;
}

// The 6-bit scales and mins of a Q4_K block's 12 scale bytes (ggml's
// get_scale_min_k4 for j = 0..7) into codes[0, 8) and codes[8, 16), four at a
// time in 32-bit words, as ggml's x86 dot products unpack them.
HWY_INLINE void UnpackScalesQ4K(const uint8_t* HWY_RESTRICT s, uint8_t* HWY_RESTRICT codes) {
  auto word = [s](size_t k) {
    return static_cast<uint32_t>(s[4 * k]) | static_cast<uint32_t>(s[4 * k + 1]) << 8 |
           static_cast<uint32_t>(s[4 * k + 2]) << 16 | static_cast<uint32_t>(s[4 * k + 3]) << 24;
  };
  constexpr uint32_t k6 = 0x3F3F3F3Fu, k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
  const uint32_t a = word(0), b = word(1), c = word(2);
  const uint32_t out[4] = {a & k6,                                   // sc[0..3]
                           (c & k4) | ((a >> 6) & k2) << 4,          // sc[4..7]
                           b & k6,                                   // m[0..3]
                           ((c >> 4) & k4) | ((b >> 6) & k2) << 4};  // m[4..7]
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  // Two 8-byte stores, so that the 8-byte loads of the codes that follow are
  // forwarded from them (bytes stored one by one stall those loads).
  const uint64_t lo = out[0] | uint64_t{out[1]} << 32, hi = out[2] | uint64_t{out[3]} << 32;
  hwy::CopyBytes<8>(&lo, codes);
  hwy::CopyBytes<8>(&hi, codes + 8);
#else
  for (size_t k = 0; k < 16; ++k) codes[k] = static_cast<uint8_t>(out[k / 4] >> (8 * (k % 4)));
#endif
}

// Each Format visits the 256 decoded weights of one block as vectors:
// visit(i, w, Slot<s>()) for the weights [i, i + Lanes) of the block, s < 4
// a compile-time tag that spreads consecutive vectors over accumulators.

// ggml's block_q4_K (d, dmin, 12 scale bytes, 128 bytes of nibbles) and,
// kFifth, block_q5_K (the same with 32 bytes of fifth bits before the
// nibbles).
template <bool kFifth>
struct Q4Or5K {
  static constexpr WeightType kType = kFifth ? WeightType::kQ5_K : WeightType::kQ4_K;

  template <class D, class Visit>
  static HWY_INLINE void Block(D d, const uint8_t* HWY_RESTRICT block, const Visit& visit) {
    const hn::RebindToUnsigned<D> du;
    const hn::RebindToSigned<D> di;
    const hn::Rebind<uint8_t, D> d8;
    const size_t N = hn::Lanes(d);
    const auto nibble = hn::Set(du, 0xFu), bit4 = hn::Set(du, 0x10u);
    const uint8_t* HWY_RESTRICT q = block + (kFifth ? ref::kQ5KQs : ref::kQ4KQs);
    [[maybe_unused]] const uint8_t* HWY_RESTRICT qh = block + ref::kQ5KQh;
    // The sub-blocks' f32(d·sc) and −f32(dmin·m) (exact products).
    HWY_ALIGN uint8_t codes[16];
    UnpackScalesQ4K(block + ref::kQ4KScales, codes);
    HWY_ALIGN float sc[8], mn[8];
    const hn::CappedTag<float, 8> ds;
    const hn::Rebind<uint8_t, decltype(ds)> ds8;
    const hn::RebindToSigned<decltype(ds)> dsi;
    const auto dd = hn::Set(ds, HalfAt(block)), ndmin = hn::Set(ds, -HalfAt(block + 2));
    for (size_t j = 0; j < 8; j += hn::Lanes(ds)) {
      const auto s8 = hn::ConvertTo(ds, hn::PromoteTo(dsi, hn::LoadU(ds8, codes + j)));
      const auto m8 = hn::ConvertTo(ds, hn::PromoteTo(dsi, hn::LoadU(ds8, codes + 8 + j)));
      hn::Store(hn::Mul(s8, dd), ds, sc + j);
      hn::Store(hn::Mul(m8, ndmin), ds, mn + j);
    }
    for (size_t c = 0; c < 4; ++c, q += 32) {
      const auto s1 = hn::Set(d, sc[2 * c]), n1 = hn::Set(d, mn[2 * c]);
      const auto s2 = hn::Set(d, sc[2 * c + 1]), n2 = hn::Set(d, mn[2 * c + 1]);
      // Two vectors a step (N ≤ 16): tags 0, 1 for the first, 2, 3 for the second.
      for (size_t l = 0; l < 32; l += 2 * N) {
        const auto a = hn::PromoteTo(du, hn::LoadU(d8, q + l));
        const auto b = hn::PromoteTo(du, hn::LoadU(d8, q + l + N));
        auto alo = hn::And(a, nibble), ahi = hn::ShiftRight<4>(a);
        auto blo = hn::And(b, nibble), bhi = hn::ShiftRight<4>(b);
        if constexpr (kFifth) {
          // Bits 2c (low nibbles) and 2c + 1 (high) of qh[l] as 16s.
          const int shift = static_cast<int>(2 * c);
          const auto ha = hn::ShiftRightSame(hn::PromoteTo(du, hn::LoadU(d8, qh + l)), shift);
          const auto hb = hn::ShiftRightSame(hn::PromoteTo(du, hn::LoadU(d8, qh + l + N)), shift);
          alo = hn::Or(alo, hn::And(hn::ShiftLeft<4>(ha), bit4));
          ahi = hn::Or(ahi, hn::And(hn::ShiftLeft<3>(ha), bit4));
          blo = hn::Or(blo, hn::And(hn::ShiftLeft<4>(hb), bit4));
          bhi = hn::Or(bhi, hn::And(hn::ShiftLeft<3>(hb), bit4));
        }
        visit(64 * c + l, hn::MulAdd(hn::ConvertTo(d, hn::BitCast(di, alo)), s1, n1), Slot<0>());
        visit(64 * c + 32 + l, hn::MulAdd(hn::ConvertTo(d, hn::BitCast(di, ahi)), s2, n2),
              Slot<1>());
        visit(64 * c + l + N, hn::MulAdd(hn::ConvertTo(d, hn::BitCast(di, blo)), s1, n1),
              Slot<2>());
        visit(64 * c + 32 + l + N, hn::MulAdd(hn::ConvertTo(d, hn::BitCast(di, bhi)), s2, n2),
              Slot<3>());
      }
    }
  }
};
using Q4K = Q4Or5K<false>;
using Q5K = Q4Or5K<true>;

// ggml's block_q6_K: ql[128], qh[64], 16 int8 scales, d.
struct Q6K {
  static constexpr WeightType kType = WeightType::kQ6_K;

  template <class D, class Visit>
  static HWY_INLINE void Block(D d, const uint8_t* HWY_RESTRICT block, const Visit& visit) {
    const hn::RebindToUnsigned<D> du;
    const hn::RebindToSigned<D> di;
    const hn::Rebind<uint8_t, D> d8;
    const size_t N = hn::Lanes(d);
    const auto low = hn::Set(du, 0xFu), high = hn::Set(du, 0x30u);
    // f32(d·scale) and −32 times it for the 16 scales.
    const float dd = HalfAt(block + ref::kQ6KD);
    const auto* sc = reinterpret_cast<const int8_t*>(block + ref::kQ6KScales);
    HWY_ALIGN float s[16], n[16];
    for (size_t k = 0; k < 16; ++k) {
      s[k] = dd * static_cast<float>(sc[k]);
      n[k] = -32.0f * s[k];
    }
    for (size_t h = 0; h < 2; ++h) {
      const uint8_t* HWY_RESTRICT ql = block + 64 * h;
      const uint8_t* HWY_RESTRICT qh = block + ref::kQ6KQh + 32 * h;
      for (size_t l = 0; l < 32; l += N) {
        const size_t is = 8 * h + l / 16;  // scales of inputs l, +32, +64, +96: is, +2, +4, +6
        const auto a = hn::PromoteTo(du, hn::LoadU(d8, ql + l));
        const auto b = hn::PromoteTo(du, hn::LoadU(d8, ql + 32 + l));
        const auto c = hn::PromoteTo(du, hn::LoadU(d8, qh + l));
        const auto q1 = hn::Or(hn::And(a, low), hn::And(hn::ShiftLeft<4>(c), high));
        const auto q2 = hn::Or(hn::And(b, low), hn::And(hn::ShiftLeft<2>(c), high));
        const auto q3 = hn::Or(hn::ShiftRight<4>(a), hn::And(c, high));
        const auto q4 = hn::Or(hn::ShiftRight<4>(b), hn::And(hn::ShiftRight<2>(c), high));
        const size_t i = 128 * h + l;
        visit(
            i,
            hn::MulAdd(hn::ConvertTo(d, hn::BitCast(di, q1)), hn::Set(d, s[is]), hn::Set(d, n[is])),
            Slot<0>());
        visit(i + 32,
              hn::MulAdd(hn::ConvertTo(d, hn::BitCast(di, q2)), hn::Set(d, s[is + 2]),
                         hn::Set(d, n[is + 2])),
              Slot<1>());
        visit(i + 64,
              hn::MulAdd(hn::ConvertTo(d, hn::BitCast(di, q3)), hn::Set(d, s[is + 4]),
                         hn::Set(d, n[is + 4])),
              Slot<2>());
        visit(i + 96,
              hn::MulAdd(hn::ConvertTo(d, hn::BitCast(di, q4)), hn::Set(d, s[is + 6]),
                         hn::Set(d, n[is + 6])),
              Slot<3>());
      }
    }
  }
};

// The block format of K-quant type kType (Q4K, Q6K or Q5K above).
template <WeightType kType>
struct FormatOf;
template <>
struct FormatOf<WeightType::kQ4_K> {
  using type = Q4K;
};
template <>
struct FormatOf<WeightType::kQ6_K> {
  using type = Q6K;
};
template <>
struct FormatOf<WeightType::kQ5_K> {
  using type = Q5K;
};

// The decoded weights of `blocks` consecutive blocks into dst (256 floats a
// block).
template <class Fmt>
HWY_INLINE void DecodeBlocks(const uint8_t* HWY_RESTRICT src, size_t blocks,
                             float* HWY_RESTRICT dst) {
  const DF d;
  constexpr size_t kBytes = Traits(Fmt::kType).block_bytes;
  for (size_t k = 0; k < blocks; ++k) {
    float* HWY_RESTRICT out = dst + k * kKQuantBlock;
    Fmt::Block(d, src + k * kBytes,
               [&](size_t i, hn::Vec<DF> w, auto) HWY_ATTR { hn::StoreU(w, d, out + i); });
  }
}

// y (+)= bias + sum, in Dense's order.
HWY_INLINE void Finish(float sum, const float* bias, float* y, bool accumulate) {
  float s = sum;
  if (bias != nullptr) s += *bias;
  *y = accumulate ? *y + s : s;
}

// Weight rows [o_begin, o_end) against activation rows [0, batch), a row's
// blocks decoded kDecodeBlocks at a time into a stack buffer and multiplied
// with every activation row (two f32 chains, summed per pass).
template <class Fmt>
HWY_NOINLINE void DecodedRows(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                              size_t o_begin, size_t o_end, float* y, size_t y_stride,
                              bool accumulate) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t blocks = w.in / kKQuantBlock;
  const size_t row_bytes = WeightRowBytes(Fmt::kType, w.in);
  constexpr size_t kBytes = Traits(Fmt::kType).block_bytes;
  const auto* wb = static_cast<const uint8_t*>(w.weight);
  HWY_ALIGN float wd[kDecodeBlocks * kKQuantBlock];
  constexpr size_t kRows = 64;  // activation rows per pass
  float sums[kRows];
  for (size_t b0 = 0; b0 < batch; b0 += kRows) {
    const size_t nb = std::min(kRows, batch - b0);
    for (size_t o = o_begin; o < o_end; ++o) {
      const uint8_t* row = wb + o * row_bytes;
      std::fill(sums, sums + nb, 0.0f);
      for (size_t k0 = 0; k0 < blocks; k0 += kDecodeBlocks) {
        const size_t nk = std::min(kDecodeBlocks, blocks - k0), n = nk * kKQuantBlock;
        DecodeBlocks<Fmt>(row + k0 * kBytes, nk, wd);
        for (size_t b = 0; b < nb; ++b) {
          const float* xb = x + (b0 + b) * x_stride + k0 * kKQuantBlock;
          auto a0 = hn::Zero(d), a1 = hn::Zero(d);
          for (size_t i = 0; i < n; i += 2 * N) {  // n is a multiple of 256 ≥ 2N
            a0 = hn::MulAdd(hn::LoadU(d, xb + i), hn::Load(d, wd + i), a0);
            a1 = hn::MulAdd(hn::LoadU(d, xb + i + N), hn::Load(d, wd + i + N), a1);
          }
          sums[b] += hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
        }
      }
      for (size_t b = 0; b < nb; ++b) {
        Finish(sums[b], w.bias ? w.bias + o : nullptr, y + (b0 + b) * y_stride + o, accumulate);
      }
    }
  }
}

#if !HWY_HAVE_SCALABLE
// Weight rows [o_begin, o_end) against kB activation rows: each block read
// once, each decoded vector multiplied into every row's accumulators (four
// chains for one row, two a row for more).
template <class Fmt, size_t kB>
HWY_NOINLINE void FusedRows(const float* x, size_t x_stride, const DenseWeights& w, size_t o_begin,
                            size_t o_end, float* y, size_t y_stride, bool accumulate) {
  using V = hn::Vec<DF>;
  const DF d;
  constexpr size_t kChains = kB == 1 ? 4 : 2;
  const size_t blocks = w.in / kKQuantBlock;
  const size_t row_bytes = WeightRowBytes(Fmt::kType, w.in);
  constexpr size_t kBytes = Traits(Fmt::kType).block_bytes;
  const auto* wb = static_cast<const uint8_t*>(w.weight);
  for (size_t o = o_begin; o < o_end; ++o) {
    const uint8_t* row = wb + o * row_bytes;
    V acc[kB][kChains];
    for (size_t b = 0; b < kB; ++b) {
      for (size_t c = 0; c < kChains; ++c) acc[b][c] = hn::Zero(d);
    }
    for (size_t k = 0; k < blocks; ++k) {
      const float* xk = x + k * kKQuantBlock;
      // The weights kPrefetchBytes ahead (the next rows' past the row's end):
      // a block's worth of lines per block.
      const uint8_t* ahead = row + k * kBytes + kPrefetchBytes;
      for (size_t line = 0; line < kBytes; line += 64) hwy::Prefetch(ahead + line);
      Fmt::Block(d, row + k * kBytes, [&](size_t i, V wv, auto slot) HWY_ATTR {
        constexpr size_t c = decltype(slot)::value % kChains;
        for (size_t b = 0; b < kB; ++b) {
          acc[b][c] = hn::MulAdd(hn::LoadU(d, xk + b * x_stride + i), wv, acc[b][c]);
        }
      });
    }
    for (size_t b = 0; b < kB; ++b) {
      V sum = acc[b][0];
      for (size_t c = 1; c < kChains; ++c) sum = hn::Add(sum, acc[b][c]);
      Finish(hn::GetLane(hn::SumOfLanes(d, sum)), w.bias ? w.bias + o : nullptr,
             y + b * y_stride + o, accumulate);
    }
  }
}

// FusedRows for nb ≤ kB rows.
template <class Fmt, size_t kB>
HWY_INLINE void FusedRowsN(size_t nb, const float* x, size_t x_stride, const DenseWeights& w,
                           float* y, size_t y_stride, bool accumulate) {
  if constexpr (kB >= 1) {
    if (nb == kB) return FusedRows<Fmt, kB>(x, x_stride, w, 0, w.out, y, y_stride, accumulate);
    if constexpr (kB > 1) FusedRowsN<Fmt, kB - 1>(nb, x, x_stride, w, y, y_stride, accumulate);
  }
}
#endif  // !HWY_HAVE_SCALABLE

// See dense.h (DenseKQuant); w is of Fmt's type.
template <class Fmt>
HWY_INLINE void KQuantDense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                            float* y, size_t y_stride, bool accumulate) {
  namespace dd = dense_detail;
  if (batch == 0 || w.out == 0) return;
  const size_t in = w.in;
  const hn::ScalableTag<float> df;
  const size_t widen_floats = dd::WidenFloats(df, batch, in, w.out);
  float* wf = widen_floats == 0 ? nullptr : dd::WidenScratch(widen_floats);
  if (wf != nullptr) {
    const size_t row_bytes = WeightRowBytes(Fmt::kType, in);
    const auto* wb = static_cast<const uint8_t*>(w.weight);
    dd::WidenedDense(
        df, x, x_stride, batch,
        [&](size_t o0, size_t rows, float* HWY_RESTRICT dst) HWY_ATTR {
          for (size_t r = 0; r < rows; ++r) {
            DecodeBlocks<Fmt>(wb + (o0 + r) * row_bytes, in / kKQuantBlock, dst + r * in);
          }
        },
        w.bias, in, w.out, wf, y, y_stride, accumulate);
    return;
  }
#if HWY_HAVE_SCALABLE
  DecodedRows<Fmt>(x, x_stride, batch, w, 0, w.out, y, y_stride, accumulate);
#else
  if (batch > dd::kMaxB) {  // no scratch
    DecodedRows<Fmt>(x, x_stride, batch, w, 0, w.out, y, y_stride, accumulate);
    return;
  }
  FusedRowsN<Fmt, dd::kMaxB>(batch, x, x_stride, w, y, y_stride, accumulate);
#endif
}

}  // namespace kquant_detail

// See dense.h (DenseKQuant): w is a K-quant.
HWY_INLINE void KQuantDense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                            float* y, size_t y_stride, bool accumulate) {
  namespace kq = kquant_detail;
  switch (w.type) {
    case WeightType::kQ4_K:
      return kq::KQuantDense<kq::Q4K>(x, x_stride, batch, w, y, y_stride, accumulate);
    case WeightType::kQ6_K:
      return kq::KQuantDense<kq::Q6K>(x, x_stride, batch, w, y, y_stride, accumulate);
    case WeightType::kQ5_K:
      return kq::KQuantDense<kq::Q5K>(x, x_stride, batch, w, y, y_stride, accumulate);
    case WeightType::kF32:
    case WeightType::kF16:
    case WeightType::kBF16:
    case WeightType::kI8:
    case WeightType::kI4:
    case WeightType::kQ8_0:
      return;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_KQUANT_INL_H_ toggle
