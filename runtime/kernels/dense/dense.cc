// Dynamic dispatch for Dense; the kernel itself is in dense-inl.h.
#include "kernels/dense/dense.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {

void DenseImpl(const float* x, size_t x_stride, size_t batch, const float* w, const float* bias,
               size_t in, size_t out, float* y, size_t y_stride, bool accumulate) {
  Dense(x, x_stride, batch, w, bias, in, out, y, y_stride, accumulate);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::kernels {

HWY_EXPORT(DenseImpl);

void Dense(const float* x, size_t x_stride, size_t batch, const float* w, const float* bias,
           size_t in, size_t out, float* y, size_t y_stride, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(DenseImpl)(x, x_stride, batch, w, bias, in, out, y, y_stride, accumulate);
}

}  // namespace recur::kernels
#endif  // HWY_ONCE
