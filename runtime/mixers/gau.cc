// GAU, the gated attention unit (docs/attention-math.md §6; the exact math is in
// runtime/schema/recur.fbs, table Gau): one head of relu² attention with a
// learned relative bias over absolute positions below max_length, gated by
// U. No normaliser, so no fixed-size summary: the causal state is the K and
// V of every position so far, bounded by max_length (the session clamps its
// max_context to it). length_scale (FLASH-pytorch's GAU): an encoder dividing
// the scores by the sequence's length N, with the mask p ≤ t when causal.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"
#include "mixers/projections.h"

namespace recur::impl {
namespace {

class Gau final : public Mixer {
 public:
  bool causal() const override { return proj_.causal && !length_scale_; }
  size_t max_sequence() const override { return t_max_; }
  // K (max_context, s) then V (max_context, E).
  size_t state_floats() const override { return 0; }
  size_t state_floats_per_position() const override { return causal() ? proj_.s + proj_.e : 0; }

  size_t scratch_floats(size_t batch, size_t steps, size_t /*threads*/,
                        size_t /*context*/) const override {
    // u, v, o (E) and z, q, k (s) per row.
    return batch * steps * (3 * proj_.e + 3 * proj_.s);
  }

  void CollectDense(std::vector<const DenseView*>* out) const override { proj_.Collect(out); }

  void Run(const float* x, size_t batch, size_t steps, float* const* states,
           const StepContext& ctx, float* y) const override {
    const size_t rows = batch * steps, E = proj_.e, s = proj_.s;
    float* u = ctx.scratch;   // (rows, E)
    float* v = u + rows * E;  // (rows, E)
    float* o = v + rows * E;  // (rows, E)
    float* z = o + rows * E;  // (rows, s)
    float* q = z + rows * s;  // (rows, s)
    float* k = q + rows * s;  // (rows, s)
    float* const qk[2] = {q, k};
    proj_.Project(x, rows, u, v, qk, z, ctx);
    ctx.pool->ParallelRanges(batch, 1, [&](size_t first, size_t last) {
      for (size_t b = first; b < last; ++b) {
        const size_t r0 = b * steps;
        if (causal()) {
          // Append this call's K, V to the cache, then attend over it.
          float* ks = states[b];                     // (max_context, s)
          float* vs = ks + ctx.max_context * s;      // (max_context, E)
          const size_t p0 = ctx.positions[b];
          std::memcpy(ks + p0 * s, k + r0 * s, steps * s * sizeof(float));
          std::memcpy(vs + p0 * E, v + r0 * E, steps * E * sizeof(float));
          for (size_t t = 0; t < steps; ++t) {
            const size_t pos = p0 + t;
            Attend(q + (r0 + t) * s, ks, vs, pos + 1, proj_.rel_bias + pos, 1.0f,
                   o + (r0 + t) * E);
          }
        } else if (proj_.causal) {
          // length_scale with the mask: p ≤ t, rel_bias[t − p], scores / N.
          for (size_t t = 0; t < steps; ++t) {
            Attend(q + (r0 + t) * s, k + r0 * s, v + r0 * E, t + 1, proj_.rel_bias + t,
                   float(steps), o + (r0 + t) * E);
          }
        } else {
          for (size_t t = 0; t < steps; ++t) {
            // rel_bias[t − p + T − 1] for p = 0 .. steps − 1.
            Attend(q + (r0 + t) * s, k + r0 * s, v + r0 * E, steps,
                   proj_.rel_bias + t + t_max_ - 1, length_scale_ ? float(steps) : 1.0f,
                   o + (r0 + t) * E);
          }
        }
      }
    });
    proj_.Output(u, o, rows, y, ctx);  // out(U ⊙ A V)
  }

  static Status Create(const fb::Gau* t, const std::string& layer, uint32_t d_model,
                       TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
    RECUR_RETURN_IF_ERROR(
        GatedProjections<2>::Check(t, layer, "GAU", "max_length", t->max_length()));
    auto m = std::make_unique<Gau>();
    m->t_max_ = t->max_length();
    m->length_scale_ = t->length_scale();
    RECUR_RETURN_IF_ERROR(m->proj_.Load(t, layer, d_model, t->max_length(), tensors));
    *out = std::move(m);
    return Status::Ok();
  }

 private:
  // o = Σ_{p<n} relu((scale·q·K_p + bias[−p])/div)² V_p: `bias` points at the
  // bias of p = 0 and the offset falls by one per key (rel_bias[t − p …]);
  // div is 1, or N with length_scale.
  void Attend(const float* q, const float* keys, const float* values, size_t n,
              const float* bias, float div, float* o) const {
    const size_t E = proj_.e, s = proj_.s;
    std::fill(o, o + E, 0.0f);
    for (size_t p = 0; p < n; ++p) {
      const float a =
          std::max(0.0f, (proj_.scale * kernels::Dot(q, keys + p * s, s) + *(bias - p)) / div);
      if (a == 0.0f) continue;
      const float w = a * a;
      const float* vp = values + p * E;
      for (size_t e = 0; e < E; ++e) o[e] += w * vp[e];
    }
  }

  size_t t_max_ = 0;  // T
  bool length_scale_ = false;
  GatedProjections<2> proj_;
};

}  // namespace

Status CreateGau(const void* table, const std::string& layer, uint32_t d_model,
                 TensorResolver* tensors, std::unique_ptr<Mixer>* out) {
  return Gau::Create(static_cast<const fb::Gau*>(table), layer, d_model, tensors, out);
}

}  // namespace recur::impl
