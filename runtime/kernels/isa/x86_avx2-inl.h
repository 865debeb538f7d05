// Named operations on 256-bit x86 vectors (namespace isa::x256) for
// Highway's AVX2 target and every AVX-512 one, which run the same 256-bit
// code where 256 bits fit better: the int8 and int4 kernels' forms that
// Highway 1.0.3 cannot express (products of unsigned and signed bytes
// summed in pairs, the sign trick, an 8 × 8 transpose of 32-bit lanes,
// horizontal sums in a fixed order, nibble unpacking), and the plain loads,
// stores and arithmetic those forms are written with. Included by
// kernels/isa/isa-inl.h only (see there why these take raw registers).
#ifndef RECUR_KERNELS_ISA_SELECTING
#error "include kernels/isa/isa-inl.h, which picks this file for the targets it serves"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace isa {
namespace x256 {

using VecI = __m256i;   // 32 bytes of integers; each operation names its lane type
using VecF = __m256;    // 8 f32 lanes
using MaskF = __m256i;  // lanes taking part in a masked f32 load or store: all ones

// ---------------------------------------------------------------------------
// Plain operations.

HWY_INLINE VecI ZeroI() { return _mm256_setzero_si256(); }
HWY_INLINE VecF ZeroF() { return _mm256_setzero_ps(); }
HWY_INLINE VecI SetI8(int8_t v) { return _mm256_set1_epi8(v); }
HWY_INLINE VecI SetI32(int32_t v) { return _mm256_set1_epi32(v); }
HWY_INLINE VecF SetF32(float v) { return _mm256_set1_ps(v); }

// The cache line at p fetched into the L2 cache, not the L1 (prefetcht1).
HWY_INLINE void PrefetchToL2(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
}

// 32 bytes at p; Load needs p 32-byte aligned, LoadU does not.
HWY_INLINE VecI Load(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }
HWY_INLINE VecI LoadU(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
// 16 bytes at p in the lower half, zeros in the upper.
HWY_INLINE VecI LoadLower16(const void* p) {
  return _mm256_zextsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}
// 16 bytes at p in the lower half and 16 at q in the upper.
HWY_INLINE VecI LoadHalves(const void* p, const void* q) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(p))),
      _mm_loadu_si128(static_cast<const __m128i*>(q)), 1);
}
HWY_INLINE void Store(void* p, VecI v) { _mm256_store_si256(static_cast<__m256i*>(p), v); }
// 8 floats at p, 32-byte aligned.
HWY_INLINE VecF Load(const float* p) { return _mm256_load_ps(p); }
HWY_INLINE void Store(float* p, VecF v) { _mm256_store_ps(p, v); }

// The first n lanes (n ≤ 8) of a masked f32 load or store.
HWY_INLINE MaskF FirstLanes(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
// p[k] in the lanes of m, zeros elsewhere; nothing read outside m's lanes.
HWY_INLINE VecF LoadMasked(const float* p, MaskF m) { return _mm256_maskload_ps(p, m); }
// p[k] = v[k] in the lanes of m; nothing written outside them.
HWY_INLINE void StoreMasked(float* p, MaskF m, VecF v) { _mm256_maskstore_ps(p, m, v); }
// 8 f16 values at p as f32 (vcvtph2ps).
HWY_INLINE VecF LoadF16ToF32(const void* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}
// The f16 value at p (little-endian bits, any alignment) as f32 (vcvtph2ps):
// exact for every half, subnormals, infinities and NaNs included.
HWY_INLINE float HalfToF32(const void* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)));
}

