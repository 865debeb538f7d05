// Scalar reference for LinearAttentionStep (the spec; used by tests).
// S and z are stored in float and updated by compensated (Kahan) addition:
// y = term − comp (S's term φk·v − comp rounded once, as by a fused
// multiply-add), sum' = sum + y, comp' = (sum' − sum) − y. The read-out
// num / den uses the float sums, accumulated in double. Null compensations:
// plain sums, sum' = float(double(φk·v) + sum) (the product exact in double;
// the sum rounded to double, then to float).
#ifndef RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_REF_H_
#define RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_REF_H_

#include <cstddef>

#include "kernels/elementwise/elementwise_ref.h"

namespace recur::impl::kernels::ref {

// Same contract as recur::impl::kernels::LinearAttentionStep (linear_attention.h).
inline void LinearAttentionStep(const float* phi_q, const float* phi_k, const float* v,
                                size_t c, size_t m, float eps, float* s, float* s_comp, float* z,
                                float* z_comp, float* out) {
  for (size_t j = 0; j < c; ++j) {
    if (z_comp == nullptr) {  // (s_comp may be null when m = 0)
      for (size_t k = 0; k < m; ++k) {
        s[j * m + k] = static_cast<float>(static_cast<double>(phi_k[j]) * v[k] + s[j * m + k]);
      }
      z[j] += phi_k[j];
      continue;
    }
    for (size_t k = 0; k < m; ++k) {
      float* sum = s + j * m + k;
      float* comp = s_comp + j * m + k;
      const float y = static_cast<float>(static_cast<double>(phi_k[j]) * v[k] - *comp);
      const float t = *sum + y;
      *comp = (t - *sum) - y;
      *sum = t;
    }
    CompensatedAdd(phi_k + j, z + j, z_comp + j, 1);
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

}  // namespace recur::impl::kernels::ref

#endif  // RECUR_KERNELS_LINEAR_ATTENTION_LINEAR_ATTENTION_REF_H_
