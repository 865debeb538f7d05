// Per-target batch-1 kernel for int4 layers in row panels (dense.h,
// PackDenseI4Panels). Panel p holds rows 16p..16p+15; per block b of 32
// inputs it stores 4 vectors of 64 bytes, byte 4r + t of vector m holding,
// as nibbles n = q + 8, input 32b + 8m + t of row r (low) and input
// 32b + 8m + 4 + t (high); after the panel's blocks, its f16 scales, 16 per
// block in row order. A 32-bit lane of a vector is one row's 4 inputs, so
// the dot products of 16 rows run side by side against broadcast activations
// and need no horizontal sums.
//   AVX512-VNNI (Avx512VnniEnabled): per vector lo = v & 0x0F and
//     hi16 = v & 0xF0 (16·n) each take one vpdpbusd against 4 broadcast
//     activation bytes, into a sum started at the block's −8·Σ q_x and one
//     of 16·n (shifted right by 4 per block: exact), so 64 stored bytes cost
//     four integer operations where the row layout's tiles (dense_i4-inl.h)
//     spend about eight; each block's i32 sum is converted and FMAed by its
//     scale into f32 lanes. Two panels run side by side.
//   AVX2 and AVX-512 without VNNI: per 32 bytes (8 rows) lo and hi nibbles
//     each take one maddubs against 4 broadcast activation bytes; the i16
//     pairs of a block's 4 vectors are added in i16 (≤ 8·3810 < 2^15) and
//     one madd with ones gives each row's i32 sum: 7 operations per 32
//     stored bytes and no horizontal sums, where the row tiles take about
//     twice as many.
//   Other targets: a scalar loop over the same layout (DenseI4PanelsPreferred
//     is false there: the row tiles are faster).
// The SIMD forms are written with the named operations of isa::x256 and
// isa::x512 (kernels/isa/).
#if defined(RECUR_KERNELS_DENSE_DENSE_I4_PANELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_I4_PANELS_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_I4_PANELS_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_I4_PANELS_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/common-inl.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"
#include "kernels/dispatch/target_limit.h"
#include "kernels/isa/isa-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

