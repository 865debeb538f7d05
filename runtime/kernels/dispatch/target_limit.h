// A ceiling on the SIMD targets dynamic dispatch may pick, so that one
// machine runs the kernels a smaller CPU would: "AVX2" makes an AVX-512
// machine dispatch as an AVX2-only one would (docs/testing.md, "Running as
// another CPU"). Highway's targets are ordered best first within an
// architecture; the ceiling disables every target better than the named one.
#ifndef RECUR_KERNELS_DISPATCH_TARGET_LIMIT_H_
#define RECUR_KERNELS_DISPATCH_TARGET_LIMIT_H_

#include <string>

#include "core/status.h"

namespace recur::impl::kernels {

// The environment variable read by ApplyTargetLimitFromEnvironment.
inline constexpr char kMaxSimdTargetVariable[] = "RECUR_MAX_SIMD_TARGET";

// Sets the ceiling to the target `name` (Highway's name, case-insensitive,
// one this build compiles: TargetNamesOfBuild); null or "" lifts it. A name
// above what the CPU has changes nothing. Errors: kInvalidArgument naming the
// unknown target and the known ones (the ceiling is then unchanged). Not
// thread-safe against kernels running on other threads: call it between runs.
Status SetMaxSimdTarget(const char* name);

// Reads kMaxSimdTargetVariable once per process and applies it; later calls
// return the first call's result. Thread-safe.
Status ApplyTargetLimitFromEnvironment();

// The targets this build compiles kernels for, best first, e.g.
// "AVX3_VNNI, AVX3, AVX2, SSE4, SSSE3, EMU128".
std::string TargetNamesOfBuild();

// AVX3_VNNI is AVX3 with the int8 and int4 tiles on AVX512-VNNI (vpdpbusd)
// where the CPU has it; not one of Highway's targets (its AVX3_DL enables the
// VEX form, AVX-VNNI, which AVX-512 CPUs such as Zen 4 lack). A ceiling of
// AVX3 or below turns those tiles off; "AVX3_VNNI" caps Highway at AVX3.
inline constexpr char kAvx3VnniName[] = "AVX3_VNNI";

// Whether the CPU has AVX512-VNNI (and AVX-512, so the AVX3 target runs).
bool CpuHasAvx512Vnni();

// Whether the AVX3 kernels use AVX512-VNNI now: the CPU has it and the
// ceiling allows it. Thread-safe.
bool Avx512VnniEnabled();

// Allows or forbids AVX512-VNNI below any ceiling (SetMaxSimdTarget sets
// it too); for tests that run both forms. Not thread-safe against kernels
// running on other threads.
void SetAvx512VnniAllowed(bool allowed);

}  // namespace recur::impl::kernels

#endif  // RECUR_KERNELS_DISPATCH_TARGET_LIMIT_H_
