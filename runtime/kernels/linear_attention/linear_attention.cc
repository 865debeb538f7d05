// Dynamic dispatch for LinearAttentionStep (linear_attention-inl.h).
#include "kernels/linear_attention/linear_attention.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/linear_attention/linear_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/linear_attention/linear_attention-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

void LinearAttentionStepImpl(const float* phi_q, const float* phi_k, const float* v, size_t c,
                             size_t m, float eps, float* s, float* s_comp, float* z,
                             float* z_comp, float* out) {
  LinearAttentionStep(phi_q, phi_k, v, c, m, eps, s, s_comp, z, z_comp, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(LinearAttentionStepImpl);

void LinearAttentionStep(const float* phi_q, const float* phi_k, const float* v, size_t c,
                         size_t m, float eps, float* s, float* s_comp, float* z, float* z_comp,
                         float* out) {
  HWY_DYNAMIC_DISPATCH(LinearAttentionStepImpl)(phi_q, phi_k, v, c, m, eps, s, s_comp, z, z_comp,
                                                out);
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