namespace i4p_detail {

inline constexpr size_t kR = kI4PanelRows;
inline constexpr size_t kBlockBytes = kR * kI4Block / 2;  // nibbles of one block, 256
inline constexpr size_t kMaxBlocks = kDenseI4DotMaxIn / kI4Block;

// One output: y (+)= bias + scale_x·sum (DenseI4Dot's finish).
HWY_INLINE void Finish(float sum, float scale_x, const float* bias, float* y, bool accumulate) {
  float s = sum * scale_x;
  if (bias != nullptr) s += *bias;
  *y = accumulate ? *y + s : s;
}

// Rows of panels [p0, p1) one at a time, activation row by row: the
// reference the SIMD forms follow. q: (batch, in) with row stride q_stride;
// xs: (batch, blocks) −8·Σ q over each block; y: (batch, out), stride y_stride.
HWY_INLINE void PanelsScalar(size_t batch, const int8_t* q, size_t q_stride, const float* qs,
                             const int32_t* xs, const uint8_t* panels, const DenseWeights& w,
                             size_t p0, size_t p1, float* y, size_t y_stride, bool accumulate) {
  const size_t blocks = w.in / kI4Block, panel_bytes = DenseI4PanelStride(w.in);
  for (size_t bi = 0; bi < batch; ++bi) {
    const int8_t* qb = q + bi * q_stride;
    for (size_t p = p0; p < p1; ++p) {
      const uint8_t* base = panels + p * panel_bytes;
      const uint8_t* scales = base + blocks * kBlockBytes;
      for (size_t r = 0; r < kR && p * kR + r < w.out; ++r) {
        float sum = 0.0f;
        for (size_t b = 0; b < blocks; ++b) {
          int32_t s = xs[bi * blocks + b];
          for (size_t m = 0; m < 4; ++m) {
            for (size_t t = 0; t < 4; ++t) {
              const uint8_t byte = base[b * kBlockBytes + m * 64 + 4 * r + t];
              s += (byte & 0xF) * qb[b * kI4Block + 8 * m + t];
              s += (byte >> 4) * qb[b * kI4Block + 8 * m + 4 + t];
            }
          }
          uint16_t bits;
          std::memcpy(&bits, scales + (b * kR + r) * 2, 2);
          sum += static_cast<float>(s) * ref::F16ToF32(bits);
        }
        const size_t o = p * kR + r;
        Finish(sum, qs[bi], w.bias ? w.bias + o : nullptr, y + bi * y_stride + o, accumulate);
      }
    }
  }
}

#if RECUR_ISA_AVX3
namespace x512 = isa::x512;

// kB activation rows (row b at q + b·q_stride, block sums xs + b·blocks)
// against kP panels side by side (base[k]: panel k's first byte), all
// blocks; f[b][k]: the f32 lanes, one weight row each. Each loaded vector is
// unpacked once for the kB rows.
template <size_t kB, size_t kP>
HWY_INLINE void VnniPanels(const int8_t* q, size_t q_stride, const int32_t* xs,
                           const uint8_t* const* base, size_t blocks, size_t ahead,
                           x512::VecF (*f)[kP]) {
  const x512::VecI lo4 = x512::SetI8(0x0F), hi4 = x512::SetI8(static_cast<int8_t>(0xF0));
  for (size_t bi = 0; bi < kB; ++bi) {
    for (size_t k = 0; k < kP; ++k) f[bi][k] = x512::ZeroF();
  }
  for (size_t b = 0; b < blocks; ++b) {
    x512::VecI lo[kB][kP], hi[kB][kP];
    for (size_t bi = 0; bi < kB; ++bi) {
      for (size_t k = 0; k < kP; ++k) {
        lo[bi][k] = x512::SetI32(xs[bi * blocks + b]);
        hi[bi][k] = x512::ZeroI();
      }
    }
    HWY_UNROLL(4)
    for (size_t m = 0; m < 4; ++m) {
      for (size_t k = 0; k < kP; ++k) {
        if (kB == 1) isa::PrefetchOnce(base[k] + ahead + b * kBlockBytes + m * 64);
        const x512::VecI v = x512::LoadU(base[k] + b * kBlockBytes + m * 64);
        const x512::VecI vl = x512::And(v, lo4), vh = x512::And(v, hi4);
        for (size_t bi = 0; bi < kB; ++bi) {
          const int8_t* x = q + bi * q_stride + b * kI4Block + 8 * m;
          lo[bi][k] = x512::DotU8I8BroadcastAccumulate(lo[bi][k], vl, x);
          hi[bi][k] = x512::DotU8I8BroadcastAccumulate(hi[bi][k], vh, x + 4);
        }
      }
    }
    for (size_t k = 0; k < kP; ++k) {
      if (kB == 1 && b % 2 == 0) isa::PrefetchOnce(base[k] + ahead + blocks * kBlockBytes + b * kR * 2);
      const x512::VecF scale = x512::LoadF16ToF32(base[k] + blocks * kBlockBytes + b * kR * 2);
      for (size_t bi = 0; bi < kB; ++bi) {
        const x512::VecI s = x512::AddI32(lo[bi][k], x512::ShiftRightI32<4>(hi[bi][k]));
        f[bi][k] = x512::MulAdd(x512::ToF32(s), scale, f[bi][k]);
      }
    }
  }
}

HWY_INLINE void VnniFinish(x512::VecF f, float qs, const float* bias, float* y, size_t rows,
                           bool accumulate) {
  const auto mask = static_cast<x512::Mask16>((1u << rows) - 1);
  x512::VecF v = x512::Mul(f, x512::SetF32(qs));
  if (bias != nullptr) v = x512::Add(v, x512::LoadMasked(mask, bias));
  if (accumulate) v = x512::Add(x512::LoadMasked(mask, y), v);
  x512::StoreMasked(y, mask, v);
}

// Panels [p0, p1) for kB activation rows: kP = 2 panels side by side for up
// to 2 rows, one for more (the i32 and f32 sums of kB·kP (row, panel) pairs
// stay in registers).
template <size_t kB>
HWY_NOINLINE void PanelsVnni(const int8_t* q, size_t q_stride, const float* qs,
                             const int32_t* xs, const uint8_t* panels, const DenseWeights& w,
                             size_t p0, size_t p1, float* y, size_t y_stride, bool accumulate) {
  constexpr size_t kP = kB <= 2 ? 2 : 1;
  const size_t blocks = w.in / kI4Block, panel_bytes = DenseI4PanelStride(w.in);
  for (size_t p = p0; p < p1; p += kP) {
    const size_t np = std::min(kP, p1 - p);
    const uint8_t* base[kP];
    for (size_t k = 0; k < kP; ++k) base[k] = panels + (p + std::min(k, np - 1)) * panel_bytes;
    x512::VecF f[kB][kP];
    // One row's panels are read as streams, each prefetched where the
    // next kP panels will be read.
    VnniPanels<kB, kP>(q, q_stride, xs, base, blocks, kP * panel_bytes, f);
    for (size_t k = 0; k < np; ++k) {
      const size_t o = (p + k) * kR;
      for (size_t bi = 0; bi < kB; ++bi) {
        VnniFinish(f[bi][k], qs[bi], w.bias ? w.bias + o : nullptr, y + bi * y_stride + o,
                   std::min(kR, w.out - o), accumulate);
      }
    }
  }
}
#endif  // RECUR_ISA_AVX3

#if RECUR_ISA_AVX2
namespace x256 = isa::x256;

// kB activation rows against one panel, all blocks, as two halves of 8 rows
// (32 bytes of a vector each); f[b][h]: row b's f32 lanes of half h, one
// weight row each. Per half and vector m the nibbles' maddubs pairs (≤
// 2·15·127) of lo and hi are added in i16, then over the block's 4 vectors
// (≤ 8·3810 < 2^15), and one madd with ones gives each row's i32 sum.
template <size_t kB>
HWY_INLINE void Avx2Panel(const int8_t* q, size_t q_stride, const int32_t* xs, const uint8_t* base,
                          size_t blocks, x256::VecF (*f)[2]) {
  const x256::VecI lo4 = x256::SetI8(0x0F);
  for (size_t bi = 0; bi < kB; ++bi) f[bi][0] = f[bi][1] = x256::ZeroF();
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t h = 0; h < 2; ++h) {
      x256::VecI acc16[kB];
      for (size_t bi = 0; bi < kB; ++bi) acc16[bi] = x256::ZeroI();
      HWY_UNROLL(4)
      for (size_t m = 0; m < 4; ++m) {
        const x256::VecI v = x256::LoadU(base + b * kBlockBytes + m * 64 + h * 32);
        const x256::VecI lo = x256::And(v, lo4);
        const x256::VecI hi = x256::And(x256::ShiftRightU16<4>(v), lo4);
        for (size_t bi = 0; bi < kB; ++bi) {
          const int8_t* x = q + bi * q_stride + b * kI4Block + 8 * m;
          int32_t x_lo, x_hi;
          std::memcpy(&x_lo, x, 4);
          std::memcpy(&x_hi, x + 4, 4);
          acc16[bi] =
              x256::AddI16(acc16[bi], x256::AddI16(x256::MulAddPairsU8I8(lo, x256::SetI32(x_lo)),
                                                   x256::MulAddPairsU8I8(hi, x256::SetI32(x_hi))));
        }
      }
      const x256::VecF scale =
          x256::LoadF16ToF32(base + blocks * kBlockBytes + (b * kR + 8 * h) * 2);
      for (size_t bi = 0; bi < kB; ++bi) {
        const x256::VecI s =
            x256::AddI32(x256::SumPairsI16(acc16[bi]), x256::SetI32(xs[bi * blocks + b]));
        f[bi][h] = x256::MulAdd(x256::ToF32(s), scale, f[bi][h]);
      }
    }
  }
}

