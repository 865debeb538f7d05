// Longformer-style sliding-window attention (docs/attention-math.md §5; the exact
// sets are in runtime/schema/recur.fbs, SlidingWindow). Causal: a
// ring buffer of the last R positions plus the global positions, a fixed
// state. Non-causal: the encoder form.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/dense_op.h"
#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"
#include "mixers/projections.h"
#include "mixers/rotary.h"

namespace recur::impl {
namespace {

constexpr uint32_t kMaxWindow = 1u << 16;

class SlidingWindow final : public Mixer {
 public:
  bool causal() const override { return causal_; }
  size_t max_positions() const override { return rotation_.max_positions(); }
  // k_glob (H, g, dk), k_ring (H, R, dk), v_glob (H, g, dv), v_ring (H, R, dv).
  size_t state_floats() const override {
    return causal_ ? heads_ * (g_ + ring_) * (dk_ + dv_) : 0;
  }

  size_t scratch_floats(size_t batch, size_t steps, size_t threads,
                        size_t /*context*/) const override {
    const size_t rows = batch * steps;
    // q, k, v, o (and the global queries, keys and values); per worker the
    // scores of one query.
    const size_t global = global_projections_ ? rows * heads_ * (2 * dk_ + dv_) : 0;
    return rows * heads_ * (2 * dk_ + 2 * dv_) + global + threads * KeysPerQuery(steps);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override {
    proj_.Collect(out);
    if (global_projections_) {
      for (const DenseView* d : {&query_global_, &key_global_, &value_global_}) out->push_back(d);
    }
  }

  void Run(const float* x, size_t batch, size_t steps, float* const* states,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps;
    const size_t qk = heads_ * dk_, vw = heads_ * dv_;
    const QkvoProjections::Rows p = proj_.ProjectRows(x, rows, ctx);
    float *q = p.q, *k = p.k, *v = p.v, *o = p.o, *scratch = p.rest;
    // Global queries read their own projections of every position (rows of
    // streams' first g positions only are used as queries).
    float *qg = nullptr, *kg = nullptr, *vg = nullptr;
    if (global_projections_) {
      qg = scratch;
      kg = qg + rows * qk;
      vg = kg + rows * qk;
      scratch = vg + rows * vw;
      const size_t d_model = query_global_.in;
      for (size_t b = 0; b < batch; ++b) {
        RunDense(query_global_, x + b * steps * d_model, std::min(g_, steps), qg + b * steps * qk,
                 false, ctx.pool, ctx.dense);
      }
      RunDense(key_global_, x, rows, kg, false, ctx.pool, ctx.dense);
      RunDense(value_global_, x, rows, vg, false, ctx.pool, ctx.dense);
    }
    rotation_.Apply(ctx, batch, steps, heads_, dk_, {{q, qk}, {k, qk}});
    const size_t keys = KeysPerQuery(steps);
    // Worker w takes pairs w, w + threads, ... with its own scores.
    ctx.pool->ForEachStrided(batch * heads_, [&](size_t w, size_t pair) {
      const size_t b = pair / heads_, h = pair % heads_;
      const size_t row0 = b * steps;
      if (causal_) {
        Causal(q + row0 * qk + h * dk_, k + row0 * qk + h * dk_, v + row0 * vw + h * dv_,
               steps, h, ctx.positions[b], states[b], o + row0 * vw + h * dv_,
               scratch + w * keys);
      } else {
        const size_t qo = row0 * qk + h * dk_, vo = row0 * vw + h * dv_;
        const Globals globals{qg ? qg + qo : nullptr, kg ? kg + qo : nullptr,
                              vg ? vg + vo : nullptr};
        Encode(q + qo, k + qo, v + vo, globals, steps, h, o + vo, scratch + w * keys);
      }
    });
    proj_.Output(o, rows, y, ctx);
  }

  static Status Create(const fb::SlidingWindow* t, const std::string& layer,
                       uint32_t d_model, TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(
        CheckHeads(layer, "sliding-window attention", t->heads(), t->dk(), t->dv()));
    if (t->window() == 0 || t->window() > kMaxWindow || t->global_tokens() > kMaxWindow) {
      return InvalidModel("%s: sliding window needs window in [1, %u] and global_tokens <= %u "
                          "(got %u, %u)", layer.c_str(), kMaxWindow, kMaxWindow, t->window(),
                          t->global_tokens());
    }
    auto m = std::make_unique<SlidingWindow>();
    m->heads_ = t->heads();
    m->dk_ = t->dk();
    m->dv_ = t->dv();
    m->window_ = t->window();
    m->g_ = t->global_tokens();
    m->causal_ = t->causal();
    m->scale_ = 1.0f / std::sqrt(static_cast<float>(t->dk()));
    RECUR_RETURN_IF_ERROR(Rotation::FromTable(t->rotary(), layer, "sliding-window attention",
                                              t->dk(), "dk", tensors, &m->rotation_));
    m->dilation_.assign(m->heads_, 1);
    if (t->dilation() != nullptr && t->dilation()->size() != 0) {
      if (t->dilation()->size() != m->heads_) {
        return InvalidModel("%s: sliding window has %u dilations for %zu heads (one per head, or "
                            "none)", layer.c_str(), t->dilation()->size(), m->heads_);
      }
      for (uint32_t i = 0; i < t->dilation()->size(); ++i) {
        const uint32_t d = t->dilation()->Get(i);
        if (d == 0 || d > kMaxWindow) {
          return InvalidModel("%s: sliding window dilation %u of head %u is outside [1, %u]",
                              layer.c_str(), d, i, kMaxWindow);
        }
        m->dilation_[i] = d;
      }
    }
    const size_t max_d = *std::max_element(m->dilation_.begin(), m->dilation_.end());
    m->ring_ = (m->window_ - 1) * max_d + 1;
    RECUR_RETURN_IF_ERROR(m->proj_.Load(t, layer, d_model, t->heads() * t->dk(),
                                        t->heads() * t->dv(), tensors));
    const int given = (t->query_global() != nullptr) + (t->key_global() != nullptr) +
                      (t->value_global() != nullptr);
    if (given != 0) {
      if (given != 3 || m->causal_ || m->g_ == 0) {
        return InvalidModel(
            "%s: sliding window global projections need all of query_global, "
            "key_global and value_global, a non-causal mixer and global_tokens > 0",
            layer.c_str());
      }
      const std::string prefix = layer + ".mixer.";
      const uint32_t qk = t->heads() * t->dk(), vw = t->heads() * t->dv();
      RECUR_RETURN_IF_ERROR(tensors->GetDense(t->query_global(), prefix + "query_global", qk,
                                              d_model, &m->query_global_));
      RECUR_RETURN_IF_ERROR(
          tensors->GetDense(t->key_global(), prefix + "key_global", qk, d_model, &m->key_global_));
      RECUR_RETURN_IF_ERROR(tensors->GetDense(t->value_global(), prefix + "value_global", vw,
                                              d_model, &m->value_global_));
      m->global_projections_ = true;
    }
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // The most keys one query sees: every position (a non-causal global
  // query), else window + g.
  size_t KeysPerQuery(size_t steps) const {
    return causal_ ? window_ + g_ : std::max<size_t>(steps, window_ + g_);
  }

  // out = Σ_j softmax(q·k_j/√dk) v_j over the keys for_each(fn) visits as
  // fn(k_j, v_j); scores: one float per key.
  template <class ForEachKey>
  void Attend(const float* q, const ForEachKey& for_each, float* out, float* scores) const {
    size_t n = 0;
    for_each([&](const float* kj, const float*) { scores[n++] = kernels::Dot(q, kj, dk_) * scale_; });
    kernels::Softmax(scores, scores, n);
    std::fill(out, out + dv_, 0.0f);
    size_t j = 0;
    for_each([&](const float*, const float* vj) {
      const float p = scores[j++];
      for (size_t m = 0; m < dv_; ++m) out[m] += p * vj[m];
    });
  }

  // Positions [p0, p0 + steps) of one stream and head, one at a time: store
  // k, v (ring slot, and the global slot for p < g), then attend.
  void Causal(const float* q, const float* k, const float* v, size_t steps, size_t h, size_t p0,
              float* state, float* o, float* scores) const {
    const size_t qk = heads_ * dk_, vw = heads_ * dv_;
    float* k_glob = state + h * g_ * dk_;                                  // (g, dk)
    float* k_ring = state + heads_ * g_ * dk_ + h * ring_ * dk_;           // (R, dk)
    float* v_glob = state + heads_ * (g_ + ring_) * dk_ + h * g_ * dv_;    // (g, dv)
    float* v_ring = state + heads_ * ((g_ + ring_) * dk_ + g_ * dv_) + h * ring_ * dv_;
    const size_t d = dilation_[h];
    for (size_t t = 0; t < steps; ++t) {
      const size_t p = p0 + t;
      std::memcpy(k_ring + (p % ring_) * dk_, k + t * qk, dk_ * sizeof(float));
      std::memcpy(v_ring + (p % ring_) * dv_, v + t * vw, dv_ * sizeof(float));
      if (p < g_) {
        std::memcpy(k_glob + p * dk_, k + t * qk, dk_ * sizeof(float));
        std::memcpy(v_glob + p * dv_, v + t * vw, dv_ * sizeof(float));
      }
      auto for_each = [&](auto&& fn) {
        for (size_t j = 0; j < window_ && j * d <= p; ++j) {
          const size_t pos = p - j * d;
          if (pos >= g_) fn(k_ring + (pos % ring_) * dk_, v_ring + (pos % ring_) * dv_);
        }
        for (size_t pos = 0; pos < g_ && pos <= p; ++pos) fn(k_glob + pos * dk_, v_glob + pos * dv_);
      };
      Attend(q + t * qk, for_each, o + t * vw, scores);
    }
  }

  // One stream and head's global queries, keys and values (null: the global
  // positions use q, k, v like the rest).
  struct Globals {
    const float *q, *k, *v;
  };

  // The whole sequence of one stream and head.
  void Encode(const float* q, const float* k, const float* v, const Globals& globals, size_t steps,
              size_t h, float* o, float* scores) const {
    const size_t qk = heads_ * dk_, vw = heads_ * dv_;
    const size_t d = dilation_[h];
    const size_t half = window_ / 2;
    for (size_t t = 0; t < steps; ++t) {
      if (t < g_ && globals.q != nullptr) {  // its own projections of every position
        auto for_each = [&](auto&& fn) {
          for (size_t p = 0; p < steps; ++p) fn(globals.k + p * qk, globals.v + p * vw);
        };
        Attend(globals.q + t * qk, for_each, o + t * vw, scores);
        continue;
      }
      auto for_each = [&](auto&& fn) {
        if (t < g_) {  // a global query sees every position
          for (size_t p = 0; p < steps; ++p) fn(k + p * qk, v + p * vw);
          return;
        }
        for (size_t p = 0; p < g_ && p < steps; ++p) fn(k + p * qk, v + p * vw);
        for (size_t j = std::min(half, t / d); j >= 1; --j) {  // t − j·d
          const size_t p = t - j * d;
          if (p >= g_) fn(k + p * qk, v + p * vw);
        }
        for (size_t j = 0; j <= half && t + j * d < steps; ++j) {  // t + j·d
          const size_t p = t + j * d;
          if (p >= g_) fn(k + p * qk, v + p * vw);
        }
      };
      Attend(q + t * qk, for_each, o + t * vw, scores);
    }
  }

  size_t heads_ = 0, dk_ = 0, dv_ = 0, window_ = 0, g_ = 0, ring_ = 0;
  std::vector<size_t> dilation_;
  bool causal_ = true;
  bool global_projections_ = false;
  DenseView query_global_, key_global_, value_global_;
  float scale_ = 1.0f;
  Rotation rotation_;  // none unless the table has rotary (§12)
  QkvoProjections proj_;
};

}  // namespace

Status CreateSlidingWindow(const void* table, const std::string& layer,
                                    uint32_t d_model, TensorResolver* tensors,
                                    std::unique_ptr<Mixer>* out) {
  return SlidingWindow::Create(static_cast<const fb::SlidingWindow*>(table), layer,
                               d_model, tensors, out);
}

}  // namespace recur::impl
