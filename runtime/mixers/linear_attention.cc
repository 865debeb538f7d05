// Causal linear attention (docs/attention-math.md §3): the RNN step and the
// chunked-parallel form.
#include "kernels/linear_attention/linear_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backends/dense_op.h"
#include "kernels/dense/dense.h"
#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"
#include "mixers/projections.h"
#include "mixers/rotary.h"

namespace recur::impl {
namespace {

// (rows, cols) → (cols, rows)
void Transpose(const float* in, size_t rows, size_t cols, size_t in_stride, float* out) {
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * in_stride + c];
  }
}

class LinearAttention final : public Mixer {
 public:
  bool causal() const override { return causal_; }
  size_t max_positions() const override { return rotation_.max_positions(); }
  // S (H, C, dv) and z (H, C), then their Kahan compensations in the same
  // layout: the sums run over unbounded streams, and plain float sums drift
  // (docs/reliability.md "Long runs"); a session with plain sums leaves them out
  // (compensation_floats). An encoder keeps nothing between calls: its sums
  // live in scratch.
  size_t state_floats() const override { return causal_ ? 2 * sum_floats() : 0; }
  size_t compensation_floats() const override { return causal_ ? sum_floats() : 0; }

  size_t scratch_floats(size_t batch, size_t steps, size_t threads,
                        size_t /*context*/) const override {
    const size_t rows = batch * steps;
    // φq, φk (H·C), v, o (H·dv), the raw q or k (H·dk)
    const size_t projections = rows * heads_ * (2 * c_ + 2 * dv_ + dk_);
    if (steps == 1 && causal_) return projections;
    return projections + threads * ChunkScratchFloats(std::min(steps, kChunk));
  }

  void CollectDense(std::vector<const DenseView*>* out) const override { proj_.Collect(out); }

  void Run(const float* x, size_t batch, size_t steps, float* const* states,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps;
    const size_t qk_width = heads_ * c_;
    const size_t v_width = heads_ * dv_;
    float* phi_q = ctx.scratch;                 // (rows, H·C)
    float* phi_k = phi_q + rows * qk_width;     // (rows, H·C)
    float* v = phi_k + rows * qk_width;         // (rows, H·dv)
    float* o = v + rows * v_width;              // (rows, H·dv)
    float* raw = o + rows * v_width;            // (rows, H·dk)
    RunDense(proj_.query, x, rows, raw, false, ctx.pool, ctx.dense);
    rotation_.Apply(ctx, batch, steps, heads_, dk_, {{raw, heads_ * dk_}});
    Features(raw, rows, phi_q, /*keys=*/false, ctx.pool);
    RunDense(proj_.key, x, rows, raw, false, ctx.pool, ctx.dense);
    rotation_.Apply(ctx, batch, steps, heads_, dk_, {{raw, heads_ * dk_}});
    Features(raw, rows, phi_k, /*keys=*/true, ctx.pool);
    if (feature_map_ == fb::FeatureMap::FavorStabilized) {
      StabilizedKeys(raw, batch, steps, phi_k, ctx.pool);
    }
    RunDense(proj_.value, x, rows, v, false, ctx.pool, ctx.dense);
    if (steps == 1 && causal_) {
      ctx.pool->ParallelRanges(batch, 8, [&](size_t first, size_t last) {
        for (size_t b = first; b < last; ++b) {
          const Sums sums = SumsOf(states[b], ctx.compensated_sums);
          for (size_t h = 0; h < heads_; ++h) {
            const Sums head = sums.Head(h, c_, dv_);
            const float* qh = phi_q + b * qk_width + h * c_;
            kernels::LinearAttentionStep(
                qh, phi_k + b * qk_width + h * c_, v + b * v_width + h * dv_, c_, dv_, Eps(qh),
                head.s, head.s_comp, head.z, head.z_comp, o + b * v_width + h * dv_);
          }
        }
      });
    } else {
      // (stream, head) pairs dealt to the workers; each has its own chunk scratch.
      float* const chunk_scratch = o + rows * v_width;
      const size_t per_worker = ChunkScratchFloats(std::min(steps, kChunk));
      ctx.pool->ForEachStrided(batch * heads_, [&](size_t worker, size_t pair) {
        const size_t b = pair / heads_, h = pair % heads_, row0 = b * steps;
        float* scratch = chunk_scratch + worker * per_worker;
        const float* qh = phi_q + row0 * qk_width + h * c_;
        const float* kh = phi_k + row0 * qk_width + h * c_;
        const float* vh = v + row0 * v_width + h * dv_;
        float* oh = o + row0 * v_width + h * dv_;
        if (!causal_) {
          Encode(qh, kh, vh, steps, qk_width, v_width, oh, scratch);
          return;
        }
        const Sums sums = SumsOf(states[b], ctx.compensated_sums).Head(h, c_, dv_);
        for (size_t t0 = 0; t0 < steps; t0 += kChunk) {
          const size_t n = std::min(kChunk, steps - t0);
          Chunk(qh + t0 * qk_width, kh + t0 * qk_width, vh + t0 * v_width, n, qk_width, v_width,
                sums, oh + t0 * v_width, scratch);
        }
      });
    }
    proj_.Output(o, rows, y, ctx);
  }

