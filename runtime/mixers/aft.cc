// AFT-simple (docs/attention-math.md §4): y_t = σ(q_t) ⊙ Σ_{p≤t} e^{k_p} v_p /
// Σ_{p≤t} e^{k_p}, element-wise over D = heads·dk channels. The causal state
// keeps, per channel, the running max m of k and num = Σ e^{k_p − m} v_p,
// den = Σ e^{k_p − m} (den ≥ 1 once a position is in, so den = 0 marks the
// empty history that the zero-initialised state stands for).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/dense_op.h"
#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"
#include "mixers/mixer_tables.h"
#include "mixers/projections.h"

namespace recur::impl {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// One channel of one position folded into the running-max sums
// (num = Σ e^{k − max} v, den = Σ e^{k − max}; den == 0: nothing yet).
void Fold(float k, float v, float* max, float* num, float* den) {
  if (*den == 0.0f) {
    *max = k;
    *num = v;
    *den = 1.0f;
    return;
  }
  const float m = std::max(*max, k);
  const float a = std::exp(*max - m), e = std::exp(k - m);
  *num = *num * a + e * v;
  *den = *den * a + e;
  *max = m;
}

// Every AFT table: heads, dk > 0.
template <class Table>
Status CheckAftHeads(const Table* t, const std::string& layer) {
  if (t->heads() == 0 || t->dk() == 0) {
    return InvalidModel("%s: AFT needs heads, dk > 0 (got %u, %u)", layer.c_str(), t->heads(),
                        t->dk());
  }
  return Status::Ok();
}

class AftSimple final : public Mixer {
 public:
  bool causal() const override { return causal_; }
  // den (D), max (D), num (D).
  size_t state_floats() const override { return causal_ ? 3 * width_ : 0; }

  size_t scratch_floats(size_t batch, size_t steps, size_t /*threads*/,
                        size_t /*context*/) const override {
    return batch * steps * 4 * width_;  // q, k, v, o
  }

  void CollectDense(std::vector<const DenseView*>* out) const override { proj_.Collect(out); }

  void Run(const float* x, size_t batch, size_t steps, float* const* states,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps, D = width_;
    float* q = ctx.scratch;   // (rows, D)
    float* k = q + rows * D;  // (rows, D)
    float* v = k + rows * D;  // (rows, D)
    float* o = v + rows * D;  // (rows, D)
    proj_.Project(x, rows, q, k, v, ctx);
    ctx.pool->ParallelRanges(batch, 1, [&](size_t first, size_t last) {
      for (size_t b = first; b < last; ++b) {
        const size_t r0 = b * steps;
        if (causal_) {
          Causal(q + r0 * D, k + r0 * D, v + r0 * D, steps, states[b], o + r0 * D);
        } else {
          Encode(q + r0 * D, k + r0 * D, v + r0 * D, steps, o + r0 * D);
        }
      }
    });
    proj_.Output(o, rows, y, ctx);
  }

  static Status Create(const fb::AftSimple* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckAftHeads(t, layer));
    if (uint64_t{t->heads()} * t->dk() > kMaxWidth) {
      return InvalidModel("%s: heads x dk must be <= %u", layer.c_str(), kMaxWidth);
    }
    auto m = std::make_unique<AftSimple>();
    m->width_ = size_t{t->heads()} * t->dk();
    m->causal_ = t->causal();
    const auto D = static_cast<uint32_t>(m->width_);
    RECUR_RETURN_IF_ERROR(m->proj_.Load(t, layer, d_model, D, D, tensors));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // One stream, positions in order: fold each into (num, den, max), then read.
  void Causal(const float* q, const float* k, const float* v, size_t steps, float* state,
              float* o) const {
    const size_t D = width_;
    float* den = state;
    float* max = state + D;
    float* num = state + 2 * D;
    for (size_t t = 0; t < steps; ++t) {
      for (size_t c = 0; c < D; ++c) {
        Fold(k[t * D + c], v[t * D + c], &max[c], &num[c], &den[c]);
        o[t * D + c] = Sigmoid(q[t * D + c]) * num[c] / den[c];
      }
    }
  }

