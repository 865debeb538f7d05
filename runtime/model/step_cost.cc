#include "kernels/dense/dense.h"
#include "model/model.h"

namespace recur::impl {

StepCost EstimateStepCost(const Model& m) {
  StepCost cost;
  const auto* tensors = m.root->tensors();
  const int32_t positions = m.root->input()->positions();
  // A head tied to the embedding is one tensor: the head's reads count.
  const int32_t head = m.root->head() != nullptr ? m.root->head()->dense()->weight() : -1;
  const int32_t embedding = m.root->input()->embedding() == head ? -1 : m.root->input()->embedding();
  for (uint32_t i = 0; i < tensors->size(); ++i) {
    // Dense weights are the rank-2 tensors; a step reads one row of the
    // embedding and position tables only.
    const fb::Tensor* t = tensors->Get(i);
    if (t->shape()->size() != 2 || int32_t(i) == embedding || int32_t(i) == positions) continue;
    cost.weight_bytes += t->size();
    // Quantisation scales are read with their weights (int4: one per group).
    if (const fb::Quantization* q = t->quant()) {
      if (q->scales()) cost.weight_bytes += uint64_t{q->scales()->size()} * sizeof(float);
      if (q->scales_f16()) cost.weight_bytes += uint64_t{q->scales_f16()->size()} * 2;
    }
    const uint64_t flops = 2 * uint64_t(t->shape()->Get(0)) * uint64_t(t->shape()->Get(1));
    cost.flops += flops;
    kernels::WeightType type;
    if (WeightTypeOf(t->dtype(), &type) && kernels::HasIntegerDot(type)) {
      cost.integer_flops += flops;
    }
  }
  return cost;
}

}  // namespace recur::impl
