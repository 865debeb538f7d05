// Dynamic dispatch for the element-wise kernels in elementwise-inl.h.
#include "kernels/elementwise/elementwise.h"

#include "kernels/dispatch/target_limit.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/elementwise/elementwise.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/elementwise/elementwise-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

void ReluImpl(const float* x, float* y, size_t n) { Relu(x, y, n); }
void GeluImpl(const float* x, float* y, size_t n) { Gelu(x, y, n); }
void EluPlusOneImpl(const float* x, float* y, size_t n) { EluPlusOne(x, y, n); }
void SigmoidImpl(const float* x, float* y, size_t n) { Sigmoid(x, y, n); }
void SiluImpl(const float* x, float* y, size_t n) { Silu(x, y, n); }
void CausalConvSiluImpl(const float* const* in, const float* weight, const float* bias,
                        size_t kernel, float* y, size_t n) {
  CausalConvSilu(in, weight, bias, kernel, y, n);
}
void AffineExpImpl(const float* x, float a, float b, float* y, size_t n) {
  AffineExp(x, a, b, y, n);
}
void AffineMaxImpl(const float* x, float a, float b, float* m, size_t n) {
  AffineMax(x, a, b, m, n);
}
void AffineExpAccumulateImpl(const float* x, float a, float b, const float* m, const float* v,
                             float* num, float* den, size_t n) {
  AffineExpAccumulate(x, a, b, m, v, num, den, n);
}
void ScaleImpl(const float* x, float a, float* y, size_t n) { Scale(x, a, y, n); }
void AddImpl(const float* a, const float* b, float* y, size_t n) { Add(a, b, y, n); }
float QuantizeS8Impl(const float* x, int8_t* q, size_t n) { return QuantizeS8(x, q, n); }
void CompensatedAddImpl(const float* x, float* sum, float* comp, size_t n) {
  CompensatedAdd(x, sum, comp, n);
}
void LayerNormImpl(const float* x, const float* gamma, const float* beta, float eps, float* y,
                   size_t n) {
  LayerNorm(x, gamma, beta, eps, y, n);
}
void RmsNormImpl(const float* x, const float* gamma, float eps, float* y, size_t n) {
  RmsNorm(x, gamma, eps, y, n);
}
void SoftmaxImpl(const float* x, float* y, size_t n) { Softmax(x, y, n); }
void LogSoftmaxImpl(const float* x, float* y, size_t n) { LogSoftmax(x, y, n); }
float DotImpl(const float* x, const float* y, size_t n) { return Dot(x, y, n); }
const char* SimdTargetNameImpl() {
#if HWY_TARGET == HWY_AVX3
  if (Avx512VnniEnabled()) return kAvx3VnniName;
#endif
  return hwy::TargetName(HWY_TARGET);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(ReluImpl);
HWY_EXPORT(GeluImpl);
HWY_EXPORT(EluPlusOneImpl);
HWY_EXPORT(SigmoidImpl);
HWY_EXPORT(SiluImpl);
HWY_EXPORT(CausalConvSiluImpl);
HWY_EXPORT(AffineExpImpl);
HWY_EXPORT(AffineMaxImpl);
HWY_EXPORT(AffineExpAccumulateImpl);
HWY_EXPORT(ScaleImpl);
HWY_EXPORT(AddImpl);
HWY_EXPORT(QuantizeS8Impl);
HWY_EXPORT(CompensatedAddImpl);
HWY_EXPORT(LayerNormImpl);
HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(SoftmaxImpl);
HWY_EXPORT(LogSoftmaxImpl);
HWY_EXPORT(DotImpl);
HWY_EXPORT(SimdTargetNameImpl);

void Relu(const float* x, float* y, size_t n) { HWY_DYNAMIC_DISPATCH(ReluImpl)(x, y, n); }
void Gelu(const float* x, float* y, size_t n) { HWY_DYNAMIC_DISPATCH(GeluImpl)(x, y, n); }
void EluPlusOne(const float* x, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(EluPlusOneImpl)(x, y, n);
}
void Sigmoid(const float* x, float* y, size_t n) { HWY_DYNAMIC_DISPATCH(SigmoidImpl)(x, y, n); }
void Silu(const float* x, float* y, size_t n) { HWY_DYNAMIC_DISPATCH(SiluImpl)(x, y, n); }
void CausalConvSilu(const float* const* in, const float* weight, const float* bias, size_t kernel,
                    float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(CausalConvSiluImpl)(in, weight, bias, kernel, y, n);
}
void AffineExp(const float* x, float a, float b, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(AffineExpImpl)(x, a, b, y, n);
}
void AffineMax(const float* x, float a, float b, float* m, size_t n) {
  HWY_DYNAMIC_DISPATCH(AffineMaxImpl)(x, a, b, m, n);
}
void AffineExpAccumulate(const float* x, float a, float b, const float* m, const float* v,
                         float* num, float* den, size_t n) {
  HWY_DYNAMIC_DISPATCH(AffineExpAccumulateImpl)(x, a, b, m, v, num, den, n);
}
void Scale(const float* x, float a, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(ScaleImpl)(x, a, y, n);
}
void Add(const float* a, const float* b, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(AddImpl)(a, b, y, n);
}
float QuantizeS8(const float* x, int8_t* q, size_t n) {
  return HWY_DYNAMIC_DISPATCH(QuantizeS8Impl)(x, q, n);
}
void CompensatedAdd(const float* x, float* sum, float* comp, size_t n) {
  HWY_DYNAMIC_DISPATCH(CompensatedAddImpl)(x, sum, comp, n);
}
void LayerNorm(const float* x, const float* gamma, const float* beta, float eps, float* y,
               size_t n) {
  HWY_DYNAMIC_DISPATCH(LayerNormImpl)(x, gamma, beta, eps, y, n);
}
void RmsNorm(const float* x, const float* gamma, float eps, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, gamma, eps, y, n);
}
void Softmax(const float* x, float* y, size_t n) { HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, y, n); }
void LogSoftmax(const float* x, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(LogSoftmaxImpl)(x, y, n);
}
float Dot(const float* x, const float* y, size_t n) {
  return HWY_DYNAMIC_DISPATCH(DotImpl)(x, y, n);
}
const char* SimdTargetName() { return HWY_DYNAMIC_DISPATCH(SimdTargetNameImpl)(); }

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
