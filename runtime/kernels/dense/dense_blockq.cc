// Dynamic dispatch for block-quantised activations (dense_blockq-inl.h):
// DenseBlockQ8, and the block-quantised tiles of its GEMM (dense_blockq_gemm-inl.h).
#include <algorithm>
#include <cstdint>

#include "kernels/dense/dense.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/dense/dense_blockq.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dense/dense_blockq-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

void DenseBlockQ8Impl(const float* x, size_t x_stride, size_t batch, const DenseWeights& w,
                      float* y, size_t y_stride, bool accumulate) {
  BlockQ8Dense(x, x_stride, batch, w, y, y_stride, accumulate);
}

bool DenseBlockQ8TilesAvailableImpl() {
#if RECUR_ISA_AVX3
  return Avx512VnniEnabled();
#else
  return false;
#endif
}

void PackDenseBlockQ8TilesImpl(const DenseWeights& w, uint8_t* dst) {
#if RECUR_ISA_AVX3
  blockq_gemm::PackTiles(w, dst);
#else
  (void)w;
  (void)dst;
#endif
}

void DenseBlockQ8TiledImpl(const float* x, size_t x_stride, size_t batch, const uint8_t* tiles,
                           const DenseWeights& w, size_t tile_begin, size_t tile_end, float* y,
                           size_t y_stride, bool accumulate) {
#if RECUR_ISA_AVX3
  if (tiles != nullptr && BlockQ8Gemm(x, x_stride, batch, w, tiles, tile_begin, tile_end, y,
                                      y_stride, accumulate)) {
    return;
  }
#else
  (void)tiles;
#endif
  const size_t begin = std::min<size_t>(tile_begin * kBlockQ8TileRows, w.out);
  const size_t end = std::min<size_t>(tile_end * kBlockQ8TileRows, w.out);
  if (begin < end) {
    BlockQ8Dense(x, x_stride, batch, w.Rows(begin, end), y + begin, y_stride, accumulate);
  }
}

bool DenseBlockQ8PreferredImpl(WeightType type, size_t batch) {
#if RECUR_ISA_AVX3
  if (blockq_gemm::Takes(type, batch, false)) return true;
#endif
  return RECUR_ISA_AVX2 && batch == 1 && HasBlockQ8Tiles(type);
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(DenseBlockQ8Impl);
HWY_EXPORT(DenseBlockQ8PreferredImpl);
HWY_EXPORT(DenseBlockQ8TilesAvailableImpl);
HWY_EXPORT(PackDenseBlockQ8TilesImpl);
HWY_EXPORT(DenseBlockQ8TiledImpl);

size_t DenseBlockQ8TileBytes(const DenseWeights& w) {
  const bool q8_0 = w.type == WeightType::kQ8_0;
  if (!HasBlockQ8Tiles(w.type) ||
      (q8_0 && ActivationBlocksOf(w.type, w.group) != ActivationBlocks::kQ8_0) || w.in == 0 ||
      w.out == 0 || w.in % Traits(w.type).block != 0 || w.in > kDenseBlockQ8MaxIn ||
      !HWY_DYNAMIC_DISPATCH(DenseBlockQ8TilesAvailableImpl)()) {
    return 0;
  }
  const size_t record = w.type == WeightType::kQ4_K ? kQ4KTileBlockBytes
                        : q8_0                      ? kQ8_0TileBlockBytes
                                                    : kQ6KTileBlockBytes;
  return DenseBlockQ8Tiles(w.out) * (w.in / Traits(w.type).block) * record;
}

void PackDenseBlockQ8Tiles(const DenseWeights& w, uint8_t* dst) {
  if (DenseBlockQ8TileBytes(w) == 0) return;
  HWY_DYNAMIC_DISPATCH(PackDenseBlockQ8TilesImpl)(w, dst);
}

void DenseBlockQ8Tiled(const float* x, size_t x_stride, size_t batch, const uint8_t* tiles,
                       const DenseWeights& w, size_t tile_begin, size_t tile_end, float* y,
                       size_t y_stride, bool accumulate) {
  if (DenseBlockQ8TileBytes(w) == 0) tiles = nullptr;
  HWY_DYNAMIC_DISPATCH(DenseBlockQ8TiledImpl)(x, x_stride, batch, tiles, w, tile_begin, tile_end,
                                              y, y_stride, accumulate);
}

bool DenseBlockQ8Preferred(WeightType type, size_t batch) {
  return HWY_DYNAMIC_DISPATCH(DenseBlockQ8PreferredImpl)(type, batch);
}

bool RunsBlockQ8(WeightType type, uint32_t group, size_t in, Int8Activations int8,
                 size_t batch) {
  if (ActivationBlocksOf(type, group) == ActivationBlocks::kNone || in > kDenseBlockQ8MaxIn) {
    return false;
  }
  if (int8 == Int8Activations::kBlocks) return true;
  // HasBlockQ8Tiles first: no dispatched call for the types it never prefers.
  return int8 != Int8Activations::kFloat && HasBlockQ8Tiles(type) &&
         DenseBlockQ8Preferred(type, batch);
}

void DenseBlockQ8(const float* x, size_t x_stride, size_t batch, const DenseWeights& w, float* y,
                  size_t y_stride, bool accumulate) {
  const ActivationBlocks kind = ActivationBlocksOf(w.type, w.group);
  if (kind == ActivationBlocks::kNone || w.in > kDenseBlockQ8MaxIn) {
    Dense(x, x_stride, batch, w, y, y_stride, accumulate);
    return;
  }
  if (RoundsActivations(kind)) {
    DenseRoundedActivations(x, x_stride, batch, w, y, y_stride, accumulate);
    return;
  }
  HWY_DYNAMIC_DISPATCH(DenseBlockQ8Impl)(x, x_stride, batch, w, y, y_stride, accumulate);
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
