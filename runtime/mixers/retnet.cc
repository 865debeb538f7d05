// RetNet multi-scale retention (docs/attention-math.md §11): the RNN step and
// the chunked-parallel form of a decayed linear attention whose q and k turn
// with the absolute position, each head's output RMS-normed and gated.
#include <algorithm>
#include <cmath>
#include <cstring>
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

class RetNet final : public Mixer {
 public:
  // S (H, dk, dv). No compensations: γ < 1 bounds S by max|k̃ᵀv|/(1 − γ), and
  // the rounding of each update decays with it (§11).
  size_t state_floats() const override { return heads_ * dk_ * dv_; }

  size_t scratch_floats(size_t batch, size_t steps, size_t threads,
                        size_t /*context*/) const override {
    // q, k (H·dk), v, gate, o (H·dv) per row.
    const size_t projections = batch * steps * heads_ * (2 * dk_ + 3 * dv_);
    if (steps == 1) return projections;
    return projections + threads * ChunkScratchFloats(std::min(steps, kChunk));
  }

  void CollectDense(std::vector<const DenseView*>* out) const override {
    proj_.Collect(out);
    out->push_back(&gate_);
  }

  void Run(const float* x, size_t batch, size_t steps, float* const* states,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps, qk = heads_ * dk_, vw = heads_ * dv_;
    float* q = ctx.scratch;      // (rows, H·dk)
    float* k = q + rows * qk;    // (rows, H·dk)
    float* v = k + rows * qk;    // (rows, H·dv)
    float* g = v + rows * vw;    // (rows, H·dv)
    float* o = g + rows * vw;    // (rows, H·dv)
    proj_.Project(x, rows, q, k, v, ctx);
    RunDense(gate_, x, rows, g, false, ctx.pool, ctx.dense);
    ctx.pool->ParallelRanges(rows * qk, kElementsPerTask, [&](size_t first, size_t last) {
      kernels::Scale(k + first, key_scale_, k + first, last - first);
    });
    rotation_.Apply(ctx, batch, steps, heads_, dk_, {{q, qk}, {k, qk}});
    if (steps == 1) {
      ctx.pool->ParallelRanges(batch, 8, [&](size_t first, size_t last) {
        for (size_t b = first; b < last; ++b) {
          for (size_t h = 0; h < heads_; ++h) {
            Step(q + b * qk + h * dk_, k + b * qk + h * dk_, v + b * vw + h * dv_, h,
                 states[b] + h * dk_ * dv_, o + b * vw + h * dv_);
          }
        }
      });
    } else {
      // (stream, head) pairs dealt to the workers; each has its own chunk scratch.
      float* const chunk_scratch = o + rows * vw;
      const size_t per_worker = ChunkScratchFloats(std::min(steps, kChunk));
      ctx.pool->ForEachStrided(batch * heads_, [&](size_t worker, size_t pair) {
        const size_t b = pair / heads_, h = pair % heads_;
        float* scratch = chunk_scratch + worker * per_worker;
        float* s = states[b] + h * dk_ * dv_;
        for (size_t t0 = 0; t0 < steps; t0 += kChunk) {
          const size_t n = std::min(kChunk, steps - t0);
          const size_t r = b * steps + t0;
          Chunk(q + r * qk + h * dk_, k + r * qk + h * dk_, v + r * vw + h * dv_, n, qk, vw, h, s,
                o + r * vw + h * dv_, scratch);
        }
      });
    }
    // ô = o / √(mean(o²) + eps) per head, then silu(gate) ⊙ ô.
    ctx.pool->ParallelRanges(rows, 16, [&](size_t first, size_t last) {
      for (size_t r = first; r < last; ++r) {
        for (size_t h = 0; h < heads_; ++h) {
          float* oh = o + r * vw + h * dv_;
          const float* gh = g + r * vw + h * dv_;
          const float inv = 1.0f / std::sqrt(kernels::Dot(oh, oh, dv_) / float(dv_) + eps_);
          for (size_t m = 0; m < dv_; ++m) oh[m] *= inv * gh[m] / (1.0f + std::exp(-gh[m]));
        }
      }
    });
    proj_.Output(o, rows, y, ctx);
  }

