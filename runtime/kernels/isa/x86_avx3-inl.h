// Named operations on 512-bit x86 vectors (namespace isa::x512) for
// Highway's AVX-512 targets (AVX3 and better): the int8 and int4 kernels'
// forms that Highway 1.0.3 cannot express (products of unsigned and signed
// bytes summed in pairs, negation under a mask, the lane sums of 16
// vectors, a 16 × 16 transpose of 32-bit lanes, nibbles in input order),
// and the plain loads, stores, masks and arithmetic those forms are written
// with. These targets also have the 256-bit operations of x86_avx2-inl.h
// and the VNNI ones of x86_avx3_vnni-inl.h. Included by
// kernels/isa/isa-inl.h only (see there why these take raw registers).
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
namespace x512 {

using VecI = __m512i;      // 64 bytes of integers; each operation names its lane type
using VecF = __m512;       // 16 f32 lanes
using Mask16 = __mmask16;  // bit k: lane k of 16 (f32, i32) takes part
using Mask64 = __mmask64;  // bit k: byte lane k takes part

// ---------------------------------------------------------------------------
// Plain operations.

HWY_INLINE VecI ZeroI() { return _mm512_setzero_si512(); }
HWY_INLINE VecF ZeroF() { return _mm512_setzero_ps(); }
HWY_INLINE VecI SetI8(int8_t v) { return _mm512_set1_epi8(v); }
HWY_INLINE VecI SetI32(int32_t v) { return _mm512_set1_epi32(v); }
// i32 lanes 0..7 = lo, 8..15 = hi.
HWY_INLINE VecI SetI32Halves(int32_t lo, int32_t hi) {
  return _mm512_mask_set1_epi32(_mm512_set1_epi32(lo), 0xFF00, hi);
}
HWY_INLINE VecF SetF32(float v) { return _mm512_set1_ps(v); }
// i32 lane l = 4k + l / 4: lanes 0..3 take k's first index, 4..7 the next...
// (for PermuteLanes: one value per 128-bit block).
HWY_INLINE VecI QuarterIndices(int k) {
  return _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                          _mm512_set1_epi32(4 * k));
}

// 64 bytes at p; Load needs p 64-byte aligned, LoadU does not.
HWY_INLINE VecI Load(const void* p) { return _mm512_load_si512(p); }
HWY_INLINE VecI LoadU(const void* p) { return _mm512_loadu_si512(p); }
HWY_INLINE void Store(void* p, VecI v) { _mm512_store_si512(p, v); }
// 16 floats at p, 64-byte aligned.
HWY_INLINE VecF Load(const float* p) { return _mm512_load_ps(p); }
HWY_INLINE void Store(float* p, VecF v) { _mm512_store_ps(p, v); }

