// AFT-simple (attention-math.md §4): y_t = σ(q_t) ⊙ Σ_{p≤t} e^{k_p} v_p /
// Σ_{p≤t} e^{k_p}, element-wise over D = heads·dk channels. The causal state
// keeps, per channel, the running max m of k and num = Σ e^{k_p − m} v_p,
// den = Σ e^{k_p − m} (den ≥ 1 once a position is in, so den = 0 marks the
// empty history that the zero-initialised state stands for).
#include <algorithm>
#include <cmath>
#include <string>

#include "engine/dense_op.h"
#include "mixers/mixer.h"
#include "mixers/projections.h"

namespace recur {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

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
    if (t->heads() == 0 || t->dk() == 0) {
      return InvalidModel("%s: AFT needs heads, dk > 0 (got %u, %u)", layer.c_str(), t->heads(),
                          t->dk());
    }
    if (uint64_t{t->heads()} * t->dk() > kMaxMixerWidth) {
      return InvalidModel("%s: heads x dk must be <= %u", layer.c_str(), kMaxMixerWidth);
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
        const float kc = k[t * D + c];
        if (den[c] == 0.0f) {  // empty history
          max[c] = kc;
          num[c] = v[t * D + c];
          den[c] = 1.0f;
        } else {
          const float m2 = std::max(max[c], kc);
          const float a = std::exp(max[c] - m2), e = std::exp(kc - m2);
          num[c] = num[c] * a + e * v[t * D + c];
          den[c] = den[c] * a + e;
          max[c] = m2;
        }
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

}  // namespace

Status CreateAftSimple(const void* table, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return AftSimple::Create(static_cast<const fb::AftSimple*>(table), layer, d_model, tensors, out);
}

}  // namespace recur