  static Status Create(const fb::RetNet* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(CheckHeads(layer, "RetNet", t->heads(), t->dk(), t->dv()));
    if (t->dk() % 2 != 0) {
      return InvalidModel("%s: RetNet needs an even dk: the rotation turns pairs of dims (got %u)",
                          layer.c_str(), t->dk());
    }
    const uint32_t decays = t->decay() == nullptr ? 0 : t->decay()->size();
    if (decays != t->heads()) {
      return InvalidModel("%s: RetNet has %u decays for %u heads (decay: one per head)",
                          layer.c_str(), decays, t->heads());
    }
    if (!(t->eps() > 0.0f && std::isfinite(t->eps()))) {
      return InvalidModel("%s: RetNet eps must be finite and > 0 (got %g)", layer.c_str(),
                          double(t->eps()));
    }
    auto m = std::make_unique<RetNet>();
    m->heads_ = t->heads();
    m->dk_ = t->dk();
    m->dv_ = t->dv();
    m->eps_ = t->eps();
    m->key_scale_ = float(1.0 / std::sqrt(double(t->dk())));
    m->powers_.resize(m->heads_ * (kChunk + 1));
    for (uint32_t h = 0; h < t->heads(); ++h) {
      const float gamma = t->decay()->Get(h);
      if (!(gamma > 0.0f && gamma < 1.0f)) {
        return InvalidModel("%s: RetNet decay %g of head %u is outside (0, 1)", layer.c_str(),
                            double(gamma), h);
      }
      for (size_t e = 0; e <= kChunk; ++e) {
        m->powers_[h * (kChunk + 1) + e] = float(std::pow(double(gamma), double(e)));
      }
    }
    m->rotation_ = Rotation::RetNet(m->dk_);
    const std::string prefix = layer + ".mixer.";
    RECUR_RETURN_IF_ERROR(m->proj_.Load(t, layer, d_model, t->heads() * t->dk(),
                                        t->heads() * t->dv(), tensors));
    RECUR_RETURN_IF_ERROR(
        tensors->GetDense(t->gate(), prefix + "gate", t->heads() * t->dv(), d_model, &m->gate_));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // Positions per chunk of the chunked form; Run walks longer calls (a long
  // prefill chunk, an encode) kChunk at a time, so that the T×T products
  // stay small and the decay powers γ^0..γ^kChunk are a table.
  static constexpr size_t kChunk = 64;

  // γ_h^e for e in [0, kChunk].
  const float* Powers(size_t h) const { return powers_.data() + h * (kChunk + 1); }

  // The RNN step of head h (§11): S = γ S + k̃ᵀ v, o = q̃ S.
  //   q, k: (dk); v, o: (dv); s: (dk, dv)
  void Step(const float* q, const float* k, const float* v, size_t h, float* s, float* o) const {
    const float gamma = Powers(h)[1];
    std::fill(o, o + dv_, 0.0f);
    for (size_t c = 0; c < dk_; ++c) {
      float* row = s + c * dv_;
      const float kc = k[c], qc = q[c];
      for (size_t m = 0; m < dv_; ++m) {
        row[m] = gamma * row[m] + kc * v[m];
        o[m] += qc * row[m];
      }
    }
  }

  // Per worker: q̃, k̃ (T, dk); γ-weighted k̃ᵀ (dk, T); vᵀ (dv, T); A (T, T);
  // out (T, dv); Sᵀ (dv, dk).
  size_t ChunkScratchFloats(size_t t) const {
    return 3 * t * dk_ + 2 * t * dv_ + t * t + dv_ * dk_;
  }

  // The chunked form of head h over T ≤ kChunk positions (§11), from the
  // state s (dk, dv) before them:
  //   o_i = γ^{i+1} q̃_i S + Σ_{j≤i} γ^{i−j} (q̃_i·k̃_j) v_j
  //   S ← γ^T S + Σ_j γ^{T−1−j} k̃_jᵀ v_j
  // q, k rows with stride row_qk, v and out rows with stride row_v.
  void Chunk(const float* q, const float* k, const float* v, size_t t_n, size_t row_qk,
             size_t row_v, size_t h, float* s, float* out, float* scratch) const {
    const float* pw = Powers(h);
    float* qh = scratch;               // (T, dk)
    float* kh = qh + t_n * dk_;        // (T, dk)
    float* kt = kh + t_n * dk_;        // (dk, T)
    float* vt = kt + dk_ * t_n;        // (dv, T)
    float* a = vt + dv_ * t_n;         // (T, T)
    float* num = a + t_n * t_n;        // (T, dv)
    float* st = num + t_n * dv_;       // (dv, dk)
    for (size_t i = 0; i < t_n; ++i) {
      std::memcpy(qh + i * dk_, q + i * row_qk, dk_ * sizeof(float));
      std::memcpy(kh + i * dk_, k + i * row_qk, dk_ * sizeof(float));
    }
    Transpose(v, t_n, dv_, row_v, vt);
    Transpose(s, dk_, dv_, dv_, st);
    // A = Q̃K̃ᵀ ⊙ D, D_ij = γ^{i−j} for j ≤ i, else 0.
    kernels::Dense(qh, dk_, t_n, kh, nullptr, dk_, t_n, a, t_n, false);
    for (size_t i = 0; i < t_n; ++i) {
      float* row = a + i * t_n;
      for (size_t j = 0; j <= i; ++j) row[j] *= pw[i - j];
      std::fill(row + i + 1, row + t_n, 0.0f);
    }
    kernels::Dense(a, t_n, t_n, vt, nullptr, t_n, dv_, num, dv_, false);  // A V
    for (size_t i = 0; i < t_n; ++i) kernels::Scale(qh + i * dk_, pw[i + 1], qh + i * dk_, dk_);
    kernels::Dense(qh, dk_, t_n, st, nullptr, dk_, dv_, num, dv_, true);  // + γ^{i+1} q̃_i S
    for (size_t i = 0; i < t_n; ++i) {
      std::memcpy(out + i * row_v, num + i * dv_, dv_ * sizeof(float));
    }
    for (size_t c = 0; c < dk_; ++c) {
      for (size_t j = 0; j < t_n; ++j) kt[c * t_n + j] = pw[t_n - 1 - j] * kh[j * dk_ + c];
    }
    kernels::Scale(s, pw[t_n], s, dk_ * dv_);
    kernels::Dense(kt, t_n, dk_, vt, nullptr, t_n, dv_, s, dv_, true);  // S += (γ k̃)ᵀ V
  }

  size_t heads_ = 0, dk_ = 0, dv_ = 0;
  float eps_ = 0.0f;
  float key_scale_ = 1.0f;      // 1/√dk
  std::vector<float> powers_;   // (H, kChunk + 1): γ_h^e
  Rotation rotation_;           // θ_i = 10000^(−i/(dk/2 − 1)), §11
  QkvoProjections proj_;
  DenseView gate_;
};

}  // namespace

Status CreateRetNet(const void* table, const std::string& layer, uint32_t d_model,
                    TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return RetNet::Create(static_cast<const fb::RetNet*>(table), layer, d_model, tensors, out);
}

}  // namespace recur::impl
