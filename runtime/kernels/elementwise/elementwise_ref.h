// Scalar references for the element-wise kernels (the spec; used by tests).
// Computed in double, rounded to float on store.
#ifndef RECUR_KERNELS_ELEMENTWISE_ELEMENTWISE_REF_H_
#define RECUR_KERNELS_ELEMENTWISE_ELEMENTWISE_REF_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/elementwise/elementwise.h"  // kQuantizeS8MinMax

namespace recur::impl::kernels::ref {

inline void Relu(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];  // NaN stays NaN
}

inline void Gelu(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440)));
  }
}

inline void EluPlusOne(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(v > 0.0 ? v + 1.0 : std::exp(v));
  }
}

inline void Sigmoid(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(1.0 / (1.0 + std::exp(-double{x[i]})));
}

inline void Silu(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    y[i] = static_cast<float>(double{x[i]} / (1.0 + std::exp(-double{x[i]})));
  }
}

inline void CausalConvSilu(const float* const* in, const float* weight, const float* bias,
                           size_t kernel, float* y, size_t n) {
  for (size_t c = 0; c < n; ++c) {
    double s = bias ? double{bias[c]} : 0.0;
    for (size_t j = 0; j < kernel; ++j) s += double{weight[c * kernel + j]} * in[j][c];
    y[c] = static_cast<float>(s / (1.0 + std::exp(-s)));
  }
}

inline void AffineExp(const float* x, float a, float b, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(std::exp(double{a} * x[i] + b));
}

inline void Scale(const float* x, float a, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = a * x[i];
}

inline float QuantizeS8(const float* x, int8_t* q, size_t n) {
  float max = 0.0f;
  for (size_t i = 0; i < n; ++i) max = std::max(max, std::fabs(x[i]));
  if (max < kQuantizeS8MinMax) {  // 127 / max would overflow
    std::fill(q, q + n, int8_t{0});
    return 0.0f;
  }
  const float inv = 127.0f / max;
  for (size_t i = 0; i < n; ++i) {
    q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
  }
  return max / 127.0f;
}

inline void AffineMax(const float* x, float a, float b, float* m, size_t n) {
  for (size_t i = 0; i < n; ++i) m[i] = std::max(m[i], a * x[i] + b);
}
// In double; num and den accumulate onto their f32 inputs.
inline void AffineExpAccumulate(const float* x, float a, float b, const float* m, const float* v,
                                double* num, double* den, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double e = std::exp(double{a} * x[i] + b - m[i]);
    num[i] += e * v[i];
    den[i] += e;
  }
}
inline void Add(const float* a, const float* b, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

inline void CompensatedAdd(const float* x, float* sum, float* comp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float y = x[i] - comp[i];
    const float t = sum[i] + y;
    comp[i] = (t - sum[i]) - y;
    sum[i] = t;
  }
}

inline void LayerNorm(const float* x, const float* gamma, const float* beta, float eps, float* y,
                      size_t n) {
  if (n == 0) return;
  double mean = 0.0;
  for (size_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (size_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<double>(n);
  const double rstd = 1.0 / std::sqrt(var + eps);
  for (size_t i = 0; i < n; ++i) {
    double v = (x[i] - mean) * rstd;
    if (gamma) v *= gamma[i];
    if (beta) v += beta[i];
    y[i] = static_cast<float>(v);
  }
}

inline void RmsNorm(const float* x, const float* gamma, float eps, float* y, size_t n) {
  if (n == 0) return;
  double sq = 0.0;
  for (size_t i = 0; i < n; ++i) sq += double{x[i]} * x[i];
  const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * rstd * (gamma ? gamma[i] : 1.0));
}

inline void Softmax(const float* x, float* y, size_t n) {
  if (n == 0) return;
  double mx = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; ++i) mx = std::max<double>(mx, x[i]);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(std::exp(x[i] - mx) / sum);
}

inline void LogSoftmax(const float* x, float* y, size_t n) {
  if (n == 0) return;
  double mx = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; ++i) mx = std::max<double>(mx, x[i]);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] - lse);
}

inline double Dot(const float* x, const float* y, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * y[i];
  return s;
}

}  // namespace recur::impl::kernels::ref

#endif  // RECUR_KERNELS_ELEMENTWISE_ELEMENTWISE_REF_H_
