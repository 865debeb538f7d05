// Dense layer kernels (batched mat-vec / small mat-mat), Highway dispatch.
#ifndef RECUR_KERNELS_DENSE_DENSE_H_
#define RECUR_KERNELS_DENSE_DENSE_H_

#include <cstddef>

namespace recur::kernels {

// y[b, o] = (accumulate ? y[b, o] : 0) + bias[o] + Σ_i x[b, i] · w[o, i]
// for b < batch, o < out.
//   x: (batch, in), row stride x_stride floats
//   w: (out, in) row-major, PyTorch nn.Linear layout; rows contiguous
//   bias: (out) or nullptr
//   y: (batch, out), row stride y_stride floats; must not overlap x or w
// No alignment is required of any pointer. Sums are accumulated in f32.
// Thread-safe; for batch >= 32 on AVX-512 it may allocate a per-thread scratch
// buffer (kept for reuse, <= ~1 MiB unless 32·in floats is larger).
void Dense(const float* x, size_t x_stride, size_t batch, const float* w, const float* bias,
           size_t in, size_t out, float* y, size_t y_stride, bool accumulate);

}  // namespace recur::kernels

#endif  // RECUR_KERNELS_DENSE_DENSE_H_