HWY_INLINE VecI And(VecI a, VecI b) { return _mm256_and_si256(a, b); }
HWY_INLINE VecI Or(VecI a, VecI b) { return _mm256_or_si256(a, b); }
// Each 16-bit lane shifted right by k, zeros shifted in.
template <int k>
HWY_INLINE VecI ShiftRightU16(VecI v) {
  return _mm256_srli_epi16(v, k);
}
// Each 16-bit lane shifted left by k.
template <int k>
HWY_INLINE VecI ShiftLeftU16(VecI v) {
  return _mm256_slli_epi16(v, k);
}
HWY_INLINE VecI AddI16(VecI a, VecI b) { return _mm256_add_epi16(a, b); }
HWY_INLINE VecI SubI16(VecI a, VecI b) { return _mm256_sub_epi16(a, b); }
// The 8 bytes at p zero-extended to i16 lanes 0..7 of both 128-bit halves.
HWY_INLINE VecI LoadU8x8ToI16Halves(const uint8_t* p) {
  return _mm256_broadcastsi128_si256(
      _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
// The 8 signed bytes at p sign-extended to i16 lanes 0..7 of both 128-bit halves.
HWY_INLINE VecI LoadI8x8ToI16Halves(const int8_t* p) {
  return _mm256_broadcastsi128_si256(
      _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
// i16 lane lo of v's lower 128-bit half in every i16 lane of that half, lane hi
// of the upper half in every lane of the upper (vpshufb).
template <int lo, int hi>
HWY_INLINE VecI BroadcastI16Lanes(VecI v) {
  static_assert(lo >= 0 && lo < 8 && hi >= 0 && hi < 8, "lanes of a 128-bit half");
  return _mm256_shuffle_epi8(
      v, _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((2 * hi + 1) << 8 | 2 * hi)),
                          _mm_set1_epi16(static_cast<int16_t>((2 * lo + 1) << 8 | 2 * lo))));
}
template <int j>
HWY_INLINE VecI BroadcastI16Lane(VecI v) {
  return BroadcastI16Lanes<j, j>(v);
}

HWY_INLINE VecI AddI32(VecI a, VecI b) { return _mm256_add_epi32(a, b); }
// |v| of signed bytes, as u8 (|−128| = 128).
HWY_INLINE VecI AbsI8(VecI v) { return _mm256_abs_epi8(v); }

HWY_INLINE VecF Add(VecF a, VecF b) { return _mm256_add_ps(a, b); }
HWY_INLINE VecF Mul(VecF a, VecF b) { return _mm256_mul_ps(a, b); }
// a·b + c, fused (one rounding).
HWY_INLINE VecF MulAdd(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
// i32 lanes converted to f32 (rounded to nearest).
HWY_INLINE VecF ToF32(VecI v) { return _mm256_cvtepi32_ps(v); }

// ---------------------------------------------------------------------------
// What Highway 1.0.3 lacks.

// Lane j = u[2j]·s[2j] + u[2j+1]·s[2j+1] in i16, saturated (vpmaddubsw);
// u unsigned, s signed bytes. Exact while a pair stays within ±32767.
HWY_INLINE VecI MulAddPairsU8I8(VecI u, VecI s) { return _mm256_maddubs_epi16(u, s); }

// Lane j = a[2j] + a[2j+1] in i32 (vpmaddwd against ones).
HWY_INLINE VecI SumPairsI16(VecI a) { return _mm256_madd_epi16(a, _mm256_set1_epi16(1)); }

// Lane j = a[2j]·b[2j] + a[2j+1]·b[2j+1] in i32 (vpmaddwd): exact unless all
// four are −32768.
HWY_INLINE VecI MulAddPairsI16(VecI a, VecI b) { return _mm256_madd_epi16(a, b); }

// Signed bytes x with the sign of s: −x where s < 0, 0 where s = 0, x where
// s > 0 (vpsignb).
HWY_INLINE VecI ApplySign(VecI x, VecI s) { return _mm256_sign_epi8(x, s); }

// out[k] = Σ i32 lanes of a[k], k < 4: per 128-bit half [Σa0, Σa1, Σa2, Σa3]
// of that half's lanes (vphaddd), the halves added.
HWY_INLINE void SumLanesOf4(const VecI* a, int32_t* out) {
  const __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
}

// Σ lanes of f in a fixed order: the 128-bit halves added (g = lo + hi),
// then (g0 + g2) + (g1 + g3).
HWY_INLINE float SumOfLanes(VecF f) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// c in i32 lane 0, zeros elsewhere.
HWY_INLINE VecI Lane0I32(int32_t c) { return _mm256_zextsi128_si256(_mm_cvtsi32_si128(c)); }

// p[0] in i32 lane 0 and, for kN = 2, p[1] in lane 4; zeros elsewhere.
// Reads kN values.
template <size_t kN>
HWY_INLINE VecI LoadToLanes0And4(const int32_t* p) {
  static_assert(kN == 1 || kN == 2, "one or two values");
  const __m128i c =
      kN == 2 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)) : _mm_cvtsi32_si128(p[0]);
  const __m256i to04 = _mm256_setr_epi32(0, 2, 2, 2, 1, 2, 2, 2);  // lane 2 of c is 0
  return _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(c), to04);
}

