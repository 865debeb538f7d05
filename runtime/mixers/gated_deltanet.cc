// Gated DeltaNet (docs/attention-math.md §18): the projections and short
// convolutions over all rows of a call, then per stream and value head the
// gated delta rule position by position (kernels/recurrence: scalar decay
// e^g, low rank a = k, b = −β·e^g·k, write (β·v) kᵀ, read q/√dk), the gated
// RMS norm per head and the output projection.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/dense_op.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/recurrence/recurrence.h"
#include "mixers/mixer.h"
#include "mixers/projections.h"
#include "mixers/short_conv.h"

namespace recur::impl {
namespace {

class GatedDeltaNet final : public Mixer {
 public:
  // S (HV, dv, dk), then the convolutions' carries: k's, q's, v's.
  size_t state_floats() const override {
    return v_heads_ * dv_ * dk_ + convs_.carry_floats();
  }

  size_t scratch_floats(size_t batch, size_t steps, size_t /*threads*/,
                        size_t /*context*/) const override {
    const size_t rows = batch * steps, qw = heads_ * dk_, vw = v_heads_ * dv_;
    // Projected q k v, their convolutions, β and the decay (HV), the gate, o,
    // and b = −β·e^g·k per value head.
    return rows * (2 * (2 * qw + vw) + 2 * v_heads_ + 2 * vw + v_heads_ * dk_);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override {
    for (const DenseView* d : {&query_, &key_, &value_, &decay_, &beta_, &out_}) out->push_back(d);
    if (gated_) out->push_back(&gate_);
  }

  void Run(const float* x, size_t batch, size_t steps, float* const* states, const StepContext& ctx,
           float* y) const override {
    const size_t rows = batch * steps, qw = heads_ * dk_, vw = v_heads_ * dv_;
    float* q0 = ctx.scratch;  // (rows, Q), (rows, Q), (rows, V): the projections
    float* k0 = q0 + rows * qw;
    float* v0 = k0 + rows * qw;
    float* q = v0 + rows * vw;  // after the convolutions
    float* k = q + rows * qw;
    float* v = k + rows * qw;
    float* beta = v + rows * vw;      // (rows, HV)
    float* decay = beta + rows * v_heads_;
    float* gate = decay + rows * v_heads_;  // (rows, V)
    float* o = gate + rows * vw;
    float* low = o + rows * vw;  // (rows, HV, dk)
    RunDense(query_, x, rows, q0, false, ctx.pool, ctx.dense);
    RunDense(key_, x, rows, k0, false, ctx.pool, ctx.dense);
    RunDense(value_, x, rows, v0, false, ctx.pool, ctx.dense);
    RunDense(beta_, x, rows, beta, false, ctx.pool, ctx.dense);
    RunDense(decay_, x, rows, decay, false, ctx.pool, ctx.dense);
    if (gated_) RunDense(gate_, x, rows, gate, false, ctx.pool, ctx.dense);
    if (convs_.kernel() != 0) {
      convs_.Run(q0, k0, v0, batch, steps, states, v_heads_ * dv_ * dk_, ctx, q, k, v);
    } else {  // silu alone (fla's use_short_conv false); q0 k0 v0 and q k v are contiguous
      ctx.pool->ParallelRanges(rows * (2 * qw + vw), kElementsPerTask,
                               [&](size_t first, size_t last) {
                                 kernels::Silu(q0 + first, q + first, last - first);
                               });
    }
    PrepareRows(rows, ctx, q, k, v, beta, decay, low);
    // Each (stream, value head) walks its positions in order; pairs are independent.
    ctx.pool->ParallelRanges(batch * v_heads_, 1, [&](size_t first, size_t last) {
      for (size_t pair = first; pair < last; ++pair) {
        const size_t b = pair / v_heads_, j = pair % v_heads_, h = j / group_;
        float* s = states[b] + j * dv_ * dk_;
        kernels::RecurrenceStepArgs args;
        args.dk = dk_;
        args.dv = dv_;
        for (size_t t = 0; t < steps; ++t) {
          const size_t row = b * steps + t;
          args.w_scalar = decay[row * v_heads_ + j];
          args.a = k + row * qw + h * dk_;
          args.b = low + (row * v_heads_ + j) * dk_;  // −β·e^g·k (PrepareRows)
          args.k = args.a;
          args.v = v + row * vw + j * dv_;  // β·v (PrepareRows)
          args.r = q + row * qw + h * dk_;
          args.warm = t > 0;
          kernels::RecurrenceStep(args, s, o + row * vw + j * dv_);
        }
      }
    });
    GatedRmsNormHeads(o, gated_ ? gate : nullptr, rows, v_heads_, dv_, norm_weight_, eps_, ctx);
    RunDense(out_, o, rows, y, false, ctx.pool, ctx.dense);
  }

  static Status Create(const fb::GatedDeltaNet* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(
        CheckHeads(layer, "Gated DeltaNet", t->v_heads(), t->head_k_dim(), t->head_v_dim()));
    if (t->heads() == 0 || t->v_heads() % t->heads() != 0) {
      return InvalidModel("%s: Gated DeltaNet v_heads (%u) must be a multiple of heads (%u > 0)",
                          layer.c_str(), t->v_heads(), t->heads());
    }
    if (!(t->norm_eps() > 0.0f && std::isfinite(t->norm_eps()))) {
      return InvalidModel("%s: Gated DeltaNet norm_eps must be finite and > 0 (got %g)",
                          layer.c_str(), double(t->norm_eps()));
    }
    if (!(t->beta_scale() > 0.0f && std::isfinite(t->beta_scale()))) {
      return InvalidModel("%s: Gated DeltaNet beta_scale must be finite and > 0 (got %g)",
                          layer.c_str(), double(t->beta_scale()));
    }
    auto m = std::make_unique<GatedDeltaNet>();
    m->heads_ = t->heads();
    m->v_heads_ = t->v_heads();
    m->group_ = m->v_heads_ / m->heads_;
    m->dk_ = t->head_k_dim();
    m->dv_ = t->head_v_dim();
    m->eps_ = t->norm_eps();
    m->beta_scale_ = t->beta_scale();
    m->gated_ = t->gate() != nullptr;
    const auto qw = uint32_t(m->heads_ * m->dk_), vw = uint32_t(m->v_heads_ * m->dv_),
               hv = uint32_t(m->v_heads_);
    const std::string p = layer + ".mixer.";
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->query(), p + "query", qw, d_model, &m->query_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->key(), p + "key", qw, d_model, &m->key_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->value(), p + "value", vw, d_model, &m->value_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->decay(), p + "decay", hv, d_model, &m->decay_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->beta(), p + "beta", hv, d_model, &m->beta_));
    if (m->gated_)
      RECUR_RETURN_IF_ERROR(tensors->GetDense(t->gate(), p + "gate", vw, d_model, &m->gate_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->out(), p + "out", d_model, vw, &m->out_));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->a_log(), (p + "a_log").c_str(), {hv}, false, &m->a_log_));
    RECUR_RETURN_IF_ERROR(
        tensors->Get(t->dt_bias(), (p + "dt_bias").c_str(), {hv}, false, &m->dt_bias_));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->norm_weight(), (p + "norm_weight").c_str(),
                                       {int64_t(m->dv_)}, false, &m->norm_weight_));
    RECUR_RETURN_IF_ERROR(m->convs_.Load(t, layer, "Gated DeltaNet", qw, qw, vw, tensors));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // Per row, in place (§18): q, k normalised per key head (q also by 1/√dk),
  // β ← beta_scale·σ(β), decay ← e^g with g = −e^{a_log}·softplus(decay +
  // dt_bias), v ← β·v and low ← −β·e^g·k per value head.
  void PrepareRows(size_t rows, const StepContext& ctx, float* q, float* k, float* v, float* beta,
                   float* decay, float* low) const {
    const size_t qw = heads_ * dk_, vw = v_heads_ * dv_;
    const float scale = 1.0f / std::sqrt(float(dk_));
    ctx.pool->ParallelRanges(rows, 4, [&](size_t first, size_t last) {
      for (size_t row = first; row < last; ++row) {
        for (size_t h = 0; h < heads_; ++h) {
          L2Normalize(q + row * qw + h * dk_, scale);
          L2Normalize(k + row * qw + h * dk_, 1.0f);
        }
        for (size_t j = 0; j < v_heads_; ++j) {
          const size_t at = row * v_heads_ + j;
          const float bj = beta_scale_ / (1.0f + std::exp(-beta[at]));
          const float z = decay[at] + dt_bias_[j];
          const float softplus = z > 20.0f ? z : std::log1p(std::exp(z));
          const float e = std::exp(-std::exp(a_log_[j]) * softplus);
          decay[at] = e;
          float* vj = v + row * vw + j * dv_;
          for (size_t i = 0; i < dv_; ++i) vj[i] *= bj;
          const float* kh = k + row * qw + (j / group_) * dk_;
          float* lj = low + at * dk_;
          for (size_t i = 0; i < dk_; ++i) lj[i] = -bj * e * kh[i];
        }
      }
    });
  }

  // x ← x/√(‖x‖² + 1e-6)·scale over dk (fla's use_qk_l2norm_in_kernel).
  void L2Normalize(float* x, float scale) const {
    const float inv = scale / std::sqrt(kernels::Dot(x, x, dk_) + 1e-6f);
    for (size_t i = 0; i < dk_; ++i) x[i] *= inv;
  }

  size_t heads_ = 0, v_heads_ = 0, group_ = 1, dk_ = 0, dv_ = 0;
  float eps_ = 0.0f, beta_scale_ = 1.0f;
  bool gated_ = false;
  DenseView query_, key_, value_, decay_, beta_, gate_, out_;
  QkvShortConvs convs_;
  const float* a_log_ = nullptr;
  const float* dt_bias_ = nullptr;
  const float* norm_weight_ = nullptr;
};

}  // namespace

Status CreateGatedDeltaNet(const void* table, const std::string& layer, uint32_t d_model,
                           TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return GatedDeltaNet::Create(static_cast<const fb::GatedDeltaNet*>(table), layer, d_model,
                               tensors, out);
}

}  // namespace recur::impl
