// Scalar reference for Dense (the spec; used by tests). Accumulates in double.
#ifndef RECUR_KERNELS_DENSE_DENSE_REF_H_
#define RECUR_KERNELS_DENSE_DENSE_REF_H_

#include <cstddef>

namespace recur::kernels::ref {

// Same contract as recur::kernels::Dense (dense.h).
inline void Dense(const float* x, size_t x_stride, size_t batch, const float* w,
                  const float* bias, size_t in, size_t out, float* y, size_t y_stride,
                  bool accumulate) {
  for (size_t b = 0; b < batch; ++b) {
    const float* xb = x + b * x_stride;
    float* yb = y + b * y_stride;
    for (size_t o = 0; o < out; ++o) {
      const float* wo = w + o * in;
      double s = 0.0;
      for (size_t i = 0; i < in; ++i) s += static_cast<double>(xb[i]) * wo[i];
      if (bias) s += bias[o];
      if (accumulate) s += yb[o];
      yb[o] = static_cast<float>(s);
    }
  }
}

}  // namespace recur::kernels::ref

#endif  // RECUR_KERNELS_DENSE_DENSE_REF_H_
