// Hugging Face Reformer's LocalSelfAttention (docs/attention-math.md §14; the
// table is runtime/schema/recur.fbs, BlockLocal). The full-sequence form pads,
// chunks and looks at adjacent chunks cyclically as transformers does. When
// causal with chunks_after = 0 and chunks_before ≤ 1 the wrapped chunks only
// hold later positions, all masked, so query i sees exactly the positions from
// chunk·(i/chunk − chunks_before) to i: a ring of (chunks_before + 1)·chunk keys
// and values, the step form. Otherwise the mixer is encoder only.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"
#include "mixers/projections.h"

namespace recur::impl {
namespace {

constexpr uint32_t kMaxChunk = 1u << 16;
constexpr uint32_t kMaxChunksAround = 256;  // chunks_before, chunks_after each
constexpr uint32_t kMaxPadMultiple = 1u << 24;
// transformers' mask_value_float32: a masked key's score (not −inf).
constexpr float kMasked = -1e9f;

class BlockLocal final : public Mixer {
 public:
  bool causal() const override { return streamable_; }
  // k_ring (H, R, dk), v_ring (H, R, dv), R = (chunks_before + 1)·chunk.
  size_t state_floats() const override {
    return streamable_ ? heads_ * ring_ * (dk_ + dv_) : 0;
  }

  size_t scratch_floats(size_t batch, size_t steps, size_t threads,
                        size_t /*context*/) const override {
    // q, k, v, o; per worker the scores of one query.
    return batch * steps * heads_ * (2 * dk_ + 2 * dv_) + threads * KeysPerQuery();
  }

  void CollectDense(std::vector<const DenseView*>* out) const override { proj_.Collect(out); }

  void Run(const float* x, size_t batch, size_t steps, float* const* states,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps;
    const size_t qk = heads_ * dk_, vw = heads_ * dv_;
    const QkvoProjections::Rows p = proj_.ProjectRows(x, rows, ctx);
    const size_t keys = KeysPerQuery();
    ctx.pool->ForEachStrided(batch * heads_, [&](size_t w, size_t pair) {
      const size_t b = pair / heads_, h = pair % heads_;
      const size_t qo = b * steps * qk + h * dk_, vo = b * steps * vw + h * dv_;
      if (streamable_) {
        Stream(p.q + qo, p.k + qo, p.v + vo, steps, h, ctx.positions[b], states[b], p.o + vo,
               p.rest + w * keys);
      } else {
        Encode(p.q + qo, p.k + qo, p.v + vo, steps, p.o + vo, p.rest + w * keys);
      }
    });
    proj_.Output(p.o, rows, y, ctx);
  }

  static Status Create(const fb::BlockLocal* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckHeads(layer, "block-local attention", t->heads(), t->dk(), t->dv()));
    if (t->chunk() == 0 || t->chunk() > kMaxChunk) {
      return InvalidModel("%s: block-local attention needs chunk in [1, %u] (got %u)",
                          layer.c_str(), kMaxChunk, t->chunk());
    }
    if (t->chunks_before() > kMaxChunksAround || t->chunks_after() > kMaxChunksAround) {
      return InvalidModel("%s: block-local attention needs chunks_before and chunks_after <= %u "
                          "(got %u, %u)", layer.c_str(), kMaxChunksAround, t->chunks_before(),
                          t->chunks_after());
    }
    if (t->pad_multiple() == 0 || t->pad_multiple() > kMaxPadMultiple ||
        t->pad_multiple() % t->chunk() != 0) {
      return InvalidModel("%s: block-local attention needs pad_multiple a multiple of chunk %u in "
                          "[1, %u] (got %u)", layer.c_str(), t->chunk(), kMaxPadMultiple,
                          t->pad_multiple());
    }
    if (t->pad_above() > t->chunk()) {
      return InvalidModel("%s: block-local attention needs pad_above <= chunk %u (got %u)",
                          layer.c_str(), t->chunk(), t->pad_above());
    }
    auto m = std::make_unique<BlockLocal>();
    m->heads_ = t->heads();
    m->dk_ = t->dk();
    m->dv_ = t->dv();
    m->chunk_ = t->chunk();
    m->before_ = t->chunks_before();
    m->after_ = t->chunks_after();
    m->mask_ = t->causal();
    m->pad_multiple_ = t->pad_multiple();
    m->pad_above_ = t->pad_above();
    m->streamable_ = m->mask_ && m->after_ == 0 && m->before_ <= 1;
    m->ring_ = (m->before_ + 1) * m->chunk_;
    m->scale_ = 1.0f / std::sqrt(static_cast<float>(t->dk()));
    RECUR_RETURN_IF_ERROR(m->proj_.Load(t, layer, d_model, t->heads() * t->dk(),
                                        t->heads() * t->dv(), tensors));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // The most scores one query has: the chunks it looks at (the standard form,
  // n ≤ chunk, has fewer).
  size_t KeysPerQuery() const { return (before_ + 1 + after_) * chunk_; }