// Masks: a Mask16 or Mask64 is its bits (static_cast from an integer);
// MaskFromBits names the conversion of 64 bits.
HWY_INLINE Mask64 MaskFromBits(uint64_t bits) { return _cvtu64_mask64(bits); }
// The bytes at p in the lanes of m, zeros elsewhere; nothing read outside
// m's lanes.
HWY_INLINE VecI LoadMaskedI8(Mask64 m, const void* p) { return _mm512_maskz_loadu_epi8(m, p); }
// v's bytes in the lanes of m, zeros elsewhere.
HWY_INLINE VecI ZeroOutsideI8(Mask64 m, VecI v) { return _mm512_maskz_mov_epi8(m, v); }
// p[k] in the lanes of m, zeros elsewhere; nothing read outside m's lanes.
HWY_INLINE VecF LoadMasked(Mask16 m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
// p[k] = v[k] in the lanes of m; nothing written outside them.
HWY_INLINE void StoreMasked(float* p, Mask16 m, VecF v) { _mm512_mask_storeu_ps(p, m, v); }
// 16 f16 values at p as f32 (vcvtph2ps); the masked form reads only the
// lanes of m (zeros elsewhere).
HWY_INLINE VecF LoadF16ToF32(const void* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}
HWY_INLINE VecF LoadF16ToF32Masked(Mask16 m, const void* p) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

HWY_INLINE VecI And(VecI a, VecI b) { return _mm512_and_si512(a, b); }
HWY_INLINE VecI Xor(VecI a, VecI b) { return _mm512_xor_si512(a, b); }
// Each 16-bit lane shifted right by k, zeros shifted in.
template <int k>
HWY_INLINE VecI ShiftRightU16(VecI v) {
  return _mm512_srli_epi16(v, k);
}
// Each i32 lane shifted right by k, its sign shifted in (exact division by
// 2^k of multiples of 2^k).
template <int k>
HWY_INLINE VecI ShiftRightI32(VecI v) {
  return _mm512_srai_epi32(v, k);
}
HWY_INLINE VecI AddI32(VecI a, VecI b) { return _mm512_add_epi32(a, b); }
HWY_INLINE VecI Or(VecI a, VecI b) { return _mm512_or_si512(a, b); }
// Each 16-bit lane shifted left by k, zeros shifted in.
template <int k>
HWY_INLINE VecI ShiftLeftU16(VecI v) {
  return _mm512_slli_epi16(v, k);
}
// Each 32-bit lane shifted left by k, zeros shifted in.
template <int k>
HWY_INLINE VecI ShiftLeftU32(VecI v) {
  return _mm512_slli_epi32(v, k);
}
// The low 32 bits of each i32 lane's product (vpmulld).
HWY_INLINE VecI MulLoI32(VecI a, VecI b) { return _mm512_mullo_epi32(a, b); }
// lo in the lower 256 bits, hi in the upper.
// Each u16 lane of v shifted left (right) by the count in the same lane of
// counts, zeros shifted in (vpsllvw, vpsrlvw).
HWY_INLINE VecI ShiftLeftU16By(VecI v, VecI counts) { return _mm512_sllv_epi16(v, counts); }
HWY_INLINE VecI ShiftRightU16By(VecI v, VecI counts) { return _mm512_srlv_epi16(v, counts); }
// The 32 bytes at p in both 256-bit halves.
HWY_INLINE VecI LoadBroadcast256(const void* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
HWY_INLINE VecI Concat256(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
// |v| of signed bytes, as u8 (|−128| = 128).
HWY_INLINE VecI AbsI8(VecI v) { return _mm512_abs_epi8(v); }
// Σ i32 lanes of v (wrapping).
HWY_INLINE int32_t SumOfLanesI32(VecI v) { return _mm512_reduce_add_epi32(v); }

HWY_INLINE VecF Add(VecF a, VecF b) { return _mm512_add_ps(a, b); }
// Σ f32 lanes of v (vector halves added pairwise down to one lane).
HWY_INLINE float SumOfLanes(VecF v) { return _mm512_reduce_add_ps(v); }
HWY_INLINE VecF Mul(VecF a, VecF b) { return _mm512_mul_ps(a, b); }
// a·b + c, fused (one rounding).
HWY_INLINE VecF MulAdd(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
// i32 lanes converted to f32 (rounded to nearest).
HWY_INLINE VecF ToF32(VecI v) { return _mm512_cvtepi32_ps(v); }
// Lane l = v[idx[l] mod 16] (vpermps).
HWY_INLINE VecF PermuteLanes(VecI idx, VecF v) { return _mm512_permutexvar_ps(idx, v); }

// ---------------------------------------------------------------------------
// What Highway 1.0.3 lacks.

// Lane j = u[2j]·s[2j] + u[2j+1]·s[2j+1] in i16, saturated (vpmaddubsw);
// u unsigned, s signed bytes. Exact while a pair stays within ±32767.
HWY_INLINE VecI MulAddPairsU8I8(VecI u, VecI s) { return _mm512_maddubs_epi16(u, s); }

// Lane j = a[2j]·b[2j] + a[2j+1]·b[2j+1] in i32, a and b signed i16
// (vpmaddwd).
HWY_INLINE VecI MulAddPairsI16(VecI a, VecI b) { return _mm512_madd_epi16(a, b); }

// The low 16 bits of each i16 lane's product (vpmullw).
HWY_INLINE VecI MulLoI16(VecI a, VecI b) { return _mm512_mullo_epi16(a, b); }
HWY_INLINE VecI SetI16(int16_t v) { return _mm512_set1_epi16(v); }

// 8 bytes at p as i16 lanes 0..7, zero-extended (lanes 8..31 zero).
HWY_INLINE VecI LoadU8x8ToI16(const uint8_t* p) {
  return _mm512_zextsi256_si512(
      _mm256_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// 16 bytes at p in the lowest quarter, zeros above.
HWY_INLINE VecI LoadLower16(const void* p) {
  return _mm512_zextsi128_si512(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}

// 16 bytes at p as i32 lanes, zero-extended (vpmovzxbd) or sign-extended
// (vpmovsxbd).
HWY_INLINE VecI LoadU8x16ToI32(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
HWY_INLINE VecI LoadI8x16ToI32(const int8_t* p) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 32 bytes at p in the lower half, zeros in the upper.
HWY_INLINE VecI LoadLower32(const void* p) {
  return _mm512_zextsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}

// i16 lane l = v[idx[l] mod 32] (vpermw).
HWY_INLINE VecI PermuteI16(VecI idx, VecI v) { return _mm512_permutexvar_epi16(idx, v); }

// 16 signed bytes at p as i16 lanes 0..15 (lanes 16..31 zero).
HWY_INLINE VecI LoadI8x16ToI16(const int8_t* p) {
  return _mm512_zextsi256_si512(
      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Lane j = a[2j] + a[2j+1] in i32 (vpmaddwd against ones).
HWY_INLINE VecI SumPairsI16(VecI a) { return _mm512_madd_epi16(a, _mm512_set1_epi16(1)); }

// The byte lanes of w that are negative (their sign bits, vpmovb2m).
HWY_INLINE Mask64 NegativeLanes(VecI w) { return _mm512_movepi8_mask(w); }

// Signed bytes: −x in the lanes of m, x elsewhere (a masked vpsubb from
// zero). With m = NegativeLanes(w), x takes w's sign wherever w is nonzero
// (AVX-512 has no vpsignb; where w is 0, |w| is 0 and so is the product).
HWY_INLINE VecI NegateWhere(Mask64 m, VecI x) {
  return _mm512_mask_sub_epi8(x, m, _mm512_setzero_si512(), x);
}

// out[k] = Σ i32 lanes of a[k], k < 4: each vector's 256-bit halves added,
// then as the 256-bit x256::SumLanesOf4.
HWY_INLINE void SumLanesOf4(const VecI* a, int32_t* out) {
  __m256i h[4];
  for (int k = 0; k < 4; ++k) {
    h[k] = _mm256_add_epi32(_mm512_castsi512_si256(a[k]), _mm512_extracti64x4_epi64(a[k], 1));
  }
  x256::SumLanesOf4(h, out);
}

// Lane r = Σ i32 lanes of a[r], r < 16, added pairwise as a tree: adjacent
// vectors' unpacked lanes, then 64-bit pairs, then 128-bit blocks.
HWY_INLINE VecI LaneSumsOf16(const VecI* a) {
  __m512i t[8], u[4], v[2];
  for (int k = 0; k < 8; ++k) {  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    t[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2 * k], a[2 * k + 1]),
                            _mm512_unpackhi_epi32(a[2 * k], a[2 * k + 1]));
  }
  for (int k = 0; k < 4; ++k) {  // per 128-bit lane: the lane's sums of rows 4k..4k+3
    u[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * k], t[2 * k + 1]),
                            _mm512_unpackhi_epi64(t[2 * k], t[2 * k + 1]));
  }
  for (int k = 0; k < 2; ++k) {
    v[k] = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2 * k], u[2 * k + 1], 0x88),
                            _mm512_shuffle_i32x4(u[2 * k], u[2 * k + 1], 0xdd));
  }
  return _mm512_add_epi32(_mm512_shuffle_i32x4(v[0], v[1], 0x88),
                          _mm512_shuffle_i32x4(v[0], v[1], 0xdd));
}

// Lane r = Σ f32 lanes of a[r], r < 16, in the order of the same tree as
// the i32 LaneSumsOf16.
HWY_INLINE VecF LaneSumsOf16(const VecF* a) {
  __m512 t[8], u[4], v[2];
  for (int k = 0; k < 8; ++k) {
    t[k] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]),
                         _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]));
  }
  for (int k = 0; k < 4; ++k) {
    const __m512d lo =
        _mm512_unpacklo_pd(_mm512_castps_pd(t[2 * k]), _mm512_castps_pd(t[2 * k + 1]));
    const __m512d hi =
        _mm512_unpackhi_pd(_mm512_castps_pd(t[2 * k]), _mm512_castps_pd(t[2 * k + 1]));
    u[k] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
  }
  for (int k = 0; k < 2; ++k) {
    v[k] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0x88),
                         _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], 0xdd));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x88),
                       _mm512_shuffle_f32x4(v[0], v[1], 0xdd));
}

