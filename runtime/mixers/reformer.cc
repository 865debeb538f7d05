// Reformer LSH attention (docs/attention-math.md §8; the exact math is in
// runtime/schema/recur.fbs, table Reformer). Encoder only: the hash sort
// reorders the whole sequence, so there is no recurrent form.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"
#include "mixers/projections.h"

namespace recur::impl {
namespace {

constexpr uint32_t kMaxBuckets = 1u << 16;
constexpr uint32_t kMaxChunk = 1u << 16;
constexpr uint32_t kMaxRounds = 64;

class Reformer final : public Mixer {
 public:
  bool causal() const override { return false; }
  size_t state_floats() const override { return 0; }

  size_t scratch_floats(size_t batch, size_t steps, size_t threads,
                        size_t /*context*/) const override {
    return batch * steps * heads_ * (dk_ + 2 * dv_) + threads * WorkerFloats(steps);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override {
    for (const DenseView* d : {&query_, &value_, &out_}) out->push_back(d);
  }

  void Run(const float* x, size_t batch, size_t steps, float* const* /*states*/,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps;
    const size_t qw = heads_ * dk_, vw = heads_ * dv_;
    float* q = ctx.scratch;    // (rows, H·dk)
    float* v = q + rows * qw;  // (rows, H·dv)
    float* o = v + rows * vw;  // (rows, H·dv)
    float* scratch = o + rows * vw;
    RunDense(query_, x, rows, q, false, ctx.pool, ctx.dense);
    RunDense(value_, x, rows, v, false, ctx.pool, ctx.dense);
    ctx.pool->ForEachStrided(batch * heads_, [&](size_t w, size_t pair) {
      const size_t b = pair / heads_, h = pair % heads_, r0 = b * steps;
      Head(q + r0 * qw + h * dk_, v + r0 * vw + h * dv_, steps, o + r0 * vw + h * dv_,
           scratch + w * WorkerFloats(steps));
    });
    RunDense(out_, o, rows, y, false, ctx.pool, ctx.dense);
  }

  static Status Create(const fb::Reformer* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckHeads(layer, "reformer", t->heads(), t->dk(), t->dv()));
    if (t->n_buckets() < 2 || t->n_buckets() % 2 != 0 || t->n_buckets() > kMaxBuckets ||
        t->chunk() == 0 || t->chunk() > kMaxChunk || t->rounds() == 0 ||
        t->rounds() > kMaxRounds) {
      return InvalidModel("%s: reformer needs an even n_buckets in [2, %u], chunk in [1, %u] and "
                          "rounds in [1, %u] (got %u, %u, %u)", layer.c_str(), kMaxBuckets,
                          kMaxChunk, kMaxRounds, t->n_buckets(), t->chunk(), t->rounds());
    }
    auto m = std::make_unique<Reformer>();
    m->heads_ = t->heads();
    m->dk_ = t->dk();
    m->dv_ = t->dv();
    m->buckets_ = t->n_buckets();
    m->chunk_ = t->chunk();
    m->rounds_ = t->rounds();
    m->scale_ = 1.0f / std::sqrt(static_cast<float>(t->dk()));
    const std::string prefix = layer + ".mixer.";
    const auto qw = uint32_t(m->heads_ * m->dk_), vw = uint32_t(m->heads_ * m->dv_);
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->query(), prefix + "query", qw, d_model, &m->query_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->value(), prefix + "value", vw, d_model, &m->value_));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->out(), prefix + "out", d_model, vw, &m->out_));
    RECUR_RETURN_IF_ERROR(tensors->Get(
        t->rotations(), (prefix + "rotations").c_str(),
        {int64_t(m->rounds_), int64_t(m->dk_), int64_t(m->buckets_ / 2)}, false, &m->rotations_));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // Per worker: normalised keys (N, dk), projections (n_buckets/2), scores
  // (2·chunk), then uint32 buckets (N), sorted positions (N) and bucket
  // starts (n_buckets + 1), kept in float-sized slots.
  size_t WorkerFloats(size_t n) const {
    return n * dk_ + buckets_ / 2 + 2 * chunk_ + 2 * n + buckets_ + 1;
  }

  // One head of one stream: q (n rows, stride H·dk), v (stride H·dv) → o.
  void Head(const float* q, const float* v, size_t n, float* o, float* scratch) const {
    const size_t dk = dk_, dv = dv_, qs = heads_ * dk_, vs = heads_ * dv_, half = buckets_ / 2;
    float* keys = scratch;            // (n, dk)
    float* proj = keys + n * dk;      // (n_buckets/2)
    float* scores = proj + half;      // (2·chunk)
    auto* bucket = reinterpret_cast<uint32_t*>(scores + 2 * chunk_);  // (n)
    uint32_t* order = bucket + n;                                     // (n)
    uint32_t* start = order + n;                                      // (n_buckets + 1)
    for (size_t j = 0; j < n; ++j) {  // K = Q / ‖Q‖
      const float* qj = q + j * qs;
      const float inv = 1.0f / std::sqrt(kernels::Dot(qj, qj, dk));
      for (size_t i = 0; i < dk; ++i) keys[j * dk + i] = qj[i] * inv;
    }
    for (size_t j = 0; j < n; ++j) std::fill(o + j * vs, o + j * vs + dv, 0.0f);
    const float weight = 1.0f / float(rounds_);
    for (size_t round = 0; round < rounds_; ++round) {
      const float* rot = rotations_ + round * dk * half;  // (dk, n_buckets/2)
      for (size_t j = 0; j < n; ++j) {
        std::fill(proj, proj + half, 0.0f);
        for (size_t i = 0; i < dk; ++i) {
          const float kji = keys[j * dk + i];
          for (size_t c = 0; c < half; ++c) proj[c] += kji * rot[i * half + c];
        }
        // argmax over [proj, −proj], the first maximum.
        uint32_t best = 0;
        float best_value = proj[0];
        for (size_t c = 1; c < 2 * half; ++c) {
          const float value = c < half ? proj[c] : -proj[c - half];
          if (value > best_value) {
            best_value = value;
            best = uint32_t(c);
          }
        }
        bucket[j] = best;
      }
      // Counting sort by bucket, positions ascending inside a bucket.
      std::fill(start, start + buckets_ + 1, 0u);
      for (size_t j = 0; j < n; ++j) ++start[bucket[j] + 1];
      for (size_t c = 0; c < buckets_; ++c) start[c + 1] += start[c];
      for (size_t j = 0; j < n; ++j) order[start[bucket[j]]++] = uint32_t(j);
      for (size_t s = 0; s < n; ++s) {
        const size_t g = s / chunk_;
        const size_t first = g == 0 ? 0 : (g - 1) * chunk_, last = std::min(n, (g + 1) * chunk_);
        const size_t j = order[s];
        const bool alone = last - first == 1;  // then a query attends to itself
        const float* qj = q + j * qs;
        float max_score = -INFINITY;
        for (size_t t = first; t < last; ++t) {
          const size_t p = order[t];
          float& sc = scores[t - first];
          sc = (p == j && !alone) ? -INFINITY : scale_ * kernels::Dot(qj, keys + p * dk, dk);
          max_score = std::max(max_score, sc);
        }
        float sum = 0.0f;
        for (size_t t = first; t < last; ++t) {
          scores[t - first] = std::exp(scores[t - first] - max_score);
          sum += scores[t - first];
        }
        float* oj = o + j * vs;
        const float norm = weight / sum;
        for (size_t t = first; t < last; ++t) {
          const float a = scores[t - first] * norm;
          if (a == 0.0f) continue;
          const float* vp = v + size_t(order[t]) * vs;
          for (size_t e = 0; e < dv; ++e) oj[e] += a * vp[e];
        }
      }
    }
  }

  size_t heads_ = 0, dk_ = 0, dv_ = 0, buckets_ = 0, chunk_ = 0, rounds_ = 0;
  float scale_ = 1.0f;
  const float* rotations_ = nullptr;  // (rounds, dk, n_buckets/2)
  DenseView query_, value_, out_;
};

}  // namespace

Status CreateReformer(const void* table, const std::string& layer, uint32_t d_model,
                      TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return Reformer::Create(static_cast<const fb::Reformer*>(table), layer, d_model, tensors, out);
}

}  // namespace recur::impl