  // Positions [p0, p0 + steps) of one stream and head, one at a time: store
  // k, v in ring slot p mod R, then attend to chunk·(p/chunk − before) .. p.
  void Stream(const float* q, const float* k, const float* v, size_t steps, size_t h, size_t p0,
              float* state, float* o, float* scores) const {
    const size_t qk = heads_ * dk_, vw = heads_ * dv_;
    float* k_ring = state + h * ring_ * dk_;                        // (R, dk)
    float* v_ring = state + heads_ * ring_ * dk_ + h * ring_ * dv_;  // (R, dv)
    for (size_t t = 0; t < steps; ++t) {
      const size_t p = p0 + t;
      std::memcpy(k_ring + (p % ring_) * dk_, k + t * qk, dk_ * sizeof(float));
      std::memcpy(v_ring + (p % ring_) * dv_, v + t * vw, dv_ * sizeof(float));
      const size_t c = p / chunk_;
      const size_t first = c >= before_ ? (c - before_) * chunk_ : 0;
      const float* qt = q + t * qk;
      for (size_t j = first; j <= p; ++j) {
        scores[j - first] = kernels::Dot(qt, k_ring + (j % ring_) * dk_, dk_) * scale_;
      }
      const size_t n = p - first + 1;
      kernels::Softmax(scores, scores, n);
      float* ot = o + t * vw;
      std::fill(ot, ot + dv_, 0.0f);
      for (size_t j = first; j <= p; ++j) {
        const float a = scores[j - first];
        const float* vj = v_ring + (j % ring_) * dv_;
        for (size_t e = 0; e < dv_; ++e) ot[e] += a * vj[e];
      }
    }
  }

  // The whole sequence (T positions) of one stream and head, as transformers
  // computes it: n slots after padding, pads and (causal) later keys scored
  // −1e9 inside the softmax; a pad's value is never read (its weight is 0).
  void Encode(const float* q, const float* k, const float* v, size_t T, float* o,
              float* scores) const {
    const size_t qk = heads_ * dk_, vw = heads_ * dv_;
    size_t n = T;
    if (T > pad_above_ && T % pad_multiple_ != 0) n = (T / pad_multiple_ + 1) * pad_multiple_;
    const bool standard = n <= chunk_;
    const size_t m = standard ? 1 : n / chunk_;  // n is a multiple of chunk (pad_multiple is)
    for (size_t i = 0; i < T; ++i) {
      // The key slots of query i, in transformers' order: chunk offsets
      // −before .. after, each chunk's slots ascending; the standard form: 0..n−1.
      const size_t c = i / chunk_;
      const size_t groups = standard ? 1 : before_ + 1 + after_;
      const size_t width = standard ? n : chunk_;
      auto slot = [&](size_t g, size_t s) {
        if (standard) return s;
        // Offset o = g − before: chunk (c + o) mod m, but transformers' slices
        // t[o:] ++ t[:o] leave the order as it is when |o| ≥ m (offset 0).
        const size_t back = before_ - std::min(g, before_), ahead = g > before_ ? g - before_ : 0;
        const size_t cc = back >= m || ahead >= m ? c : (c + m + ahead - back) % m;
        return cc * chunk_ + s;
      };
      const float* qi = q + i * qk;
      size_t idx = 0;
      for (size_t g = 0; g < groups; ++g) {
        for (size_t s = 0; s < width; ++s, ++idx) {
          const size_t j = slot(g, s);
          scores[idx] = (j >= T || (mask_ && j > i)) ? kMasked
                                                     : kernels::Dot(qi, k + j * qk, dk_) * scale_;
        }
      }
      kernels::Softmax(scores, scores, idx);
      float* oi = o + i * vw;
      std::fill(oi, oi + dv_, 0.0f);
      idx = 0;
      for (size_t g = 0; g < groups; ++g) {
        for (size_t s = 0; s < width; ++s, ++idx) {
          const size_t j = slot(g, s);
          const float a = scores[idx];
          if (j >= T || a == 0.0f) continue;
          const float* vj = v + j * vw;
          for (size_t e = 0; e < dv_; ++e) oi[e] += a * vj[e];
        }
      }
    }
  }

  size_t heads_ = 0, dk_ = 0, dv_ = 0, chunk_ = 0, before_ = 0, after_ = 0;
  size_t pad_multiple_ = 1, pad_above_ = 0, ring_ = 0;
  bool mask_ = true, streamable_ = true;
  float scale_ = 1.0f;
  QkvoProjections proj_;
};

}  // namespace

Status CreateBlockLocal(const void* table, const std::string& layer, uint32_t d_model,
                        TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return BlockLocal::Create(static_cast<const fb::BlockLocal*>(table), layer, d_model, tensors,
                            out);
}

}  // namespace recur::impl