// r[j] = 32-bit lane j of the 16 input vectors r[0..15] (a 16 × 16
// transpose of 32-bit lanes).
HWY_INLINE void Transpose16x16(VecI* r) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 2; ++i) {
    for (int m = 0; m < 4; ++m) {
      t[8 * i + m] = _mm512_shuffle_i32x4(r[8 * i + m], r[8 * i + 4 + m], 0x88);
      t[8 * i + 4 + m] = _mm512_shuffle_i32x4(r[8 * i + m], r[8 * i + 4 + m], 0xdd);
    }
  }
  for (int m = 0; m < 8; ++m) {
    r[m] = _mm512_shuffle_i32x4(t[m], t[8 + m], 0x88);
    r[8 + m] = _mm512_shuffle_i32x4(t[m], t[8 + m], 0xdd);
  }
}

// The nibbles of 32 packed bytes (two int4 blocks of 16) as 64 u8 in input
// order: 128-bit lane 2k holds block k's low nibbles (its inputs 0..15),
// lane 2k + 1 its high nibbles (16..31).
HWY_INLINE VecI InterleaveNibbles(__m256i bytes) {
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(bytes, nib);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nib);
  // [lo0 lo1 hi0 hi1] (128-bit lanes) to [lo0 hi0 lo1 hi1].
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  return _mm512_shuffle_i64x2(both, both, 0xD8);
}

}  // namespace x512

