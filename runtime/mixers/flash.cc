// FLASH mixed-chunk attention (attention-math.md §6; the exact math is in
// runtime/schema/recur.fbs, table Flash): quadratic inside an absolute chunk
// of C positions, linear across chunks. Causal RNN form at token granularity
// with a fixed state: the sum over completed chunks plus the current chunk's
// K^quad, K^lin, V slots.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/dense_op.h"
#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"

namespace recur {
namespace {

constexpr uint32_t kMaxWidth = 1u << 20;
constexpr uint32_t kMaxChunk = 1u << 16;

void Silu(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

class Flash final : public Mixer {
 public:
  bool causal() const override { return causal_; }
  // S (s, E), kl_buf (C, s), kq_buf (C, s), v_buf (C, E).
  size_t state_floats() const override { return causal_ ? s_ * e_ + c_ * (2 * s_ + e_) : 0; }

  size_t scratch_floats(size_t batch, size_t steps, size_t /*threads*/,
                        size_t /*context*/) const override {
    // u, v, o (E) and z, q^quad, k^quad, q^lin, k^lin (s) per row; the
    // encoder's Σ K^linᵀV (s, E) per stream.
    return batch * steps * (3 * e_ + 5 * s_) + (causal_ ? 0 : batch * s_ * e_);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override {
    for (const DenseView* d : {&u_proj_, &v_proj_, &z_proj_, &out_}) out->push_back(d);
  }

  void Run(const float* x, size_t batch, size_t steps, float* const* states,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps, E = e_, s = s_;
    float* u = ctx.scratch;       // (rows, E)
    float* v = u + rows * E;      // (rows, E)
    float* o = v + rows * E;      // (rows, E)
    float* z = o + rows * E;      // (rows, s)
    float* qq = z + rows * s;     // (rows, s) Q^quad
    float* kq = qq + rows * s;    // (rows, s) K^quad
    float* ql = kq + rows * s;    // (rows, s) Q^lin
    float* kl = ql + rows * s;    // (rows, s) K^lin
    RunDense(u_proj_, x, rows, u, false, ctx.pool, ctx.dense);
    RunDense(v_proj_, x, rows, v, false, ctx.pool, ctx.dense);
    RunDense(z_proj_, x, rows, z, false, ctx.pool, ctx.dense);
    Silu(u, rows * E);
    Silu(v, rows * E);
    Silu(z, rows * s);
    float* qk[4] = {qq, kq, ql, kl};
    for (size_t r = 0; r < rows; ++r) {
      for (size_t k = 0; k < 4; ++k) {
        for (size_t i = 0; i < s; ++i) {
          qk[k][r * s + i] = gamma_[k * s + i] * z[r * s + i] + beta_[k * s + i];
        }
      }
    }
    float* sums = kl + rows * s;  // encoder: (batch, s, E)
    ctx.pool->ParallelRanges(batch, 1, [&](size_t first, size_t last) {
      for (size_t b = first; b < last; ++b) {
        const size_t r0 = b * steps;
        if (causal_) {
          Causal(qq + r0 * s, kq + r0 * s, ql + r0 * s, kl + r0 * s, v + r0 * E, steps,
                 ctx.positions[b], states[b], o + r0 * E);
        } else {
          Encode(qq + r0 * s, kq + r0 * s, ql + r0 * s, kl + r0 * s, v + r0 * E, steps,
                 sums + b * s * E, o + r0 * E);
        }
      }
    });
    for (size_t i = 0; i < rows * E; ++i) o[i] *= u[i];  // U ⊙ (quad + lin)
    RunDense(out_, o, rows, y, false, ctx.pool, ctx.dense);
  }

  static Status Create(const fb::Flash* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    if (t->expansion_dim() == 0 || t->qk_dim() == 0 || t->chunk() == 0 ||
        t->expansion_dim() > kMaxWidth || t->qk_dim() > kMaxWidth || t->chunk() > kMaxChunk) {
      return InvalidModel("%s: FLASH needs expansion_dim and qk_dim in [1, %u] and chunk in "
                          "[1, %u] (got %u, %u, %u)", layer.c_str(), kMaxWidth, kMaxChunk,
                          t->expansion_dim(), t->qk_dim(), t->chunk());
    }
    if (!(std::isfinite(t->scale()) && t->scale() != 0.0f)) {
      return InvalidModel("%s: FLASH scale must be finite and nonzero (got %g)", layer.c_str(),
                          double(t->scale()));
    }
    auto m = std::make_unique<Flash>();
    m->e_ = t->expansion_dim();
    m->s_ = t->qk_dim();
    m->c_ = t->chunk();
    m->scale_ = t->scale();
    m->causal_ = t->causal();
    const std::string prefix = layer + ".mixer.";
    const auto E = uint32_t(m->e_), s = uint32_t(m->s_);
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->u_proj(), prefix + "u_proj", E, d_model, &m->u_proj_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->v_proj(), prefix + "v_proj", E, d_model, &m->v_proj_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->z_proj(), prefix + "z_proj", s, d_model, &m->z_proj_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->out(), prefix + "out", d_model, E, &m->out_));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->qk_gamma(), (prefix + "qk_gamma").c_str(),
                                       {4, int64_t(s)}, false, &m->gamma_));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->qk_beta(), (prefix + "qk_beta").c_str(),
                                       {4, int64_t(s)}, false, &m->beta_));
    const int64_t bias_len = m->causal_ ? int64_t(m->c_) : 2 * int64_t(m->c_) - 1;
    RECUR_RETURN_IF_ERROR(tensors->Get(t->rel_bias(), (prefix + "rel_bias").c_str(), {bias_len},
                                       false, &m->rel_bias_));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // relu(scale·a·b + bias)² for s-vectors a, b.
  float Weight(const float* a, const float* b, float bias) const {
    const float w = std::max(0.0f, scale_ * kernels::Dot(a, b, s_) + bias);
    return w * w;
  }

  // One stream, positions p0 .. p0 + steps − 1 in order.
  void Causal(const float* qq, const float* kq, const float* ql, const float* kl, const float* v,
              size_t steps, size_t p0, float* state, float* o) const {
    const size_t E = e_, s = s_, C = c_;
    float* sum = state;                 // (s, E)
    float* kl_buf = sum + s * E;        // (C, s)
    float* kq_buf = kl_buf + C * s;     // (C, s)
    float* v_buf = kq_buf + C * s;      // (C, E)
    for (size_t t = 0; t < steps; ++t) {
      const size_t slot = (p0 + t) % C;
      std::memcpy(kq_buf + slot * s, kq + t * s, s * sizeof(float));
      std::memcpy(kl_buf + slot * s, kl + t * s, s * sizeof(float));
      std::memcpy(v_buf + slot * E, v + t * E, E * sizeof(float));
      float* out = o + t * E;
      // lin = scale · Q^lin_t · S (earlier chunks only: S is updated below).
      std::fill(out, out + E, 0.0f);
      for (size_t i = 0; i < s; ++i) {
        const float a = scale_ * ql[t * s + i];
        const float* row = sum + i * E;
        for (size_t e = 0; e < E; ++e) out[e] += a * row[e];
      }
      for (size_t p = 0; p <= slot; ++p) {  // the current chunk, up to t
        const float w = Weight(qq + t * s, kq_buf + p * s, rel_bias_[slot - p]);
        if (w == 0.0f) continue;
        const float* vp = v_buf + p * E;
        for (size_t e = 0; e < E; ++e) out[e] += w * vp[e];
      }
      if (slot + 1 == C) {  // the chunk is complete: S += K^linᵀ V over its slots
        for (size_t p = 0; p < C; ++p) {
          for (size_t i = 0; i < s; ++i) {
            const float a = kl_buf[p * s + i];
            float* row = sum + i * E;
            const float* vp = v_buf + p * E;
            for (size_t e = 0; e < E; ++e) row[e] += a * vp[e];
          }
        }
      }
    }
  }

  // One stream's whole sequence.
  void Encode(const float* qq, const float* kq, const float* ql, const float* kl, const float* v,
              size_t steps, float* sum, float* o) const {
    const size_t E = e_, s = s_, C = c_;
    std::fill(sum, sum + s * E, 0.0f);
    for (size_t p = 0; p < steps; ++p) {
      for (size_t i = 0; i < s; ++i) {
        const float a = kl[p * s + i];
        for (size_t e = 0; e < E; ++e) sum[i * E + e] += a * v[p * E + e];
      }
    }
    const float inv_n = 1.0f / float(steps);
    for (size_t t = 0; t < steps; ++t) {
      float* out = o + t * E;
      std::fill(out, out + E, 0.0f);
      for (size_t i = 0; i < s; ++i) {
        const float a = ql[t * s + i] * inv_n;
        for (size_t e = 0; e < E; ++e) out[e] += a * sum[i * E + e];
      }
      const size_t g0 = t / C * C, g1 = std::min(steps, g0 + C);
      for (size_t p = g0; p < g1; ++p) {
        const float w = Weight(qq + t * s, kq + p * s, rel_bias_[t + C - 1 - p]);
        if (w == 0.0f) continue;
        for (size_t e = 0; e < E; ++e) out[e] += w * v[p * E + e];
      }
    }
  }

  size_t e_ = 0, s_ = 0, c_ = 0;
  float scale_ = 1.0f;
  bool causal_ = true;
  const float* gamma_ = nullptr;     // (4, s)
  const float* beta_ = nullptr;      // (4, s)
  const float* rel_bias_ = nullptr;  // (C) or (2C − 1)
  DenseView u_proj_, v_proj_, z_proj_, out_;
};

}  // namespace

Status CreateFlash(const void* table, const std::string& layer, uint32_t d_model,
                   TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return Flash::Create(static_cast<const fb::Flash*>(table), layer, d_model, tensors, out);
}

}  // namespace recur
