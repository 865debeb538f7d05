// The GPU path's kernels (issue 8), written once for two runners: a CUDA grid
// (cuda_device.cu) and a host loop (host_device.cc), so that the math and the
// indexing every CUDA kernel runs are also tested on machines without a GPU.
//
// A kernel is a struct of the pointers and sizes it reads, with
//   RECUR_HD void operator()(size_t i) const
// run exactly once for every i in [0, n). No kernel synchronises threads or
// uses shared memory: thread i owns its outputs, so any order of i (a grid,
// a loop) gives the same bits. Accumulations are double where the CPU's
// scalar references (kernels/*/..._ref.h) accumulate in double. The GPU and
// the emulation still differ in the last bits of exp, erf and log (CUDA's
// math library against glibc's); nvcc builds these without FMA contraction.
//
// This header is compiled by nvcc too: it includes no runtime header.
#ifndef RECUR_PLATFORMS_CUDA_GPU_KERNELS_H_
#define RECUR_PLATFORMS_CUDA_GPU_KERNELS_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define RECUR_HD __host__ __device__
#else
#define RECUR_HD
#endif

namespace recur::gpu {

// out[r, :] = table[ids[r], :]; i over rows × width.
struct GatherRows {
  const float* table;
  const int32_t* ids;
  size_t width;
  float* out;
  RECUR_HD void operator()(size_t i) const {
    out[i] = table[static_cast<size_t>(ids[i / width]) * width + i % width];
  }
};

// y[i] += a[i].
struct AddInPlace {
  const float* a;
  float* y;
  RECUR_HD void operator()(size_t i) const { y[i] += a[i]; }
};

enum class Activation : int { kNone = 0, kRelu = 1, kGelu = 2 };

// y[r, c] = act(y[r, c] + bias[c]); bias may be null; i over rows × width.
struct BiasActivation {
  const float* bias;
  size_t width;
  Activation activation;
  float* y;
  RECUR_HD void operator()(size_t i) const {
    float v = y[i] + (bias != nullptr ? bias[i % width] : 0.0f);
    if (activation == Activation::kRelu) {
      v = v > 0.0f ? v : 0.0f;
    } else if (activation == Activation::kGelu) {  // exact: 0.5·x·(1 + erf(x/√2))
      const double d = v;
      v = static_cast<float>(0.5 * d * (1.0 + erf(d * 0.70710678118654752440)));
    }
    y[i] = v;
  }
};

// y[r] = LayerNorm(x[r]) · gamma + beta (y may be x); i over rows.
struct LayerNormRows {
  const float* x;
  const float* gamma;
  const float* beta;
  float eps;
  size_t width;
  float* y;
  RECUR_HD void operator()(size_t i) const {
    const float* xr = x + i * width;
    float* yr = y + i * width;
    double mean = 0.0;
    for (size_t c = 0; c < width; ++c) mean += xr[c];
    mean /= static_cast<double>(width);
    double var = 0.0;
    for (size_t c = 0; c < width; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    var /= static_cast<double>(width);
    const double rstd = 1.0 / sqrt(var + eps);
    for (size_t c = 0; c < width; ++c) {
      double v = (xr[c] - mean) * rstd;
      if (gamma != nullptr) v *= gamma[c];
      if (beta != nullptr) v += beta[c];
      yr[c] = static_cast<float>(v);
    }
  }
};

enum class FeatureMap : int { kEluPlusOne = 0, kRelu = 1 };

// x[i] = φ(x[i]) for the elementwise feature maps (attention-math §3).
struct ElementwiseFeatures {
  FeatureMap map;
  float* x;
  RECUR_HD void operator()(size_t i) const {
    const float v = x[i];
    if (map == FeatureMap::kEluPlusOne) {
      x[i] = v > 0.0f ? v + 1.0f : static_cast<float>(exp(static_cast<double>(v)));
    } else {
      x[i] = v > 0.0f ? v : 0.0f;
    }
  }
};

// φ(x)[a·dk + b] = x_a·x_b over (vectors, dk) → (vectors, dk²); i over
// vectors × dk².
struct Poly2Features {
  const float* x;
  size_t dk;
  float* phi;
  RECUR_HD void operator()(size_t i) const {
    const size_t c = dk * dk, vec = i / c, a = (i % c) / dk, b = i % dk;
    phi[i] = x[vec * dk + a] * x[vec * dk + b];
  }
};

// Linear attention, the paper's Algorithm 1: for every position t in order,
// S += φ(k_t) v_tᵀ and num_t = φ(q_t)ᵀ S. The value rows are extended by a
// constant 1, so column dv of S is z = Σ φ(k) and column dv of num is the
// denominator φ(q)·z. Thread i owns column m = i % (dv + 1) of head
// h = i / (dv + 1): its C sums and their compensations, over all positions.
//   phi_q, phi_k (T, H, C); v (T, H, dv); s, s_comp (H, C, dv + 1);
//   num (T, H, dv + 1). Causal: S keeps the Kahan-compensated running sums
//   of kernels/linear_attention (the same state a CPU step leaves).
//   Non-causal (encoder): S = Σ over all T positions first, then every
//   position reads it.
struct LinearAttentionScan {
  const float* phi_q;
  const float* phi_k;
  const float* v;
  size_t steps, heads, c, dv;
  bool causal;
  float* s;
  float* s_comp;
  float* num;
  RECUR_HD void operator()(size_t i) const {
    const size_t cols = dv + 1, h = i / cols, m = i % cols;
    float* sh = s + h * c * cols + m;
    float* comp = s_comp + h * c * cols + m;
    for (size_t t = 0; t < steps; ++t) {
      const size_t row = t * heads + h;
      const float vm = m < dv ? v[row * dv + m] : 1.0f;
      const float* k = phi_k + row * c;
      for (size_t j = 0; j < c; ++j) {
        float* sum = sh + j * cols;
        if (causal) {  // as kernels::ref::LinearAttentionStep
          float* cj = comp + j * cols;
          const float y = static_cast<float>(static_cast<double>(k[j]) * vm - *cj);
          const float next = *sum + y;
          *cj = (next - *sum) - y;
          *sum = next;
        } else {
          *sum += k[j] * vm;
        }
      }
      if (causal) Read(t, h, m, sh);
    }
    if (!causal) {
      for (size_t t = 0; t < steps; ++t) Read(t, h, m, sh);
    }
  }
  RECUR_HD void Read(size_t t, size_t h, size_t m, const float* sh) const {
    const size_t cols = dv + 1, row = t * heads + h;
    const float* q = phi_q + row * c;
    double acc = 0.0;
    for (size_t j = 0; j < c; ++j) acc += static_cast<double>(q[j]) * sh[j * cols];
    num[row * cols + m] = static_cast<float>(acc);
  }
};

// o[t, h, m] = num[t, h, m] / (num[t, h, dv] + eps); i over T × H × dv.
struct LinearAttentionRead {
  const float* num;
  size_t dv;
  float eps;
  float* o;
  RECUR_HD void operator()(size_t i) const {
    const size_t row = i / dv, m = i % dv;
    const float* n = num + row * (dv + 1);
    o[i] = static_cast<float>(static_cast<double>(n[m]) / (static_cast<double>(n[dv]) + eps));
  }
};

// Softmax attention over the keys a query sees (attention-math §2, §5):
// o = Σ_j softmax_j(q·k_j · scale) v_j. Thread i is the query at position
// p = p0 + i / H of head h = i % H.
//   q (T, H, dk) for positions p0 … p0 + T − 1; k (kv, H, dk), v (kv, H, dv)
//   hold positions 0 … kv − 1 of the sequence; o (T, H, dv).
// Which keys: full softmax sees j ≤ p (causal) or every j; a sliding window
// (SlidingWindowAttention in recur.fbs) sees, causal, the global positions
// j < g up to p and p − n·d for n < window; non-causal, every j for a global
// query, else j < g and |p − j| = n·d for n ≤ window / 2 (d: the head's
// dilation).
struct SoftmaxAttention {
  const float* q;
  const float* k;
  const float* v;
  size_t p0, kv, heads, dk, dv;
  float scale;
  bool causal;
  bool sliding;
  size_t window, globals;
  const uint32_t* dilation;  // (H); sliding only
  float* o;