  static Status Create(const fb::LinearAttention* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckHeads(layer, "linear attention", t->heads(), t->dk(), t->dv()));
    const fb::FeatureMap fm = t->feature_map();
    if (fm != fb::FeatureMap::EluPlusOne && fm != fb::FeatureMap::Relu &&
        fm != fb::FeatureMap::Poly2 && fm != fb::FeatureMap::Favor &&
        fm != fb::FeatureMap::FavorHyperbolic && fm != fb::FeatureMap::FavorStabilized &&
        fm != fb::FeatureMap::GeneralizedRelu && fm != fb::FeatureMap::RandomFourier &&
        fm != fb::FeatureMap::SmoothedRandomFourier) {
      return Unsupported("%s: feature map %d is not supported by this runtime", layer.c_str(),
                         static_cast<int>(fm));
    }
    // The maps with a random projection ω.
    const bool fourier =
        fm == fb::FeatureMap::RandomFourier || fm == fb::FeatureMap::SmoothedRandomFourier;
    const bool favor = fm == fb::FeatureMap::Favor || fm == fb::FeatureMap::FavorHyperbolic ||
                       fm == fb::FeatureMap::FavorStabilized ||
                       fm == fb::FeatureMap::GeneralizedRelu || fourier;
    // Features ≥ feature_eps > 0: the denominator cannot vanish, eps may be 0.
    const bool positive =
        (fm == fb::FeatureMap::FavorStabilized || fm == fb::FeatureMap::GeneralizedRelu) &&
        t->feature_eps() > 0.0f && std::isfinite(t->feature_eps());
    if ((fm == fb::FeatureMap::FavorStabilized || fm == fb::FeatureMap::GeneralizedRelu) &&
        !positive) {
      return InvalidModel("%s: feature map %s needs feature_eps finite and > 0 (got %g)",
                          layer.c_str(), fb::EnumNameFeatureMap(fm), double(t->feature_eps()));
    }
    if (fm == fb::FeatureMap::FavorStabilized && t->causal()) {
      return InvalidModel(
          "%s: feature map FavorStabilized is encoder-only: its key stabiliser is "
          "a maximum over the whole utterance, which a recurrent step cannot "
          "know",
          layer.c_str());
    }
    if (favor && (t->favor_features() == 0 || t->favor_features() > kMaxWidth ||
                  ((fm == fb::FeatureMap::FavorHyperbolic || fourier) &&
                   t->favor_features() < 2))) {
      return InvalidModel("%s: feature map %s needs favor_features in [%u, %u] (got %u)",
                          layer.c_str(), fb::EnumNameFeatureMap(fm),
                          fm == fb::FeatureMap::FavorHyperbolic || fourier ? 2u : 1u, kMaxWidth,
                          t->favor_features());
    }
    if (fm == fb::FeatureMap::SmoothedRandomFourier && !std::isfinite(t->smoothing())) {
      return InvalidModel("%s: feature map SmoothedRandomFourier needs a finite smoothing (got %g)",
                          layer.c_str(), double(t->smoothing()));
    }
    if (favor && !(t->softmax_temp() > 0.0f && std::isfinite(t->softmax_temp()))) {
      return InvalidModel("%s: feature map %s needs softmax_temp > 0 (got %g)", layer.c_str(),
                          fb::EnumNameFeatureMap(fm), double(t->softmax_temp()));
    }
    if (!favor && t->omega() >= 0) {
      return InvalidModel("%s: omega is set, but feature map %s takes no projection",
                          layer.c_str(), fm == fb::FeatureMap::Poly2 ? "poly2" : "elu+1/relu");
    }
    if (fm == fb::FeatureMap::Poly2 && uint64_t{t->dk()} * t->dk() * t->heads() > kMaxWidth) {
      return InvalidModel("%s: poly2 features heads x dk² must be <= %u", layer.c_str(), kMaxWidth);
    }
    // eps keeps φ(q)ᵀz + eps away from 0 (relu features of all-negative keys
    // give z = 0): the reference and the converter require it > 0, or ≥ 0
    // for the maps whose features are > 0.
    if (!(std::isfinite(t->eps()) && (t->eps() > 0.0f || (positive && t->eps() == 0.0f)))) {
      return InvalidModel("%s: linear attention eps must be finite and > 0 (got %g)",
                          layer.c_str(), double(t->eps()));
    }
    auto m = std::make_unique<LinearAttention>();
    m->heads_ = t->heads();
    m->dk_ = t->dk();
    m->dv_ = t->dv();
    m->eps_ = t->eps();
    m->eps_per_feature_ = t->eps_per_feature();
    m->feature_eps_ = t->feature_eps();
    m->smoothing_ = t->smoothing();
    m->causal_ = t->causal();
    m->feature_map_ = fm;
    RECUR_RETURN_IF_ERROR(
        Rotation::FromTable(t->rotary(), layer, "linear attention", t->dk(), "dk", tensors,
                            &m->rotation_));
    switch (fm) {
      case fb::FeatureMap::Poly2: m->c_ = m->dk_ * m->dk_; break;
      case fb::FeatureMap::Favor:
      case fb::FeatureMap::FavorStabilized:
      case fb::FeatureMap::GeneralizedRelu:
        m->favor_m_ = m->omega_cols_ = t->favor_features();
        m->c_ = m->omega_cols_;
        break;
      case fb::FeatureMap::FavorHyperbolic:
        m->favor_m_ = t->favor_features();
        m->omega_cols_ = m->favor_m_ / 2;
        m->c_ = 2 * m->omega_cols_;
        break;
      case fb::FeatureMap::RandomFourier:
      case fb::FeatureMap::SmoothedRandomFourier:
        m->favor_m_ = t->favor_features();
        m->omega_cols_ = m->favor_m_ / 2;
        m->c_ = 2 * m->omega_cols_ + (fm == fb::FeatureMap::SmoothedRandomFourier ? 1 : 0);
        break;
      default: m->c_ = m->dk_; break;
    }
    if (favor) {
      m->temp_ = t->softmax_temp();
      const float* omega = nullptr;  // [dk, cols]
      const std::string what = layer + ".mixer.feature_map.omega";
      RECUR_RETURN_IF_ERROR(tensors->Get(t->omega(), what.c_str(),
                                         {int64_t(m->dk_), int64_t(m->omega_cols_)}, false, &omega));
      m->omega_t_.resize(m->omega_cols_ * m->dk_);
      Transpose(omega, m->dk_, m->omega_cols_, m->omega_cols_, m->omega_t_.data());
    }
    RECUR_RETURN_IF_ERROR(m->proj_.Load(t, layer, d_model, t->heads() * t->dk(),
                                        t->heads() * t->dv(), tensors));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // φ of the (rows, H·dk) projections into (rows, H·C) features (the schema's
  // FeatureMap; docs/attention-math.md §3).
  // `keys`: FavorStabilized leaves the keys' s = ω_jᵀx̃ for StabilizedKeys.
  void Features(const float* raw, size_t rows, float* phi, bool keys, ThreadPool* pool) const {
    const size_t vectors = rows * heads_;  // dk-vectors, contiguous
    switch (feature_map_) {
      case fb::FeatureMap::EluPlusOne:
        pool->ParallelRanges(vectors * dk_, kElementsPerTask, [&](size_t first, size_t last) {
          kernels::EluPlusOne(raw + first, phi + first, last - first);
        });
        return;
      case fb::FeatureMap::Relu:
        pool->ParallelRanges(vectors * dk_, kElementsPerTask, [&](size_t first, size_t last) {
          kernels::Relu(raw + first, phi + first, last - first);
        });
        return;
      case fb::FeatureMap::Poly2:
        pool->ParallelRanges(vectors, 64, [&](size_t first, size_t last) {
          for (size_t i = first; i < last; ++i) {
            const float* x = raw + i * dk_;
            for (size_t a = 0; a < dk_; ++a) kernels::Scale(x, x[a], phi + i * c_ + a * dk_, dk_);
          }
        });
        return;
      case fb::FeatureMap::Favor:
      case fb::FeatureMap::FavorHyperbolic: {
        // u = xᵀω; with x̃ = √t·x: ω_jᵀx̃ = √t·u_j and ‖x̃‖²/2 = t·‖x‖²/2.
        const float root_t = std::sqrt(temp_);
        const float log_m = 0.5f * std::log(static_cast<float>(favor_m_));
        pool->ParallelRanges(vectors, 16, [&](size_t first, size_t last) {
          kernels::Dense(raw + first * dk_, dk_, last - first, omega_t_.data(), nullptr, dk_,
                         omega_cols_, phi + first * c_, c_, false);
          for (size_t i = first; i < last; ++i) {
            const float* x = raw + i * dk_;
            float* u = phi + i * c_;
            const float off = 0.5f * temp_ * kernels::Dot(x, x, dk_) + log_m;
            if (feature_map_ == fb::FeatureMap::FavorHyperbolic) {
              // [exp(√t·u − off), exp(−√t·u − off)]: the second half first (u is read).
              kernels::AffineExp(u, -root_t, -off, u + omega_cols_, omega_cols_);
            }
            kernels::AffineExp(u, root_t, -off, u, omega_cols_);
          }
        });
        return;
      }
      case fb::FeatureMap::GeneralizedRelu: {
        const float root_t = std::sqrt(temp_);
        pool->ParallelRanges(vectors, 16, [&](size_t first, size_t last) {
          kernels::Dense(raw + first * dk_, dk_, last - first, omega_t_.data(), nullptr, dk_,
                         omega_cols_, phi + first * c_, c_, false);
          float* u = phi + first * c_;
          for (size_t i = 0; i < (last - first) * c_; ++i) {
            u[i] = std::max(root_t * u[i], 0.0f) + feature_eps_;
          }
        });
        return;
      }
      case fb::FeatureMap::RandomFourier:
      case fb::FeatureMap::SmoothedRandomFourier: {
        // [cos(√t·u), sin(√t·u)]·√(2/m) (+ the smoothing feature); scalar
        // libm cos/sin on every target.
        const float root_t = std::sqrt(temp_);
        const float scale = std::sqrt(2.0f / static_cast<float>(favor_m_));
        const bool smoothed = feature_map_ == fb::FeatureMap::SmoothedRandomFourier;
        pool->ParallelRanges(vectors, 16, [&](size_t first, size_t last) {
          kernels::Dense(raw + first * dk_, dk_, last - first, omega_t_.data(), nullptr, dk_,
                         omega_cols_, phi + first * c_, c_, false);
          for (size_t i = first; i < last; ++i) {
            float* u = phi + i * c_;
            for (size_t j = 0; j < omega_cols_; ++j) {
              const float a = root_t * u[j];
              u[j] = scale * std::cos(a);
              u[omega_cols_ + j] = scale * std::sin(a);
            }
            if (smoothed) u[2 * omega_cols_] = smoothing_;
          }
        });
        return;
      }
      case fb::FeatureMap::FavorStabilized: {
        // s = √t·u; a query's φ against its own maximum over j.
        const float root_t = std::sqrt(temp_);
        const float ratio = 1.0f / std::sqrt(static_cast<float>(favor_m_));
        pool->ParallelRanges(vectors, 16, [&](size_t first, size_t last) {
          kernels::Dense(raw + first * dk_, dk_, last - first, omega_t_.data(), nullptr, dk_,
                         omega_cols_, phi + first * c_, c_, false);
          kernels::Scale(phi + first * c_, root_t, phi + first * c_, (last - first) * c_);
          if (keys) return;
          for (size_t i = first; i < last; ++i) {
            float* s = phi + i * c_;
            const float top = *std::max_element(s, s + c_);
            StabilizedRow(raw + i * dk_, top, ratio, s);
          }
        });
        return;
      }
    }
  }