// p[0] in lanes 0..3 and p[1] (kN = 2) or 0 (kN = 1) in lanes 4..7. Reads
// kN values.
template <size_t kN>
HWY_INLINE VecF LoadBroadcastToHalves(const float* p) {
  static_assert(kN == 1 || kN == 2, "one or two values");
  const __m128 s2 =
      kN == 2 ? _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p))) : _mm_set_ss(p[0]);
  const __m256i to0_1 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(s2), to0_1);
}

// The 32 nibbles of 16 packed bytes at p (an int4 block) as u8: the low
// nibbles in the lower 128 bits (the block's inputs 0..15), the high ones in
// the upper (16..31).
HWY_INLINE VecI LoadNibbles16(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// r[j] = 32-bit lane j of the 8 input vectors r[0..7] (an 8 × 8 transpose
// of 32-bit lanes).
HWY_INLINE void Transpose8x8(VecI* r) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i + 0], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    r[m] = _mm256_permute2x128_si256(u[m], u[4 + m], 0x20);
    r[4 + m] = _mm256_permute2x128_si256(u[m], u[4 + m], 0x31);
  }
}

}  // namespace x256

// The int8 row tiles' step (dense_i8dot-inl.h) on AVX2: 32 bytes of a
// weight row against 32 of an activation row, the sign trick: u = |w| (as
// u8: |−128| = 128), v = x with w's sign, maddubs pairs (≤ 2·128·127, never
// saturated), madd with ones to i32.
struct I8DotStep256 {
  static constexpr size_t kStep = 32;  // bytes of a row per step
  using Acc = x256::VecI;
  struct W {  // a step's weights, prepared
    x256::VecI abs, w;
  };
  static HWY_INLINE Acc Zero() { return x256::ZeroI(); }
  static HWY_INLINE W LoadWeights(const int8_t* p) {
    const x256::VecI w = x256::LoadU(p);
    return {x256::AbsI8(w), w};
  }
  // acc + Σ w·x over the step, in i32 lanes (which lane takes which
  // product is the form's; only the sum over lanes is defined).
  static HWY_INLINE Acc DotAccumulate(Acc acc, const W& w, const int8_t* x) {
    const x256::VecI p16 = x256::MulAddPairsU8I8(w.abs, x256::ApplySign(x256::LoadU(x), w.w));
    return x256::AddI32(acc, x256::SumPairsI16(p16));
  }
  // out[k] = Σ lanes of a[k], k < 4.
  static HWY_INLINE void SumLanesOf4(const Acc* a, int32_t* out) { x256::SumLanesOf4(a, out); }
};

// The int4 row tiles' step (dense_i4-inl.h) on AVX2 and AVX-512: one block
// of 16 bytes (LoadNibbles16) against 32 activation bytes, maddubs pairs (n
// ≤ 15, |x| ≤ 128: at most 3840) and madd with ones to i32.
struct I4DotStep256 {
  using Acc = x256::VecI;  // i32 sums of one group
  using W = x256::VecI;    // a block's nibbles
  using F = x256::VecF;    // f32 sums over groups
  static HWY_INLINE F ZeroSums() { return x256::ZeroF(); }
  static HWY_INLINE W LoadNibbles(const uint8_t* p) { return x256::LoadNibbles16(p); }
  // acc + Σ n·x over the block, in i32 lanes.
  static HWY_INLINE Acc DotAccumulate(Acc acc, const W& w, const int8_t* x) {
    return x256::AddI32(acc, x256::SumPairsI16(x256::MulAddPairsU8I8(w, x256::LoadU(x))));
  }
  // A group's sum starting at c (lane 0).
  static HWY_INLINE Acc StartSum(int32_t c) { return x256::Lane0I32(c); }
  // f + float(acc)·scale, fused.
  static HWY_INLINE F MulAddScaled(Acc acc, float scale, F f) {
    return x256::MulAdd(x256::ToF32(acc), x256::SetF32(scale), f);
  }
  static HWY_INLINE float SumOfLanes(F f) { return x256::SumOfLanes(f); }
};

}  // namespace isa
}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();
