// Mamba2's SSD mixer (docs/attention-math.md §17): the in-projection over all
// rows of a call, then the causal depthwise convolution (ShortConv, with its
// bias), per stream and head the scalar-decay recurrence
// (kernels/recurrence), the grouped gated RMS norm and the out-projection.
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
#include "mixers/short_conv.h"

namespace recur::impl {
namespace {

// softplus(x) = log(1 + eˣ), without overflow for large x.
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

class Mamba2 final : public Mixer {
 public:
  // S (H, P, N), then the last K − 1 convolution inputs (K − 1, W).
  size_t state_floats() const override { return s_floats() + conv_.carry_floats(); }

  size_t scratch_floats(size_t batch, size_t steps, size_t /*threads*/,
                        size_t /*context*/) const override {
    // The projected rows (R), the convolution's outputs (W), Δ·x and y (I).
    return batch * steps * (proj_width() + w_ + 2 * inner_);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override {
    out->push_back(&in_proj_);
    out->push_back(&out_proj_);
  }

  void Run(const float* x, size_t batch, size_t steps, float* const* states, const StepContext& ctx,
           float* y) const override {
    const size_t rows = batch * steps, pw = proj_width(), gn = groups_ * n_;
    float* proj = ctx.scratch;       // (rows, R): z (I), u (W), dt (H)
    float* conv = proj + rows * pw;  // (rows, W): x_c (I), B (G·N), C (G·N)
    float* dx = conv + rows * w_;    // (rows, I): Δ·x_c
    float* o = dx + rows * inner_;   // (rows, I)
    RunDense(in_proj_, x, rows, proj, false, ctx.pool, ctx.dense);
    // conv (rows, W) from u, the W columns after z in proj's rows.
    conv_.Run(proj + inner_, batch, steps, states, s_floats(), ctx, conv, pw);
    // Δ over dt in place, and Δ·x_c.
    ctx.pool->ParallelRanges(rows, 16, [&](size_t first, size_t last) {
      for (size_t row = first; row < last; ++row) {
        float* dt = proj + row * pw + inner_ + w_;
        for (size_t h = 0; h < heads_; ++h) {
          dt[h] = std::min(std::max(Softplus(dt[h] + dt_bias_[h]), dt_min_), dt_max_);
          const float* xh = conv + row * w_ + h * p_;
          float* dxh = dx + row * inner_ + h * p_;
          for (size_t i = 0; i < p_; ++i) dxh[i] = dt[h] * xh[i];
        }
      }
    });
    // Each (stream, head) walks its positions in order; pairs are independent.
    const size_t per_group = heads_ / groups_;
    ctx.pool->ParallelRanges(batch * heads_, 1, [&](size_t first, size_t last) {
      for (size_t pair = first; pair < last; ++pair) {
        const size_t b = pair / heads_, h = pair % heads_, g = h / per_group;
        float* s = states[b] + h * p_ * n_;
        kernels::RecurrenceStepArgs args;
        args.dk = n_;
        args.dv = p_;
        for (size_t t = 0; t < steps; ++t) {
          const size_t row = b * steps + t;
          const float* u = conv + row * w_;
          args.w_scalar = std::exp(proj[row * pw + inner_ + w_ + h] * a_[h]);
          args.k = u + inner_ + g * n_;
          args.r = u + inner_ + gn + g * n_;
          args.v = dx + row * inner_ + h * p_;
          args.warm = t > 0;
          float* oh = o + row * inner_ + h * p_;
          kernels::RecurrenceStep(args, s, oh);
          const float* xh = u + h * p_;
          for (size_t i = 0; i < p_; ++i) oh[i] += d_[h] * xh[i];
        }
      }
    });
    // y ← RMSNorm per group of (y ⊙ silu(z)) ⊙ norm_weight.
    const size_t group_width = inner_ / groups_;
    ctx.pool->ParallelRanges(rows, 4, [&](size_t first, size_t last) {
      for (size_t row = first; row < last; ++row) {
        float* orow = o + row * inner_;
        float* z = proj + row * pw;  // read only here: silu(z) in place
        kernels::Silu(z, z, inner_);
        for (size_t i = 0; i < inner_; ++i) orow[i] *= z[i];
        for (size_t g = 0; g < groups_; ++g) {
          float* og = orow + g * group_width;
          const float inv =
              1.0f / std::sqrt(kernels::Dot(og, og, group_width) / float(group_width) + eps_);
          for (size_t i = 0; i < group_width; ++i) og[i] *= inv * norm_weight_[g * group_width + i];
        }
      }
    });
    RunDense(out_proj_, o, rows, y, false, ctx.pool, ctx.dense);
  }

  static Status Create(const fb::Mamba2* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckHeads(layer, "Mamba2", t->heads(), t->state_size(), t->head_dim()));
    if (t->groups() == 0 || t->heads() % t->groups() != 0) {
      return InvalidModel("%s: Mamba2 groups (%u) must divide heads (%u)", layer.c_str(),
                          t->groups(), t->heads());
    }
    if (t->conv_kernel() == 0 || t->conv_kernel() > kMaxShortConvKernel) {
      return InvalidModel("%s: Mamba2 conv_kernel must be in [1, %zu] (got %u)", layer.c_str(),
                          kMaxShortConvKernel, t->conv_kernel());
    }
    const uint64_t inner = uint64_t{t->heads()} * t->head_dim();
    const uint64_t w = inner + 2 * uint64_t{t->groups()} * t->state_size();
    if (2 * inner + 2 * uint64_t{t->groups()} * t->state_size() + t->heads() > kMaxWidth) {
      return InvalidModel("%s: Mamba2 in_proj's width 2·heads·head_dim + 2·groups·state_size + "
                          "heads must be <= %u",
                          layer.c_str(), kMaxWidth);
    }
    if (!(t->norm_eps() > 0.0f && std::isfinite(t->norm_eps()))) {
      return InvalidModel("%s: Mamba2 norm_eps must be finite and > 0 (got %g)", layer.c_str(),
                          double(t->norm_eps()));
    }
    if (!(t->dt_min() >= 0.0f && t->dt_min() < t->dt_max() && !std::isnan(t->dt_max()))) {
      return InvalidModel("%s: Mamba2 needs 0 <= dt_min < dt_max (got %g, %g)", layer.c_str(),
                          double(t->dt_min()), double(t->dt_max()));
    }
    auto m = std::make_unique<Mamba2>();
    m->heads_ = t->heads();
    m->p_ = t->head_dim();
    m->n_ = t->state_size();
    m->groups_ = t->groups();
    m->inner_ = size_t(inner);
    m->w_ = size_t(w);
    m->eps_ = t->norm_eps();
    m->dt_min_ = t->dt_min();
    m->dt_max_ = t->dt_max();
    const std::string p = layer + ".mixer.";
    const auto h = int64_t(m->heads_), wi = int64_t(w);
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->in_proj(), p + "in_proj",
                                            uint32_t(m->proj_width()), d_model, &m->in_proj_));
    RECUR_RETURN_IF_ERROR(
        tensors->GetDense(t->out_proj(), p + "out_proj", d_model, uint32_t(inner), &m->out_proj_));
    RECUR_RETURN_IF_ERROR(
        m->conv_.Load(t->conv_weight(), p + "conv.weight", uint32_t(w), t->conv_kernel(), tensors));
    RECUR_RETURN_IF_ERROR(
        tensors->Get(t->conv_bias(), (p + "conv.bias").c_str(), {wi}, false, &m->conv_.bias));
    RECUR_RETURN_IF_ERROR(
        tensors->Get(t->dt_bias(), (p + "dt_bias").c_str(), {h}, false, &m->dt_bias_));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->a(), (p + "A").c_str(), {h}, false, &m->a_));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->d(), (p + "D").c_str(), {h}, false, &m->d_));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->norm_weight(), (p + "norm.weight").c_str(),
                                       {int64_t(inner)}, false, &m->norm_weight_));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  size_t proj_width() const { return 2 * inner_ + 2 * groups_ * n_ + heads_; }
  size_t s_floats() const { return heads_ * p_ * n_; }

  size_t heads_ = 0, p_ = 0, n_ = 0, groups_ = 1, inner_ = 0, w_ = 0;
  float eps_ = 0.0f, dt_min_ = 0.0f, dt_max_ = 0.0f;
  DenseView in_proj_, out_proj_;
  ShortConv conv_;                      // over W channels, biased
  const float* dt_bias_ = nullptr;      // (H)
  const float* a_ = nullptr;            // (H)
  const float* d_ = nullptr;            // (H)
  const float* norm_weight_ = nullptr;  // (I)
};

}  // namespace

Status CreateMamba2(const void* table, const std::string& layer, uint32_t d_model,
                    TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return Mamba2::Create(static_cast<const fb::Mamba2*>(table), layer, d_model, tensors, out);
}

}  // namespace recur::impl
