// The one place that picks, per Highway target, the named operations that
// Highway 1.0.3 cannot express (design.md, principle 7): dot products of
// bytes, the sign trick, lane transposes, horizontal sums in a fixed order,
// AVX512-VNNI's vpdpbusd and vpdpwssd, a prefetch into L2. Each is a small
// documented inline function in the file of its instruction set, the only
// files with intrinsics in the kernels; kernels call them by name. Include
// from a kernel family's -inl.h (kernels/common-inl.h includes it).
//
//   file                 targets                      holds
//   x86_ssse3-inl.h      SSSE3, SSE4                  isa::x128; I8DotStep128, I4DotStep128
//   x86_avx2-inl.h       AVX2 and every AVX-512 one   isa::x256; I8DotStep256, I4DotStep256
//   x86_avx3-inl.h       AVX-512 (AVX3 and better)    isa::x512; I8DotStep512
//   x86_avx3_vnni-inl.h  AVX-512 (AVX3 and better)    vpdpbusd, vpdpwssd (x512::, x256::
//                                                     DotU8I8Accumulate, x512::DotI16Accumulate,
//                                                     I8DotStepVnni): only where
//                                                     Avx512VnniEnabled() (dispatch/)
//   arm_neon-inl.h       NEON on arm64                isa::neon; I8DotStepNeon, I4DotStepNeon
//   (none)               EMU128, SCALAR, SVE, RVV...  nothing: the kernels keep their Highway or
//                                                     scalar forms there
//
// The steps (I8DotStep, I4DotStep below: the target's widest) are what the
// int8 and int4 row tiles are written with on every target that has them.
// The x86-only kernel forms (GEMMs, the VNNI mat-vecs, the int4 panels) are
// written with the operations of isa::x256 and isa::x512, plain loads,
// stores and arithmetic included, on raw registers: Highway 1.0.3 wraps a
// vector in a struct, and with those structs GCC kept the GEMMs'
// accumulators in memory and contracted the finishing multiply-adds into
// FMAs where it had not before (different rounding); on raw registers the
// kernels compile to the operations, in the order, they had when they held
// the intrinsics themselves, and give the same outputs bit for bit.
//
// The RECUR_ISA_* predicates below say which files the target being
// compiled has; kernels choose their forms with them (#if RECUR_ISA_AVX3)
// rather than by comparing HWY_TARGET. What differs per target but is not
// an operation (the registers a tile plans with, whether masked loads
// fault) is a constant here, after the includes.

// Predicates, evaluated where they are used, with the HWY_TARGET then being
// compiled (so they sit outside the per-target toggle).
#ifndef RECUR_KERNELS_ISA_PREDICATES_H_
#define RECUR_KERNELS_ISA_PREDICATES_H_
#include "hwy/highway.h"
// x86_avx2-inl.h: AVX2 and every AVX-512 target.
#define RECUR_ISA_AVX2 (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2)
// x86_avx3-inl.h and x86_avx3_vnni-inl.h: the AVX-512 (F, BW, DQ, VL) targets.
#define RECUR_ISA_AVX3 (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3)
// x86_ssse3-inl.h: the 128-bit x86 targets with pmaddubsw.
#define RECUR_ISA_SSSE3 (HWY_ARCH_X86 && (HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3))
// arm_neon-inl.h: NEON on arm64 (not SVE).
#define RECUR_ISA_NEON (HWY_ARCH_ARM_A64 && HWY_TARGET == HWY_NEON)
// isa::I8DotStep and isa::I4DotStep exist.
#define RECUR_ISA_DOT_STEPS (RECUR_ISA_AVX2 || RECUR_ISA_SSSE3 || RECUR_ISA_NEON)
#endif  // RECUR_KERNELS_ISA_PREDICATES_H_

#if defined(RECUR_KERNELS_ISA_ISA_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_ISA_ISA_INL_H_
#undef RECUR_KERNELS_ISA_ISA_INL_H_
#else
#define RECUR_KERNELS_ISA_ISA_INL_H_
#endif

#include <cstddef>

#include "hwy/cache_control.h"
#include "hwy/highway.h"

