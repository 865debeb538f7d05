// The Highway backend: our own kernels, every weight type. Unpacked, it runs
// RunDense on the model's bytes (output features split over the session's
// pool). With DensePlan::pack_weights it also keeps the layer in packed
// panels (kernels::PackDense: f32, or f16 and bf16 layers' own values with
// DensePlan::narrow_panels) and runs calls of kPackedMinRows rows or more
// on the packed GEMM, panels split over the pool. int8 and int4 layers that
// run on integer dot products (DensePlan::int8, kernels::DenseI8Dot and
// DenseI4Dot) read the model's bytes and are never packed in f32; with
// DensePlan::pack_for_steps, int4 layers with groups of 32 also keep row panels
// (kernels::PackDenseI4Panels) for calls of up to kI4PanelMaxBatch rows where
// the CPU runs them faster: the rows are quantised once, the panels split
// over the pool. The layers kernels::RunsBlockQ8 names (with
// Int8Activations::kBlocks every layer DenseBlockQ8 takes) run on it,
// unpacked, or (q4_k, q6_k and q8_0 with DensePlan::pack_weights, on
// AVX-512 with VNNI) on tiles laid out once for its GEMM
// (kernels::PackDenseBlockQ8Tiles), as are q4_k layers with
// DensePlan::pack_for_steps for a step's single rows
// (kernels::DenseBlockQ8TilesRun).
// The copies live in huge pages where the OS has them (platform::StreamedAlloc).
#include <algorithm>

#include "backends/dense_op.h"
#include "backends/gemm_backend.h"
#include "core/platform.h"
#include "hwy/aligned_allocator.h"
#include "kernels/dense/dense.h"
#include "kernels/elementwise/elementwise.h"

namespace recur::impl::backends {
namespace {

class HighwayDense final : public PreparedDense {
 public:
  HighwayDense(const DenseView& d, ThreadPool* pool, kernels::Int8Activations int8,
               bool from_memory)
      : d_(d), pool_(pool), int8_(int8) {
    d_.from_memory = from_memory;
  }

  // Whether the layer runs on block-quantised activations (DenseBlockQ8).
  bool Blocks(size_t rows) const {
    return kernels::RunsBlockQ8(d_.type, d_.group, d_.in, int8_, rows);
  }

  // How Blocks rounds the activations of f16 and bf16 layers (kNone for
  // other types): their rows still run the f32-activation kernels, packed
  // panels included.
  kernels::ActivationBlocks Rounding() const {
    const kernels::ActivationBlocks kind = kernels::ActivationBlocksOf(d_.type, d_.group);
    return kernels::RoundsActivations(kind) ? kind : kernels::ActivationBlocks::kNone;
  }

  // Whether `rows` rows run on the packed GEMM where the layer has panels:
  // rows on f32 activations, and under kBlocks f16 and bf16 rows rounded.
  bool RunsPacked(size_t rows) const {
    if (rows < kPackedMinRows) return false;
    return Blocks(rows) ? Rounding() != kernels::ActivationBlocks::kNone : !Quantized(rows);
  }

  // Whether `rows` rows run on integer dot products.
  bool Quantized(size_t rows) const {
    if (int8_ == kernels::Int8Activations::kBlocks) {
      return (Blocks(rows) && Rounding() == kernels::ActivationBlocks::kNone) ||
             (d_.type == kernels::WeightType::kI8 && d_.in <= kernels::kDenseI8DotMaxIn);
    }
    if (d_.type == kernels::WeightType::kI4) {
      if (d_.in > kernels::kDenseI4DotMaxIn) return false;
      return int8_ == kernels::Int8Activations::kQuantized ||
             (int8_ == kernels::Int8Activations::kAuto &&
              kernels::DenseI4DotPreferred(rows, d_.in, d_.out));
    }
    if (d_.type != kernels::WeightType::kI8 || d_.in > kernels::kDenseI8DotMaxIn) return false;
    return int8_ == kernels::Int8Activations::kQuantized ||
           (int8_ == kernels::Int8Activations::kAuto &&
            kernels::DenseI8DotPreferred(rows, d_.in, d_.out));
  }

  Status Pack(bool narrow) {
    panel_type_ =
        narrow && kernels::PanelsMayKeepType(d_.type) && kernels::DenseNarrowPanelsPreferred()
            ? d_.type
            : kernels::WeightType::kF32;
    const size_t bytes = kernels::DensePackedBytes(d_.in, d_.out, panel_type_);
    packed_ = platform::AllocateStreamed<uint8_t>(bytes);
    if (!packed_) return OutOfMemory("cannot allocate %zu bytes of packed weights", bytes);
    kernels::PackDense(d_, panel_type_, packed_.get());
    return Status::Ok();
  }

  Status PackBlockQ8Tiles() {
    const size_t bytes = kernels::DenseBlockQ8TileBytes(d_);
    tiles_ = platform::AllocateStreamed<uint8_t>(bytes);
    if (!tiles_) return OutOfMemory("cannot allocate %zu bytes of block-quantised tiles", bytes);
    kernels::PackDenseBlockQ8Tiles(d_, tiles_.get());
    return Status::Ok();
  }

  Status PackInt4Panels() {
    const size_t bytes = kernels::DenseI4PanelBytes(d_);
    panels_ = platform::AllocateStreamed<uint8_t>(bytes);
    panel_q_ = hwy::AllocateAligned<int8_t>(kernels::kI4PanelMaxBatch * d_.in);
    if (!panels_ || !panel_q_) {
      return OutOfMemory("cannot allocate %zu bytes of int4 panels",
                         bytes + kernels::kI4PanelMaxBatch * d_.in);
    }
    kernels::PackDenseI4Panels(d_, panels_.get());
    return Status::Ok();
  }

