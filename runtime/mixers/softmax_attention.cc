// Softmax attention (docs/attention-math.md §2), the baseline: causal with a KV
// cache (the state grows with the sequence, bounded by the session's
// max_context) and the non-causal encoder form.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backends/dense_op.h"
#include "kernels/dense/dense.h"
#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"
#include "mixers/projections.h"
#include "mixers/rotary.h"

namespace recur::impl {
namespace {

class SoftmaxAttention final : public Mixer {
 public:
  bool causal() const override { return causal_; }
  size_t max_positions() const override { return rotation_.max_positions(); }
  // Per stream: K (H, max_context, dk) then V (H, max_context, dv); the
  // session's position count says how much of it is filled.
  size_t state_floats() const override { return 0; }
  size_t state_floats_per_position() const override {
    return causal_ ? heads_ * (dk_ + dv_) : 0;
  }

  size_t scratch_floats(size_t batch, size_t steps, size_t threads,
                        size_t context) const override {
    const size_t rows = batch * steps;
    const size_t projections = rows * heads_ * (2 * dk_ + 2 * dv_);  // q, k, v, o
    return projections + threads * WorkerScratchFloats(steps, context);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override { proj_.Collect(out); }

  void Run(const float* x, size_t batch, size_t steps, float* const* states,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps;
    const QkvoProjections::Rows p = proj_.ProjectRows(x, rows, ctx);
    const size_t qk = heads_ * dk_, vw = heads_ * dv_, max_context = ctx.max_context;
    rotation_.Apply(ctx, batch, steps, heads_, dk_, {{p.q, qk}, {p.k, qk}});
    const size_t per_worker = WorkerScratchFloats(steps, max_context);
    // (stream, head) pairs dealt to the workers; each has its own scratch.
    ctx.pool->ForEachStrided(batch * heads_, [&](size_t worker, size_t pair) {
      const size_t b = pair / heads_, h = pair % heads_, row0 = b * steps;
      float* scratch = p.rest + worker * per_worker;
      const float* q = p.q + row0 * qk + h * dk_;
      const float* k = p.k + row0 * qk + h * dk_;
      const float* v = p.v + row0 * vw + h * dv_;
      float* o = p.o + row0 * vw + h * dv_;
      if (!causal_) {
        // K, V of the whole sequence, contiguous per head.
        float* keys = scratch + kQueryBlock * steps;
        float* values = keys + steps * dk_;
        for (size_t j = 0; j < steps; ++j) {
          std::memcpy(keys + j * dk_, k + j * qk, dk_ * sizeof(float));
          std::memcpy(values + j * dv_, v + j * vw, dv_ * sizeof(float));
        }
        Attend(q, qk, steps, keys, values, steps, SIZE_MAX, o, vw, scratch);
        return;
      }
      // Append this call's keys and values to the cache, then attend.
      const size_t p0 = ctx.positions[b];
      float* keys = states[b] + h * max_context * dk_;
      float* values = states[b] + heads_ * max_context * dk_ + h * max_context * dv_;
      for (size_t j = 0; j < steps; ++j) {
        std::memcpy(keys + (p0 + j) * dk_, k + j * qk, dk_ * sizeof(float));
        std::memcpy(values + (p0 + j) * dv_, v + j * vw, dv_ * sizeof(float));
      }
      Attend(q, qk, steps, keys, values, p0 + steps, p0, o, vw, scratch);
    });
    proj_.Output(p.o, rows, y, ctx);
  }

  static Status Create(const fb::SoftmaxAttention* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckHeads(layer, "softmax attention", t->heads(), t->dk(), t->dv()));
    auto m = std::make_unique<SoftmaxAttention>();
    m->heads_ = t->heads();
    m->dk_ = t->dk();
    m->dv_ = t->dv();
    m->causal_ = t->causal();
    m->scale_ = 1.0f / std::sqrt(static_cast<float>(t->dk()));
    RECUR_RETURN_IF_ERROR(
        Rotation::FromTable(t->rotary(), layer, "softmax attention", t->dk(), "dk", tensors,
                            &m->rotation_));
    RECUR_RETURN_IF_ERROR(m->proj_.Load(t, layer, d_model, t->heads() * t->dk(),
                                        t->heads() * t->dv(), tensors));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // Queries per block of scores: bounds the scratch at kQueryBlock × keys.
  static constexpr size_t kQueryBlock = 64;

  // Per worker: scores (kQueryBlock, the most keys a query sees); the
  // encoder's contiguous K, V copies.
  size_t WorkerScratchFloats(size_t steps, size_t context) const {
    return causal_ ? kQueryBlock * context : kQueryBlock * steps + steps * (dk_ + dv_);
  }

  // o_t = softmax(q_t·Kᵀ/√dk over the keys it sees) V for T queries; query t
  // sees keys [0, first + t] (causal) or all n (first = SIZE_MAX).
  //   q: (T, dk) rows with stride q_stride; K (n, dk), V (n, dv) contiguous;
  //   o: (T, dv) rows with stride o_stride; scores: kQueryBlock × n floats.
  void Attend(const float* q, size_t q_stride, size_t t_n, const float* keys, const float* values,
              size_t n, size_t first, float* o, size_t o_stride, float* scores) const {
    for (size_t t0 = 0; t0 < t_n; t0 += kQueryBlock) {
      const size_t tb = std::min(kQueryBlock, t_n - t0);
      // The keys any query of this block sees.
      const size_t seen = first == SIZE_MAX ? n : std::min(n, first + t0 + tb);
      kernels::Dense(q + t0 * q_stride, q_stride, tb, keys, nullptr, dk_, seen, scores, seen,
                     false);
      for (size_t t = 0; t < tb; ++t) {
        float* s = scores + t * seen;
        const size_t len = first == SIZE_MAX ? seen : first + t0 + t + 1;
        kernels::Scale(s, scale_, s, len);
        kernels::Softmax(s, s, len);
        float* out = o + (t0 + t) * o_stride;
        std::fill(out, out + dv_, 0.0f);
        for (size_t j = 0; j < len; ++j) {
          const float p = s[j];
          const float* vj = values + j * dv_;
          for (size_t m = 0; m < dv_; ++m) out[m] += p * vj[m];
        }
      }
    }
  }

  size_t heads_ = 0, dk_ = 0, dv_ = 0;
  bool causal_ = true;
  float scale_ = 1.0f;
  Rotation rotation_;  // none unless the table has rotary (§12)
  QkvoProjections proj_;
};

}  // namespace

Status CreateSoftmaxAttention(const void* table, const std::string& layer, uint32_t d_model,
                              TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return SoftmaxAttention::Create(static_cast<const fb::SoftmaxAttention*>(table), layer,
                                  d_model, tensors, out);
}

}  // namespace recur::impl
