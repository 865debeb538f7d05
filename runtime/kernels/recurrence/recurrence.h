// The gated recurrence family, one step of one head (docs/attention-math.md,
// "The gated recurrence family"): a state S per head updated by a decay, a
// low-rank correction and a rank-one write, then read by a query.
#ifndef RECUR_KERNELS_RECURRENCE_RECURRENCE_H_
#define RECUR_KERNELS_RECURRENCE_RECURRENCE_H_

#include <cstddef>

namespace recur::impl::kernels {

// The operands of one step; sizes in the comments. Which update rule a step
// is follows from which are given:
//   decay       w (dk) per key dimension (RWKV-7, GLA), or w null and the
//               scalar w_scalar (Mamba2, RetNet: its γ; 1 for none, DeltaNet)
//   low rank    a and b (dk), both or neither: the diagonal-plus-low-rank
//               (generalised delta) rule of RWKV-7 (a = −κ̂, b = κ̂ ⊙ α) and
//               the delta rule of (Gated) DeltaNet (a = k, b = −β·decay·k)
//   write       v (dv) ⊗ k (dk)
//   read        r (dk): y = S r (y: dv)
struct RecurrenceStepArgs {
  size_t dk = 0, dv = 0;
  const float* w = nullptr;  // (dk) or null
  float w_scalar = 1.0f;     // the decay when w is null
  const float* a = nullptr;  // (dk) or null (then b is null too)
  const float* b = nullptr;  // (dk) or null
  const float* k = nullptr;  // (dk)
  const float* v = nullptr;  // (dv)
  const float* r = nullptr;  // (dk)
  // Where S is, which picks the loop: warm, S was updated by the step before
  // (a prefill's later positions: it is in L1), and four rows at a time share
  // their loads of w, k, b and r; cold (a decode step, a call's first
  // position), S streams from the caches or memory one row at a time, which
  // reads it up to 2.7× faster (docs/performance.md, "The state one row at a
  // time"). S' is the same either way; y_i's lanes are summed in another
  // order (within the contract's float sums).
  bool warm = false;
};

// S ← S·diag(w) + (S a) bᵀ + v kᵀ, then y = S r, for one head:
//   S'[i][j] = S[i][j]·w_j + (Σ_m S[i][m]·a_m)·b_j + v_i·k_j,   y_i = Σ_j S'[i][j]·r_j
// with S (dv, dk) row-major (a row per value dimension, as RWKV-7's reference
// keeps it), updated in place; S a reads S before the decay. Sums and products
// in float with fused multiply-adds where the target has them. s and y must
// not overlap each other or the operands; no alignment is required. dk or dv
// may be 0 (y gets dv zeros, S is empty).
void RecurrenceStep(const RecurrenceStepArgs& args, float* s, float* y);

}  // namespace recur::impl::kernels

#endif  // RECUR_KERNELS_RECURRENCE_RECURRENCE_H_
