// Dynamic dispatch for Dense; the kernels are in dense-inl.h (f32) and
// dense_lowp-inl.h (f16, bf16, int8 weights).
#include "kernels/dense/dense.h"

#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense-inl.h"
#include "kernels/dense/dense_lowp-inl.h"
#include "kernels/dense/dense_packed-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::kernels {
namespace HWY_NAMESPACE {

void DenseImpl(const float* x, size_t x_stride, size_t batch, const float* w, const float* bias,
               size_t in, size_t out, float* y, size_t y_stride, bool accumulate) {
  Dense(x, x_stride, batch, w, bias, in, out, y, y_stride, accumulate);
}

void DenseNarrowImpl(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                     float* y, size_t y_stride, bool accumulate) {
  switch (w.type) {
    case WeightType::kF32:
      break;  // the f32 entry point handles these (see Dense below)
    case WeightType::kF16:
      DenseNarrow(x, x_stride, batch, static_cast<const hwy::float16_t*>(w.weight), nullptr,
                  w.bias, w.in, w.out, y, y_stride, accumulate);
      return;
    case WeightType::kBF16:
      DenseNarrow(x, x_stride, batch, static_cast<const hwy::bfloat16_t*>(w.weight), nullptr,
                  w.bias, w.in, w.out, y, y_stride, accumulate);
      return;
    case WeightType::kI8:
      DenseNarrow(x, x_stride, batch, static_cast<const int8_t*>(w.weight), w.scales, w.bias,
                  w.in, w.out, y, y_stride, accumulate);
      return;
  }
}

DenseScratch DenseScratchNeedImpl(size_t batch, size_t in, size_t out, WeightType type) {
  const hn::ScalableTag<float> d;
  switch (type) {
    case WeightType::kF32:
      break;
    case WeightType::kF16:
      return dense_detail::NarrowScratchNeed<hwy::float16_t>(d, batch, in, out);
    case WeightType::kBF16:
      return dense_detail::NarrowScratchNeed<hwy::bfloat16_t>(d, batch, in, out);
    case WeightType::kI8:
      return dense_detail::NarrowScratchNeed<int8_t>(d, batch, in, out);
  }
  DenseScratch need;
  if (batch != 0 && out != 0) need.panel_floats = dense_detail::PanelScratchFloats(d, batch, in, out);
  return need;
}

void PackDenseImpl(const DenseWeights& w, float* packed) { HWY_NAMESPACE::PackDense(w, packed); }

void DensePackedImpl(const float* x, size_t x_stride, size_t rows, const float* packed,
                     const float* bias, size_t in, size_t out, size_t panel_begin,
                     size_t panel_end, float* y, size_t y_stride, bool accumulate) {
  HWY_NAMESPACE::DensePacked(x, x_stride, rows, packed, bias, in, out, panel_begin, panel_end, y, y_stride,
              accumulate);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::kernels {

HWY_EXPORT(DenseImpl);
HWY_EXPORT(DenseNarrowImpl);
HWY_EXPORT(PackDenseImpl);
HWY_EXPORT(DensePackedImpl);
HWY_EXPORT(DenseScratchNeedImpl);

namespace {
thread_local const DenseScratch* t_bound_scratch = nullptr;
}  // namespace

DenseScratch DenseScratchNeed(size_t batch, size_t in, size_t out, WeightType type) {
  return HWY_DYNAMIC_DISPATCH(DenseScratchNeedImpl)(batch, in, out, type);
}

ScopedDenseScratch::ScopedDenseScratch(const DenseScratch* scratch)
    : previous_(t_bound_scratch), bound_(scratch != nullptr) {
  if (bound_) t_bound_scratch = scratch;
}

ScopedDenseScratch::~ScopedDenseScratch() {
  if (bound_) t_bound_scratch = previous_;
}

const DenseScratch* BoundDenseScratch() { return t_bound_scratch; }

void PackDense(const DenseWeights& w, float* packed) {
  HWY_DYNAMIC_DISPATCH(PackDenseImpl)(w, packed);
}

void DensePacked(const float* x, size_t x_stride, size_t rows, const float* packed,
                 const float* bias, size_t in, size_t out, size_t panel_begin, size_t panel_end,
                 float* y, size_t y_stride, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(DensePackedImpl)(x, x_stride, rows, packed, bias, in, out, panel_begin,
                                        panel_end, y, y_stride, accumulate);
}

void Dense(const float* x, size_t x_stride, size_t batch, const float* w, const float* bias,
           size_t in, size_t out, float* y, size_t y_stride, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(DenseImpl)(x, x_stride, batch, w, bias, in, out, y, y_stride, accumulate);
}

size_t WeightTypeSize(WeightType type) {
  switch (type) {
    case WeightType::kF32: return 4;
    case WeightType::kF16:
    case WeightType::kBF16: return 2;
    case WeightType::kI8: return 1;
  }
  return 0;
}

DenseWeights DenseWeights::Rows(size_t begin, size_t end) const {
  DenseWeights r = *this;
  r.weight = static_cast<const uint8_t*>(weight) + begin * in * WeightTypeSize(type);
  if (scales != nullptr) r.scales = scales + begin;
  if (bias != nullptr) r.bias = bias + begin;
  r.out = static_cast<uint32_t>(end - begin);
  return r;
}

void Dense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
           size_t y_stride, bool accumulate) {
  if (w.type == WeightType::kF32) {
    Dense(x, x_stride, batch, static_cast<const float*>(w.weight), w.bias, w.in, w.out, y,
          y_stride, accumulate);
    return;
  }
  HWY_DYNAMIC_DISPATCH(DenseNarrowImpl)(x, x_stride, batch, w, y, y_stride, accumulate);
}

}  // namespace recur::kernels
#endif  // HWY_ONCE