template <size_t kB>
HWY_NOINLINE void PanelsAvx2(const int8_t* q, size_t q_stride, const float* qs,
                             const int32_t* xs, const uint8_t* panels, const DenseWeights& w,
                             size_t p0, size_t p1, float* y, size_t y_stride, bool accumulate) {
  const size_t blocks = w.in / kI4Block, panel_bytes = DenseI4PanelStride(w.in);
  for (size_t p = p0; p < p1; ++p) {
    x256::VecF f[kB][2];
    Avx2Panel<kB>(q, q_stride, xs, panels + p * panel_bytes, blocks, f);
    for (size_t bi = 0; bi < kB; ++bi) {
      HWY_ALIGN float sums[kR];
      x256::Store(sums, f[bi][0]);
      x256::Store(sums + 8, f[bi][1]);
      for (size_t r = 0; r < kR && p * kR + r < w.out; ++r) {
        const size_t o = p * kR + r;
        Finish(sums[r], qs[bi], w.bias ? w.bias + o : nullptr, y + bi * y_stride + o,
               accumulate);
      }
    }
  }
}
#endif  // RECUR_ISA_AVX2

}  // namespace i4p_detail

HWY_INLINE bool I4PanelsPreferred() {
#if RECUR_ISA_AVX2
  return true;  // VNNI or not (docs/performance.md "int4 weights")
#else
  return false;
#endif
}

