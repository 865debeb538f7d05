// The GPU path's kernels, written once for two runners: a CUDA grid
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

namespace recur::impl::gpu {

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

// y[i] *= a[i].
struct MultiplyInPlace {
  const float* a;
  float* y;
  RECUR_HD void operator()(size_t i) const { y[i] *= a[i]; }
};

// out[r, c] = gamma[c]·z[r, c] + beta[c] (GAU/FLASH's per-dim scale and
// offset rows); i over rows × width.
struct ScaleOffset {
  const float* z;
  const float* gamma;
  const float* beta;
  size_t width;
  float* out;
  RECUR_HD void operator()(size_t i) const {
    const size_t c = i % width;
    out[i] = gamma[c] * z[i] + beta[c];
  }
};

enum class Activation : int { kNone = 0, kRelu = 1, kGelu = 2, kSilu = 3 };

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
    } else if (activation == Activation::kSilu) {  // x·σ(x) (GAU, FLASH)
      v = v / (1.0f + static_cast<float>(exp(-static_cast<double>(v))));
    }
    y[i] = v;
  }
};

// out[r, c] = act(h[r, c])·h[r, d_ff + c] (a GLU feed-forward's gate, h the
// (rows, 2·d_ff) output of linear1); i over rows × d_ff.
struct GluRows {
  const float* h;
  size_t d_ff;
  Activation activation;  // kRelu or kGelu
  float* out;
  RECUR_HD void operator()(size_t i) const {
    const size_t r = i / d_ff, c = i % d_ff;
    float a = h[r * 2 * d_ff + c];
    if (activation == Activation::kRelu) {
      a = a > 0.0f ? a : 0.0f;
    } else {  // exact gelu, as BiasActivation
      const double d = a;
      a = static_cast<float>(0.5 * d * (1.0 + erf(d * 0.70710678118654752440)));
    }
    out[i] = a * h[r * 2 * d_ff + d_ff + c];
  }
};

// The norms of recur.fbs NormKind (this header includes no runtime header).
enum class NormKind : int { kLayerNorm = 0, kRmsNorm = 1, kScaleNorm = 2 };