// The per-ISA files have no guard of their own: they are included here,
// once per target, and refuse to be included from anywhere else. GCC's
// intrinsics headers make "undefined" vectors as __Y = __Y, which GCC
// reports as uninitialized once they are inlined through functions such as
// the operations; Highway's x86 headers silence it the same way.
HWY_DIAGNOSTICS(push)
#if HWY_COMPILER_GCC_ACTUAL
HWY_DIAGNOSTICS_OFF(disable : 4701, ignored "-Wuninitialized")
HWY_DIAGNOSTICS_OFF(disable : 4703 6001 26494, ignored "-Wmaybe-uninitialized")
#endif
#define RECUR_KERNELS_ISA_SELECTING 1
#if RECUR_ISA_SSSE3
#include "kernels/isa/x86_ssse3-inl.h"
#endif
#if RECUR_ISA_AVX2
#include "kernels/isa/x86_avx2-inl.h"
#endif
#if RECUR_ISA_AVX3
#include "kernels/isa/x86_avx3-inl.h"
#include "kernels/isa/x86_avx3_vnni-inl.h"
#endif
#if RECUR_ISA_NEON
#include "kernels/isa/arm_neon-inl.h"
#endif
#undef RECUR_KERNELS_ISA_SELECTING
HWY_DIAGNOSTICS(pop)

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace isa {

// The dot-product steps of the int8 and int4 row tiles (dense_i8dot-inl.h,
// dense_i4-inl.h).
#if RECUR_ISA_AVX3
using I8DotStep = I8DotStep512;
using I4DotStep = I4DotStep256;  // 256 bits keep a group of 32 in one step
#elif RECUR_ISA_AVX2
using I8DotStep = I8DotStep256;
using I4DotStep = I4DotStep256;
#elif RECUR_ISA_SSSE3
using I8DotStep = I8DotStep128;
using I4DotStep = I4DotStep128;
#elif RECUR_ISA_NEON
using I8DotStep = I8DotStepNeon;
using I4DotStep = I4DotStepNeon;
#endif

// Prefetches the cache line at p of data a kernel reads once (a mat-vec's
// weights, streamed from DRAM once a token): into the L2 cache from AVX2 on
// (prefetcht1), hwy::Prefetch elsewhere. dense_bench rows on AMD Zen 4
// (AVX3_VNNI, KVM), one-row f16 layers streamed 8 KiB ahead: 46-54% of the
// read probe with prefetchnta, 76-94% with prefetcht1; q4_k tiles 36-50%
// with prefetcht0 (or none), 74-108% with prefetcht1 (docs/performance.md).
// On Zen 5 prefetchnta was measured best for the f16 stream; prefetcht1
// was not measured there. (Unscaled rows, f16 among them, are no longer
// prefetched: StreamRows in dense/dense-inl.h.)
HWY_INLINE void PrefetchOnce(const void* p) {
#if RECUR_ISA_AVX2
  x256::PrefetchToL2(p);
#else
  hwy::Prefetch(p);
#endif
}

// Vector registers a tile of accumulators may plan with: 32 with AVX-512 and
// on arm64, 16 on the other x86 targets (and elsewhere, where no tile
// depends on it).
inline constexpr size_t kVectorRegisters = RECUR_ISA_AVX3 || HWY_ARCH_ARM_A64 ? 32 : 16;

// Whether hn::MaskedLoad and hn::BlendedStore leave the memory of inactive
// lanes untouched (AVX2 and AVX-512 masked moves, SVE predicated ld1/st1).
// Highway 1.0.3's MaskedLoad does a full aligned Load on SSE4, SSSE3,
// EMU128 and SCALAR, which reads past an array's end.
inline constexpr bool kMaskedLoadSkipsInactiveLanes =
    RECUR_ISA_AVX2 || (HWY_ARCH_ARM_A64 && HWY_HAVE_SCALABLE);

// Whether hn::PromoteTo widens f16 to f32 in one instruction (x86 F16C from
// AVX2, NEON's fcvtl); elsewhere Highway 1.0.3 widens with bit arithmetic.
inline constexpr bool kF16WidensInOneInstruction = RECUR_ISA_AVX2 || RECUR_ISA_NEON;
// Whether hn::DemoteTo narrows f32 to f16 in one instruction, to nearest,
// ties to even (vcvtps2ph, NEON's fcvtn); elsewhere Highway 1.0.3 narrows
// with bit arithmetic that truncates.
inline constexpr bool kF16NarrowsToNearestEven = RECUR_ISA_AVX2 || RECUR_ISA_NEON;

}  // namespace isa
}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_ISA_ISA_INL_H_ toggle
