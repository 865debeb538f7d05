// The Highway backend: our own kernels, every weight type. Unpacked, it runs
// RunDense on the model's bytes (output features split over the session's
// pool). With DensePlan::pack_weights it also keeps the layer in packed f32
// panels (kernels::PackDense) and runs calls of kPackedMinRows rows or more
// on the packed GEMM, panels split over the pool. int8 and int4 layers that
// run on integer dot products (DensePlan::int8, kernels::DenseI8Dot and
// DenseI4Dot) read the model's bytes at every row count and are never packed.
#include <algorithm>

#include "backends/dense_op.h"
#include "backends/gemm_backend.h"
#include "hwy/aligned_allocator.h"
#include "kernels/dense/dense.h"

namespace recur::impl::backends {
namespace {

class HighwayDense final : public PreparedDense {
 public:
  HighwayDense(const DenseView& d, ThreadPool* pool, kernels::Int8Activations int8)
      : d_(d), pool_(pool), int8_(int8) {}

  // Whether `rows` rows run on integer dot products.
  bool Quantized(size_t rows) const {
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

  Status Pack() {
    const size_t floats = kernels::DensePackedFloats(d_.in, d_.out);
    packed_ = hwy::AllocateAligned<float>(floats);
    if (!packed_) {
      return OutOfMemory("cannot allocate %zu bytes of packed weights", floats * sizeof(float));
    }
    kernels::PackDense(d_, packed_.get());
    return Status::Ok();
  }

  void Run(const float* x, size_t rows, float* y, bool accumulate) override {
    if (Quantized(rows)) {
      RunDense(d_, x, rows, y, accumulate, pool_, kernels::Int8Activations::kQuantized);
      return;
    }
    if (!packed_ || rows < kPackedMinRows) {
      RunDense(d_, x, rows, y, accumulate, pool_, kernels::Int8Activations::kFloat);
      return;
    }
    const size_t panels = kernels::DensePanels(d_.out);
    pool_->ParallelRanges(panels, 1, [&](size_t first, size_t last) {
      kernels::DensePacked(x, d_.in, rows, packed_.get(), d_.bias, d_.in, d_.out, first, last, y,
                           d_.out, accumulate);
    });
  }

  size_t memory_bytes() const override {
    return packed_ ? kernels::DensePackedFloats(d_.in, d_.out) * sizeof(float) : 0;
  }

 private:
  DenseView d_;
  ThreadPool* pool_;
  kernels::Int8Activations int8_;
  hwy::AlignedFreeUniquePtr<float[]> packed_;
};

class Highway final : public DenseBackend {
 public:
  const char* name() const override { return "highway"; }
  bool Supports(const DenseView&) const override { return true; }
  Status Prepare(const DenseView& d, const DensePlan& plan,
                 std::unique_ptr<PreparedDense>* out) const override {
    auto op = std::make_unique<HighwayDense>(d, plan.pool, plan.int8);
    // Packed only if some planned count of kPackedMinRows or more would use it.
    bool pack = false;
    for (size_t rows : plan.rows) pack |= rows >= kPackedMinRows && !op->Quantized(rows);
    if (plan.pack_weights && pack) RECUR_RETURN_IF_ERROR(op->Pack());
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
