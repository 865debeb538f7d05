// Scalar reference for Dense (the spec; used by tests). Accumulates in double.
#ifndef RECUR_KERNELS_DENSE_DENSE_REF_H_
#define RECUR_KERNELS_DENSE_DENSE_REF_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/dense/dense.h"

namespace recur::impl::kernels::ref {

// Same contract as recur::impl::kernels::Dense (dense.h).
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

// bfloat16 bits → f32: the bits are the top half of the f32 (exact).
inline float Bf16ToF32(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// IEEE binary16 bits → f32 (exact: every half is an f32), including
// subnormals (mantissa·2^-24), ±0, ±Inf and NaN.
inline float F16ToF32(uint16_t bits) {
  const bool negative = (bits & 0x8000) != 0;
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity()
                              : std::numeric_limits<float>::quiet_NaN();
  } else {
    magnitude = std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  }
  return negative ? -magnitude : magnitude;
}

// Weight w[o, i] of `w` decoded to double: the f32/f16/bf16 value, or
// scales[o]·q for int8, or scale[o, i/group]·q for int4 and q8_0 (exact in
// double).
inline double DecodeWeight(const DenseWeights& w, size_t o, size_t i) {
  const size_t k = o * w.in + i;
  switch (w.type) {
    case WeightType::kF32: return static_cast<const float*>(w.weight)[k];
    case WeightType::kF16: return F16ToF32(static_cast<const uint16_t*>(w.weight)[k]);
    case WeightType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(w.weight)[k]);
    case WeightType::kI8:
      return static_cast<double>(w.scales[o]) * static_cast<const int8_t*>(w.weight)[k];
    case WeightType::kI4: {
      const size_t groups = w.in / w.group;
      const auto* row = static_cast<const uint8_t*>(w.weight) + o * (w.in / 2);
      return static_cast<double>(F16ToF32(w.group_scales[o * groups + i / w.group])) *
             I4Value(row, i);
    }
    case WeightType::kQ8_0: {
      const size_t groups = w.in / w.group;
      return static_cast<double>(F16ToF32(w.group_scales[o * groups + i / w.group])) *
             static_cast<const int8_t*>(w.weight)[k];
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// Same contract as recur::impl::kernels::Dense(x, x_stride, batch, DenseWeights, ...).
inline void Dense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                  float* y, size_t y_stride, bool accumulate) {
  std::vector<double> row(w.in);
  for (size_t o = 0; o < w.out; ++o) {
    for (size_t i = 0; i < w.in; ++i) row[i] = DecodeWeight(w, o, i);
    for (size_t b = 0; b < batch; ++b) {
      const float* xb = x + b * x_stride;
      double s = 0.0;
      for (size_t i = 0; i < w.in; ++i) s += static_cast<double>(xb[i]) * row[i];
      if (w.bias) s += w.bias[o];
      if (accumulate) s += y[b * y_stride + o];
      y[b * y_stride + o] = static_cast<float>(s);
    }
  }
}

// Same contract as recur::impl::kernels::DenseI8DotQuantized (dense.h): the sums
// exact (64-bit), then the f32 operations the kernels do, in their order.
inline void DenseI8DotQuantized(const int8_t* q, size_t q_stride, const float* q_scales,
                                size_t batch, const DenseWeights& w, float* y, size_t y_stride,
                                bool accumulate) {
  const auto* qw = static_cast<const int8_t*>(w.weight);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t o = 0; o < w.out; ++o) {
      int64_t sum = 0;
      for (size_t i = 0; i < w.in; ++i) {
        sum += int64_t{q[b * q_stride + i]} * qw[o * size_t{w.in} + i];
      }
      float s = static_cast<float>(sum) * (w.scales[o] * q_scales[b]);
      if (w.bias) s += w.bias[o];
      float& yo = y[b * y_stride + o];
      yo = accumulate ? yo + s : s;
    }
  }
}

// Same contract as recur::impl::kernels::DenseI4DotQuantized (dense.h), computed
// exactly (64-bit integer sums per group, double after), rounded once:
//   y = (accumulate ? y : 0) + bias[o] + s_b·Σ_g scale[o, g]·Σ_{i in g} q_w·q_b.
inline void DenseI4DotQuantized(const int8_t* q, size_t q_stride, const float* q_scales,
                                size_t batch, const DenseWeights& w, float* y, size_t y_stride,
                                bool accumulate) {
  const size_t groups = w.in == 0 ? 0 : w.in / w.group;
  for (size_t b = 0; b < batch; ++b) {
    for (size_t o = 0; o < w.out; ++o) {
      const auto* row = static_cast<const uint8_t*>(w.weight) + o * (w.in / 2);
      double s = 0.0;
      for (size_t g = 0; g < groups; ++g) {
        int64_t sum = 0;
        for (size_t i = g * w.group; i < (g + 1) * w.group; ++i) {
          sum += int64_t{q[b * q_stride + i]} * I4Value(row, i);
        }
        s += static_cast<double>(F16ToF32(w.group_scales[o * groups + g])) * sum;
      }
      s *= q_scales[b];
      if (w.bias) s += w.bias[o];
      if (accumulate) s += y[b * y_stride + o];
      y[b * y_stride + o] = static_cast<float>(s);
    }
  }
}

}  // namespace recur::impl::kernels::ref

#endif  // RECUR_KERNELS_DENSE_DENSE_REF_H_
