// What the attention-style mixers share: their shape checks and the query,
// key, value and output projections (tensors <layer>.mixer.{query,key,value,
// out}.{weight,bias}).
#ifndef RECUR_MIXERS_PROJECTIONS_H_
#define RECUR_MIXERS_PROJECTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/dense_op.h"
#include "mixers/mixer.h"

namespace recur {

// Bounds widths so that products of dimensions cannot overflow 32 bits.
inline constexpr uint32_t kMaxMixerWidth = 1u << 20;

// heads, dk, dv > 0 and heads·dk, heads·dv ≤ kMaxMixerWidth; `what` names the
// mixer in the message ("softmax attention").
inline Status CheckHeads(const std::string& layer, const char* what, uint32_t heads, uint32_t dk,
                         uint32_t dv) {
  if (heads == 0 || dk == 0 || dv == 0) {
    return InvalidModel("%s: %s needs heads, dk, dv > 0 (got %u, %u, %u)", layer.c_str(), what,
                        heads, dk, dv);
  }
  if (uint64_t{heads} * dk > kMaxMixerWidth || uint64_t{heads} * dv > kMaxMixerWidth) {
    return InvalidModel("%s: heads x dk and heads x dv must be <= %u", layer.c_str(),
                        kMaxMixerWidth);
  }
  return Status::Ok();
}

struct QkvoProjections {
  DenseView query, key, value, out;

  // query, key [qk_width, d_model]; value [v_width, d_model]; out [d_model, v_width].
  template <class Table>
  Status Load(const Table* t, const std::string& layer, uint32_t d_model, uint32_t qk_width,
              uint32_t v_width, TensorResolver* tensors) {
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
  // y = o·W_outᵀ + b.
  void Output(const float* o, size_t rows, float* y, const StepContext& ctx) const {
    RunDense(out, o, rows, y, false, ctx.pool, ctx.dense);
  }
};

}  // namespace recur

#endif  // RECUR_MIXERS_PROJECTIONS_H_
