// RWKV-7's time mix (docs/attention-math.md §16): the token shift and its six
// mixes, the projections and low-rank paths over all rows of a call, then per
// stream and head the diagonal-plus-low-rank recurrence position by position
// (kernels/recurrence), the per-head group norm, the bonus and the gated
// output projection.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/dense_op.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/recurrence/recurrence.h"
#include "mixers/mixer.h"
#include "mixers/projections.h"

namespace recur::impl {
namespace {

class Rwkv7 final : public Mixer {
 public:
  // S (H, N, N), then x₋₁ (C).
  size_t state_floats() const override { return d_model_ + heads_ * n_ * n_; }

  size_t shared_row_floats() const override { return width_; }
  bool writes_shared_rows() const override { return !value_residual_; }

  size_t scratch_floats(size_t batch, size_t steps, size_t /*threads*/,
                        size_t /*context*/) const override {
    const size_t rows = batch * steps;
    const size_t low_rank = decay_down_.out + rate_down_.out + gate_down_.out + value_down_.out;
    // The six mixed inputs (C), r k v w α g κ̂ ν y (A), the low-rank hiddens.
    return rows * (kMixes * d_model_ + 9 * width_ + low_rank);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override {
    for (const DenseView* d : {&receptance_, &key_, &value_, &out_, &decay_down_, &decay_up_,
                               &rate_down_, &rate_up_, &gate_down_, &gate_up_}) {
      out->push_back(d);
    }
    if (value_residual_) {
      out->push_back(&value_down_);
      out->push_back(&value_up_);
    }
  }

  void Run(const float* x, size_t batch, size_t steps, float* const* states, const StepContext& ctx,
           float* y) const override {
    const size_t rows = batch * steps, c = d_model_, a = width_;
    float* mixed = ctx.scratch;            // (6, rows, C): x_r, x_w, x_k, x_v, x_a, x_g
    float* r = mixed + kMixes * rows * c;  // (rows, A) each, below
    float* k = r + rows * a;
    float* v = k + rows * a;
    float* w = v + rows * a;
    float* rate = w + rows * a;
    float* g = rate + rows * a;
    float* kk = g + rows * a;
    float* nu = kk + rows * a;
    float* o = nu + rows * a;
    float* hidden = o + rows * a;  // (rows, D) for each low-rank path in turn
    MixInputs(x, batch, steps, states, ctx, mixed);
    auto input = [&](size_t m) { return mixed + m * rows * c; };
    RunDense(receptance_, input(0), rows, r, false, ctx.pool, ctx.dense);
    RunDense(key_, input(2), rows, k, false, ctx.pool, ctx.dense);
    RunDense(value_, input(3), rows, v, false, ctx.pool, ctx.dense);
    LowRank(decay_down_, decay_up_, input(1), rows, Inner::kTanh, hidden, w, ctx);
    LowRank(rate_down_, rate_up_, input(4), rows, Inner::kNone, hidden, rate, ctx);
    LowRank(gate_down_, gate_up_, input(5), rows, Inner::kSigmoid, hidden, g, ctx);
    if (value_residual_)
      LowRank(value_down_, value_up_, input(3), rows, Inner::kNone, hidden, nu, ctx);
    PrepareRows(rows, ctx, k, v, w, rate, kk, nu);
    // Each (stream, head) walks its positions in order; pairs are independent.
    ctx.pool->ParallelRanges(batch * heads_, 1, [&](size_t first, size_t last) {
      for (size_t pair = first; pair < last; ++pair) {
        const size_t b = pair / heads_, h = pair % heads_;
        float* s = states[b] + h * n_ * n_;
        kernels::RecurrenceStepArgs args;
        args.dk = args.dv = n_;
        for (size_t t = 0; t < steps; ++t) {
          const size_t at = (b * steps + t) * a + h * n_;
          args.w = w + at;
          args.a = kk + at;    // −κ̂ (PrepareRows)
          args.b = rate + at;  // κ̂ ⊙ α (PrepareRows)
          args.k = k + at;
          args.v = v + at;
          args.r = r + at;
          args.warm = t > 0;
          kernels::RecurrenceStep(args, s, o + at);
        }
      }
    });
    FinishRows(rows, ctx, r, k, v, g, o);
    RunDense(out_, o, rows, y, false, ctx.pool, ctx.dense);
  }

  static Status Create(const fb::Rwkv7* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckHeads(layer, "RWKV-7", t->heads(), t->head_size(), t->head_size()));
    if (!(t->group_norm_eps() > 0.0f && std::isfinite(t->group_norm_eps()))) {
      return InvalidModel("%s: RWKV-7 group_norm_eps must be finite and > 0 (got %g)",
                          layer.c_str(), double(t->group_norm_eps()));
    }
    if (!(t->decay_scale() > 0.0f && std::isfinite(t->decay_scale()))) {
      return InvalidModel("%s: RWKV-7 decay_scale must be finite and > 0 (got %g)", layer.c_str(),
                          double(t->decay_scale()));
    }
    if ((t->value_down() == nullptr) != (t->value_up() == nullptr)) {
      return InvalidModel(
          "%s: RWKV-7 value_down and value_up come together (the value "
          "residual's two layers), but the file gives one",
          layer.c_str());
    }
    auto m = std::make_unique<Rwkv7>();
    m->d_model_ = d_model;
    m->heads_ = t->heads();
    m->n_ = t->head_size();
    m->width_ = m->heads_ * m->n_;
    m->eps_ = t->group_norm_eps();
    m->decay_scale_ = t->decay_scale();
    m->value_residual_ = t->value_down() != nullptr;
    const auto a = uint32_t(m->width_);
    const std::string p = layer + ".mixer.";
    RECUR_RETURN_IF_ERROR(tensors->Get(t->token_mix(), (p + "token_mix").c_str(), {kMixes, d_model},
                                       false, &m->token_mix_));
    RECUR_RETURN_IF_ERROR(
        tensors->GetDense(t->receptance(), p + "receptance", a, d_model, &m->receptance_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->key(), p + "key", a, d_model, &m->key_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->value(), p + "value", a, d_model, &m->value_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->out(), p + "out", d_model, a, &m->out_));
    RECUR_RETURN_IF_ERROR(LoadLowRank(t->decay_down(), t->decay_up(), p + "decay", d_model, a, true,
                                      tensors, &m->decay_down_, &m->decay_up_));
    RECUR_RETURN_IF_ERROR(LoadLowRank(t->rate_down(), t->rate_up(), p + "rate", d_model, a, true,
                                      tensors, &m->rate_down_, &m->rate_up_));
    RECUR_RETURN_IF_ERROR(LoadLowRank(t->gate_down(), t->gate_up(), p + "gate", d_model, a, false,
                                      tensors, &m->gate_down_, &m->gate_up_));
    if (m->value_residual_) {
      RECUR_RETURN_IF_ERROR(LoadLowRank(t->value_down(), t->value_up(), p + "value", d_model, a,
                                        true, tensors, &m->value_down_, &m->value_up_));
    }
    RECUR_RETURN_IF_ERROR(
        tensors->Get(t->key_norm(), (p + "key_norm").c_str(), {a}, false, &m->key_norm_));
    RECUR_RETURN_IF_ERROR(
        tensors->Get(t->key_rate(), (p + "key_rate").c_str(), {a}, false, &m->key_rate_));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->bonus(), (p + "bonus").c_str(), {a}, false, &m->bonus_));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->group_norm_weight(), (p + "group_norm.weight").c_str(),
                                       {a}, false, &m->group_norm_weight_));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->group_norm_bias(), (p + "group_norm.bias").c_str(), {a},
                                       false, &m->group_norm_bias_));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  static constexpr uint32_t kMixes = 6;
  enum class Inner { kNone, kTanh, kSigmoid };

  // A low-rank path: down [D, d_model] (no bias), up [A, D] with a bias
  // when `up_bias` (w0, a0, v0), D in [1, kMaxWidth] read from down's rows.
  static Status LoadLowRank(const fb::Dense* down, const fb::Dense* up, const std::string& name,
                            uint32_t d_model, uint32_t a, bool up_bias, TensorResolver* tensors,
                            DenseView* down_out, DenseView* up_out) {
    const std::string down_name = name + "_down", up_name = name + "_up";
    if (down == nullptr || up == nullptr) {
      return InvalidModel("%s and %s are missing", down_name.c_str(), up_name.c_str());
    }
    uint32_t rank = 0;
    RECUR_RETURN_IF_ERROR(tensors->DenseRows(down, down_name, d_model, &rank));
    if (down->bias() >= 0) {
      return InvalidModel("%s has a bias; the low-rank path's first layer has none",
                          down_name.c_str());
    }
    RECUR_RETURN_IF_ERROR(tensors->GetDense(down, down_name, rank, d_model, down_out));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(up, up_name, a, rank, up_out));
    if (up_bias != (up->bias() >= 0)) {
      return InvalidModel(up_bias ? "%s needs a bias (w0, a0 or v0)"
                                  : "%s has a bias; the "
                                    "gate's second layer has none",
                          up_name.c_str());
    }
    return Status::Ok();
  }

  // mixed[m] = x + (x₋₁ − x) ⊙ token_mix[m] per stream; the last row's x
  // becomes the stream's x₋₁.
  void MixInputs(const float* x, size_t batch, size_t steps, float* const* states,
                 const StepContext& ctx, float* mixed) const {
    const size_t c = d_model_, rows = batch * steps;
    ctx.pool->ParallelRanges(batch, 1, [&](size_t first, size_t last) {
      for (size_t b = first; b < last; ++b) {
        float* prev = states[b] + heads_ * n_ * n_;
        for (size_t t = 0; t < steps; ++t) {
          const size_t row = b * steps + t;
          const float* xr = x + row * c;
          const float* xp = t == 0 ? prev : xr - c;
          for (size_t m = 0; m < kMixes; ++m) {
            const float* mu = token_mix_ + m * c;
            float* out = mixed + (m * rows + row) * c;
            for (size_t i = 0; i < c; ++i) out[i] = xr[i] + (xp[i] - xr[i]) * mu[i];
          }
        }
        std::memcpy(prev, x + (b * steps + steps - 1) * c, c * sizeof(float));
      }
    });
  }

  // y = up(f(down(x))) + bias, f as `inner` says; hidden (rows, D) is scratch.
  static void LowRank(const DenseView& down, const DenseView& up, const float* x, size_t rows,
                      Inner inner, float* hidden, float* y, const StepContext& ctx) {
    RunDense(down, x, rows, hidden, false, ctx.pool, ctx.dense);
    if (inner != Inner::kNone) {
      const size_t n = rows * down.out;
      ctx.pool->ParallelRanges(n, kElementsPerTask, [&](size_t first, size_t last) {
        if (inner == Inner::kSigmoid) {
          kernels::Sigmoid(hidden + first, hidden + first, last - first);
          return;
        }
        for (size_t i = first; i < last; ++i) hidden[i] = std::tanh(hidden[i]);
      });
    }
    RunDense(up, hidden, rows, y, false, ctx.pool, ctx.dense);
  }

  // Per row and head, in place (§16): w ← exp(−scale·σ(w)), α ← σ(α),
  // κ̂ = normalize(k ⊙ key_norm), k ← k ⊙ (1 + (α − 1) ⊙ key_rate), the value
  // residual (nu ← σ(nu) on the way) or the shared rows written, then the
  // recurrence's operands kk ← −κ̂ and rate ← κ̂ ⊙ α.
  void PrepareRows(size_t rows, const StepContext& ctx, float* k, float* v, float* w, float* rate,
                   float* kk, float* nu) const {
    const size_t a = width_;
    ctx.pool->ParallelRanges(rows, 4, [&](size_t first, size_t last) {
      for (size_t row = first; row < last; ++row) {
        const size_t base = row * a;
        float* wr = w + base;
        float* ar = rate + base;
        float* kr = k + base;
        float* kkr = kk + base;
        float* vr = v + base;
        kernels::Sigmoid(wr, wr, a);
        kernels::AffineExp(wr, -decay_scale_, 0.0f, wr, a);
        kernels::Sigmoid(ar, ar, a);
        for (size_t i = 0; i < a; ++i) kkr[i] = kr[i] * key_norm_[i];
        for (size_t h = 0; h < heads_; ++h) {
          float* head = kkr + h * n_;
          const float norm = std::sqrt(kernels::Dot(head, head, n_));
          const float inv = 1.0f / std::max(norm, 1e-12f);
          for (size_t j = 0; j < n_; ++j) head[j] *= inv;
        }
        for (size_t i = 0; i < a; ++i) {
          kr[i] *= 1.0f + (ar[i] - 1.0f) * key_rate_[i];
          const float kappa = kkr[i];
          kkr[i] = -kappa;
          ar[i] = kappa * ar[i];
        }
        float* shared = ctx.shared_rows + base;
        if (value_residual_) {
          float* nur = nu + base;
          kernels::Sigmoid(nur, nur, a);
          for (size_t i = 0; i < a; ++i) vr[i] += (shared[i] - vr[i]) * nur[i];
        } else {
          std::memcpy(shared, vr, a * sizeof(float));
        }
      }
    });
  }

  // o ← (GroupNorm(o) + (Σ r ⊙ k ⊙ bonus) v per head) ⊙ g.
  void FinishRows(size_t rows, const StepContext& ctx, const float* r, const float* k,
                  const float* v, const float* g, float* o) const {
    const size_t a = width_;
    ctx.pool->ParallelRanges(rows, 4, [&](size_t first, size_t last) {
      for (size_t row = first; row < last; ++row) {
        for (size_t h = 0; h < heads_; ++h) {
          const size_t at = row * a + h * n_;
          float* oh = o + at;
          kernels::LayerNorm(oh, group_norm_weight_ + h * n_, group_norm_bias_ + h * n_, eps_, oh,
                             n_);
          float bonus = 0.0f;
          for (size_t j = 0; j < n_; ++j) bonus += r[at + j] * k[at + j] * bonus_[h * n_ + j];
          for (size_t j = 0; j < n_; ++j) oh[j] = (oh[j] + bonus * v[at + j]) * g[at + j];
        }
      }
    });
  }

  size_t d_model_ = 0, heads_ = 0, n_ = 0, width_ = 0;
  float eps_ = 0.0f, decay_scale_ = 0.0f;
  bool value_residual_ = false;
  const float* token_mix_ = nullptr;  // (6, C)
  DenseView receptance_, key_, value_, out_;
  DenseView decay_down_, decay_up_, rate_down_, rate_up_, gate_down_, gate_up_;
  DenseView value_down_, value_up_;  // out 0 in the first layer
  const float* key_norm_ = nullptr;
  const float* key_rate_ = nullptr;
  const float* bonus_ = nullptr;
  const float* group_norm_weight_ = nullptr;
  const float* group_norm_bias_ = nullptr;
};

}  // namespace

Status CreateRwkv7(const void* table, const std::string& layer, uint32_t d_model,
                   TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return Rwkv7::Create(static_cast<const fb::Rwkv7*>(table), layer, d_model, tensors, out);
}

}  // namespace recur::impl