  // φ_j = (exp(s_j − t·‖x‖²/2 − top) + ε)/√m in place of s (one dk-vector x).
  void StabilizedRow(const float* x, float top, float ratio, float* s) const {
    const float off = 0.5f * temp_ * kernels::Dot(x, x, dk_) + top;
    kernels::AffineExp(s, 1.0f, -off, s, c_);
    for (size_t j = 0; j < c_; ++j) s[j] = ratio * (s[j] + feature_eps_);
  }

  // FavorStabilized keys: phi_k holds s per (row, head), raw_k the keys
  // (rows, H·dk). M is the maximum of s over each (stream, head)'s keys.
  void StabilizedKeys(const float* raw_k, size_t batch, size_t steps, float* phi_k,
                      ThreadPool* pool) const {
    const float ratio = 1.0f / std::sqrt(static_cast<float>(favor_m_));
    pool->ForEachStrided(batch * heads_, [&](size_t, size_t pair) {
      const size_t b = pair / heads_, h = pair % heads_;
      float top = -std::numeric_limits<float>::infinity();
      for (size_t t = 0; t < steps; ++t) {
        const float* s = phi_k + ((b * steps + t) * heads_ + h) * c_;
        top = std::max(top, *std::max_element(s, s + c_));
      }
      for (size_t t = 0; t < steps; ++t) {
        const size_t i = (b * steps + t) * heads_ + h;
        StabilizedRow(raw_k + i * dk_, top, ratio, phi_k + i * c_);
      }
    });
  }