  RECUR_HD bool Sees(size_t p, size_t j, size_t d) const {
    if (causal && j > p) return false;
    if (!sliding) return true;
    if (j < globals) return true;
    const size_t dist = p >= j ? p - j : j - p;
    if (dist % d != 0) return false;
    if (causal) return dist / d < window;
    return p < globals || dist / d <= window / 2;
  }
  RECUR_HD void operator()(size_t i) const {
    const size_t t = i / heads, h = i % heads, p = p0 + t;
    const size_t d = sliding ? dilation[h] : 1;
    const float* qi = q + i * dk;
    float* out = o + i * dv;
    double max_score = -HUGE_VAL;
    for (size_t j = 0; j < kv; ++j) {
      if (Sees(p, j, d)) max_score = fmax(max_score, Score(qi, j, h));
    }
    for (size_t m = 0; m < dv; ++m) out[m] = 0.0f;
    double total = 0.0;
    for (size_t j = 0; j < kv; ++j) {
      if (!Sees(p, j, d)) continue;
      const double w = exp(Score(qi, j, h) - max_score);
      total += w;
      const float* vj = v + (j * heads + h) * dv;
      for (size_t m = 0; m < dv; ++m) out[m] += static_cast<float>(w * vj[m]);
    }
    for (size_t m = 0; m < dv; ++m) out[m] = static_cast<float>(out[m] / total);
  }
  RECUR_HD double Score(const float* qi, size_t j, size_t h) const {
    const float* kj = k + (j * heads + h) * dk;
    double acc = 0.0;
    for (size_t c = 0; c < dk; ++c) acc += static_cast<double>(qi[c]) * kj[c];
    return static_cast<float>(acc) * scale;
  }
};

// The output head's activation over each row: softmax or log-softmax; i over
// rows.
struct RowSoftmax {
  size_t width;
  bool log_output;  // log-softmax
  float* y;
  RECUR_HD void operator()(size_t i) const {
    float* r = y + i * width;
    double mx = -HUGE_VAL;
    for (size_t c = 0; c < width; ++c) mx = fmax(mx, static_cast<double>(r[c]));
    double sum = 0.0;
    for (size_t c = 0; c < width; ++c) sum += exp(r[c] - mx);
    const double lse = mx + log(sum);
    for (size_t c = 0; c < width; ++c) {
      r[c] = static_cast<float>(log_output ? r[c] - lse : exp(r[c] - lse));
    }
  }
};

// Every kernel, once: the device interface gets a Launch overload per entry
// and both runners implement them from this list.
#define RECUR_GPU_KERNELS(X)                                                        \
  X(GatherRows) X(AddInPlace) X(BiasActivation) X(LayerNormRows)                   \
  X(ElementwiseFeatures) X(Poly2Features) X(LinearAttentionScan)                   \
  X(LinearAttentionRead) X(SoftmaxAttention) X(RowSoftmax)

// A cuBLAS sgemm call (column-major): C = op(A)·op(B) + beta·C, with
// op(A) m × k, op(B) k × n, C m × n.
struct Sgemm {
  bool transpose_a, transpose_b;
  int m, n, k;
  const float* a;
  int lda;
  const float* b;
  int ldb;
  float beta;  // 0: C is only written
  float* c;
  int ldc;
};

// A dense layer over row-major arrays: y (rows, out) = x (rows, in) · Wᵀ
// (+ y when accumulating), W (out, in) as nn.Linear stores it. Column-major,
// that is yᵀ (out × rows) = W (Wᵀ's storage read transposed) · xᵀ.
inline Sgemm LinearLayer(size_t rows, size_t in, size_t out, const float* x, const float* w,
                         bool accumulate, float* y) {
  return Sgemm{true,          false,     static_cast<int>(out), static_cast<int>(rows),
               static_cast<int>(in), w, static_cast<int>(in), x, static_cast<int>(in),
               accumulate ? 1.0f : 0.0f, y, static_cast<int>(out)};
}

}  // namespace recur::gpu

#endif  // RECUR_PLATFORMS_CUDA_GPU_KERNELS_H_
