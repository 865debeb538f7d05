// AVX512-VNNI's dot product of bytes (vpdpbusd) for Highway's AVX-512
// targets, which Highway 1.0.3 neither names nor compiles for (its AVX3
// target's attributes lack avx512vnni). Call these only where
// Avx512VnniEnabled() (dispatch/target_limit.h): the kernels check it once
// per call and run their other AVX-512 forms otherwise.
//
// Inline asm rather than _mm512_dpbusd_epi32: a function with the
// avx512vnni attribute of its own would keep the kernels' tiles from
// inlining into it. The 256-bit form is forced to the EVEX encoding (the VEX
// one is AVX-VNNI, which Zen 4 lacks). Included by kernels/isa/isa-inl.h
// only.
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
// acc[j] += Σ_{k<4} u[4j+k]·s[4j+k] (i32 lanes j), u unsigned and s signed
// bytes, the sum wrapping (no saturation).
HWY_INLINE VecI DotU8I8Accumulate(VecI acc, VecI u, VecI s) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}

// acc[j] += Σ_{k<4} u[4j+k]·s[k]: the 4 signed bytes at s broadcast to
// every lane from memory (EVEX embedded broadcast).
HWY_INLINE VecI DotU8I8BroadcastAccumulate(VecI acc, VecI u, const int8_t* s) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0"
          : "+v"(acc)
          : "v"(u), "m"(*reinterpret_cast<const int32_t*>(s)));
  return acc;
}

// acc[j] += a[2j]·b[2j] + a[2j+1]·b[2j+1] (i16 lanes, i32 lanes j): vpmaddwd
// and the add in one operation (vpdpwssd), the sum wrapping.
HWY_INLINE VecI DotI16Accumulate(VecI acc, VecI a, VecI b) {
  __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// acc[j] += a[2j]·s[0] + a[2j+1]·s[1] (i16 lanes of a, i32 lanes j): the two
// i16 at s broadcast to every lane from memory (vpdpwssd), the sum wrapping.
HWY_INLINE VecI DotI16BroadcastAccumulate(VecI acc, VecI a, const int16_t* s) {
  __asm__("vpdpwssd %2%{1to16%}, %1, %0"
          : "+v"(acc)
          : "v"(a), "m"(*reinterpret_cast<const int32_t*>(s)));
  return acc;
}
}  // namespace x512

namespace x256 {
// As x512::DotU8I8Accumulate on 8 i32 lanes, EVEX-encoded.
HWY_INLINE VecI DotU8I8Accumulate(VecI acc, VecI u, VecI s) {
  __asm__("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}
}  // namespace x256

// The int8 row tiles' step (dense_i8dot-inl.h) with VNNI: vpdpbusd of w +
// 128 (w xor 0x80, unsigned) and x, four products a lane. Σ (w + 128)·x =
// Σ w·x + 128·Σ x: the caller starts or corrects the sums by −128·Σ x.
// |sum| ≤ 255·127·in < 2^31.
struct I8DotStepVnni {
  static constexpr size_t kStep = 64;  // bytes of a row per step
  using Acc = x512::VecI;
  using W = x512::VecI;  // w + 128
  static HWY_INLINE Acc Zero() { return x512::ZeroI(); }
  static HWY_INLINE W LoadWeights(const int8_t* p) {
    return x512::Xor(x512::LoadU(p), x512::SetI8(-128));
  }
  // acc + Σ (w + 128)·x over the step, in i32 lanes.
  static HWY_INLINE Acc DotAccumulate(Acc acc, const W& w, const int8_t* x) {
    return x512::DotU8I8Accumulate(acc, w, x512::LoadU(x));
  }
  // out[k] = Σ lanes of a[k], k < 4.
  static HWY_INLINE void SumLanesOf4(const Acc* a, int32_t* out) { x512::SumLanesOf4(a, out); }
};

}  // namespace isa
}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();
