// Dynamic dispatch for Dense with weights stored an element at a time, f32
// aside (f16, bf16, int8: dense_lowp-inl.h), the DenseWeights entry point
// (int4: dense_i4.cc; K-quants: dense_kquant.cc), and the scratch each weight
// type needs (f32's from dense-inl.h, which dense_lowp-inl.h includes).
#include <cstdint>

#include "kernels/dense/dense.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense_lowp.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense_lowp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

void DenseNarrowImpl(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                     float* y, size_t y_stride, bool accumulate) {
  switch (w.type) {
    case WeightType::kF32:
      break;  // dense.cc (DenseF32, see Dense below)
    case WeightType::kF16:
      DenseNarrow<WeightType::kF16>(x, x_stride, batch, w, y, y_stride, accumulate);
      return;
    case WeightType::kBF16:
      DenseNarrow<WeightType::kBF16>(x, x_stride, batch, w, y, y_stride, accumulate);
      return;
    case WeightType::kI8:
      DenseNarrow<WeightType::kI8>(x, x_stride, batch, w, y, y_stride, accumulate);
      return;
    case WeightType::kQ8_0:
      DenseNarrow<WeightType::kQ8_0>(x, x_stride, batch, w, y, y_stride, accumulate);
      return;
    case WeightType::kI4:
      break;  // dense_i4.cc (see Dense below)
    case WeightType::kQ4_K:
    case WeightType::kQ6_K:
    case WeightType::kQ5_K:
      break;  // dense_kquant.cc (see Dense below)
  }
}

void DenseRoundedImpl(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                      float* y, size_t y_stride, bool accumulate) {
  if (w.type == WeightType::kF16) {
    DenseRounded<WeightType::kF16>(x, x_stride, batch, w, y, y_stride, accumulate);
  } else if (w.type == WeightType::kBF16) {
    DenseRounded<WeightType::kBF16>(x, x_stride, batch, w, y, y_stride, accumulate);
  }
}

DenseScratch WeightScratchNeed(size_t batch, size_t in, size_t out, WeightType type) {
  const hn::ScalableTag<float> d;
  switch (type) {
    case WeightType::kF32:
      break;
    case WeightType::kF16:
      return dense_detail::NarrowScratchNeed<WeightType::kF16>(d, batch, in, out);
    case WeightType::kBF16:
      return dense_detail::NarrowScratchNeed<WeightType::kBF16>(d, batch, in, out);
    case WeightType::kI8: {
      DenseScratch need = dense_detail::NarrowScratchNeed<WeightType::kI8>(d, batch, in, out);
      if (batch > 1 && in <= kDenseI8DotMaxIn) {
        need.widen_floats =
            std::max(need.widen_floats, dense_detail::QuantizedRowsFloats(batch, in));
      }
      return need;
    }
    case WeightType::kQ8_0:
      return dense_detail::NarrowScratchNeed<WeightType::kQ8_0>(d, batch, in, out);
    case WeightType::kI4: {  // f32 activations: decoded on the stack
      DenseScratch need;
      if (batch > 1 && in <= kDenseI4DotMaxIn) {
        need.widen_floats = dense_detail::QuantizedRowsFloats(batch, in, in / kI4Block);
      }
      return need;
    }
    case WeightType::kQ4_K:
    case WeightType::kQ6_K:
    case WeightType::kQ5_K:
      return dense_detail::WidenedScratchNeed(d, batch, in, out);
  }
  DenseScratch need;
  if (batch != 0 && out != 0) need.panel_floats = dense_detail::PanelScratchFloats(d, batch, in, out);
  return need;
}

DenseScratch DenseScratchNeedImpl(size_t batch, size_t in, size_t out, WeightType type,
                                  Int8Activations int8) {
  DenseScratch need = WeightScratchNeed(batch, in, out, type);
  if (int8 == Int8Activations::kBlocks && RoundsActivations(ActivationBlocksOf(type, 0)) &&
      in <= kDenseBlockQ8MaxIn && out != 0) {
    need.rounded_floats = dense_detail::RoundedScratchFloats(batch, in);
  }
  return need;
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(DenseNarrowImpl);
HWY_EXPORT(DenseRoundedImpl);
HWY_EXPORT(DenseScratchNeedImpl);

DenseScratch DenseScratchNeed(size_t batch, size_t in, size_t out, WeightType type,
                              Int8Activations int8) {
  return HWY_DYNAMIC_DISPATCH(DenseScratchNeedImpl)(batch, in, out, type, int8);
}

void DenseRoundedActivations(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                             float* y, size_t y_stride, bool accumulate) {
  if (!RoundsActivations(ActivationBlocksOf(w.type, w.group)) || w.in > kDenseBlockQ8MaxIn) {
    Dense(x, x_stride, batch, w, y, y_stride, accumulate);
    return;
  }
  HWY_DYNAMIC_DISPATCH(DenseRoundedImpl)(x, x_stride, batch, w, y, y_stride, accumulate);
}

void Dense(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
           size_t y_stride, bool accumulate) {
  switch (w.type) {  // no default: a type without a case is a -Wswitch warning
    case WeightType::kF32:
      DenseF32(x, x_stride, batch, w, y, y_stride, accumulate);
      return;
    case WeightType::kF16:
    case WeightType::kBF16:
    case WeightType::kI8:
    case WeightType::kQ8_0:
      HWY_DYNAMIC_DISPATCH(DenseNarrowImpl)(x, x_stride, batch, w, y, y_stride, accumulate);
      return;
    case WeightType::kI4:
      DenseI4Float(x, x_stride, batch, w, y, y_stride, accumulate);
      return;
    case WeightType::kQ4_K:
    case WeightType::kQ6_K:
    case WeightType::kQ5_K:
      DenseKQuant(x, x_stride, batch, w, y, y_stride, accumulate);
      return;
  }
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
