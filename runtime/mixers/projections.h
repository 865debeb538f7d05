// What the attention-style mixers share: their shape checks, the query, key,
// value and output projections (tensors <layer>.mixer.{query,key,value,
// out}.{weight,bias}) and GAU/FLASH's gated projections.
#ifndef RECUR_MIXERS_PROJECTIONS_H_
#define RECUR_MIXERS_PROJECTIONS_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/dense_op.h"
#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"

namespace recur::impl {

// heads, dk, dv > 0 and heads·dk, heads·dv ≤ kMaxWidth; `what` names the
// mixer in the message ("softmax attention").
inline Status CheckHeads(const std::string& layer, const char* what, uint32_t heads, uint32_t dk,
                         uint32_t dv) {
  if (heads == 0 || dk == 0 || dv == 0) {
    return InvalidModel("%s: %s needs heads, dk, dv > 0 (got %u, %u, %u)", layer.c_str(), what,
                        heads, dk, dv);
  }
  if (uint64_t{heads} * dk > kMaxWidth || uint64_t{heads} * dv > kMaxWidth) {
    return InvalidModel("%s: heads x dk and heads x dv must be <= %u", layer.c_str(),
                        kMaxWidth);
  }
  return Status::Ok();
}

struct QkvoProjections {
  DenseView query, key, value, out;
  size_t qk_width = 0, v_width = 0;

  // query, key [qk_width, d_model]; value [v_width, d_model]; out [d_model, v_width].
  template <class Table>
  Status Load(const Table* t, const std::string& layer, uint32_t d_model, uint32_t qk_width,
              uint32_t v_width, TensorResolver* tensors) {
    this->qk_width = qk_width;
    this->v_width = v_width;
    const std::string prefix = layer + ".mixer.";
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->query(), prefix + "query", qk_width, d_model, &query));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->key(), prefix + "key", qk_width, d_model, &key));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->value(), prefix + "value", v_width, d_model, &value));
    return tensors->GetDense(t->out(), prefix + "out", d_model, v_width, &out);
  }

  void Collect(std::vector<const DenseView*>* layers) const {
    for (const DenseView* d : {&query, &key, &value, &out}) layers->push_back(d);
  }

  // q, k, v = x·Wᵀ + b over `rows` rows of x.
  void Project(const float* x, size_t rows, float* q, float* k, float* v,
               const StepContext& ctx) const {
    RunDense(query, x, rows, q, false, ctx.pool, ctx.dense);
    RunDense(key, x, rows, k, false, ctx.pool, ctx.dense);
    RunDense(value, x, rows, v, false, ctx.pool, ctx.dense);
  }
  // The projected rows at the front of a call's scratch: q, k (rows, qk_width),
  // v and the attention output o (rows, v_width); `rest` is the scratch after them.
  struct Rows {
    float *q, *k, *v, *o, *rest;
  };
  // Carves Rows from ctx.scratch and projects `rows` rows of x into q, k, v.
  Rows ProjectRows(const float* x, size_t rows, const StepContext& ctx) const {
    Rows r;
    r.q = ctx.scratch;
    r.k = r.q + rows * qk_width;
    r.v = r.k + rows * qk_width;
    r.o = r.v + rows * v_width;
    r.rest = r.o + rows * v_width;
    Project(x, rows, r.q, r.k, r.v, ctx);
    return r;
  }
  // y = o·W_outᵀ + b.
  void Output(const float* o, size_t rows, float* y, const StepContext& ctx) const {
    RunDense(out, o, rows, y, false, ctx.pool, ctx.dense);
  }
};

// GAU and FLASH (docs/attention-math.md §6): U, V = silu(x W_u|v + b) (E),
// Z = silu(x W_z + b) (s), then kRows per-dim scale/offset rows
// qk_r = qk_gamma[r] ⊙ Z + qk_beta[r]; the output is out(U ⊙ o). Also what
// else they share: the relu² scale, causality and the relative bias over
// offsets below `length` (FLASH's chunk, GAU's max_length).
template <size_t kRows>
struct GatedProjections {
  DenseView u_proj, v_proj, z_proj, out;
  const float* gamma = nullptr;     // (kRows, s)
  const float* beta = nullptr;      // (kRows, s)
  const float* rel_bias = nullptr;  // (length) causal, (2·length − 1) non-causal
  size_t e = 0, s = 0;
  float scale = 1.0f;
  bool causal = true;