  // The denominator's eps for the query features phi_q (C): eps, or
  // eps·Σφ(q) when eps_per_feature (φ(q)·(z + eps)).
  float Eps(const float* phi_q) const {
    if (!eps_per_feature_) return eps_;
    float sum = 0.0f;
    for (size_t j = 0; j < c_; ++j) sum += phi_q[j];
    return eps_ * sum;
  }

  // Positions per attention chunk. Run may get more (a long prefill chunk or
  // a whole utterance); it walks them kChunk at a time, so that the T×T
  // products stay small and in cache.
  static constexpr size_t kChunk = 64;

  // A causal stream's state: the sums (H, C, dv) and (H, C) and their
  // compensations (null with plain sums).
  struct Sums {
    float *s, *z, *s_comp, *z_comp;
    // Head h's part: S (C, dv), z (C).
    Sums Head(size_t h, size_t c, size_t dv) const {
      const size_t hs = h * c * dv, hz = h * c;
      return {s + hs, z + hz, s_comp ? s_comp + hs : nullptr, z_comp ? z_comp + hz : nullptr};
    }
  };
  size_t sum_floats() const { return heads_ * (c_ * dv_ + c_); }
  Sums SumsOf(float* state, bool compensated) const {
    float* z = state + heads_ * c_ * dv_;
    if (!compensated) return {state, z, nullptr, nullptr};
    float* comp = state + sum_floats();
    return {state, z, comp, comp + heads_ * c_ * dv_};
  }