// The SIMD form for kB activation rows, or the scalar loop.
template <size_t kB>
HWY_INLINE void I4PanelsRows(const int8_t* q, size_t q_stride, const float* qs,
                             const int32_t* xs, const uint8_t* panels, const DenseWeights& w,
                             size_t p0, size_t p1, float* y, size_t y_stride, bool accumulate) {
  namespace d = i4p_detail;
#if RECUR_ISA_AVX3
  if (Avx512VnniEnabled()) {
    d::PanelsVnni<kB>(q, q_stride, qs, xs, panels, w, p0, p1, y, y_stride, accumulate);
    return;
  }
#endif
#if RECUR_ISA_AVX2
  d::PanelsAvx2<kB>(q, q_stride, qs, xs, panels, w, p0, p1, y, y_stride, accumulate);
  return;
#endif
  d::PanelsScalar(kB, q, q_stride, qs, xs, panels, w, p0, p1, y, y_stride, accumulate);
}

// DenseI4PanelsQuantized (dense.h) for a layer DenseI4PanelBytes accepts and
// 1 <= batch <= kI4PanelMaxBatch.
HWY_INLINE void I4PanelsQuantized(const int8_t* q, size_t q_stride, const float* qs,
                                  size_t batch, const uint8_t* panels, const DenseWeights& w,
                                  size_t p0, size_t p1, float* y, size_t y_stride,
                                  bool accumulate) {
  namespace d = i4p_detail;
  const size_t blocks = w.in / kI4Block;
  int32_t xs[kI4PanelMaxBatch * d::kMaxBlocks];  // −8·Σ q over each row's blocks
  for (size_t bi = 0; bi < batch; ++bi) {
    for (size_t b = 0; b < blocks; ++b) {
      int32_t s = 0;
      for (size_t i = 0; i < kI4Block; ++i) s += q[bi * q_stride + b * kI4Block + i];
      xs[bi * blocks + b] = -8 * s;
    }
  }
  switch (batch) {
    case 1: return I4PanelsRows<1>(q, q_stride, qs, xs, panels, w, p0, p1, y, y_stride, accumulate);
    case 2: return I4PanelsRows<2>(q, q_stride, qs, xs, panels, w, p0, p1, y, y_stride, accumulate);
    case 3: return I4PanelsRows<3>(q, q_stride, qs, xs, panels, w, p0, p1, y, y_stride, accumulate);
    default: return I4PanelsRows<4>(q, q_stride, qs, xs, panels, w, p0, p1, y, y_stride, accumulate);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_I4_PANELS_INL_H_ toggle
