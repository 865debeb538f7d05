// Reformer LSH attention (docs/attention-math.md §8; the exact math is in
// runtime/schema/recur.fbs, table Reformer), in two forms: the paper's and
// Hugging Face transformers' LSHSelfAttention. Encoder only: the hash sort
// reorders the whole sequence, so there is no recurrent form.
#include <algorithm>
#include <cmath>
#include <cstddef>
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
constexpr uint32_t kMaxWindowChunks = 64;  // chunks_before + chunks_after + 1
// transformers' mask values (float32): masked keys, then the query's own position.
constexpr float kMaskScore = -1e9f;
constexpr float kSelfScore = -1e5f;

// The bucket of projections p (n_buckets/2): argmax over [p, −p], the first
// maximum (torch.argmax's choice).
uint32_t SignedArgmax(const float* p, size_t half) {
  uint32_t best = 0;
  float best_value = p[0];
  for (size_t b = 1; b < 2 * half; ++b) {
    const float value = b < half ? p[b] : -p[b - half];
    if (value > best_value) {
      best_value = value;
      best = uint32_t(b);
    }
  }
  return best;
}

class Reformer final : public Mixer {
 public:
  bool causal() const override { return false; }
  size_t state_floats() const override { return 0; }

  size_t scratch_floats(size_t batch, size_t steps, size_t threads,
                        size_t /*context*/) const override {
    const size_t worker = transformers_ ? HfWorkerFloats(steps) : WorkerFloats(steps);
    return batch * steps * heads_ * (dk_ + 2 * dv_) + threads * worker;
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
    const size_t worker = transformers_ ? HfWorkerFloats(steps) : WorkerFloats(steps);
    ctx.pool->ForEachStrided(batch * heads_, [&](size_t w, size_t pair) {
      const size_t b = pair / heads_, h = pair % heads_, r0 = b * steps;
      if (transformers_) {
        HfHead(h, q + r0 * qw + h * dk_, v + r0 * vw + h * dv_, steps, o + r0 * vw + h * dv_,
               scratch + w * worker);
      } else {
        Head(q + r0 * qw + h * dk_, v + r0 * vw + h * dv_, steps, o + r0 * vw + h * dv_,
             scratch + w * worker);
      }
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
    const bool transformers = t->form() == fb::ReformerForm::Transformers;
    if (t->form() != fb::ReformerForm::Paper && !transformers) {
      return InvalidModel(
          "%s: reformer form %u is not one this runtime knows (0 paper, 1 transformers)",
          layer.c_str(), unsigned(t->form()));
    }
    if (!transformers && (t->chunks_before() != 1 || t->chunks_after() != 0 || t->causal_mask() ||
                          t->pad_multiple() != 0 || t->pad_above() != 0)) {
      return InvalidModel(
          "%s: the paper-form reformer needs chunks_before 1, chunks_after 0, causal_mask "
          "false, pad_multiple 0 and pad_above 0 (got %u, %u, %s, %u, %u)",
          layer.c_str(), t->chunks_before(), t->chunks_after(), t->causal_mask() ? "true" : "false",
          t->pad_multiple(), t->pad_above());
    }
    if (transformers) {
      if (uint64_t{t->chunks_before()} + t->chunks_after() + 1 > kMaxWindowChunks) {
        return InvalidModel(
            "%s: reformer chunks_before + chunks_after + 1 must be at most %u (got %u + %u + 1)",
            layer.c_str(), kMaxWindowChunks, t->chunks_before(), t->chunks_after());
      }
      if (t->pad_multiple() == 0 || t->pad_multiple() % t->chunk() != 0 ||
          t->pad_multiple() > kMaxChunk) {
        return InvalidModel(
            "%s: reformer pad_multiple must be a positive multiple of chunk %u, at most %u "
            "(got %u)",
            layer.c_str(), t->chunk(), kMaxChunk, t->pad_multiple());
      }
      if (t->pad_above() > t->chunk()) {
        return InvalidModel("%s: reformer pad_above must be at most chunk %u (got %u)",
                            layer.c_str(), t->chunk(), t->pad_above());
      }
    }
    auto m = std::make_unique<Reformer>();
    m->transformers_ = transformers;
    m->chunks_before_ = t->chunks_before();
    m->chunks_after_ = t->chunks_after();
    m->causal_mask_ = t->causal_mask();
    m->pad_multiple_ = t->pad_multiple();
    m->pad_above_ = t->pad_above();
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
    const std::string rotations = prefix + "rotations";
    const int64_t half = int64_t(m->buckets_ / 2);
    RECUR_RETURN_IF_ERROR(
        transformers
            ? tensors->Get(t->rotations(), rotations.c_str(),
                           {int64_t(m->heads_), int64_t(m->dk_), int64_t(m->rounds_), half}, false,
                           &m->rotations_)
            : tensors->Get(t->rotations(), rotations.c_str(),
                           {int64_t(m->rounds_), int64_t(m->dk_), half}, false, &m->rotations_));
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
        bucket[j] = SignedArgmax(proj, half);
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

  // Form transformers: the slots a sequence of n positions takes, pads included.
  size_t Padded(size_t n) const {
    return n > pad_above_ && n % pad_multiple_ != 0 ? n + pad_multiple_ - n % pad_multiple_ : n;
  }

  // Per worker (form transformers), for T positions in n = Padded(T) slots:
  // keys (T, dk), projections (n_buckets/2), scores (window), per-round
  // outputs (rounds, T, dv) and logsumexps (rounds, T), then uint32 buckets
  // (T), sorted positions (rounds·n), bucket starts (n_buckets + 2) and a
  // chunk's key positions (window), kept in float-sized slots.
  size_t HfWorkerFloats(size_t t) const {
    const size_t n = Padded(t), window = (chunks_before_ + chunks_after_ + 1) * chunk_;
    return t * dk_ + buckets_ / 2 + window + rounds_ * t * (dv_ + 1) + t + rounds_ * n + buckets_ +
           2 + window;
  }

  // Query position i against the key positions keys[0..m) (§8, second form:
  // the masks go by position, a duplicate counts again): o = softmax · V of
  // the scores Q_i·K_p (no 1/√dk); returns their logsumexp. scores: (m).
  float HfAttend(const float* qi, size_t i, const uint32_t* keys, size_t m, const float* normed,
                 const float* v, size_t t, float* scores, float* o) const {
    const size_t dk = dk_, dv = dv_, vs = heads_ * dv_;
    float max_score = -INFINITY;
    for (size_t a = 0; a < m; ++a) {
      const size_t p = keys[a];
      float sc =
          (p >= t || (causal_mask_ && p > i)) ? kMaskScore : kernels::Dot(qi, normed + p * dk, dk);
      if (p == i) sc = kSelfScore;
      scores[a] = sc;
      max_score = std::max(max_score, sc);
    }
    float sum = 0.0f;
    for (size_t a = 0; a < m; ++a) {
      scores[a] = std::exp(scores[a] - max_score);
      sum += scores[a];
    }
    std::fill(o, o + dv, 0.0f);
    const float inv = 1.0f / sum;
    for (size_t a = 0; a < m; ++a) {
      const float w = scores[a] * inv;
      // Pads (p ≥ t) have no value rows; their weight is 0 unless the scores
      // are not finite (weights with Inf or NaN in a hostile file).
      if (w == 0.0f || keys[a] >= t) continue;
      const float* vp = v + size_t(keys[a]) * vs;
      for (size_t e = 0; e < dv; ++e) o[e] += w * vp[e];
    }
    return max_score + std::log(sum);
  }

  // One head h of one stream, form transformers: q (t rows, stride H·dk),
  // v (stride H·dv) → o (stride H·dv).
  void HfHead(size_t h, const float* q, const float* v, size_t t, float* o, float* scratch) const {
    const size_t dk = dk_, dv = dv_, qs = heads_ * dk_, vs = heads_ * dv_, half = buckets_ / 2;
    const size_t n = Padded(t), c = chunk_, rounds = rounds_;
    const size_t window = (chunks_before_ + chunks_after_ + 1) * c;  // ≥ n on the standard path
    float* normed = scratch;                                         // (t, dk)
    float* proj = normed + t * dk;                                   // (n_buckets/2)
    float* scores = proj + half;                                     // (window)
    float* outs = scores + window;                                   // (rounds, t, dv)
    float* lses = outs + rounds * t * dv;                            // (rounds, t)
    auto* bucket = reinterpret_cast<uint32_t*>(lses + rounds * t);   // (t)
    uint32_t* order = bucket + t;                                    // (rounds·n)
    uint32_t* start = order + rounds * n;                            // (n_buckets + 2)
    uint32_t* keys = start + buckets_ + 2;                           // (window)
    const float inv_sqrt_dk = 1.0f / std::sqrt(float(dk));
    for (size_t j = 0; j < t; ++j) {  // K = Q / √(mean Q² + 1e-6) / √dk
      const float* qj = q + j * qs;
      const float inv = 1.0f / std::sqrt(kernels::Dot(qj, qj, dk) / float(dk) + 1e-6f);
      for (size_t e = 0; e < dk; ++e) normed[j * dk + e] = qj[e] * inv * inv_sqrt_dk;
    }
    if (n <= c) {  // transformers' standard path: every slot, no hashing
      for (size_t j = 0; j < n; ++j) keys[j] = uint32_t(j);
      for (size_t i = 0; i < t; ++i)
        HfAttend(q + i * qs, i, keys, n, normed, v, t, scores, o + i * vs);
      return;
    }
    for (size_t r = 0; r < rounds; ++r) {
      // Buckets of the raw Q: argmax over [Q R, −Q R] (the first maximum);
      // R = rotations[h, :, r, :], pads in bucket n_buckets.
      const float* rot = rotations_ + (h * dk * rounds + r) * half;  // row e at e·rounds·half
      for (size_t j = 0; j < t; ++j) {
        std::fill(proj, proj + half, 0.0f);
        const float* qj = q + j * qs;
        for (size_t e = 0; e < dk; ++e) {
          const float* row = rot + e * rounds * half;
          for (size_t b = 0; b < half; ++b) proj[b] += qj[e] * row[b];
        }
        bucket[j] = SignedArgmax(proj, half);
      }
      // Counting sort by (bucket, position); the pads last.
      uint32_t* ord = order + r * n;
      std::fill(start, start + buckets_ + 2, 0u);
      for (size_t j = 0; j < t; ++j) ++start[bucket[j] + 1];
      start[buckets_ + 1] += uint32_t(n - t);
      for (size_t b = 0; b <= buckets_; ++b) start[b + 1] += start[b];
      for (size_t j = 0; j < t; ++j) ord[start[bucket[j]]++] = uint32_t(j);
      for (size_t j = t; j < n; ++j) ord[start[buckets_]++] = uint32_t(j);
    }
    // The rounds' slots in a row, cut into chunks; a query's keys are the
    // chunks g + d, d = −chunks_before..chunks_after, cyclically over all
    // (an offset |d| ≥ the chunk count is 0, as transformers' slices give).
    const size_t chunks = rounds * n / c;
    for (size_t g = 0; g < chunks; ++g) {
      size_t m = 0;
      for (ptrdiff_t d = -ptrdiff_t(chunks_before_); d <= ptrdiff_t(chunks_after_); ++d) {
        const bool beyond = size_t(d < 0 ? -d : d) >= chunks;
        const size_t kg = beyond ? g : size_t((ptrdiff_t(g + chunks) + d)) % chunks;
        for (size_t u = kg * c; u < (kg + 1) * c; ++u) keys[m++] = order[u];
      }
      for (size_t s = g * c; s < (g + 1) * c; ++s) {
        const size_t i = order[s], r = s / n;
        if (i >= t) continue;  // a pad's output is dropped
        lses[r * t + i] =
            HfAttend(q + i * qs, i, keys, m, normed, v, t, scores, outs + (r * t + i) * dv);
      }
    }
    // y_i = Σ_r o_r exp(lse_r − logsumexp_r lse_r) (one round: o_0).
    for (size_t i = 0; i < t; ++i) {
      float* oi = o + i * vs;
      if (rounds == 1) {
        std::copy(outs + i * dv, outs + (i + 1) * dv, oi);
        continue;
      }
      float top = -INFINITY;
      for (size_t r = 0; r < rounds; ++r) top = std::max(top, lses[r * t + i]);
      float sum = 0.0f;
      for (size_t r = 0; r < rounds; ++r) sum += std::exp(lses[r * t + i] - top);
      std::fill(oi, oi + dv, 0.0f);
      for (size_t r = 0; r < rounds; ++r) {
        const float w = std::exp(lses[r * t + i] - top) / sum;
        const float* orow = outs + (r * t + i) * dv;
        for (size_t e = 0; e < dv; ++e) oi[e] += w * orow[e];
      }
    }
  }

  size_t heads_ = 0, dk_ = 0, dv_ = 0, buckets_ = 0, chunk_ = 0, rounds_ = 0;
  bool transformers_ = false, causal_mask_ = false;
  size_t chunks_before_ = 1, chunks_after_ = 0, pad_multiple_ = 0, pad_above_ = 0;
  float scale_ = 1.0f;
  const float* rotations_ =
      nullptr;  // (rounds, dk, n_buckets/2); transformers: (H, dk, rounds, n_buckets/2)
  DenseView query_, value_, out_;
};

}  // namespace

Status CreateReformer(const void* table, const std::string& layer, uint32_t d_model,
                      TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return Reformer::Create(static_cast<const fb::Reformer*>(table), layer, d_model, tensors, out);
}

}  // namespace recur::impl
