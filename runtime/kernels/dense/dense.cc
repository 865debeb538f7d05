// Dynamic dispatch for the f32 Dense (dense-inl.h), the scratch binding and
// DenseWeights. The narrow-weight kernels with DenseScratchNeed and the
// DenseWeights entry point (dense_lowp.cc) and the packed GEMM
// (dense_packed.cc) are separate translation units: each is compiled once per
// Highway target, and one file holding all three took ~3.5 minutes to
// compile under ASan, the longest step of the sanitizer build.
#include "kernels/dense/dense.h"

#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

void DenseImpl(const float* x, size_t x_stride, size_t batch, const float* w, const float* bias,
               size_t in, size_t out, float* y, size_t y_stride, bool accumulate,
               bool from_memory) {
  Dense(x, x_stride, batch, w, bias, in, out, y, y_stride, accumulate, from_memory);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(DenseImpl);

namespace {
thread_local const DenseScratch* t_bound_scratch = nullptr;
}  // namespace

ScopedDenseScratch::ScopedDenseScratch(const DenseScratch* scratch)
    : previous_(t_bound_scratch), bound_(scratch != nullptr) {
  if (bound_) t_bound_scratch = scratch;
}

ScopedDenseScratch::~ScopedDenseScratch() {
  if (bound_) t_bound_scratch = previous_;
}

const DenseScratch* BoundDenseScratch() { return t_bound_scratch; }

void Dense(const float* x, size_t x_stride, size_t batch, const float* w, const float* bias,
           size_t in, size_t out, float* y, size_t y_stride, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(DenseImpl)
  (x, x_stride, batch, w, bias, in, out, y, y_stride, accumulate, false);
}

void DenseF32(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
              size_t y_stride, bool accumulate) {
  if (w.type != WeightType::kF32) return;
  HWY_DYNAMIC_DISPATCH(DenseImpl)
  (x, x_stride, batch, static_cast<const float*>(w.weight), w.bias, w.in, w.out, y, y_stride,
   accumulate, w.from_memory);
}

DenseWeights DenseWeights::Rows(size_t begin, size_t end) const {
  DenseWeights r = *this;
  r.weight = static_cast<const uint8_t*>(weight) + begin * WeightRowBytes(type, in);
  if (scales != nullptr) r.scales = scales + begin;
  if (group_scales != nullptr) r.group_scales = group_scales + begin * (in / group);
  if (bias != nullptr) r.bias = bias + begin;
  r.out = static_cast<uint32_t>(end - begin);
  return r;
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
