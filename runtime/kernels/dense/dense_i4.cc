// Dynamic dispatch for int4 weights (dense_i4-inl.h): DenseI4Float,
// DenseI4Dot and DenseI4DotQuantized.
#include <cstdint>

#include "kernels/dense/dense.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense_i4.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense_i4-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

void DenseI4FloatImpl(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                      float* y, size_t y_stride, bool accumulate) {
  I4Float(x, x_stride, batch, w, y, y_stride, accumulate);
}

void DenseI4DotImpl(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                    float* y, size_t y_stride, bool accumulate) {
  I4Dot(x, x_stride, batch, w, y, y_stride, accumulate);
}

void DenseI4DotQuantizedImpl(const int8_t* q, size_t q_stride, const float* q_scales,
                             size_t batch, const DenseWeights& w, float* y, size_t y_stride,
                             bool accumulate) {
  I4DotQuantized(q, q_stride, q_scales, batch, w, y, y_stride, accumulate);
}

bool DenseI4DotPreferredImpl(size_t batch, size_t in, size_t out) {
  return I4DotPreferred(batch, in, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(DenseI4FloatImpl);
HWY_EXPORT(DenseI4DotImpl);
HWY_EXPORT(DenseI4DotQuantizedImpl);
HWY_EXPORT(DenseI4DotPreferredImpl);

bool DenseI4DotPreferred(size_t batch, size_t in, size_t out) {
  return HWY_DYNAMIC_DISPATCH(DenseI4DotPreferredImpl)(batch, in, out);
}

void DenseI4Float(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                  size_t y_stride, bool accumulate) {
  if (w.type != WeightType::kI4) return;
  HWY_DYNAMIC_DISPATCH(DenseI4FloatImpl)(x, x_stride, batch, w, y, y_stride, accumulate);
}

void DenseI4Dot(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                size_t y_stride, bool accumulate) {
  if (w.type != WeightType::kI4 || w.in > kDenseI4DotMaxIn) {
    Dense(x, x_stride, batch, w, y, y_stride, accumulate);
    return;
  }
  HWY_DYNAMIC_DISPATCH(DenseI4DotImpl)(x, x_stride, batch, w, y, y_stride, accumulate);
}

void DenseI4DotQuantized(const int8_t* q, size_t q_stride, const float* q_scales, size_t batch,
                         const DenseWeights& w, float* y, size_t y_stride, bool accumulate) {
  if (w.type != WeightType::kI4 || w.in > kDenseI4DotMaxIn) return;
  HWY_DYNAMIC_DISPATCH(DenseI4DotQuantizedImpl)(q, q_stride, q_scales, batch, w, y, y_stride,
                                                accumulate);
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
