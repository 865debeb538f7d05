// Scalar reference for LinearAttentionStep (the spec; used by tests).
// S and z are stored in float (S updated as if by a fused multiply-add); the
// read-out num / den is accumulated in double.
#ifndef RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_REF_H_
#define RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_REF_H_

#include <cstddef>

namespace recur::kernels::ref {

// Same contract as recur::kernels::LinearAttentionStep (linear_attention.h).
inline void LinearAttentionStep(const float* phi_q, const float* phi_k, const float* v,
                                size_t c, size_t m, float eps, float* s, float* z, float* out) {
  for (size_t j = 0; j < c; ++j) {
    for (size_t k = 0; k < m; ++k) {
      s[j * m + k] = static_cast<float>(s[j * m + k] + static_cast<double>(phi_k[j]) * v[k]);
    }
    z[j] += phi_k[j];
  }
  double den = 0.0;
  for (size_t j = 0; j < c; ++j) den += static_cast<double>(phi_q[j]) * z[j];
  den += eps;
  for (size_t k = 0; k < m; ++k) {
    double num = 0.0;
    for (size_t j = 0; j < c; ++j) num += static_cast<double>(phi_q[j]) * s[j * m + k];
    out[k] = static_cast<float>(num / den);
  }
}

}  // namespace recur::kernels::ref

#endif  // RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_REF_H_