  // expansion_dim, qk_dim in [1, kMaxWidth], the position bound
  // (`length_name`: FLASH's chunk, GAU's max_length) in [1, 65536], and a
  // finite nonzero scale; `what` names the mixer in messages.
  template <class Table>
  static Status Check(const Table* t, const std::string& layer, const char* what,
                      const char* length_name, uint32_t length) {
    constexpr uint32_t kMaxLength = 1u << 16;
    if (t->expansion_dim() == 0 || t->qk_dim() == 0 || length == 0 ||
        t->expansion_dim() > kMaxWidth || t->qk_dim() > kMaxWidth ||
        length > kMaxLength) {
      return InvalidModel("%s: %s needs expansion_dim and qk_dim in [1, %u] and %s in [1, %u] "
                          "(got %u, %u, %u)", layer.c_str(), what, kMaxWidth, length_name,
                          kMaxLength, t->expansion_dim(), t->qk_dim(), length);
    }
    if (!(std::isfinite(t->scale()) && t->scale() > 0.0f)) {  // > 0, as the reference
      return InvalidModel("%s: %s scale must be finite and positive (got %g)", layer.c_str(), what,
                          double(t->scale()));
    }
    return Status::Ok();
  }

  template <class Table>
  Status Load(const Table* t, const std::string& layer, uint32_t d_model, uint32_t length,
              TensorResolver* tensors) {
    e = t->expansion_dim();
    s = t->qk_dim();
    scale = t->scale();
    causal = t->causal();
    const std::string prefix = layer + ".mixer.";
    const auto E = uint32_t(e), S = uint32_t(s);
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->u_proj(), prefix + "u_proj", E, d_model, &u_proj));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->v_proj(), prefix + "v_proj", E, d_model, &v_proj));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->z_proj(), prefix + "z_proj", S, d_model, &z_proj));
    RECUR_RETURN_IF_ERROR(tensors->GetDense(t->out(), prefix + "out", d_model, E, &out));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->qk_gamma(), (prefix + "qk_gamma").c_str(),
                                       {int64_t(kRows), int64_t(S)}, false, &gamma));
    RECUR_RETURN_IF_ERROR(tensors->Get(t->qk_beta(), (prefix + "qk_beta").c_str(),
                                       {int64_t(kRows), int64_t(S)}, false, &beta));
    const int64_t offsets = causal ? int64_t(length) : 2 * int64_t(length) - 1;
    return tensors->Get(t->rel_bias(), (prefix + "rel_bias").c_str(), {offsets}, false, &rel_bias);
  }

  void Collect(std::vector<const DenseView*>* layers) const {
    for (const DenseView* d : {&u_proj, &v_proj, &z_proj, &out}) layers->push_back(d);
  }

  // u, v (rows, E); qk[r] (rows, s); z: scratch (rows, s).
  void Project(const float* x, size_t rows, float* u, float* v, float* const* qk, float* z,
               const StepContext& ctx) const {
    RunDense(u_proj, x, rows, u, false, ctx.pool, ctx.dense);
    RunDense(v_proj, x, rows, v, false, ctx.pool, ctx.dense);
    RunDense(z_proj, x, rows, z, false, ctx.pool, ctx.dense);
    kernels::Silu(u, u, rows * e);
    kernels::Silu(v, v, rows * e);
    kernels::Silu(z, z, rows * s);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t k = 0; k < kRows; ++k) {
        for (size_t i = 0; i < s; ++i) {
          qk[k][r * s + i] = gamma[k * s + i] * z[r * s + i] + beta[k * s + i];
        }
      }
    }
  }

  // y = out(U ⊙ o); o (rows, E) is overwritten.
  void Output(const float* u, float* o, size_t rows, float* y, const StepContext& ctx) const {
    for (size_t i = 0; i < rows * e; ++i) o[i] *= u[i];
    RunDense(out, o, rows, y, false, ctx.pool, ctx.dense);
  }
};

}  // namespace recur::impl

#endif  // RECUR_MIXERS_PROJECTIONS_H_
