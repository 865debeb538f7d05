// CpuRelax: the hint a thread gives the CPU while it spins on a flag (x86
// PAUSE, arm64 YIELD; nothing elsewhere), for the thread pool's waits. The
// one instruction-set-specific operation outside kernels/isa/: core/ sits
// below kernels/ and cannot include it (docs/design.md, principle 7).
#ifndef RECUR_CORE_CPU_RELAX_H_
#define RECUR_CORE_CPU_RELAX_H_

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace recur::impl {

// Tells the CPU the thread is spin-waiting: x86's PAUSE takes 10-140 cycles
// and frees the core's resources for its sibling thread.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

}  // namespace recur::impl

#endif  // RECUR_CORE_CPU_RELAX_H_
