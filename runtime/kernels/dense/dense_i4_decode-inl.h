// Per-target decoding of int4 weights (kI4, dense.h) to f32: a row's group
// scales and its 32-input blocks. Shared by the int4 kernels (dense_i4-inl.h)
// and DecodeWeightRows (dense_decode.cc); everything here is inline, so any
// number of translation units may include it.
#if defined(RECUR_KERNELS_DENSE_DENSE_I4_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_DENSE_DENSE_I4_DECODE_INL_H_
#undef RECUR_KERNELS_DENSE_DENSE_I4_DECODE_INL_H_
#else
#define RECUR_KERNELS_DENSE_DENSE_I4_DECODE_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/dense/dense.h"
#include "kernels/dense/dense_ref.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace i4_detail {

inline constexpr size_t kBlockBytes = kI4Block / 2;  // 16

// dst[k] = scale bits src[k] as f32, k < n.
HWY_INLINE void DecodeScales(const uint16_t* HWY_RESTRICT src, size_t n,
                             float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const size_t N = hn::Lanes(df);
  const auto* h = reinterpret_cast<const hwy::float16_t*>(src);
  size_t k = 0;
  for (; k + N <= n; k += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, h + k)), df, dst + k);
  // A tile's scales are often fewer than a full vector (4 rows of 256 inputs
  // in groups of 128: 8; AVX-512 holds 16): 4 at a time, then scalar (which
  // is slow: ldexpf).
  const hn::CappedTag<float, 4> d4;
  const hn::Rebind<hwy::float16_t, decltype(d4)> dh4;
  const size_t N4 = hn::Lanes(d4);
  for (; k + N4 <= n; k += N4) {
    hn::StoreU(hn::PromoteTo(d4, hn::LoadU(dh4, h + k)), d4, dst + k);
  }
  for (; k < n; ++k) dst[k] = ref::F16ToF32(src[k]);
}

// dst[k] = scale·(n − 8) for the nibbles n of `bytes` (bytes / 16 blocks;
// block layout as kI4Block says).
HWY_INLINE void DecodeBlocks(const uint8_t* HWY_RESTRICT bytes, size_t blocks, float scale,
                             float* HWY_RESTRICT dst) {
  const hn::CappedTag<float, kBlockBytes> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> du8;
  const size_t N = hn::Lanes(df);
  const auto s = hn::Set(df, scale), eight = hn::Set(df, 8.0f);
  const auto mask = hn::Set(du8, uint8_t{0x0F});
  for (size_t k = 0; k < blocks; ++k) {
    const uint8_t* p = bytes + k * kBlockBytes;
    float* out = dst + k * kI4Block;
    for (size_t j = 0; j < kBlockBytes; j += N) {
      const auto v = hn::LoadU(du8, p + j);
      const auto lo = hn::ConvertTo(df, hn::PromoteTo(di, hn::And(v, mask)));
      const auto hi = hn::ConvertTo(df, hn::PromoteTo(di, hn::ShiftRight<4>(v)));
      hn::StoreU(hn::Mul(hn::Sub(lo, eight), s), df, out + j);
      hn::StoreU(hn::Mul(hn::Sub(hi, eight), s), df, out + kBlockBytes + j);
    }
  }
}

}  // namespace i4_detail

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_DENSE_DENSE_I4_DECODE_INL_H_ toggle