  void Run(const float* x, size_t rows, float* y, bool accumulate) override {
    if (Blocks(rows)) {
      if (tiles_) {
        // 2 tiles (64 rows) a task at least, as RunDense splits.
        const auto run = [&](size_t first, size_t last) {
          kernels::DenseBlockQ8Tiled(x, d_.in, rows, tiles_.get(), d_, first, last, y, d_.out,
                                     accumulate);
        };
        pool_->ParallelRanges(kernels::DenseBlockQ8Tiles(d_.out), 2, run);
        return;
      }
      if (packed_ && RunsPacked(rows)) return RunPacked(x, rows, y, accumulate, Rounding());
      RunDense(d_, x, rows, y, accumulate, pool_, kernels::Int8Activations::kBlocks);
      return;
    }
    if (panels_ && rows >= 1 && rows <= kernels::kI4PanelMaxBatch && Quantized(rows)) {
      float qs[kernels::kI4PanelMaxBatch];
      for (size_t b = 0; b < rows; ++b) {
        qs[b] = kernels::QuantizeS8(x + b * d_.in, panel_q_.get() + b * d_.in, d_.in);
      }
      // 4 panels (64 rows) a task at least: fewer cost more in synchronisation.
      pool_->ParallelRanges(kernels::DenseI4Panels(d_.out), 4, [&](size_t first, size_t last) {
        kernels::DenseI4PanelsQuantized(panel_q_.get(), d_.in, qs, rows, panels_.get(), d_, first,
                                        last, y, d_.out, accumulate);
      });
      return;
    }
    if (Quantized(rows)) {
      RunDense(d_, x, rows, y, accumulate, pool_, kernels::Int8Activations::kQuantized);
      return;
    }
    if (packed_ && RunsPacked(rows)) {
      RunPacked(x, rows, y, accumulate, kernels::ActivationBlocks::kNone);
      return;
    }
    RunDense(d_, x, rows, y, accumulate, pool_, kernels::Int8Activations::kFloat);
  }

  // The packed GEMM, panels split over the pool (each task rounds x as
  // `rounding` says for itself).
  void RunPacked(const float* x, size_t rows, float* y, bool accumulate,
                 kernels::ActivationBlocks rounding) {
    const size_t panels = kernels::DensePanels(d_.out);
    pool_->ParallelRanges(panels, 1, [&](size_t first, size_t last) {
      kernels::DensePacked(x, d_.in, rows, packed_.get(), panel_type_, d_.bias, d_.in, d_.out,
                           first, last, y, d_.out, accumulate, rounding);
    });
  }

  size_t memory_bytes() const override {
    return (packed_ ? kernels::DensePackedBytes(d_.in, d_.out, panel_type_) : 0) +
           (tiles_ ? kernels::DenseBlockQ8TileBytes(d_) : 0) +
           (panels_ ? kernels::DenseI4PanelBytes(d_) + kernels::kI4PanelMaxBatch * d_.in : 0);
  }

 private:
  DenseView d_;
  ThreadPool* pool_;
  kernels::Int8Activations int8_;
  platform::StreamedArray<uint8_t> packed_;  // panels of panel_type_, or null
  kernels::WeightType panel_type_ = kernels::WeightType::kF32;
  platform::StreamedArray<uint8_t> tiles_;     // block-quantised tiles, or null
  platform::StreamedArray<uint8_t> panels_;    // int4 row panels, or null
  hwy::AlignedFreeUniquePtr<int8_t[]> panel_q_;  // the quantised rows they run on
};

class Highway final : public DenseBackend {
 public:
  const char* name() const override { return "highway"; }
  bool Supports(const DenseView&) const override { return true; }
  Status Prepare(const DenseView& d, const DensePlan& plan,
                 std::unique_ptr<PreparedDense>* out) const override {
    auto op = std::make_unique<HighwayDense>(d, plan.pool, plan.int8, plan.weights_from_memory);
    // Packed only if some planned count of kPackedMinRows or more would use it
    // (Run takes block-quantised and integer-dot rows before the packed GEMM).
    bool pack = false, tiles = false;
    for (size_t rows : plan.rows) {
      pack |= op->RunsPacked(rows);
      tiles |= rows >= kernels::kBlockQ8TilesMinBatch && op->Blocks(rows);
    }
    if (plan.pack_weights && pack) RECUR_RETURN_IF_ERROR(op->Pack(plan.narrow_panels));
    // Block-quantised tiles where some planned count runs on block-quantised rows
    // on the GEMM (fewer rows run the row forms on the model's bytes), or
    // the step's single rows do (q4_k).
    const size_t few = plan.rows.front();
    const bool step_tiles = plan.pack_for_steps && few == 1 && op->Blocks(1) &&
                            kernels::DenseBlockQ8TilesRun(d.type, 1);
    if (((plan.pack_weights && tiles) || step_tiles) && kernels::DenseBlockQ8TileBytes(d) > 0) {
      RECUR_RETURN_IF_ERROR(op->PackBlockQ8Tiles());
    }
    // Panels when the smallest planned count (a step's) is a small batch.
    if (plan.pack_for_steps && !op->Blocks(few) && few <= kernels::kI4PanelMaxBatch && op->Quantized(few) &&
        kernels::DenseI4PanelBytes(d) > 0 && kernels::DenseI4PanelsPreferred()) {
      RECUR_RETURN_IF_ERROR(op->PackInt4Panels());
    }
    *out = std::move(op);
    return Status::Ok();
  }
};

}  // namespace

const DenseBackend* HighwayBackend() {
  static const Highway backend;
  return &backend;
}

}  // namespace recur::impl::backends
