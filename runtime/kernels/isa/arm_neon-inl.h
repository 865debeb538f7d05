// Named operations of Highway's NEON target on arm64 (namespace isa::neon)
// that Highway 1.0.3 cannot express: the dot product of signed bytes into
// i32 lanes (sdot where the compiler targets the dot-product extension, else
// widening multiplies and pairwise adds), horizontal sums in a fixed order;
// and the int8 and int4 row tiles' steps made of them. SVE targets have no
// such file: the kernels keep their scalar forms there. Included by
// kernels/isa/isa-inl.h only (see there why these take raw registers).
#ifndef RECUR_KERNELS_ISA_SELECTING
#error "include kernels/isa/isa-inl.h, which picks this file for the targets it serves"
#endif

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace isa {
namespace neon {

using VecI32 = int32x4_t;  // 4 i32 lanes
using VecI8 = int8x16_t;   // 16 signed bytes

// c in every i32 lane.
HWY_INLINE VecI32 SetI32(int32_t c) { return vdupq_n_s32(c); }
// The 16 bytes of v as signed bytes.
HWY_INLINE VecI8 AsI8(VecI32 v) { return vreinterpretq_s8_s32(v); }

// acc + Σ_k w[k]·x[k] over the 16 bytes, in i32 lanes: sdot (lane j takes
// bytes 4j..4j+3) with the dot-product extension (-march=armv8.2-a+dotprod),
// else vmull_s8/vmlal_high_s8 into i16 (two products, at most 2·128·127 =
// 32512 with the kernels' |x| ≤ 127) and vpadalq_s16 into i32. Which lane
// takes which product differs between the forms; only the sum over lanes is
// defined.
HWY_INLINE VecI32 DotI8I8Accumulate(VecI32 acc, VecI8 w, VecI8 x) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, w, x);
#else
  int16x8_t p = vmull_s8(vget_low_s8(w), vget_low_s8(x));
  p = vmlal_high_s8(p, w, x);
  return vpadalq_s16(acc, p);
#endif
}

// out[k] = Σ lanes of a[k], k < 4 (pairwise adds).
HWY_INLINE void SumLanesOf4(const VecI32* a, int32_t* out) {
  vst1q_s32(out, vpaddq_s32(vpaddq_s32(a[0], a[1]), vpaddq_s32(a[2], a[3])));
}

}  // namespace neon

// The int8 row tiles' step (dense_i8dot-inl.h): 16 bytes of a weight row
// against 16 of an activation row (neon::DotI8I8Accumulate).
struct I8DotStepNeon {
  static constexpr size_t kStep = 16;  // bytes of a row per step
  using Acc = int32x4_t;
  using W = int8x16_t;
  static HWY_INLINE Acc Zero() { return vdupq_n_s32(0); }
  static HWY_INLINE W LoadWeights(const int8_t* p) { return vld1q_s8(p); }
  // acc + Σ w·x over the step, in i32 lanes.
  static HWY_INLINE Acc DotAccumulate(Acc acc, const W& w, const int8_t* x) {
    return neon::DotI8I8Accumulate(acc, w, vld1q_s8(x));
  }
  // out[k] = Σ lanes of a[k], k < 4.
  static HWY_INLINE void SumLanesOf4(const Acc* a, int32_t* out) { neon::SumLanesOf4(a, out); }
};

// The int4 row tiles' step (dense_i4-inl.h): one block of 16 bytes (32
// nibbles n = q + 8, low nibbles inputs 0..15, high 16..31) as s8 against
// 32 activation bytes (neon::DotI8I8Accumulate: n ≤ 15, so pairs ≤ 3810).
struct I4DotStepNeon {
  using Acc = int32x4_t;  // i32 sums of one group
  struct W {              // a block's nibbles, as s8
    int8x16_t lo, hi;
  };
  using F = float32x4_t;  // f32 sums over groups
  static HWY_INLINE F ZeroSums() { return vdupq_n_f32(0.0f); }
  static HWY_INLINE W LoadNibbles(const uint8_t* p) {
    const uint8x16_t b = vld1q_u8(p);
    return {vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0F))),
            vreinterpretq_s8_u8(vshrq_n_u8(b, 4))};
  }
  // acc + Σ n·x over the block, in i32 lanes.
  static HWY_INLINE Acc DotAccumulate(Acc acc, const W& w, const int8_t* x) {
    const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    return neon::DotI8I8Accumulate(neon::DotI8I8Accumulate(acc, w.lo, x0), w.hi, x1);
  }
  // A group's sum starting at c (lane 0).
  static HWY_INLINE Acc StartSum(int32_t c) { return vsetq_lane_s32(c, vdupq_n_s32(0), 0); }
  // f + float(acc)·scale, fused.
  static HWY_INLINE F MulAddScaled(Acc acc, float scale, F f) {
    return vfmaq_n_f32(f, vcvtq_f32_s32(acc), scale);
  }
  // Σ lanes of f (faddv).
  static HWY_INLINE float SumOfLanes(F f) { return vaddvq_f32(f); }
};

}  // namespace isa
}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();
