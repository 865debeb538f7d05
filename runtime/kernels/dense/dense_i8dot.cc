// Dynamic dispatch for DenseI8Dot (dense_i8dot-inl.h) and the Dense entry
// point that chooses how int8 weights run (dense.h).
#include <cstdint>

#include "kernels/dense/dense.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense_i8dot.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense_i8dot-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

void DenseI8DotImpl(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                    float* y, size_t y_stride, bool accumulate) {
  DenseI8Dot(x, x_stride, batch, static_cast<const int8_t*>(w.weight), w.scales, w.bias, w.in,
             w.out, y, y_stride, accumulate);
}

void DenseI8DotQuantizedImpl(const int8_t* q, size_t q_stride, const float* q_scales,
                             size_t batch, const DenseWeights& w, float* y, size_t y_stride,
                             bool accumulate) {
  DenseI8DotQuantized(q, q_stride, q_scales, batch, static_cast<const int8_t*>(w.weight),
                      w.scales, w.bias, w.in, w.out, y, y_stride, accumulate);
}

bool DenseI8DotPreferredImpl(size_t batch, size_t in, size_t out) {
  return DenseI8DotPreferred(batch, in, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(DenseI8DotImpl);
HWY_EXPORT(DenseI8DotQuantizedImpl);
HWY_EXPORT(DenseI8DotPreferredImpl);

bool DenseI8DotPreferred(size_t batch, size_t in, size_t out) {
  return HWY_DYNAMIC_DISPATCH(DenseI8DotPreferredImpl)(batch, in, out);
}

void DenseI8Dot(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                size_t y_stride, bool accumulate) {
  if (w.type != WeightType::kI8 || w.in > kDenseI8DotMaxIn) {
    Dense(x, x_stride, batch, w, y, y_stride, accumulate);
    return;
  }
  HWY_DYNAMIC_DISPATCH(DenseI8DotImpl)(x, x_stride, batch, w, y, y_stride, accumulate);
}

void DenseI8DotQuantized(const int8_t* q, size_t q_stride, const float* q_scales, size_t batch,
                         const DenseWeights& w, float* y, size_t y_stride, bool accumulate) {
  if (w.type != WeightType::kI8 || w.in > kDenseI8DotMaxIn) return;
  HWY_DYNAMIC_DISPATCH(DenseI8DotQuantizedImpl)(q, q_stride, q_scales, batch, w, y, y_stride,
                                                accumulate);
}

void Dense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
           size_t y_stride, bool accumulate, Int8Activations int8) {
  if (RunsBlockQ8(w.type, w.group, w.in, int8, batch)) {
    DenseBlockQ8(x, x_stride, batch, w, y, y_stride, accumulate);
    return;
  }
  if (w.type == WeightType::kI4) {
    if (int8 == Int8Activations::kQuantized ||
        (int8 == Int8Activations::kAuto && DenseI4DotPreferred(batch, w.in, w.out))) {
      DenseI4Dot(x, x_stride, batch, w, y, y_stride, accumulate);
    } else {
      Dense(x, x_stride, batch, w, y, y_stride, accumulate);
    }
    return;
  }
  const bool quantize =
      w.type == WeightType::kI8 &&
      (int8 == Int8Activations::kQuantized || int8 == Int8Activations::kBlocks ||
       (int8 == Int8Activations::kAuto && DenseI8DotPreferred(batch, w.in, w.out)));
  if (quantize) {
    DenseI8Dot(x, x_stride, batch, w, y, y_stride, accumulate);
  } else {
    Dense(x, x_stride, batch, w, y, y_stride, accumulate);
  }
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
