// Dynamic dispatch for the packed-weight GEMM (dense_packed-inl.h).
#include <cstdint>

#include "kernels/dense/dense.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense_packed.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense_packed-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

// Calls f with a value of the panels' element type: f16 or bf16 where
// panel_type names them, else f32.
template <class F>
void WithPanelElement(WeightType panel_type, const F& f) {
  if (panel_type == WeightType::kF16) return f(hwy::float16_t());
  if (panel_type == WeightType::kBF16) return f(hwy::bfloat16_t());
  f(0.0f);
}

void PackDenseImpl(const DenseWeights& w, WeightType panel_type, void* packed) {
  WithPanelElement(panel_type, [&](auto element) {
    HWY_NAMESPACE::PackDense(w, static_cast<decltype(element)*>(packed));
  });
}

void DensePackedImpl(const float* x, size_t x_stride, size_t rows, const void* packed,
                     WeightType panel_type, const float* bias, size_t in, size_t out,
                     size_t panel_begin, size_t panel_end, float* y, size_t y_stride,
                     bool accumulate, ActivationBlocks rounding) {
  WithPanelElement(panel_type, [&](auto element) {
    HWY_NAMESPACE::DensePacked(x, x_stride, rows, static_cast<const decltype(element)*>(packed),
                               bias, in, out, panel_begin, panel_end, y, y_stride, accumulate,
                               rounding);
  });
}

bool DenseNarrowPanelsPreferredImpl() { return isa::kF16WidensInOneInstruction; }

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(PackDenseImpl);
HWY_EXPORT(DensePackedImpl);
HWY_EXPORT(DenseNarrowPanelsPreferredImpl);

void PackDense(const DenseWeights& w, WeightType panel_type, void* packed) {
  HWY_DASSERT(panel_type == WeightType::kF32 ||
              (panel_type == w.type && PanelsMayKeepType(w.type)));
  HWY_DYNAMIC_DISPATCH(PackDenseImpl)(w, panel_type, packed);
}

void DensePacked(const float* x, size_t x_stride, size_t rows, const void* packed,
                 WeightType panel_type, const float* bias, size_t in, size_t out,
                 size_t panel_begin, size_t panel_end, float* y, size_t y_stride, bool accumulate,
                 ActivationBlocks rounding) {
  HWY_DASSERT(!RoundsActivations(rounding) || in <= kDenseBlockQ8MaxIn);
  HWY_DYNAMIC_DISPATCH(DensePackedImpl)
  (x, x_stride, rows, packed, panel_type, bias, in, out, panel_begin, panel_end, y, y_stride,
   accumulate, rounding);
}

bool DenseNarrowPanelsPreferred() { return HWY_DYNAMIC_DISPATCH(DenseNarrowPanelsPreferredImpl)(); }

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
