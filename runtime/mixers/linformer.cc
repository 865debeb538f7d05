// Linformer (docs/attention-math.md §7): keys and values projected along the
// sequence to proj_dim rows, then softmax attention over those rows. Encoder
// only: the projections mix every position, so there is no recurrent form.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/dense/dense.h"
#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"
#include "mixers/mixer_tables.h"
#include "mixers/projections.h"

namespace recur::impl {
namespace {

class Linformer final : public Mixer {
 public:
  bool causal() const override { return false; }
  size_t max_sequence() const override { return n_; }
  size_t state_floats() const override { return 0; }

  size_t scratch_floats(size_t batch, size_t steps, size_t threads,
                        size_t /*context*/) const override {
    return batch * steps * heads_ * (2 * dk_ + 2 * dv_) + threads * WorkerFloats(steps);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override { proj_.Collect(out); }

  void Run(const float* x, size_t batch, size_t steps, float* const* /*states*/,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps;
    const size_t qk = heads_ * dk_, vw = heads_ * dv_;
    const QkvoProjections::Rows p = proj_.ProjectRows(x, rows, ctx);
    float *q = p.q, *k = p.k, *v = p.v, *o = p.o, *scratch = p.rest;
    ctx.pool->ForEachStrided(batch * heads_, [&](size_t w, size_t pair) {
      const size_t b = pair / heads_, h = pair % heads_, r0 = b * steps;
      Head(q + r0 * qk + h * dk_, k + r0 * qk + h * dk_, v + r0 * vw + h * dv_, steps, h,
           o + r0 * vw + h * dv_, scratch + w * WorkerFloats(steps));
    });
    proj_.Output(o, rows, y, ctx);
  }

  static Status Create(const fb::Linformer* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckHeads(layer, "linformer", t->heads(), t->dk(), t->dv()));
    if (t->seq_len() == 0 || t->proj_dim() == 0 || t->seq_len() > kMaxWidth ||
        t->proj_dim() > kMaxWidth) {
      return InvalidModel("%s: linformer needs seq_len and proj_dim in [1, %u] (got %u, %u)",
                          layer.c_str(), kMaxWidth, t->seq_len(), t->proj_dim());
    }
    auto m = std::make_unique<Linformer>();
    m->heads_ = t->heads();
    m->dk_ = t->dk();
    m->dv_ = t->dv();
    m->n_ = t->seq_len();
    m->k_ = t->proj_dim();
    m->scale_ = 1.0f / std::sqrt(static_cast<float>(t->dk()));
    RECUR_RETURN_IF_ERROR(m->proj_.Load(t, layer, d_model, t->heads() * t->dk(),
                                        t->heads() * t->dv(), tensors));
    LinformerProjections ef;
    RECUR_RETURN_IF_ERROR(ReadLinformerProjections(t, layer, tensors, &ef));
    m->e_ = ef.e;
    m->f_ = ef.f;
    m->e_per_head_ = ef.e_per_head;
    m->f_per_head_ = ef.f_per_head;
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // Per worker: Kᵀ (dk, N), Vᵀ (dv, N), K' (k, dk), V'ᵀ (dv, k), V' (k, dv),
  // scores (N, k).
  size_t WorkerFloats(size_t steps) const {
    return (dk_ + dv_) * steps + k_ * (dk_ + 2 * dv_) + steps * k_;
  }

  // One stream and head over N = steps positions (N <= n, checked by the session).
  void Head(const float* q, const float* k, const float* v, size_t steps, size_t h, float* o,
            float* scratch) const {
    const size_t qk = heads_ * dk_, vw = heads_ * dv_, N = steps;
    float* kt = scratch;             // (dk, N)
    float* vt = kt + dk_ * N;        // (dv, N)
    float* k2 = vt + dv_ * N;        // (k, dk)
    float* v2t = k2 + k_ * dk_;      // (dv, k)
    float* v2 = v2t + dv_ * k_;      // (k, dv)
    float* scores = v2 + k_ * dv_;   // (N, k)
    for (size_t t = 0; t < N; ++t) {
      for (size_t i = 0; i < dk_; ++i) kt[i * N + t] = k[t * qk + i];
      for (size_t i = 0; i < dv_; ++i) vt[i * N + t] = v[t * vw + i];
    }
    const float* e = e_ + (e_per_head_ ? h * k_ * n_ : 0);  // (k, n): rows of stride n
    const float* f = f_ + (f_per_head_ ? h * k_ * n_ : 0);
    kernels::Dense(e, n_, k_, kt, nullptr, N, dk_, k2, dk_, false);   // K' = E[:, :N]·K
    kernels::Dense(f, n_, k_, vt, nullptr, N, dv_, v2, dv_, false);   // V' = F[:, :N]·V
    for (size_t r = 0; r < k_; ++r) {
      for (size_t i = 0; i < dv_; ++i) v2t[i * k_ + r] = v2[r * dv_ + i];
    }
    kernels::Dense(q, qk, N, k2, nullptr, dk_, k_, scores, k_, false);  // Q·K'ᵀ
    for (size_t t = 0; t < N; ++t) {
      float* s = scores + t * k_;
      kernels::Scale(s, scale_, s, k_);
      kernels::Softmax(s, s, k_);
    }
    kernels::Dense(scores, k_, N, v2t, nullptr, k_, dv_, o, vw, false);  // P·V'
  }

  size_t heads_ = 0, dk_ = 0, dv_ = 0, n_ = 0, k_ = 0;
  float scale_ = 1.0f;
  const float* e_ = nullptr;
  const float* f_ = nullptr;
  bool e_per_head_ = false, f_per_head_ = false;
  QkvoProjections proj_;
};

}  // namespace

Status CreateLinformer(const void* table, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return Linformer::Create(static_cast<const fb::Linformer*>(table), layer, d_model, tensors, out);
}

}  // namespace recur::impl
