// Named operations on 128-bit x86 vectors (namespace isa::x128) for
// Highway's SSSE3 and SSE4 targets: the int8 and int4 row tiles' steps,
// which Highway 1.0.3 cannot express (products of unsigned and signed bytes
// summed in pairs, the sign trick, horizontal sums in a fixed order).
// Included by kernels/isa/isa-inl.h only (see there why these take raw
// registers).
#ifndef RECUR_KERNELS_ISA_SELECTING
#error "include kernels/isa/isa-inl.h, which picks this file for the targets it serves"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace isa {
namespace x128 {

using VecI = __m128i;  // 16 bytes of integers; each operation names its lane type
using VecF = __m128;   // 4 f32 lanes

HWY_INLINE VecI ZeroI() { return _mm_setzero_si128(); }
HWY_INLINE VecF ZeroF() { return _mm_setzero_ps(); }
HWY_INLINE VecI SetI8(int8_t v) { return _mm_set1_epi8(v); }
HWY_INLINE VecI SetI32(int32_t v) { return _mm_set1_epi32(v); }
HWY_INLINE VecF SetF32(float v) { return _mm_set1_ps(v); }
// 16 bytes at p, unaligned.
HWY_INLINE VecI LoadU(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
HWY_INLINE VecI And(VecI a, VecI b) { return _mm_and_si128(a, b); }
// Each 16-bit lane shifted right by k, zeros shifted in.
template <int k>
HWY_INLINE VecI ShiftRightU16(VecI v) {
  return _mm_srli_epi16(v, k);
}
HWY_INLINE VecI AddI16(VecI a, VecI b) { return _mm_add_epi16(a, b); }
HWY_INLINE VecI AddI32(VecI a, VecI b) { return _mm_add_epi32(a, b); }
// |v| of signed bytes, as u8 (|−128| = 128).
HWY_INLINE VecI AbsI8(VecI v) { return _mm_abs_epi8(v); }
HWY_INLINE VecF Add(VecF a, VecF b) { return _mm_add_ps(a, b); }
HWY_INLINE VecF Mul(VecF a, VecF b) { return _mm_mul_ps(a, b); }
// i32 lanes converted to f32 (rounded to nearest).
HWY_INLINE VecF ToF32(VecI v) { return _mm_cvtepi32_ps(v); }
// c in i32 lane 0, zeros elsewhere.
HWY_INLINE VecI Lane0I32(int32_t c) { return _mm_cvtsi32_si128(c); }

// Lane j = u[2j]·s[2j] + u[2j+1]·s[2j+1] in i16, saturated (pmaddubsw); u
// unsigned, s signed bytes. Exact while a pair stays within ±32767.
HWY_INLINE VecI MulAddPairsU8I8(VecI u, VecI s) { return _mm_maddubs_epi16(u, s); }

// Lane j = a[2j] + a[2j+1] in i32 (pmaddwd against ones).
HWY_INLINE VecI SumPairsI16(VecI a) { return _mm_madd_epi16(a, _mm_set1_epi16(1)); }

// Signed bytes x with the sign of s: −x where s < 0, 0 where s = 0, x where
// s > 0 (psignb).
HWY_INLINE VecI ApplySign(VecI x, VecI s) { return _mm_sign_epi8(x, s); }

// out[k] = Σ i32 lanes of a[k], k < 4 (phaddd).
HWY_INLINE void SumLanesOf4(const VecI* a, int32_t* out) {
  const __m128i s = _mm_hadd_epi32(_mm_hadd_epi32(a[0], a[1]), _mm_hadd_epi32(a[2], a[3]));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), s);
}

// Σ lanes of f as (f0 + f2) + (f1 + f3).
HWY_INLINE float SumOfLanes(VecF s) {
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

}  // namespace x128

// The int8 row tiles' step (dense_i8dot-inl.h): 16 bytes of a weight row
// against 16 of an activation row, the sign trick: u = |w| (as u8: |−128| =
// 128), v = x with w's sign, maddubs pairs (≤ 2·128·127, never saturated),
// madd with ones to i32.
struct I8DotStep128 {
  static constexpr size_t kStep = 16;  // bytes of a row per step
  using Acc = x128::VecI;
  struct W {  // a step's weights, prepared
    x128::VecI abs, w;
  };
  static HWY_INLINE Acc Zero() { return x128::ZeroI(); }
  static HWY_INLINE W LoadWeights(const int8_t* p) {
    const x128::VecI w = x128::LoadU(p);
    return {x128::AbsI8(w), w};
  }
  // acc + Σ w·x over the step, in i32 lanes (which lane takes which
  // product is the form's; only the sum over lanes is defined).
  static HWY_INLINE Acc DotAccumulate(Acc acc, const W& w, const int8_t* x) {
    const x128::VecI p16 = x128::MulAddPairsU8I8(w.abs, x128::ApplySign(x128::LoadU(x), w.w));
    return x128::AddI32(acc, x128::SumPairsI16(p16));
  }
  // out[k] = Σ lanes of a[k], k < 4.
  static HWY_INLINE void SumLanesOf4(const Acc* a, int32_t* out) { x128::SumLanesOf4(a, out); }
};

// The int4 row tiles' step (dense_i4-inl.h): one block of 16 bytes (32
// nibbles n = q + 8, low nibbles inputs 0..15, high 16..31) against 32
// activation bytes, as two 128-bit halves whose maddubs pairs are added in
// i16 (at most 7680) before madd with ones.
struct I4DotStep128 {
  using Acc = x128::VecI;  // i32 sums of one group
  struct W {               // a block's nibbles
    x128::VecI lo, hi;
  };
  using F = x128::VecF;  // f32 sums over groups
  static HWY_INLINE F ZeroSums() { return x128::ZeroF(); }
  static HWY_INLINE W LoadNibbles(const uint8_t* p) {
    const x128::VecI b = x128::LoadU(p);
    const x128::VecI mask = x128::SetI8(0x0F);
    return {x128::And(b, mask), x128::And(x128::ShiftRightU16<4>(b), mask)};
  }
  // acc + Σ n·x over the block, in i32 lanes.
  static HWY_INLINE Acc DotAccumulate(Acc acc, const W& w, const int8_t* x) {
    const x128::VecI x0 = x128::LoadU(x), x1 = x128::LoadU(x + 16);
    const x128::VecI p16 =
        x128::AddI16(x128::MulAddPairsU8I8(w.lo, x0), x128::MulAddPairsU8I8(w.hi, x1));
    return x128::AddI32(acc, x128::SumPairsI16(p16));
  }
  // A group's sum starting at c (lane 0).
  static HWY_INLINE Acc StartSum(int32_t c) { return x128::Lane0I32(c); }
  // f + float(acc)·scale (no FMA on these targets).
  static HWY_INLINE F MulAddScaled(Acc acc, float scale, F f) {
    return x128::Add(f, x128::Mul(x128::ToF32(acc), x128::SetF32(scale)));
  }
  static HWY_INLINE float SumOfLanes(F f) { return x128::SumOfLanes(f); }
};

}  // namespace isa
}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();
