// Causal linear attention, recurrent form (docs/attention-math.md §3), one head.
#ifndef RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_H_
#define RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_H_

#include <cstddef>

namespace recur::impl::kernels {

// One step of one head, given feature-mapped query/key:
//   S += φk ⊗ v            s: (c, m) row-major, updated in place
//   z += φk                z: (c), updated in place
//   out = (φqᵀ S) / (φq·z + eps)     out: (m)
// The update happens before the read, so position i attends to itself.
// S and z are compensated (Kahan) sums: s_comp (c, m) and z_comp (c) carry
// the low-order parts that the float additions lose, so that a sum of
// millions of terms stays as accurate as one of a few (docs/reliability.md "Long runs").
// s_comp and z_comp both null: plain float sums (S += φk·v as one fused
// multiply-add where the target has one), which read and write half the
// state; for sequences short enough that rounding does not build up.
// phi_q, phi_k: (c); v: (m). out must not overlap the other arrays, and s, z
// and their compensations must not overlap the inputs or each other (phi_q
// may equal phi_k). No alignment required.
void LinearAttentionStep(const float* phi_q, const float* phi_k, const float* v, size_t c,
                         size_t m, float eps, float* s, float* s_comp, float* z, float* z_comp,
                         float* out);

}  // namespace recur::impl::kernels

#endif  // RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_H_