  // The whole sequence: one (num, den) over all positions, read by every query.
  void Encode(const float* q, const float* k, const float* v, size_t steps, float* o) const {
    const size_t D = width_;
    for (size_t c = 0; c < D; ++c) {
      float m = -INFINITY;
      for (size_t t = 0; t < steps; ++t) m = std::max(m, k[t * D + c]);
      float num = 0.0f, den = 0.0f;
      for (size_t t = 0; t < steps; ++t) {
        const float e = std::exp(k[t * D + c] - m);
        num += e * v[t * D + c];
        den += e;
      }
      const float ratio = num / den;
      for (size_t t = 0; t < steps; ++t) o[t * D + c] = Sigmoid(q[t * D + c]) * ratio;
    }
  }

  size_t width_ = 0;
  bool causal_ = true;
  QkvoProjections proj_;
};


// AFT-local / AFT-conv (schema: table AftLocal). The causal state keeps the
// folded sums of the positions that left the window (as AftSimple, den = 0
// meaning none yet) and a ring of the last s positions' k and v.
class AftLocal final : public Mixer {
 public:
  bool causal() const override { return causal_; }
  // den (D), k_ring (s, D), max (D), num (D), v_ring (s, D).
  size_t state_floats() const override { return causal_ ? width_ * (3 + 2 * s_) : 0; }

