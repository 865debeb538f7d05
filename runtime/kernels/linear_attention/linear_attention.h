// Causal linear attention, recurrent form (attention-math.md §3), one head.
#ifndef RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_H_
#define RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_H_

#include <cstddef>

namespace recur::kernels {

// One step of one head, given feature-mapped query/key:
//   S += φk ⊗ v            s: (c, m) row-major, updated in place
//   z += φk                z: (c), updated in place
//   out = (φqᵀ S) / (φq·z + eps)     out: (m)
// The update happens before the read, so position i attends to itself.
// phi_q, phi_k: (c); v: (m). out must not overlap the other arrays, and s, z
// must not overlap the inputs (phi_q may equal phi_k). No alignment required.
void LinearAttentionStep(const float* phi_q, const float* phi_k, const float* v, size_t c,
                         size_t m, float eps, float* s, float* z, float* out);

}  // namespace recur::kernels

#endif  // RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_H_
