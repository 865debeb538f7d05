// Per-target helpers shared by the kernel families: partial-vector loads and
// stores for loop tails, a compensated addition. Include from a family's
// -inl.h; it brings the named per-ISA operations (kernels/isa/isa-inl.h).
//
// Highway 1.0.3's MaskedLoad is only safe where isa::kMaskedLoadSkipsInactiveLanes
// (x86 AVX2/AVX3: fault-suppressing masked moves; SVE). On SSE4/SSSE3/EMU128/
// SCALAR it does an aligned full-vector Load, which would read past the array
// end and requires alignment, so those targets go through a stack buffer
// instead.
#if defined(RECUR_KERNELS_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RECUR_KERNELS_COMMON_INL_H_
#undef RECUR_KERNELS_COMMON_INL_H_
#else
#define RECUR_KERNELS_COMMON_INL_H_
#endif

#include <cstddef>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/isa/isa-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads p[0, n) into the low lanes, zeros elsewhere. Requires n < Lanes(d).
// Reads nothing at or past p + n.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* HWY_RESTRICT p, size_t n) {
  if constexpr (isa::kMaskedLoadSkipsInactiveLanes) {
    return hn::MaskedLoad(hn::FirstN(d, n), d, p);
  } else {
    HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)] = {};
    std::memcpy(buf, p, n * sizeof(float));
    return hn::Load(d, buf);
  }
}

// Stores the low n lanes of v to p[0, n). Requires n < Lanes(d).
// Writes nothing at or past p + n.
template <class D>
HWY_INLINE void StoreTail(hn::Vec<D> v, D d, float* HWY_RESTRICT p, size_t n) {
  if constexpr (isa::kMaskedLoadSkipsInactiveLanes) {
    hn::BlendedStore(v, hn::FirstN(d, n), d, p);
  } else {
    HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
    hn::Store(v, d, buf);
    std::memcpy(p, buf, n * sizeof(float));
  }
}

// One compensated (Kahan) addition: returns sum + y, where y = term − *comp
// (the caller forms it, fused or not), and leaves in *comp what the float
// addition lost. Used for sums over unbounded streams (linear attention).
template <class V>
HWY_INLINE V CompensatedUpdate(V sum, V y, V* comp) {
  const V t = hn::Add(sum, y);
  *comp = hn::Sub(hn::Sub(t, sum), y);
  return t;
}

#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
// Adds the 128-bit blocks of v: returns a 4-lane vector.
template <class D>
HWY_INLINE auto SumBlocks(D, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) > 4) {
    const hn::Half<D> dh;
    return SumBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  } else {
    return v;
  }
}

// Returns {Σa, Σb, Σc, Σe} (sums over all lanes of each input).
template <class D>
HWY_INLINE hn::Vec128<float> Sum4(D d, hn::Vec<D> a, hn::Vec<D> b, hn::Vec<D> c,
                                  hn::Vec<D> e) {
  // Per 128-bit block: t0 = [a0+a2, b0+b2, a1+a3, b1+b3], likewise t1 for c, e.
  const auto t0 = hn::Add(hn::InterleaveLower(d, a, b), hn::InterleaveUpper(d, a, b));
  const auto t1 = hn::Add(hn::InterleaveLower(d, c, e), hn::InterleaveUpper(d, c, e));
  // 64-bit interleave: per block [Σa, Σb, Σc, Σe] over that block's lanes.
  const hn::Repartition<uint64_t, D> d64;
  const auto w0 = hn::BitCast(d64, t0);
  const auto w1 = hn::BitCast(d64, t1);
  const auto s = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, w0, w1)),
                         hn::BitCast(d, hn::InterleaveUpper(d64, w0, w1)));
  return SumBlocks(d, s);
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#endif  // RECUR_KERNELS_COMMON_INL_H_ toggle