  // Per worker: q, k (T, C); kᵀ (C, T); vᵀ (dv, T); A (T, T); num (T, dv);
  // Sᵀ (dv, C); den (T); the chunk's φKᵀV (C, dv) and Σ φK (C).
  size_t ChunkScratchFloats(size_t t) const {
    return 2 * t * c_ + t * c_ + t * dv_ + t * t + t * dv_ + dv_ * c_ + t + c_ * dv_ + c_;
  }

  // The chunked form for one stream and head over T positions (docs/attention-math.md
  // §3): num = (φQ φKᵀ ⊙ causal) V + φQ S; den likewise with z;
  // S += φKᵀ V; z += Σ φK (compensated unless `sums` has no compensations,
  // as the step does). Small products go through the Dense kernel.
  void Chunk(const float* phi_q, const float* phi_k, const float* v, size_t steps, size_t row_qk,
             size_t row_v, const Sums& sums, float* out, float* scratch) const {
    float* s = sums.s;
    float* z = sums.z;
    const size_t t_n = steps;
    float* q = scratch;                 // (T, C)
    float* k = q + t_n * c_;           // (T, C)
    float* kt = k + t_n * c_;          // (C, T)
    float* vt = kt + c_ * t_n;         // (dv, T)
    float* a = vt + dv_ * t_n;          // (T, T)
    float* num = a + t_n * t_n;         // (T, dv)
    float* st = num + t_n * dv_;        // (dv, C)
    float* den = st + dv_ * c_;        // (T)
    float* kv = den + t_n;              // (C, dv)
    float* k_sum = kv + c_ * dv_;       // (C)
    for (size_t t = 0; t < t_n; ++t) {
      std::memcpy(q + t * c_, phi_q + t * row_qk, c_ * sizeof(float));
      std::memcpy(k + t * c_, phi_k + t * row_qk, c_ * sizeof(float));
    }
    Transpose(k, t_n, c_, c_, kt);
    Transpose(v, t_n, dv_, row_v, vt);
    Transpose(s, c_, dv_, dv_, st);
    // A = φQ φKᵀ, causal: position i sees j ≤ i.
    kernels::Dense(q, c_, t_n, k, nullptr, c_, t_n, a, t_n, false);
    for (size_t i = 0; i < t_n; ++i) {
      std::fill(a + i * t_n + i + 1, a + (i + 1) * t_n, 0.0f);
      float row = 0.0f;
      for (size_t j = 0; j <= i; ++j) row += a[i * t_n + j];
      den[i] = row + kernels::Dot(q + i * c_, z, c_) + Eps(q + i * c_);
    }
    kernels::Dense(a, t_n, t_n, vt, nullptr, t_n, dv_, num, dv_, false);   // A V
    kernels::Dense(q, c_, t_n, st, nullptr, c_, dv_, num, dv_, true);    // + φQ S
    for (size_t t = 0; t < t_n; ++t) {
      const float inv = 1.0f / den[t];
      for (size_t m = 0; m < dv_; ++m) out[t * row_v + m] = num[t * dv_ + m] * inv;
    }
    std::memcpy(k_sum, k, c_ * sizeof(float));
    for (size_t t = 1; t < t_n; ++t) kernels::Add(k_sum, k + t * c_, k_sum, c_);
    if (sums.s_comp == nullptr) {
      kernels::Dense(kt, t_n, c_, vt, nullptr, t_n, dv_, s, dv_, true);  // S += φKᵀ V
      kernels::Add(k_sum, z, z, c_);                                       // z += Σ φK
      return;
    }
    kernels::Dense(kt, t_n, c_, vt, nullptr, t_n, dv_, kv, dv_, false);   // φKᵀ V
    kernels::CompensatedAdd(kv, s, sums.s_comp, c_ * dv_);                 // S += φKᵀ V
    kernels::CompensatedAdd(k_sum, z, sums.z_comp, c_);                    // z += Σ φK
  }

