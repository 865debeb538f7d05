// Per-target rounding of activation rows to the values ggml multiplies f16
// and bf16 weights by (dense.h, "Block-quantised activations": to nearest,
// ties to even), for Int8Activations::kBlocks on such layers: the rounded
// rows then run the f32-activation kernels, or, for a step's f16 stream,
// are kept as f16 and widened as the weights are.
#if defined(RECUR_KERNELS_DENSE_DENSE_ROUNDED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_ROUNDED_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_ROUNDED_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_ROUNDED_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/common-inl.h"
#include "kernels/dense/dense-inl.h"  // ScratchRegion
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace dense_detail {

// Scratch for rounded activation rows (ScratchRegion).
HWY_INLINE float* RoundedScratch(size_t floats) {
  return ScratchRegion<&DenseScratch::rounded, &DenseScratch::rounded_floats>(floats);
}

// Floats RoundedScratch is asked for on `batch` rows of `in` inputs.
HWY_INLINE size_t RoundedScratchFloats(size_t batch, size_t in) {
  return RoundedActivationRows(batch, in) * in;
}

// Lanes of v rounded to bf16 values, ties to even (finite v; ±Inf past the
// range): the bit trick of ggml's GGML_FP32_TO_BF16, on every target.
template <class D>
HWY_INLINE hn::Vec<D> RoundToBf16(D d, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  auto u = hn::BitCast(du, v);
  const auto odd = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  u = hn::And(hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), odd)), hn::Set(du, 0xFFFF0000u));
  return hn::BitCast(d, u);
}

// dst[i] = x[i] rounded as `kind` (kF16 or kBF16) says, as f32, i < n.
template <class D>
HWY_INLINE void RoundRow(D d, ActivationBlocks kind, const float* HWY_RESTRICT x, size_t n,
                         float* HWY_RESTRICT dst) {
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  if (kind == ActivationBlocks::kBF16) {
    for (; i + N <= n; i += N) hn::StoreU(RoundToBf16(d, hn::LoadU(d, x + i)), d, dst + i);
  } else if constexpr (isa::kF16NarrowsToNearestEven) {
    const hn::Rebind<hwy::float16_t, D> dh;
    for (; i + N <= n; i += N) {
      hn::StoreU(hn::PromoteTo(d, hn::DemoteTo(dh, hn::LoadU(d, x + i))), d, dst + i);
    }
  }
  for (; i < n; ++i) dst[i] = ref::RoundActivation(kind, x[i]);
}

// dst[i] = x[i] rounded to f16, i < n (for the f16 stream, which widens it
// as it widens the weights).
template <class D>
HWY_INLINE void RoundRowToF16(D d, const float* HWY_RESTRICT x, size_t n,
                              hwy::float16_t* HWY_RESTRICT dst) {
  size_t i = 0;
  if constexpr (isa::kF16NarrowsToNearestEven) {
    const hn::Rebind<hwy::float16_t, D> dh;
    const size_t N = hn::Lanes(d);
    for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, x + i)), dh, dst + i);
  }
  for (; i < n; ++i) {
    const uint16_t bits = ref::F32ToF16Bits(x[i]);
    std::memcpy(&dst[i], &bits, sizeof(bits));
  }
  (void)d;
}

// `rows` rows of x (row stride x_stride) rounded into dst, row stride in.
template <class D>
HWY_INLINE void RoundRows(D d, ActivationBlocks kind, const float* x, size_t x_stride, size_t rows,
                          size_t in, float* dst) {
  for (size_t r = 0; r < rows; ++r) RoundRow(d, kind, x + r * x_stride, in, dst + r * in);
}

// Runs f(xr, b0, nb) over rows [0, batch) of x rounded as `kind` says, nb
// rows at a time (xr: those rows, row stride in): RoundedActivationRows
// rows a pass in the rounding scratch, or one row at a time on the stack
// where it has no room (in <= kDenseBlockQ8MaxIn).
template <class D, class F>
HWY_INLINE void ForRoundedRows(D d, ActivationBlocks kind, const float* x, size_t x_stride,
                               size_t batch, size_t in, const F& f) {
  const size_t pass = RoundedActivationRows(batch, in);
  if (float* xr = RoundedScratch(RoundedScratchFloats(batch, in))) {
    for (size_t b0 = 0; b0 < batch; b0 += pass) {
      const size_t nb = std::min(pass, batch - b0);
      RoundRows(d, kind, x + b0 * x_stride, x_stride, nb, in, xr);
      f(static_cast<const float*>(xr), b0, nb);
    }
    return;
  }
  HWY_DASSERT(in <= kDenseBlockQ8MaxIn);
  HWY_ALIGN float one[kDenseBlockQ8MaxIn];
  for (size_t b = 0; b < batch; ++b) {
    RoundRow(d, kind, x + b * x_stride, std::min(in, kDenseBlockQ8MaxIn), one);
    f(static_cast<const float*>(one), b, size_t{1});
  }
}

}  // namespace dense_detail

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_ROUNDED_INL_H_ toggle
