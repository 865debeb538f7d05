// Gated linear attention (docs/attention-math.md §19): the projections, the
// low-rank gate and the optional short convolutions over all rows of a call,
// then per stream and query head the recurrence position by position
// (kernels/recurrence: decay w = e^α per key dimension, write v kᵀ, read
// q/√dk), the gated RMS norm per head and the output projection.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/dense_op.h"
#include "kernels/recurrence/recurrence.h"
#include "mixers/mixer.h"
#include "mixers/projections.h"
#include "mixers/short_conv.h"

namespace recur::impl {
namespace {

class Gla final : public Mixer {
 public:
  // S (H, dv, dk), then the convolutions' carries: k's, q's, v's.
  size_t state_floats() const override { return heads_ * dv_ * dk_ + convs_.carry_floats(); }

  size_t scratch_floats(size_t batch, size_t steps, size_t /*threads*/,
                        size_t /*context*/) const override {
    const size_t rows = batch * steps;
    // Projected q k v and their convolutions, α (C), the gate's hidden (R),
    // the output gate and o (H·dv).
    return rows * (2 * (q_width_ + k_width_ + v_width_) + k_width_ + gate_down_.out +
                   2 * heads_ * dv_);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override {
    for (const DenseView* d : {&query_, &key_, &value_, &gate_down_, &gate_up_, &out_})
      out->push_back(d);
    if (gated_) out->push_back(&gate_);
  }

  void Run(const float* x, size_t batch, size_t steps, float* const* states, const StepContext& ctx,
           float* y) const override {
    const size_t rows = batch * steps, qw = q_width_, kw = k_width_, uw = v_width_;
    const size_t ow = heads_ * dv_;
    float* q = ctx.scratch;  // (rows, Q), (rows, C), (rows, U): the projections
    float* k = q + rows * qw;
    float* v = k + rows * kw;
    float* qc = v + rows * uw;  // after the convolutions
    float* kc = qc + rows * qw;
    float* vc = kc + rows * kw;
    float* alpha = vc + rows * uw;  // (rows, C)
    float* hidden = alpha + rows * kw;  // (rows, R)
    float* gate = hidden + rows * gate_down_.out;  // (rows, H·dv)
    float* o = gate + rows * ow;
    RunDense(query_, x, rows, q, false, ctx.pool, ctx.dense);
    RunDense(key_, x, rows, k, false, ctx.pool, ctx.dense);
    RunDense(value_, x, rows, v, false, ctx.pool, ctx.dense);
    RunDense(gate_down_, x, rows, hidden, false, ctx.pool, ctx.dense);
    RunDense(gate_up_, hidden, rows, alpha, false, ctx.pool, ctx.dense);
    if (gated_) RunDense(gate_, x, rows, gate, false, ctx.pool, ctx.dense);
    if (convs_.kernel() != 0) {
      convs_.Run(q, k, v, batch, steps, states, heads_ * dv_ * dk_, ctx, qc, kc, vc);
      q = qc;
      k = kc;
      v = vc;
    }
    PrepareRows(rows, ctx, q, alpha);
    // Each (stream, query head) walks its positions in order; pairs are independent.
    ctx.pool->ParallelRanges(batch * heads_, 1, [&](size_t first, size_t last) {
      for (size_t pair = first; pair < last; ++pair) {
        const size_t b = pair / heads_, h = pair % heads_, g = h / group_;
        float* s = states[b] + h * dv_ * dk_;
        kernels::RecurrenceStepArgs args;
        args.dk = dk_;
        args.dv = dv_;
        for (size_t t = 0; t < steps; ++t) {
          const size_t row = b * steps + t;
          args.w = alpha + row * kw + g * dk_;  // e^α (PrepareRows)
          args.k = k + row * kw + g * dk_;
          args.v = v + row * uw + g * dv_;
          args.r = q + row * qw + h * dk_;
          args.warm = t > 0;
          kernels::RecurrenceStep(args, s, o + row * ow + h * dv_);
        }
      }
    });
    GatedRmsNormHeads(o, gated_ ? gate : nullptr, rows, heads_, dv_, norm_weight_, eps_, ctx);
    RunDense(out_, o, rows, y, false, ctx.pool, ctx.dense);
  }

  static Status Create(const fb::Gla* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckHeads(layer, "GLA", t->heads(), t->head_k_dim(), t->head_v_dim()));
    if (t->kv_heads() == 0 || t->heads() % t->kv_heads() != 0) {
      return InvalidModel("%s: GLA heads (%u) must be a multiple of kv_heads (%u > 0)",
                          layer.c_str(), t->heads(), t->kv_heads());
    }
    if (!(t->norm_eps() > 0.0f && std::isfinite(t->norm_eps()))) {
      return InvalidModel("%s: GLA norm_eps must be finite and > 0 (got %g)", layer.c_str(),
                          double(t->norm_eps()));
    }
    if (!(t->gate_logit_normalizer() > 0.0f && std::isfinite(t->gate_logit_normalizer()))) {
      return InvalidModel("%s: GLA gate_logit_normalizer must be finite and > 0 (got %g)",
                          layer.c_str(), double(t->gate_logit_normalizer()));
    }
    if (std::isnan(t->clamp_min()) || t->clamp_min() > 0.0f) {
      return InvalidModel("%s: GLA clamp_min must be at most 0 (got %g)", layer.c_str(),
                          double(t->clamp_min()));
    }
    auto m = std::make_unique<Gla>();
    m->heads_ = t->heads();
    m->group_ = t->heads() / t->kv_heads();
    m->dk_ = t->head_k_dim();
    m->dv_ = t->head_v_dim();
    m->q_width_ = m->heads_ * m->dk_;
    m->k_width_ = size_t{t->kv_heads()} * m->dk_;
    m->v_width_ = size_t{t->kv_heads()} * m->dv_;
    m->eps_ = t->norm_eps();
    m->normalizer_ = t->gate_logit_normalizer();
    m->clamp_min_ = t->clamp_min();
    m->gated_ = t->gate() != nullptr;
    const auto qw = uint32_t(m->q_width_), kw = uint32_t(m->k_width_),
               uw = uint32_t(m->v_width_), ow = uint32_t(m->heads_ * m->dv_);
    const std::string p = layer + ".mixer.";
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->query(), p + "query", qw, d_model, &m->query_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->key(), p + "key", kw, d_model, &m->key_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->value(), p + "value", uw, d_model, &m->value_));
    if (t->gate_down() == nullptr) return InvalidModel("%sgate_down is missing", p.c_str());
    uint32_t rank = 0;
    RECUR_RETURN_IF_ERROR(tensors->DenseRows(t->gate_down(), p + "gate_down", d_model, &rank));
    RECUR_RETURN_IF_ERROR(
        tensors->GetDense(t->gate_down(), p + "gate_down", rank, d_model, &m->gate_down_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->gate_up(), p + "gate_up", kw, rank, &m->gate_up_));
    if (m->gated_)
      RECUR_RETURN_IF_ERROR(tensors->GetDense(t->gate(), p + "gate", ow, d_model, &m->gate_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->out(), p + "out", d_model, ow, &m->out_));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->norm_weight(), (p + "norm_weight").c_str(),
                                       {int64_t(m->dv_)}, false, &m->norm_weight_));
    RECUR_RETURN_IF_ERROR(m->convs_.Load(t, layer, "GLA", qw, kw, uw, tensors));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // Per row, in place (§19): q ← q/√dk, α ← exp(max(logsigmoid(α)/normalizer,
  // clamp_min)), logsigmoid(a) = min(a, 0) − log1p(e^{−|a|}).
  void PrepareRows(size_t rows, const StepContext& ctx, float* q, float* alpha) const {
    const float scale = 1.0f / std::sqrt(float(dk_));
    ctx.pool->ParallelRanges(rows, 4, [&](size_t first, size_t last) {
      for (size_t row = first; row < last; ++row) {
        float* qr = q + row * q_width_;
        for (size_t i = 0; i < q_width_; ++i) qr[i] *= scale;
        float* ar = alpha + row * k_width_;
        for (size_t i = 0; i < k_width_; ++i) {
          const float a = ar[i];
          const float log_sigmoid = std::min(a, 0.0f) - std::log1p(std::exp(-std::fabs(a)));
          ar[i] = std::exp(std::max(log_sigmoid / normalizer_, clamp_min_));
        }
      }
    });
  }

  size_t heads_ = 0, group_ = 1, dk_ = 0, dv_ = 0, q_width_ = 0, k_width_ = 0, v_width_ = 0;
  float eps_ = 0.0f, normalizer_ = 16.0f, clamp_min_ = 0.0f;
  bool gated_ = false;
  DenseView query_, key_, value_, gate_down_, gate_up_, gate_, out_;
  QkvShortConvs convs_;
  const float* norm_weight_ = nullptr;
};

}  // namespace

Status CreateGla(const void* table, const std::string& layer, uint32_t d_model,
                 TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return Gla::Create(static_cast<const fb::Gla*>(table), layer, d_model, tensors, out);
}

}  // namespace recur::impl
