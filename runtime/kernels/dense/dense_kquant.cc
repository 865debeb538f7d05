// Dynamic dispatch for K-quant weights (dense_kquant-inl.h): DenseKQuant.
#include <cstdint>

#include "kernels/dense/dense.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense_kquant.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense_kquant-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

void DenseKQuantImpl(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                     size_t y_stride, bool accumulate) {
  KQuantDense(x, x_stride, batch, w, y, y_stride, accumulate);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(DenseKQuantImpl);

void DenseKQuant(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                 size_t y_stride, bool accumulate) {
  if (!IsKQuant(w.type)) return;
  HWY_DYNAMIC_DISPATCH(DenseKQuantImpl)(x, x_stride, batch, w, y, y_stride, accumulate);
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
