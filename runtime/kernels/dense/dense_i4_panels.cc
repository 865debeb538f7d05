// int4 row panels (dense.h): the layout (DenseI4PanelBytes, PackDenseI4Panels)
// and the dynamic dispatch of the batch-1 kernel (dense_i4_panels-inl.h).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/dense/dense.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense_i4_panels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense_i4_panels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

void DenseI4PanelsQuantizedImpl(const int8_t* q, size_t q_stride, const float* q_scales,
                                size_t batch, const uint8_t* panels, const DenseWeights& w,
                                size_t panel_begin, size_t panel_end, float* y, size_t y_stride,
                                bool accumulate) {
  I4PanelsQuantized(q, q_stride, q_scales, batch, panels, w, panel_begin, panel_end, y, y_stride,
                    accumulate);
}

bool DenseI4PanelsPreferredImpl() { return I4PanelsPreferred(); }

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(DenseI4PanelsQuantizedImpl);
HWY_EXPORT(DenseI4PanelsPreferredImpl);

size_t DenseI4PanelBytes(const DenseWeights& w) {
  if (w.type != WeightType::kI4 || w.group != kI4Block || w.in == 0 || w.out == 0 ||
      w.in % kI4Block != 0 || w.in > kDenseI4DotMaxIn) {
    return 0;
  }
  return DenseI4Panels(w.out) * DenseI4PanelStride(w.in);
}

void PackDenseI4Panels(const DenseWeights& w, uint8_t* dst) {
  const size_t bytes = DenseI4PanelBytes(w);
  if (bytes == 0) return;
  const size_t blocks = w.in / kI4Block, panels = DenseI4Panels(w.out);
  const size_t block_bytes = kI4PanelRows * kI4Block / 2, panel_bytes = DenseI4PanelStride(w.in);
  const auto* rows = static_cast<const uint8_t*>(w.weight);
  for (size_t p = 0; p < panels; ++p) {
    uint8_t* base = dst + p * panel_bytes;
    uint8_t* scales = base + blocks * block_bytes;
    for (size_t r = 0; r < kI4PanelRows; ++r) {
      const size_t o = p * kI4PanelRows + r;
      const uint8_t* row = o < w.out ? rows + o * (w.in / 2) : nullptr;
      for (size_t b = 0; b < blocks; ++b) {
        // Rows past `out`: q = 0 with a zero scale (their outputs are not stored).
        for (size_t m = 0; m < 4; ++m) {
          for (size_t t = 0; t < 4; ++t) {
            const size_t i = b * kI4Block + 8 * m + t;
            const int lo = row ? I4Value(row, i) + 8 : 8, hi = row ? I4Value(row, i + 4) + 8 : 8;
            base[b * block_bytes + m * 64 + 4 * r + t] = static_cast<uint8_t>(lo | hi << 4);
          }
        }
        const uint16_t scale = row ? w.group_scales[o * blocks + b] : 0;
        std::memcpy(scales + (b * kI4PanelRows + r) * 2, &scale, 2);
      }
    }
  }
}

bool DenseI4PanelsPreferred() { return HWY_DYNAMIC_DISPATCH(DenseI4PanelsPreferredImpl)(); }

void DenseI4PanelsQuantized(const int8_t* q, size_t q_stride, const float* q_scales,
                            size_t batch, const uint8_t* panels, const DenseWeights& w,
                            size_t panel_begin, size_t panel_end, float* y, size_t y_stride,
                            bool accumulate) {
  if (DenseI4PanelBytes(w) == 0) return;
  panel_end = std::min(panel_end, DenseI4Panels(w.out));
  if (panel_begin >= panel_end) return;
  for (size_t b = 0; b < batch; b += kI4PanelMaxBatch) {
    HWY_DYNAMIC_DISPATCH(DenseI4PanelsQuantizedImpl)(
        q + b * q_stride, q_stride, q_scales + b, std::min(kI4PanelMaxBatch, batch - b), panels,
        w, panel_begin, panel_end, y + b * y_stride, y_stride, accumulate);
  }
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