// y[r] = the norm of x[r] (y may be x); i over rows. kLayerNorm: (x − mean)
// / √(var + eps) · gamma + beta; kRmsNorm: x / √(mean(x²) + eps) · gamma;
// kScaleNorm: gamma[0]·x / max(scale·‖x‖₂, eps).
struct LayerNormRows {
  const float* x;
  const float* gamma;
  const float* beta;
  float eps;
  size_t width;
  float* y;
  NormKind kind = NormKind::kLayerNorm;
  float scale = 1.0f;  // kScaleNorm's c: 1, or 1/√width
  RECUR_HD void operator()(size_t i) const {
    const float* xr = x + i * width;
    float* yr = y + i * width;
    if (kind != NormKind::kLayerNorm) {
      double sq = 0.0;
      for (size_t c = 0; c < width; ++c) sq += static_cast<double>(xr[c]) * xr[c];
      if (kind == NormKind::kRmsNorm) {
        const double rstd = 1.0 / sqrt(sq / static_cast<double>(width) + eps);
        for (size_t c = 0; c < width; ++c) yr[c] = static_cast<float>(xr[c] * rstd * gamma[c]);
      } else {
        const double norm = static_cast<double>(scale) * sqrt(sq);
        const double g = gamma[0] / (norm > eps ? norm : static_cast<double>(eps));
        for (size_t c = 0; c < width; ++c) yr[c] = static_cast<float>(xr[c] * g);
      }
      return;
    }
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

// x[r, c] += scale·sin((p0 + r)·freq[c]) and x[r, half + c] += scale·cos(...)
// (recur.fbs SinusoidPositions, in double as AddSinusoidPositions on the
// CPU); i over rows × half.
struct AddSinusoid {
  const double* freq;  // (half)
  const float* scale;  // (1) or null: 1
  size_t half;
  size_t p0;
  float* x;
  RECUR_HD void operator()(size_t i) const {
    const size_t r = i / half, c = i % half;
    const double a = static_cast<double>(p0 + r) * freq[c];
    const double s = scale != nullptr ? static_cast<double>(scale[0]) : 1.0;
    x[r * 2 * half + c] += static_cast<float>(sin(a) * s);
    x[r * 2 * half + half + c] += static_cast<float>(cos(a) * s);
  }
};

enum class FeatureMap : int { kEluPlusOne = 0, kRelu = 1 };

// x[i] = φ(x[i]) for the elementwise feature maps (docs/attention-math.md §3).
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

// The Favor maps (Performer; docs/attention-math.md §3): u = xᵀω, off = t·‖x‖²/2 +
// log(m)/2, φ_j = exp(√t·u_j − off), and for the hyperbolic map the second
// half exp(−√t·u_j − off). x (vectors, dk), ω (dk, cols), φ (vectors, C);
// i over vectors × C.
struct FavorFeatures {
  const float* x;
  const float* omega;
  size_t dk, cols, c;
  float root_t, temp, log_m;
  float* phi;
  RECUR_HD void operator()(size_t i) const {
    const size_t vec = i / c, j = i % c, col = j % cols;
    const float* xv = x + vec * dk;
    double u = 0.0, norm = 0.0;
    for (size_t a = 0; a < dk; ++a) {
      u += static_cast<double>(xv[a]) * omega[a * cols + col];
      norm += static_cast<double>(xv[a]) * xv[a];
    }
    const double off = 0.5 * temp * norm + log_m;
    phi[i] = static_cast<float>(exp((j < cols ? root_t : -root_t) * u - off));
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

// Softmax attention over the keys a query sees (docs/attention-math.md §2, §5):
// o = Σ_j softmax_j(q·k_j · scale) v_j. Thread i is the query at position
// p = p0 + i / H of head h = i % H.
//   q (T, H, dk) for positions p0 … p0 + T − 1; k (kv, H, dk), v (kv, H, dv)
//   hold positions 0 … kv − 1 of the sequence; o (T, H, dv).
// Which keys: full softmax sees j ≤ p (causal) or every j; a sliding window
// (SlidingWindow in recur.fbs) sees, causal, the global positions
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
    if (j < globals || (!causal && p < globals)) return true;  // global keys; a global query
    const size_t dist = p >= j ? p - j : j - p;
    if (dist % d != 0) return false;
    return causal ? dist / d < window : dist / d <= window / 2;
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

// The AFT family (docs/attention-math.md §4; AftSimple, AftLocal, AftFull in
// recur.fbs), element-wise per channel c of D:
//   o[t, c] = σ(q[t, c]) · Σ_p e^{l(t, p)} v[p, c] / Σ_p e^{l(t, p)}
// over p ≤ t (causal) or every p < kv, with the logit l = k[p, c] (simple);
// + bias[(t − p (+ s − 1 non-causal)), c] when |t − p| < s (local); and
// k + w or w·k (multiply) with w = W[t, p] or u_t·v_p (full). Thread i is
// (position p0 + i / D, channel i % D); k, v (kv, D) hold positions 0 … kv − 1.
enum class AftKind : int { kSimple = 0, kLocal = 1, kFull = 2 };
struct AftAttention {
  const float* q;  // (T, D)
  const float* k;
  const float* v;
  size_t p0, kv, width;
  bool causal;
  AftKind kind;
  const float* bias;  // local: (offsets, D)
  size_t window;      // local: s
  const float* w;     // full: (t_max, t_max) or null
  const float* u;     // full: (t_max, rank) when w is null
  const float* uv;    // full: (t_max, rank)
  size_t rank, t_max;
  bool multiply;
  float* o;

  RECUR_HD double Logit(size_t t, size_t p, size_t c) const {
    const double kp = k[p * width + c];
    if (kind == AftKind::kLocal) {
      const size_t dist = t >= p ? t - p : p - t;
      if (dist >= window) return kp;
      return kp + bias[(causal ? t - p : t + window - 1 - p) * width + c];
    }
    if (kind == AftKind::kFull) {
      double wt = 0.0;
      if (w != nullptr) {
        wt = w[t * t_max + p];
      } else {
        for (size_t r = 0; r < rank; ++r) wt += static_cast<double>(u[t * rank + r]) * uv[p * rank + r];
        wt = static_cast<float>(wt);
      }
      return multiply ? wt * kp : kp + wt;
    }
    return kp;
  }
  RECUR_HD void operator()(size_t i) const {
    const size_t t = p0 + i / width, c = i % width, n = causal ? t + 1 : kv;
    double mx = -HUGE_VAL;
    for (size_t p = 0; p < n; ++p) mx = fmax(mx, Logit(t, p, c));
    double num = 0.0, den = 0.0;
    for (size_t p = 0; p < n; ++p) {
      const double e = exp(Logit(t, p, c) - mx);
      num += e * v[p * width + c];
      den += e;
    }
    const float qc = q[i];
    const float gate = 1.0f / (1.0f + static_cast<float>(exp(-static_cast<double>(qc))));
    o[i] = static_cast<float>(gate * num / den);
  }
};

// Linformer's projection along the sequence (docs/attention-math.md §7):
// out[r, h, w] = Σ_{t < N} E[h, r, t]·x[t, h, w], E (H or 1, k, n) with rows
// of stride n; x (N, H, width), out (k, H, width); i over k × H × width.
struct SequenceProjection {
  const float* e;
  bool per_head;
  const float* x;
  size_t steps, n, k, heads, width;
  float* out;
  RECUR_HD void operator()(size_t i) const {
    const size_t r = i / (heads * width), h = (i / width) % heads, w = i % width;
    const float* row = e + (per_head ? h * k * n : 0) + r * n;
    double acc = 0.0;
    for (size_t t = 0; t < steps; ++t) {
      acc += static_cast<double>(row[t]) * x[(t * heads + h) * width + w];
    }
    out[i] = static_cast<float>(acc);
  }
};

// GAU and FLASH (docs/attention-math.md §6; Gau and Flash in recur.fbs): thread i
// is the query at position t = p0 + i, o[i] (E) = Σ_p relu(scale·qq_t·kq_p +
// bias)² v_p over its quadratic keys, plus Σ_p lin·(ql_t·kl_p) v_p over its
// linear ones (FLASH). GAU (chunk 0): quadratic over p ≤ t, bias
// rel_bias[t − p] (causal), or every p, rel_bias[t − p + T − 1]. FLASH: the
// chunk of t, g0 = ⌊t / C⌋·C: p in [g0, t], rel_bias[t − p], linear over
// p < g0 with lin = scale (causal); p in the chunk, rel_bias[t − p + C − 1],
// linear over every p with lin = 1/N (non-causal).
//   qq, ql (T, s); kq, kl (kv, s) and v (kv, E) hold positions 0 … kv − 1.
struct GatedAttention {
  const float* qq;
  const float* ql;
  const float* kq;
  const float* kl;
  const float* v;
  size_t p0, kv, s, e;
  float scale;
  const float* rel_bias;
  bool causal;
  size_t chunk;  // 0: GAU
  size_t t_max;  // GAU: max_length
  float* o;

  RECUR_HD void Add(double w, size_t p, float* out) const {
    const float* vp = v + p * e;
    for (size_t c = 0; c < e; ++c) out[c] += static_cast<float>(w * vp[c]);
  }
  RECUR_HD double Dot(const float* a, const float* b) const {
    double acc = 0.0;
    for (size_t c = 0; c < s; ++c) acc += static_cast<double>(a[c]) * b[c];
    return acc;
  }
  RECUR_HD void operator()(size_t i) const {
    const size_t t = p0 + i;
    float* out = o + i * e;
    for (size_t c = 0; c < e; ++c) out[c] = 0.0f;
    size_t first = 0, last = causal ? t + 1 : kv;  // the quadratic keys
    if (chunk != 0) {
      first = t / chunk * chunk;
      if (!causal && first + chunk < last) last = first + chunk;
      const size_t lin_end = causal ? first : kv;
      const double lin = causal ? static_cast<double>(scale) : 1.0 / static_cast<double>(kv);
      for (size_t p = 0; p < lin_end; ++p) Add(lin * Dot(ql + i * s, kl + p * s), p, out);
    }
    const size_t offset = causal ? 0 : (chunk != 0 ? chunk : t_max) - 1;
    for (size_t p = first; p < last; ++p) {
      const double a = scale * Dot(qq + i * s, kq + p * s) + rel_bias[t + offset - p];
      if (a > 0.0) Add(a * a, p, out);
    }
  }
};

// Reformer LSH attention (docs/attention-math.md §8), in three kernels per layer.
// keys[j, h] = q[j, h] / ‖q[j, h]‖; i over n × H.
struct NormalizeRows {
  const float* q;
  size_t dk;
  float* keys;
  RECUR_HD void operator()(size_t i) const {
    const float* row = q + i * dk;
    float sum = 0.0f;
    for (size_t c = 0; c < dk; ++c) sum += row[c] * row[c];
    const float inv = 1.0f / static_cast<float>(sqrt(static_cast<double>(sum)));
    for (size_t c = 0; c < dk; ++c) keys[i * dk + c] = row[c] * inv;
  }
};

// bucket[round, h, j] = the first argmax over [kᵀR, −kᵀR] of the key's
// projection by the round's rotations R (dk, buckets / 2), summed in f32 in
// order of the dk rows as the CPU does (a bucket is a discrete choice);
// i over rounds × H × n.
struct LshBuckets {
  const float* keys;  // (n, H, dk)
  const float* rotations;  // (rounds, dk, half)
  size_t n, heads, dk, half;
  uint32_t* bucket;
  RECUR_HD float Projection(const float* key, const float* rot, size_t c) const {
    float acc = 0.0f;
    for (size_t a = 0; a < dk; ++a) acc += key[a] * rot[a * half + c];
    return acc;
  }
  RECUR_HD void operator()(size_t i) const {
    const size_t round = i / (heads * n), h = (i / n) % heads, j = i % n;
    const float* key = keys + (j * heads + h) * dk;
    const float* rot = rotations + round * dk * half;
    uint32_t best = 0;
    float best_value = Projection(key, rot, 0);
    for (size_t c = 1; c < 2 * half; ++c) {
      const float value = c < half ? Projection(key, rot, c) : -Projection(key, rot, c - half);
      if (value > best_value) {
        best_value = value;
        best = static_cast<uint32_t>(c);
      }
    }
    bucket[i] = best;
  }
};

// A counting sort of one (round, head)'s positions by bucket, positions
// ascending inside a bucket: order[s] = j and rank[j] = s. start: (buckets
// + 1) per (round, head), scratch. i over rounds × H.
struct LshSort {
  const uint32_t* bucket;  // (rounds, H, n)
  size_t n, buckets;
  uint32_t* start;
  uint32_t* order;  // (rounds, H, n)
  uint32_t* rank;   // (rounds, H, n)
  RECUR_HD void operator()(size_t i) const {
    const uint32_t* b = bucket + i * n;
    uint32_t* st = start + i * (buckets + 1);
    uint32_t* ord = order + i * n;
    for (size_t c = 0; c <= buckets; ++c) st[c] = 0;
    for (size_t j = 0; j < n; ++j) ++st[b[j] + 1];
    for (size_t c = 0; c < buckets; ++c) st[c + 1] += st[c];
    for (size_t j = 0; j < n; ++j) ord[st[b[j]]++] = static_cast<uint32_t>(j);
    for (size_t s = 0; s < n; ++s) rank[i * n + ord[s]] = static_cast<uint32_t>(s);
  }
};

// o[j, h] = Σ_rounds (1/rounds)·softmax over the query's sorted chunk and the
// one before it (never itself unless alone) of scale·q_j·key_p, times v_p;
// i over n × H.
struct LshAttend {
  const float* q;  // (n, H, dk)
  const float* keys;
  const float* v;  // (n, H, dv)
  const uint32_t* order;
  const uint32_t* rank;
  size_t n, heads, dk, dv, chunk, rounds;
  float scale;
  float* o;
  RECUR_HD double Score(size_t j, size_t p, size_t h, bool alone) const {
    if (p == j && !alone) return -HUGE_VAL;
    const float* a = q + (j * heads + h) * dk;
    const float* b = keys + (p * heads + h) * dk;
    double acc = 0.0;
    for (size_t c = 0; c < dk; ++c) acc += static_cast<double>(a[c]) * b[c];
    return static_cast<float>(acc) * scale;
  }
  RECUR_HD void operator()(size_t i) const {
    const size_t j = i / heads, h = i % heads;
    float* out = o + i * dv;
    for (size_t c = 0; c < dv; ++c) out[c] = 0.0f;
    for (size_t round = 0; round < rounds; ++round) {
      const size_t table = (round * heads + h) * n;
      const size_t g = rank[table + j] / chunk;
      const size_t first = g == 0 ? 0 : (g - 1) * chunk;
      const size_t last = (g + 1) * chunk < n ? (g + 1) * chunk : n;
      const bool alone = last - first == 1;
      double mx = -HUGE_VAL;
      for (size_t t = first; t < last; ++t) mx = fmax(mx, Score(j, order[table + t], h, alone));
      double sum = 0.0;
      for (size_t t = first; t < last; ++t) sum += exp(Score(j, order[table + t], h, alone) - mx);
      for (size_t t = first; t < last; ++t) {
        const size_t p = order[table + t];
        const double a = exp(Score(j, p, h, alone) - mx) / (sum * rounds);
        const float* vp = v + (p * heads + h) * dv;
        for (size_t c = 0; c < dv; ++c) out[c] += static_cast<float>(a * vp[c]);
      }
    }
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
// clang-format off
#define RECUR_GPU_KERNELS(X)                                                        \
  X(GatherRows) X(AddInPlace) X(MultiplyInPlace) X(ScaleOffset) X(BiasActivation)  \
  X(LayerNormRows) X(ElementwiseFeatures) X(Poly2Features) X(FavorFeatures)        \
  X(LinearAttentionScan) X(LinearAttentionRead) X(SoftmaxAttention)               \
  X(AftAttention) X(SequenceProjection) X(GatedAttention) X(NormalizeRows)         \
  X(LshBuckets) X(LshSort) X(LshAttend) X(RowSoftmax) X(AddSinusoid) X(GluRows)
// clang-format on

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

}  // namespace recur::impl::gpu

#endif  // RECUR_PLATFORMS_CUDA_GPU_KERNELS_H_
