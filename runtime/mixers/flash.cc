// FLASH mixed-chunk attention (docs/attention-math.md §6; the exact math is in
// runtime/schema/recur.fbs, table Flash): quadratic inside an absolute chunk
// of C positions, linear across chunks. Causal RNN form at token granularity
// with a fixed state: the sum over completed chunks plus the current chunk's
// K^quad, K^lin, V slots.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backends/dense_op.h"
#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"
#include "mixers/projections.h"
#include "mixers/rotary.h"

namespace recur::impl {
namespace {

class Flash final : public Mixer {
 public:
  bool causal() const override { return proj_.causal; }
  size_t max_positions() const override { return rotation_.max_positions(); }
  // S (s, E), kl_buf (C, s), kq_buf (C, s), v_buf (C, E).
  size_t state_floats() const override {
    const size_t s = proj_.s, E = proj_.e;
    return proj_.causal ? s * E + c_ * (2 * s + E) : 0;
  }

  size_t scratch_floats(size_t batch, size_t steps, size_t /*threads*/,
                        size_t /*context*/) const override {
    // u, v, o (E) and z, q^quad, k^quad, q^lin, k^lin (s) per row; the
    // encoder's Σ K^linᵀV (s, E) per stream.
    const size_t s = proj_.s, E = proj_.e;
    return batch * steps * (3 * E + 5 * s) + (proj_.causal ? 0 : batch * s * E);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override { proj_.Collect(out); }

  void Run(const float* x, size_t batch, size_t steps, float* const* states,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps, E = proj_.e, s = proj_.s;
    float* u = ctx.scratch;       // (rows, E)
    float* v = u + rows * E;      // (rows, E)
    float* o = v + rows * E;      // (rows, E)
    float* z = o + rows * E;      // (rows, s)
    float* qq = z + rows * s;     // (rows, s) Q^quad
    float* kq = qq + rows * s;    // (rows, s) K^quad
    float* ql = kq + rows * s;    // (rows, s) Q^lin
    float* kl = ql + rows * s;    // (rows, s) K^lin
    float* const qk[4] = {qq, kq, ql, kl};
    proj_.Project(x, rows, u, v, qk, z, ctx);
    rotation_.Apply(ctx, batch, steps, 1, s, {{qq, s}, {kq, s}, {ql, s}, {kl, s}});
    float* sums = kl + rows * s;  // encoder: (batch, s, E)
    ctx.pool->ParallelRanges(batch, 1, [&](size_t first, size_t last) {
      for (size_t b = first; b < last; ++b) {
        const size_t r0 = b * steps;
        if (proj_.causal) {
          Causal(qq + r0 * s, kq + r0 * s, ql + r0 * s, kl + r0 * s, v + r0 * E, steps,
                 ctx.positions[b], states[b], o + r0 * E);
        } else {
          Encode(qq + r0 * s, kq + r0 * s, ql + r0 * s, kl + r0 * s, v + r0 * E, steps,
                 sums + b * s * E, o + r0 * E);
        }
      }
    });
    proj_.Output(u, o, rows, y, ctx);  // out(U ⊙ (quad + lin))
  }

  static Status Create(const fb::Flash* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(
        GatedProjections<4>::Check(t, layer, "FLASH", "chunk", t->chunk()));
    auto m = std::make_unique<Flash>();
    m->c_ = t->chunk();
    RECUR_RETURN_IF_ERROR(
        Rotation::FromTable(t->rotary(), layer, "FLASH", t->qk_dim(), "qk_dim", tensors,
                            &m->rotation_));
    RECUR_RETURN_IF_ERROR(m->proj_.Load(t, layer, d_model, t->chunk(), tensors));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // relu(scale·a·b + bias)² for s-vectors a, b.
  float Weight(const float* a, const float* b, float bias) const {
    const float w = std::max(0.0f, proj_.scale * kernels::Dot(a, b, proj_.s) + bias);
    return w * w;
  }

  // One stream, positions p0 .. p0 + steps − 1 in order.
  void Causal(const float* qq, const float* kq, const float* ql, const float* kl, const float* v,
              size_t steps, size_t p0, float* state, float* o) const {
    const size_t E = proj_.e, s = proj_.s, C = c_;
    float* sum = state;                 // (s, E)
    float* kl_buf = sum + s * E;        // (C, s)
    float* kq_buf = kl_buf + C * s;     // (C, s)
    float* v_buf = kq_buf + C * s;      // (C, E)
    for (size_t t = 0; t < steps; ++t) {
      const size_t slot = (p0 + t) % C;
      std::memcpy(kq_buf + slot * s, kq + t * s, s * sizeof(float));
      std::memcpy(kl_buf + slot * s, kl + t * s, s * sizeof(float));
      std::memcpy(v_buf + slot * E, v + t * E, E * sizeof(float));
      float* out = o + t * E;
      // lin = scale · Q^lin_t · S (earlier chunks only: S is updated below).
      std::fill(out, out + E, 0.0f);
      for (size_t i = 0; i < s; ++i) {
        const float a = proj_.scale * ql[t * s + i];
        const float* row = sum + i * E;
        for (size_t e = 0; e < E; ++e) out[e] += a * row[e];
      }
      for (size_t p = 0; p <= slot; ++p) {  // the current chunk, up to t
        const float w = Weight(qq + t * s, kq_buf + p * s, proj_.rel_bias[slot - p]);
        if (w == 0.0f) continue;
        const float* vp = v_buf + p * E;
        for (size_t e = 0; e < E; ++e) out[e] += w * vp[e];
      }
      if (slot + 1 == C) {  // the chunk is complete: S += K^linᵀ V over its slots
        for (size_t p = 0; p < C; ++p) {
          for (size_t i = 0; i < s; ++i) {
            const float a = kl_buf[p * s + i];
            float* row = sum + i * E;
            const float* vp = v_buf + p * E;
            for (size_t e = 0; e < E; ++e) row[e] += a * vp[e];
          }
        }
      }
    }
  }

  // One stream's whole sequence.
  void Encode(const float* qq, const float* kq, const float* ql, const float* kl, const float* v,
              size_t steps, float* sum, float* o) const {
    const size_t E = proj_.e, s = proj_.s, C = c_;
    std::fill(sum, sum + s * E, 0.0f);
    for (size_t p = 0; p < steps; ++p) {
      for (size_t i = 0; i < s; ++i) {
        const float a = kl[p * s + i];
        for (size_t e = 0; e < E; ++e) sum[i * E + e] += a * v[p * E + e];
      }
    }
    const float inv_n = 1.0f / float(steps);
    for (size_t t = 0; t < steps; ++t) {
      float* out = o + t * E;
      std::fill(out, out + E, 0.0f);
      for (size_t i = 0; i < s; ++i) {
        const float a = ql[t * s + i] * inv_n;
        for (size_t e = 0; e < E; ++e) out[e] += a * sum[i * E + e];
      }
      const size_t g0 = t / C * C, g1 = std::min(steps, g0 + C);
      for (size_t p = g0; p < g1; ++p) {
        const float w = Weight(qq + t * s, kq + p * s, proj_.rel_bias[t + C - 1 - p]);
        if (w == 0.0f) continue;
        for (size_t e = 0; e < E; ++e) out[e] += w * v[p * E + e];
      }
    }
  }

  size_t c_ = 0;  // C
  Rotation rotation_;  // none unless the table has rotary (§12)
  GatedProjections<4> proj_;
};

}  // namespace

Status CreateFlash(const void* table, const std::string& layer, uint32_t d_model,
                   TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return Flash::Create(static_cast<const fb::Flash*>(table), layer, d_model, tensors, out);
}

}  // namespace recur::impl