  size_t scratch_floats(size_t batch, size_t steps, size_t threads,
                        size_t /*context*/) const override {
    // q, k, v, o; per worker the window's logits (s, D) and max, num, den,
    // or the encoder's prefix and suffix sums.
    return batch * steps * 4 * width_ + threads * WorkerFloats(steps);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override { proj_.Collect(out); }

  void Run(const float* x, size_t batch, size_t steps, float* const* states,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps, D = width_;
    float* q = ctx.scratch;   // (rows, D)
    float* k = q + rows * D;  // (rows, D)
    float* v = k + rows * D;  // (rows, D)
    float* o = v + rows * D;  // (rows, D)
    float* scratch = o + rows * D;
    proj_.Project(x, rows, q, k, v, ctx);
    ctx.pool->ForEachStrided(batch, [&](size_t w, size_t b) {
      const size_t r0 = b * steps;
      float* worker = scratch + w * WorkerFloats(steps);
      if (causal_) {
        Causal(q + r0 * D, k + r0 * D, v + r0 * D, steps, ctx.positions[b], states[b],
               o + r0 * D, worker);
      } else {
        Encode(q + r0 * D, k + r0 * D, v + r0 * D, steps, o + r0 * D, worker);
      }
    });
    proj_.Output(o, rows, y, ctx);
  }

  static Status Create(const fb::AftLocal* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckAftHeads(t, layer));
    if (uint64_t{t->heads()} * t->dk() > kMaxWidth || t->window() == 0 ||
        t->window() > (1u << 16)) {
      return InvalidModel("%s: AFT-local needs heads x dk <= %u and window in [1, 65536] (got "
                          "%u x %u, %u)", layer.c_str(), kMaxWidth, t->heads(), t->dk(),
                          t->window());
    }
    if ((t->pos_bias() >= 0) == (t->conv_kernel() >= 0)) {
      return InvalidModel("%s: AFT-local needs exactly one of pos_bias (aft_local) and "
                          "conv_kernel (aft_conv)", layer.c_str());
    }
    auto m = std::make_unique<AftLocal>();
    m->width_ = size_t{t->heads()} * t->dk();
    m->s_ = t->window();
    m->causal_ = t->causal();
    const auto D = static_cast<uint32_t>(m->width_);
    RECUR_RETURN_IF_ERROR(m->proj_.Load(t, layer, d_model, D, D, tensors));
    RECUR_RETURN_IF_ERROR(ReadAftLocalBias(t, layer, tensors, &m->bias_));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  size_t WorkerFloats(size_t steps) const {
    return causal_ ? (s_ + 3) * width_ : 4 * (steps + 1);
  }

  void Causal(const float* q, const float* k, const float* v, size_t steps, size_t p0,
              float* state, float* o, float* scratch) const {
    const size_t D = width_, s = s_;
    float* den = state;
    float* k_ring = den + D;          // (s, D)
    float* max = k_ring + s * D;
    float* num = max + D;
    float* v_ring = num + D;          // (s, D)
    float* logits = scratch;          // (s, D): the window's k + w, oldest first
    float* m = logits + s * D;        // (D) the largest logit
    float* n = m + D;                 // (D)
    float* d = n + D;                 // (D)
    for (size_t t = 0; t < steps; ++t) {
      const size_t p = p0 + t, first = p + 1 >= s ? p + 1 - s : 0, window = p + 1 - first;
      std::memcpy(k_ring + (p % s) * D, k + t * D, D * sizeof(float));
      std::memcpy(v_ring + (p % s) * D, v + t * D, D * sizeof(float));
      // M over the folded sums (if any) and the window; then the sums at M.
      for (size_t c = 0; c < D; ++c) m[c] = den[c] == 0.0f ? -INFINITY : max[c];
      for (size_t j = first; j <= p; ++j) {
        float* row = logits + (j - first) * D;
        kernels::Add(k_ring + (j % s) * D, bias_.data() + (p - j) * D, row, D);
        kernels::AffineMax(row, 1.0f, 0.0f, m, D);
      }
      for (size_t c = 0; c < D; ++c) {
        const float a = den[c] == 0.0f ? 0.0f : std::exp(max[c] - m[c]);
        n[c] = num[c] * a;
        d[c] = den[c] * a;
      }
      for (size_t j = 0; j < window; ++j) {
        kernels::AffineExpAccumulate(logits + j * D, 1.0f, 0.0f, m, v_ring + ((first + j) % s) * D,
                                     n, d, D);
      }
      for (size_t c = 0; c < D; ++c) o[t * D + c] = Sigmoid(q[t * D + c]) * n[c] / d[c];
      if (p + 1 >= s) {  // position p − s + 1 leaves the window: fold it (bias 0)
        const size_t slot = (p + 1 - s) % s;
        for (size_t c = 0; c < D; ++c) {
          Fold(k_ring[slot * D + c], v_ring[slot * D + c], &max[c], &num[c], &den[c]);
        }
      }
    }
  }

  // The whole sequence: y_t = σ(q_t) Σ_p e^{k_p + w_{t,p}} v_p / Σ_p e^{k_p + w_{t,p}},
  // w nonzero only for |t − p| < s (O(N·s) per channel): the positions
  // outside t's window come from prefix and suffix sums of e^{k_p − gm}
  // (each summed forward, never a difference of sums: taking the window's
  // e^{k} back out of a total cancelled to NaN for w ≪ 0), the window's own
  // terms are added with their bias.
  void Encode(const float* q, const float* k, const float* v, size_t steps, float* o,
              float* scratch) const {
    const size_t D = width_, s = s_;
    float* pre_n = scratch;            // (steps + 1): Σ_{p<i} e^{k_p − gm} v_p
    float* pre_d = pre_n + steps + 1;  // (steps + 1): Σ_{p<i} e^{k_p − gm}
    float* suf_n = pre_d + steps + 1;  // (steps + 1): Σ_{p≥i} e^{k_p − gm} v_p
    float* suf_d = suf_n + steps + 1;  // (steps + 1): Σ_{p≥i} e^{k_p − gm}
    for (size_t c = 0; c < D; ++c) {
      float gm = -INFINITY;
      for (size_t p = 0; p < steps; ++p) gm = std::max(gm, k[p * D + c]);
      pre_n[0] = pre_d[0] = suf_n[steps] = suf_d[steps] = 0.0f;
      for (size_t p = 0; p < steps; ++p) {
        const float e = std::exp(k[p * D + c] - gm);
        pre_n[p + 1] = pre_n[p] + e * v[p * D + c];
        pre_d[p + 1] = pre_d[p] + e;
      }
      for (size_t p = steps; p-- > 0;) {
        const float e = std::exp(k[p * D + c] - gm);
        suf_n[p] = suf_n[p + 1] + e * v[p * D + c];
        suf_d[p] = suf_d[p + 1] + e;
      }
      for (size_t t = 0; t < steps; ++t) {
        const size_t lo = t + 1 >= s ? t + 1 - s : 0, hi = std::min(steps, t + s);
        const float out_n = pre_n[lo] + suf_n[hi], out_d = pre_d[lo] + suf_d[hi];
        float m = out_d > 0.0f ? gm : -INFINITY;
        for (size_t p = lo; p < hi; ++p) {
          m = std::max(m, k[p * D + c] + bias_[(t + s - 1 - p) * D + c]);
        }
        const float a = out_d > 0.0f ? std::exp(gm - m) : 0.0f;
        float n = out_n * a, d = out_d * a;
        for (size_t p = lo; p < hi; ++p) {
          const float e = std::exp(k[p * D + c] + bias_[(t + s - 1 - p) * D + c] - m);
          n += e * v[p * D + c];
          d += e;
        }
        o[t * D + c] = Sigmoid(q[t * D + c]) * n / d;
      }
    }
  }

  size_t width_ = 0, s_ = 0;
  bool causal_ = true;
  std::vector<float> bias_;  // (offsets, D)
  QkvoProjections proj_;
};


// AFT-full (schema: table AftFull). Causal: a cache of every position's k and
// v, bounded by max_length (the session's max_context is clamped to it).
class AftFull final : public Mixer {
 public:
  bool causal() const override { return causal_; }
  size_t max_sequence() const override { return t_max_; }
  // k (max_context, D) then v (max_context, D).
  size_t state_floats() const override { return 0; }
  size_t state_floats_per_position() const override { return causal_ ? 2 * width_ : 0; }

