// Dynamic dispatch for DecodeWeightRows (dense.h): one row decoder per weight
// type, each built from the decoding its Dense kernels use (the f16, bf16 and
// int8 loads of dense-inl.h, int4's blocks of dense_i4_decode-inl.h, the K-quants'
// of dense_kquant-inl.h), gathered in a table indexed by WeightType and
// expanded from weight_types.inc: a new line there needs a branch of
// DecodeRow below and nothing else.
#include <cstdint>
#include <cstring>
#include <iterator>

#include "kernels/dense/dense.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense_decode.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense_i4_decode-inl.h"
#include "kernels/dense/dense_kquant-inl.h"  // and dense_lowp-inl.h, dense-inl.h

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {
namespace decode_detail {

namespace hn = hwy::HWY_NAMESPACE;

// Row o of w (of type kType) into dst[0, w.in).
template <WeightType kType>
HWY_INLINE void DecodeRow(const DenseWeights& w, size_t o, float* HWY_RESTRICT dst) {
  constexpr WeightScales kScales = Traits(kType).scales;
  const size_t in = w.in;
  const auto* row = static_cast<const uint8_t*>(w.weight) + o * WeightRowBytes(kType, in);
  if constexpr (kType == WeightType::kF32) {
    std::memcpy(dst, row, in * sizeof(float));
  } else if constexpr (kScales == WeightScales::kInBlock) {
    using Fmt = typename kquant_detail::FormatOf<kType>::type;
    kquant_detail::DecodeBlocks<Fmt>(row, in / kKQuantBlock, dst);
  } else if constexpr (kType == WeightType::kI4) {
    // Groups of G inputs (a multiple of the 32-input block), their scales
    // decoded dense_detail::kScaleRun at a time.
    const size_t G = w.group, groups = in / G;
    float sc[dense_detail::kScaleRun];
    for (size_t g0 = 0; g0 < groups; g0 += dense_detail::kScaleRun) {
      const size_t ng = std::min(dense_detail::kScaleRun, groups - g0);
      i4_detail::DecodeScales(w.group_scales + o * groups + g0, ng, sc);
      for (size_t g = 0; g < ng; ++g) {
        i4_detail::DecodeBlocks(row + (g0 + g) * (G / 2), G / kI4Block, sc[g],
                                dst + (g0 + g) * G);
      }
    }
  } else {
    // Stored an element at a time: widened as the row tiles load them.
    using TW = typename dense_detail::StoredElement<kType>::type;
    const auto* src = reinterpret_cast<const TW*>(row);
    if constexpr (kScales == WeightScales::kPerGroup) {
      // Groups of G, a multiple of 32 and so of Ng: whole vectors.
      const hn::CappedTag<float, dense_detail::kGroupLanes> dg;
      const size_t Ng = hn::Lanes(dg);
      const size_t G = w.group, groups = in / G;
      HWY_ALIGN float sc[dense_detail::kScaleBuffer];
      for (size_t g0 = 0; g0 < groups; g0 += dense_detail::kScaleRun) {
        const size_t ng = std::min(dense_detail::kScaleRun, groups - g0);
        dense_detail::DecodeGroupScales(dg, w.group_scales + o * groups + g0, ng, sc);
        for (size_t g = 0; g < ng; ++g) {
          const auto s = hn::Set(dg, sc[g]);
          for (size_t i = (g0 + g) * G, end = i + G; i < end; i += Ng) {
            hn::StoreU(hn::Mul(dense_detail::LoadWeights(dg, src + i), s), dg, dst + i);
          }
        }
      }
    } else {
      const hn::ScalableTag<float> d;
      const size_t N = hn::Lanes(d);
      size_t i = 0;
      if constexpr (kScales == WeightScales::kPerRow) {
        const auto s = hn::Set(d, w.scales[o]);
        for (; i + N <= in; i += N) {
          hn::StoreU(hn::Mul(dense_detail::LoadWeights(d, src + i), s), d, dst + i);
        }
      } else {
        for (; i + N <= in; i += N) hn::StoreU(dense_detail::LoadWeights(d, src + i), d, dst + i);
      }
      // The last in % N (< N) values: nothing is written past dst + in.
      for (; i < in; ++i) dst[i] = static_cast<float>(ref::DecodeWeight(w, o, i));
    }
  }
}

template <WeightType kType>
void DecodeRows(const DenseWeights& w, size_t begin, size_t rows, float* dst) {
  for (size_t r = 0; r < rows; ++r) DecodeRow<kType>(w, begin + r, dst + r * w.in);
}

}  // namespace decode_detail

void DecodeWeightRowsImpl(const DenseWeights& w, size_t begin, size_t rows, float* dst) {
  using Decode = void (*)(const DenseWeights&, size_t, size_t, float*);
  static constexpr Decode kByType[] = {
#define RECUR_WEIGHT_TYPE(Tag, name, block, block_bytes, scales) \
  &decode_detail::DecodeRows<WeightType::k##Tag>,
#include "kernels/dense/weight_types.inc"
#undef RECUR_WEIGHT_TYPE
  };
  static_assert(std::size(kByType) == kWeightTypeCount, "one decoder per weight type");
  kByType[static_cast<size_t>(w.type)](w, begin, rows, dst);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(DecodeWeightRowsImpl);

void DecodeWeightRows(const DenseWeights& w, size_t begin, size_t rows, float* dst) {
  if (rows == 0 || w.in == 0) return;
  HWY_DYNAMIC_DISPATCH(DecodeWeightRowsImpl)(w, begin, rows, dst);
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
