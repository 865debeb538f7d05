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
// Written in portable Highway operations, the same on every target: this is
// the path for numbers equal to llama.cpp's, not the fastest one (the int4
// and int8 paths of dense_i4-inl.h and dense_i8dot-inl.h are).
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

#include "hwy/highway.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"

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
// Q8_0-type formats have one scale per block, applied in f32 by Scale.

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
        dw = ref::F16ToF32(w.group_scales[o * blocks + k]);
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

}  // namespace blockq_detail

HWY_INLINE void BlockQ8Dense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                             float* y, size_t y_stride, bool accumulate) {
  namespace bd = blockq_detail;
  const ActivationBlocks kind = ActivationBlocksOf(w.type, w.group);
  const size_t in = w.in;
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