// The int8 row tiles' step (dense_i8dot-inl.h) on AVX-512 without VNNI: 64
// bytes of a weight row against 64 of an activation row, the sign trick
// with w's sign applied by NegateWhere (AVX-512 has no vpsignb).
struct I8DotStep512 {
  static constexpr size_t kStep = 64;  // bytes of a row per step
  using Acc = x512::VecI;
  struct W {  // a step's weights, prepared
    x512::VecI abs;
    x512::Mask64 neg;
  };
  static HWY_INLINE Acc Zero() { return x512::ZeroI(); }
  static HWY_INLINE W LoadWeights(const int8_t* p) {
    const x512::VecI w = x512::LoadU(p);
    return {x512::AbsI8(w), x512::NegativeLanes(w)};
  }
  // acc + Σ w·x over the step, in i32 lanes (which lane takes which
  // product is the form's; only the sum over lanes is defined).
  static HWY_INLINE Acc DotAccumulate(Acc acc, const W& w, const int8_t* x) {
    const x512::VecI v = x512::NegateWhere(w.neg, x512::LoadU(x));
    return x512::AddI32(acc, x512::SumPairsI16(x512::MulAddPairsU8I8(w.abs, v)));
  }
  // out[k] = Σ lanes of a[k], k < 4.
  static HWY_INLINE void SumLanesOf4(const Acc* a, int32_t* out) { x512::SumLanesOf4(a, out); }
};

}  // namespace isa
}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();
