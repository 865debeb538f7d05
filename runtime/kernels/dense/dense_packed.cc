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

void PackDenseImpl(const DenseWeights& w, float* packed) { HWY_NAMESPACE::PackDense(w, packed); }

void DensePackedImpl(const float* x, size_t x_stride, size_t rows, const float* packed,
                     const float* bias, size_t in, size_t out, size_t panel_begin,
                     size_t panel_end, float* y, size_t y_stride, bool accumulate) {
  HWY_NAMESPACE::DensePacked(x, x_stride, rows, packed, bias, in, out, panel_begin, panel_end, y,
                             y_stride, accumulate);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(PackDenseImpl);
HWY_EXPORT(DensePackedImpl);

void PackDense(const DenseWeights& w, float* packed) {
  HWY_DYNAMIC_DISPATCH(PackDenseImpl)(w, packed);
}

void DensePacked(const float* x, size_t x_stride, size_t rows, const float* packed,
                 const float* bias, size_t in, size_t out, size_t panel_begin, size_t panel_end,
                 float* y, size_t y_stride, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(DensePackedImpl)(x, x_stride, rows, packed, bias, in, out, panel_begin,
                                        panel_end, y, y_stride, accumulate);
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
