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

// ---------------------------------------------------------------------------
// K-quant blocks (recur.fbs has their layouts): ggml's dequantize_row_q4_K,
// _q6_K and _q5_K, bit for bit. A Q4_K or Q5_K weight is f32(d·sc)·q −
// f32(dmin·m) rounded once: d·sc and dmin·m are exact in f32 (an 11-bit
// half significand times a 6-bit integer), and so is their product with a
// 4- or 5-bit q, so a fused multiply-add and ggml's multiply-then-subtract
// agree. A Q6_K weight d·scale·q is exact in f32 (11 + 7 + 5 significant
// bits).

// Little-endian half bits at p, as f32.
inline float HalfAt(const uint8_t* p) { return F16ToF32(static_cast<uint16_t>(p[0] | p[1] << 8)); }

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j (< 8)
// from the 12 scale bytes of a Q4_K or Q5_K block.
inline void KQuantScaleMin(const uint8_t* scales, size_t j, int* sc, int* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0xF) | (scales[j - 4] >> 6) << 4;
    *m = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
  }
}

// Byte offsets within a Q4_K block (ggml's block_q4_K), a Q6_K block
// (block_q6_K) and a Q5_K block (block_q5_K: d, dmin and scales as Q4_K's).
inline constexpr size_t kQ4KScales = 4, kQ4KQs = 16;
inline constexpr size_t kQ6KQh = 128, kQ6KScales = 192, kQ6KD = 208;
inline constexpr size_t kQ5KQh = 16, kQ5KQs = 48;

// Sub-block j's (d·sc, dmin·m) of a Q4_K or Q5_K block, as ggml computes them.
inline void Q4KSubBlock(const uint8_t* block, size_t j, float* dsc, float* dm) {
  int sc, m;
  KQuantScaleMin(block + kQ4KScales, j, &sc, &m);
  *dsc = HalfAt(block) * static_cast<float>(sc);
  *dm = HalfAt(block + 2) * static_cast<float>(m);
}

// The 6-bit q (0..63, before − 32) of input i (< 256) of a Q6_K block.
inline int Q6KCode(const uint8_t* block, size_t i) {
  const size_t h = i / 128, l = i % 32, quarter = (i % 128) / 32;
  const uint8_t a = block[64 * h + l + (quarter & 1) * 32];
  const int low = quarter < 2 ? a & 0xF : a >> 4;
  const int high = (block[kQ6KQh + 32 * h + l] >> (2 * quarter)) & 3;
  return low | high << 4;
}

// Weight i (< kKQuantBlock) of a block of K-quant `type`, as ggml's
// dequantize_row_* gives it.
inline float KQuantValue(WeightType type, const uint8_t* block, size_t i) {
  if (type == WeightType::kQ4_K || type == WeightType::kQ5_K) {
    const bool q5 = type == WeightType::kQ5_K;
    float dsc, dm;
    Q4KSubBlock(block, i / 32, &dsc, &dm);
    const uint8_t byte = block[(q5 ? kQ5KQs : kQ4KQs) + 32 * (i / 64) + i % 32];
    int q = (i % 64) < 32 ? byte & 0xF : byte >> 4;
    if (q5) q += ((block[kQ5KQh + i % 32] >> (i / 32)) & 1) << 4;  // bit 2c or 2c + 1
    return dsc * static_cast<float>(q) - dm;
  }
  // kQ6_K
  const float d = HalfAt(block + kQ6KD);
  const auto scale = static_cast<int8_t>(block[kQ6KScales + i / 16]);
  return d * static_cast<float>(scale) * static_cast<float>(Q6KCode(block, i) - 32);
}

