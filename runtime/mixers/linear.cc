// Causal linear attention (attention-math.md §3) in RNN mode.
#include <string>

#include "engine/dense_op.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/linear_attention/linear_attention.h"
#include "mixers/mixer.h"

namespace recur {
namespace {

// Bounds widths so that products of dimensions cannot overflow 32 bits.
constexpr uint32_t kMaxWidth = 1u << 20;

class LinearAttention final : public Mixer {
 public:
  size_t state_floats() const override { return heads_ * (dk_ * dv_ + dk_); }

  size_t scratch_floats(size_t batch) const override {
    return batch * heads_ * (2 * dk_ + 2 * dv_);  // φq, φk, v, o
  }

  void Step(const float* x, size_t batch, float* const* states, const StepContext& ctx,
            float* y) const override {
    const size_t qk_width = heads_ * dk_;
    const size_t v_width = heads_ * dv_;
    float* phi_q = ctx.scratch;                  // (B, H·dk)
    float* phi_k = phi_q + batch * qk_width;     // (B, H·dk)
    float* v = phi_k + batch * qk_width;         // (B, H·dv)
    float* o = v + batch * v_width;              // (B, H·dv)
    RunDense(query_, x, batch, phi_q, false, ctx.pool);
    RunDense(key_, x, batch, phi_k, false, ctx.pool);
    RunDense(value_, x, batch, v, false, ctx.pool);
    kernels::EluPlusOne(phi_q, phi_q, batch * qk_width);
    kernels::EluPlusOne(phi_k, phi_k, batch * qk_width);
    auto heads = [&](size_t first, size_t last) {
      for (size_t b = first; b < last; ++b) {
        float* s = states[b];                      // (H, dk, dv)
        float* z = s + heads_ * dk_ * dv_;         // (H, dk)
        for (size_t h = 0; h < heads_; ++h) {
          kernels::LinearAttentionStep(
              phi_q + b * qk_width + h * dk_, phi_k + b * qk_width + h * dk_,
              v + b * v_width + h * dv_, dk_, dv_, eps_, s + h * dk_ * dv_, z + h * dk_,
              o + b * v_width + h * dv_);
        }
      }
    };
    if (ctx.pool != nullptr) {
      ctx.pool->ParallelRanges(batch, 8, heads);
    } else {
      heads(0, batch);
    }
    RunDense(out_, o, batch, y, false, ctx.pool);
  }

  static Status Create(const fb::LinearAttention* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    if (t->heads() == 0 || t->dk() == 0 || t->dv() == 0) {
      return InvalidModel("%s: linear attention needs heads, dk, dv > 0 (got %u, %u, %u)",
                          layer.c_str(), t->heads(), t->dk(), t->dv());
    }
    if (uint64_t{t->heads()} * t->dk() > kMaxWidth || uint64_t{t->heads()} * t->dv() > kMaxWidth) {
      return InvalidModel("%s: heads x dk and heads x dv must be <= %u", layer.c_str(), kMaxWidth);
    }
    if (t->feature_map() != fb::FeatureMap::EluPlusOne) {
      return Unsupported("%s: feature map %d is not supported by this runtime", layer.c_str(),
                         static_cast<int>(t->feature_map()));
    }
    if (!(t->eps() >= 0.0f)) {
      return InvalidModel("%s: linear attention eps must be >= 0", layer.c_str());
    }
    auto m = std::make_unique<LinearAttention>();
    m->heads_ = t->heads();
    m->dk_ = t->dk();
    m->dv_ = t->dv();
    m->eps_ = t->eps();
    const uint32_t qk = t->heads() * t->dk();
    const uint32_t vw = t->heads() * t->dv();
    const std::string prefix = layer + ".mixer.";
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->query(), prefix + "query", qk, d_model, &m->query_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->key(), prefix + "key", qk, d_model, &m->key_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->value(), prefix + "value", vw, d_model, &m->value_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->out(), prefix + "out", d_model, vw, &m->out_));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  size_t heads_ = 0, dk_ = 0, dv_ = 0;
  float eps_ = 0.0f;
  DenseView query_, key_, value_, out_;
};

}  // namespace

Status CreateLinearAttention(const void* table, const std::string& layer, uint32_t d_model,
                             TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return LinearAttention::Create(static_cast<const fb::LinearAttention*>(table), layer, d_model,
                                 tensors, out);
}

}  // namespace recur