  // The encoder form for one stream and head (docs/attention-math.md §3 without the
  // mask): S, z summed over all positions first, then every position reads
  // them: out_i = φq_iᵀ S / (φq_i·z + eps).
  void Encode(const float* phi_q, const float* phi_k, const float* v, size_t steps, size_t row_qk,
              size_t row_v, float* out, float* scratch) const {
    const size_t cap = std::min(steps, kChunk);
    float* kt = scratch;                // (C, cap)
    float* vt = kt + c_ * cap;         // (dv, cap)
    float* st = vt + dv_ * cap;         // (dv, C)
    float* s = st + dv_ * c_;           // (C, dv), within ChunkScratchFloats(cap)
    float* z = s + c_ * dv_;            // (C)
    std::fill(s, z + c_, 0.0f);
    for (size_t t0 = 0; t0 < steps; t0 += kChunk) {
      const size_t n = std::min(kChunk, steps - t0);
      Transpose(phi_k + t0 * row_qk, n, c_, row_qk, kt);
      Transpose(v + t0 * row_v, n, dv_, row_v, vt);
      kernels::Dense(kt, n, c_, vt, nullptr, n, dv_, s, dv_, true);  // S += φKᵀ V
      for (size_t t = 0; t < n; ++t) kernels::Add(z, phi_k + (t0 + t) * row_qk, z, c_);
    }
    Transpose(s, c_, dv_, dv_, st);
    for (size_t t = 0; t < steps; ++t) {
      const float* q = phi_q + t * row_qk;
      float* o = out + t * row_v;
      kernels::Dense(q, c_, 1, st, nullptr, c_, dv_, o, dv_, false);  // φqᵀ S
      const float inv = 1.0f / (kernels::Dot(q, z, c_) + Eps(q));
      for (size_t m = 0; m < dv_; ++m) o[m] *= inv;
    }
  }

  size_t heads_ = 0, dk_ = 0, dv_ = 0;
  size_t c_ = 0;  // features per head: φ maps dk → C
  fb::FeatureMap feature_map_ = fb::FeatureMap::EluPlusOne;
  bool eps_per_feature_ = false;
  float feature_eps_ = 0.0f;  // FavorStabilized, GeneralizedRelu
  float smoothing_ = 1.0f;    // SmoothedRandomFourier
  // Favor maps: ωᵀ (cols, dk), so that u = xᵀω is a Dense over the (rows·H, dk) q/k rows;
  // m (favor_features) and the temperature.
  std::vector<float> omega_t_;
  size_t omega_cols_ = 0, favor_m_ = 0;
  float temp_ = 1.0f;
  float eps_ = 0.0f;
  bool causal_ = true;
  Rotation rotation_;  // none unless the table has rotary (§12)
  QkvoProjections proj_;
};

}  // namespace

Status CreateLinearAttention(const void* table, const std::string& layer, uint32_t d_model,
                             TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return LinearAttention::Create(static_cast<const fb::LinearAttention*>(table), layer, d_model,
                                 tensors, out);
}

}  // namespace recur::impl
