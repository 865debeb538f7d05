#include "model/model.h"

namespace recur {

StepCost EstimateStepCost(const Model& m) {
  StepCost cost;
  const auto* tensors = m.root->tensors();
  const int32_t embedding = m.root->input()->embedding();
  const int32_t positions = m.root->input()->positions();
  for (uint32_t i = 0; i < tensors->size(); ++i) {
    // Dense weights are the rank-2 tensors; a step reads one row of the
    // embedding and position tables only.
    const fb::Tensor* t = tensors->Get(i);
    if (t->shape()->size() != 2 || int32_t(i) == embedding || int32_t(i) == positions) continue;
    cost.weight_bytes += t->size();
    cost.flops += 2 * uint64_t(t->shape()->Get(0)) * uint64_t(t->shape()->Get(1));
  }
  return cost;
}

}  // namespace recur