// The kKQuantBlock weights of a block, y[i] = KQuantValue(type, block, i),
// in ggml's order of operations (dequantize_row_q4_K, _q6_K, _q5_K).
inline void DecodeKQuantBlock(WeightType type, const uint8_t* block, float* y) {
  if (type == WeightType::kQ5_K) {
    const uint8_t* ql = block + kQ5KQs;
    const uint8_t* qh = block + kQ5KQh;
    uint8_t u1 = 1, u2 = 2;
    for (size_t c = 0; c < 4; ++c, ql += 32, u1 <<= 2, u2 <<= 2) {
      float d1, m1, d2, m2;
      Q4KSubBlock(block, 2 * c, &d1, &m1);
      Q4KSubBlock(block, 2 * c + 1, &d2, &m2);
      for (size_t l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      }
      for (size_t l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      }
    }
    return;
  }
  if (type == WeightType::kQ4_K) {
    const uint8_t* q = block + kQ4KQs;
    for (size_t c = 0; c < 4; ++c, q += 32) {
      float d1, m1, d2, m2;
      Q4KSubBlock(block, 2 * c, &d1, &m1);
      Q4KSubBlock(block, 2 * c + 1, &d2, &m2);
      for (size_t l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (size_t l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
    return;
  }
  // kQ6_K
  const float d = HalfAt(block + kQ6KD);
  const uint8_t* ql = block;
  const uint8_t* qh = block + kQ6KQh;
  const auto* sc = reinterpret_cast<const int8_t*>(block + kQ6KScales);
  for (size_t h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
    for (size_t l = 0; l < 32; ++l) {
      const size_t is = l / 16;
      const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
      const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
      const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
      y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

// Weight w[o, i] of `w` decoded to double: the f32/f16/bf16 value, or
// scales[o]·q for int8, or scale[o, i/group]·q for int4 and q8_0 (exact in
// double), or a K-quant's f32 value (KQuantValue).
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
    case WeightType::kQ4_K:
    case WeightType::kQ6_K:
    case WeightType::kQ5_K: {
      const size_t block_bytes = Traits(w.type).block_bytes;
      const auto* row = static_cast<const uint8_t*>(w.weight) + o * WeightRowBytes(w.type, w.in);
      return KQuantValue(w.type, row + (i / kKQuantBlock) * block_bytes, i % kKQuantBlock);
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// Output o of every batch row, from w's row o decoded (`row`, w.in values).
inline void DenseOutput(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                        size_t o, const double* row, float* y, size_t y_stride, bool accumulate) {
  for (size_t b = 0; b < batch; ++b) {
    const float* xb = x + b * x_stride;
    double s = 0.0;
    for (size_t i = 0; i < w.in; ++i) s += static_cast<double>(xb[i]) * row[i];
    if (w.bias) s += w.bias[o];
    if (accumulate) s += y[b * y_stride + o];
    y[b * y_stride + o] = static_cast<float>(s);
  }
}

// Same contract as recur::impl::kernels::Dense(x, x_stride, batch, DenseWeights, ...).
inline void Dense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                  float* y, size_t y_stride, bool accumulate) {
  std::vector<double> row(w.in);
  for (size_t o = 0; o < w.out; ++o) {
    for (size_t i = 0; i < w.in; ++i) row[i] = DecodeWeight(w, o, i);
    DenseOutput(x, x_stride, batch, w, o, row.data(), y, y_stride, accumulate);
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

// ---------------------------------------------------------------------------
// Block-quantised activations (dense.h, DenseBlockQ8): ggml's quantize_row_q8_0
// (its x86 form) and quantize_row_q8_K_ref, and the sums exact.

// v (finite, >= 0) rounded to the nearest binary16, ties to even, as an f32
// (ggml's FP32_TO_FP16 read back); Inf from 65520 up.
inline float RoundToHalf(float v) {
  if (v >= 65520.0f) return std::numeric_limits<float>::infinity();
  if (v < 6.103515625e-05f) return std::rint(v * 16777216.0f) / 16777216.0f;  // subnormal half
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  u = (u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu;  // 13 bits dropped, a carry bumps the exponent
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

// Where a block's scale overflows (max |x| below 127/FLT_MAX) ggml's codes are
// those of ±Inf and NaN, and its d is 0; the codes here are 0 then, the
// products the same.

// One Q8_0 block: q[0, 32) from x[0, 32); returns d (an f16's value).
inline float QuantizeQ8_0Block(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (size_t i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  if (!std::isfinite(id)) id = 0.0f;
  for (size_t i = 0; i < 32; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  return RoundToHalf(amax / 127.0f);
}

// One Q8_K block: q[0, 256) from x[0, 256); returns d.
inline float QuantizeQ8_KBlock(const float* x, int8_t* q) {
  float amax = 0.0f, max = 0.0f;
  for (size_t i = 0; i < kKQuantBlock; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0.0f) {
    std::memset(q, 0, kKQuantBlock);
    return 0.0f;
  }
  const float iscale = -127.0f / max;
  if (!std::isfinite(iscale)) {
    std::memset(q, 0, kKQuantBlock);
    return 1.0f / iscale;
  }
  for (size_t i = 0; i < kKQuantBlock; ++i) {
    q[i] = static_cast<int8_t>(std::fmin(127.0f, std::nearbyint(iscale * x[i])));
  }
  return 1.0f / iscale;
}

// v (finite) rounded as ggml rounds an activation for f16 or bf16 weights
// (kind kF16, kBF16; dense.h): to the nearest binary16 or bfloat16, ties to
// even, as an f32 (±Inf past their ranges).
inline float RoundActivation(ActivationBlocks kind, float v) {
  if (kind == ActivationBlocks::kF16) return std::copysign(RoundToHalf(std::fabs(v)), v);
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

// The binary16 bits of v (finite) rounded to nearest, ties to even (±Inf
// from 65520 on): F16C's vcvtps2ph with round-to-nearest.
inline uint16_t F32ToF16Bits(float v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const float r = RoundToHalf(std::fabs(v));
  if (std::isinf(r)) return sign | 0x7C00;
  if (r < 6.103515625e-05f) return sign | static_cast<uint16_t>(r * 16777216.0f);  // subnormal
  uint32_t u;
  std::memcpy(&u, &r, sizeof(u));
  return sign | static_cast<uint16_t>((((u >> 23) - 112) << 10) | ((u >> 13) & 0x3FF));
}

// The integer code of weight i of a K-quant block and the integer scale of its
// sub-block: KQuantValue = f32(d)·scale·code − f32(dmin)·min (Q4_K, Q5_K: code
// 0..31, scale and min 0..63) or f32(d)·scale·code (Q6_K: code −32..31, scale
// −128..127, min 0).
inline void KQuantCode(WeightType type, const uint8_t* block, size_t i, int* code, int* scale,
                       int* min) {
  if (type == WeightType::kQ6_K) {
    *code = Q6KCode(block, i) - 32;
    *scale = static_cast<int8_t>(block[kQ6KScales + i / 16]);
    *min = 0;
    return;
  }
  const bool q5 = type == WeightType::kQ5_K;
  KQuantScaleMin(block + kQ4KScales, i / 32, scale, min);
  const uint8_t byte = block[(q5 ? kQ5KQs : kQ4KQs) + 32 * (i / 64) + i % 32];
  *code = (i % 64) < 32 ? byte & 0xF : byte >> 4;
  if (q5) *code += ((block[kQ5KQh + i % 32] >> (i / 32)) & 1) << 4;
}

// Same contract as recur::impl::kernels::DenseBlockQ8 (dense.h): the
// activations quantised as it says, every block's sum exact, double after.
inline void DenseBlockQ8(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                         float* y, size_t y_stride, bool accumulate) {
  const ActivationBlocks kind = ActivationBlocksOf(w.type, w.group);
  if (RoundsActivations(kind)) {
    std::vector<float> rounded(w.in);
    for (size_t b = 0; b < batch; ++b) {
      for (size_t i = 0; i < w.in; ++i) rounded[i] = RoundActivation(kind, x[b * x_stride + i]);
      ref::Dense(rounded.data(), w.in, 1, w, y + b * y_stride, y_stride, accumulate);
    }
    return;
  }
  const size_t block = kind == ActivationBlocks::kQ8_0 ? 32 : kKQuantBlock;
  std::vector<int8_t> q(w.in);
  std::vector<float> d(w.in / block);
  for (size_t b = 0; b < batch; ++b) {
    const float* xb = x + b * x_stride;
    for (size_t k = 0; k < w.in / block; ++k) {
      d[k] = kind == ActivationBlocks::kQ8_0 ? QuantizeQ8_0Block(xb + k * block, &q[k * block])
                                             : QuantizeQ8_KBlock(xb + k * block, &q[k * block]);
    }
    for (size_t o = 0; o < w.out; ++o) {
      double s = 0.0;
      for (size_t k = 0; k < w.in / block; ++k) {
        if (kind == ActivationBlocks::kQ8_0) {
          const auto* row =
              static_cast<const uint8_t*>(w.weight) + o * WeightRowBytes(w.type, w.in);
          int64_t sum = 0;
          for (size_t i = k * block; i < (k + 1) * block; ++i) {
            const int qw = w.type == WeightType::kI4
                               ? I4Value(row, i)
                               : static_cast<const int8_t*>(w.weight)[o * w.in + i];
            sum += int64_t{qw} * q[i];
          }
          s += static_cast<double>(F16ToF32(w.group_scales[o * (w.in / block) + k])) * d[k] *
               static_cast<double>(sum);
          continue;
        }
        const auto* blk = static_cast<const uint8_t*>(w.weight) + o * WeightRowBytes(w.type, w.in) +
                          k * Traits(w.type).block_bytes;
        int64_t scaled = 0, mins = 0;
        for (size_t i = 0; i < kKQuantBlock; ++i) {
          int code, scale, min;
          KQuantCode(w.type, blk, i, &code, &scale, &min);
          scaled += int64_t{scale} * code * q[k * block + i];
          mins += int64_t{min} * q[k * block + i];
        }
        const bool q6 = w.type == WeightType::kQ6_K;
        const double dw = HalfAt(blk + (q6 ? kQ6KD : 0));
        const double dmin = q6 ? 0.0 : HalfAt(blk + 2);
        s += static_cast<double>(d[k]) *
             (dw * static_cast<double>(scaled) - dmin * static_cast<double>(mins));
      }
      if (w.bias) s += w.bias[o];
      if (accumulate) s += y[b * y_stride + o];
      y[b * y_stride + o] = static_cast<float>(s);
    }
  }
}

}  // namespace recur::impl::kernels::ref

#endif  // RECUR_KERNELS_DENSE_DENSE_REF_H_
