// Dynamic dispatch for block-quantised activations (dense_blockq-inl.h):
// DenseBlockQ8.
#include <cstdint>

#include "kernels/dense/dense.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense_blockq.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense_blockq-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

void DenseBlockQ8Impl(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                      float* y, size_t y_stride, bool accumulate) {
  BlockQ8Dense(x, x_stride, batch, w, y, y_stride, accumulate);
}

bool DenseBlockQ8PreferredImpl(WeightType type, size_t batch) {
#if RECUR_ISA_AVX3
  if (blockq_gemm::Takes(type, batch)) return true;
#endif
  return RECUR_ISA_AVX2 && batch == 1 && (type == WeightType::kQ4_K || type == WeightType::kQ6_K);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(DenseBlockQ8Impl);
HWY_EXPORT(DenseBlockQ8PreferredImpl);

bool DenseBlockQ8Preferred(WeightType type, size_t batch) {
  return HWY_DYNAMIC_DISPATCH(DenseBlockQ8PreferredImpl)(type, batch);
}

bool RunsBlockQ8(WeightType type, uint32_t group, size_t in, Int8Activations int8,
                 size_t batch) {
  if (ActivationBlocksOf(type, group) == ActivationBlocks::kNone || in > kDenseBlockQ8MaxIn) {
    return false;
  }
  if (int8 == Int8Activations::kBlocks) return true;
  return IsKQuant(type) && int8 != Int8Activations::kFloat && DenseBlockQ8Preferred(type, batch);
}

void DenseBlockQ8(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                  size_t y_stride, bool accumulate) {
  if (ActivationBlocksOf(w.type, w.group) == ActivationBlocks::kNone || w.in > kDenseBlockQ8MaxIn) {
    Dense(x, x_stride, batch, w, y, y_stride, accumulate);
    return;
  }
  HWY_DYNAMIC_DISPATCH(DenseBlockQ8Impl)(x, x_stride, batch, w, y, y_stride, accumulate);
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