  size_t scratch_floats(size_t batch, size_t steps, size_t threads,
                        size_t context) const override {
    // q, k, v, o; per worker one row of w and max, num, den per channel.
    return batch * steps * 4 * width_ + threads * WorkerFloats(steps, context);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override { proj_.Collect(out); }

  void Run(const float* x, size_t batch, size_t steps, float* const* states,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps, D = width_;
    float* q = ctx.scratch;   // (rows, D)
    float* k = q + rows * D;  // (rows, D)
    float* v = k + rows * D;  // (rows, D)
    float* o = v + rows * D;  // (rows, D)
    float* scratch = o + rows * D;
    proj_.Project(x, rows, q, k, v, ctx);
    const size_t per_worker = WorkerFloats(steps, ctx.max_context);
    ctx.pool->ForEachStrided(batch, [&](size_t w, size_t b) {
      const size_t r0 = b * steps;
      float* mine = scratch + w * per_worker;
      if (causal_) {
        // Append this call's k, v to the cache, then attend over it.
        float* ks = states[b];
        float* vs = states[b] + ctx.max_context * D;
        const size_t p0 = ctx.positions[b];
        std::memcpy(ks + p0 * D, k + r0 * D, steps * D * sizeof(float));
        std::memcpy(vs + p0 * D, v + r0 * D, steps * D * sizeof(float));
        for (size_t t = 0; t < steps; ++t) {
          Attend(q + (r0 + t) * D, ks, vs, p0 + t, p0 + t + 1, o + (r0 + t) * D, mine);
        }
      } else {
        for (size_t t = 0; t < steps; ++t) {
          Attend(q + (r0 + t) * D, k + r0 * D, v + r0 * D, t, steps, o + (r0 + t) * D, mine);
        }
      }
    });
    proj_.Output(o, rows, y, ctx);
  }

  static Status Create(const fb::AftFull* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckAftHeads(t, layer));
    if (uint64_t{t->heads()} * t->dk() > kMaxWidth || t->max_length() == 0 ||
        t->max_length() > (1u << 16)) {
      return InvalidModel("%s: AFT-full needs heads x dk <= %u and max_length in [1, 65536] (got "
                          "%u x %u, %u)", layer.c_str(), kMaxWidth, t->heads(), t->dk(),
                          t->max_length());
    }
    if ((t->pos_bias() >= 0) == (t->u() >= 0 || t->v() >= 0) || (t->u() >= 0) != (t->v() >= 0)) {
      return InvalidModel("%s: AFT-full needs either pos_bias or both u and v", layer.c_str());
    }
    auto m = std::make_unique<AftFull>();
    m->width_ = size_t{t->heads()} * t->dk();
    m->t_max_ = t->max_length();
    m->multiply_ = t->multiply();
    m->causal_ = t->causal();
    const auto D = static_cast<uint32_t>(m->width_);
    RECUR_RETURN_IF_ERROR(m->proj_.Load(t, layer, d_model, D, D, tensors));
    const std::string prefix = layer + ".mixer.";
    const int64_t T = m->t_max_;
    if (t->pos_bias() >= 0) {
      RECUR_RETURN_IF_ERROR(
          tensors->Get(t->pos_bias(), (prefix + "pos_bias").c_str(), {T, T}, false, &m->w_full_));
    } else {
      if (t->bias_rank() == 0 || t->bias_rank() > kMaxWidth) {
        return InvalidModel("%s: AFT-full with u, v needs bias_rank in [1, %u] (got %u)",
                            layer.c_str(), kMaxWidth, t->bias_rank());
      }
      m->rank_ = t->bias_rank();
      const int64_t r = int64_t(m->rank_);
      RECUR_RETURN_IF_ERROR(tensors->Get(t->u(), (prefix + "u").c_str(), {T, r}, false, &m->u_));
      RECUR_RETURN_IF_ERROR(tensors->Get(t->v(), (prefix + "v").c_str(), {T, r}, false, &m->v_));
    }
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  size_t WorkerFloats(size_t steps, size_t context) const {
    return std::max(steps, context) + 3 * width_;
  }

  // w_{t,p} for p < n into w.
  void BiasRow(size_t t, size_t n, float* w) const {
    if (w_full_ != nullptr) {
      std::memcpy(w, w_full_ + t * t_max_, n * sizeof(float));
      return;
    }
    for (size_t p = 0; p < n; ++p) w[p] = kernels::Dot(u_ + t * rank_, v_ + p * rank_, rank_);
  }

  // o = σ(q) ⊙ Σ_{p<n} softmax_p(logit(k_p, w_{t,p})) v_p, keys/values (n, D).
  void Attend(const float* q, const float* keys, const float* values, size_t t, size_t n,
              float* o, float* scratch) const {
    const size_t D = width_;
    float* w = scratch;       // (n)
    float* mx = scratch + n;  // (D); then num, den (D each)
    float* num = mx + D;
    float* den = num + D;
    BiasRow(t, n, w);
    // logit = a·k_p + b: (w, 0) multiplied, (1, w) added.
    for (size_t c = 0; c < D; ++c) mx[c] = -INFINITY;
    for (size_t p = 0; p < n; ++p) {
      kernels::AffineMax(keys + p * D, multiply_ ? w[p] : 1.0f, multiply_ ? 0.0f : w[p], mx, D);
    }
    std::fill(num, num + D, 0.0f);
    std::fill(den, den + D, 0.0f);
    for (size_t p = 0; p < n; ++p) {
      kernels::AffineExpAccumulate(keys + p * D, multiply_ ? w[p] : 1.0f, multiply_ ? 0.0f : w[p],
                                   mx, values + p * D, num, den, D);
    }
    for (size_t c = 0; c < D; ++c) o[c] = Sigmoid(q[c]) * num[c] / den[c];
  }

  size_t width_ = 0, t_max_ = 0, rank_ = 0;
  bool multiply_ = false, causal_ = true;
  const float* w_full_ = nullptr;  // (T, T)
  const float* u_ = nullptr;       // (T, r)
  const float* v_ = nullptr;       // (T, r)
  QkvoProjections proj_;
};

}  // namespace

Status CreateAftSimple(const void* table, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return AftSimple::Create(static_cast<const fb::AftSimple*>(table), layer, d_model, tensors, out);
}

Status CreateAftLocal(const void* table, const std::string& layer, uint32_t d_model,
                      TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return AftLocal::Create(static_cast<const fb::AftLocal*>(table), layer, d_model, tensors, out);
}

Status CreateAftFull(const void* table, const std::string& layer, uint32_t d_model,
                     TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return AftFull::Create(static_cast<const fb::AftFull*>(table), layer, d_model, tensors, out);
}

}  // namespace recur::impl
