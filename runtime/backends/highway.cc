// The Highway backend: today's RunDense (output features split over the
// session's pool, kernels::Dense per slice). Every weight type; no copies.
#include "backends/gemm_backend.h"
#include "engine/dense_op.h"

namespace recur::backends {
namespace {

class HighwayDense final : public PreparedDense {
 public:
  HighwayDense(const DenseView& d, ThreadPool* pool) : d_(d), pool_(pool) {}
  void Run(const float* x, size_t rows, float* y, bool accumulate) override {
    RunDense(d_, x, rows, y, accumulate, pool_);
  }

 private:
  DenseView d_;
  ThreadPool* pool_;
};

class Highway final : public DenseBackend {
 public:
  const char* name() const override { return "highway"; }
  bool Supports(const DenseView&) const override { return true; }
  Status Prepare(const DenseView& d, const DensePlan& plan,
                 std::unique_ptr<PreparedDense>* out) const override {
    *out = std::make_unique<HighwayDense>(d, plan.pool);
    return Status::Ok();
  }
};

}  // namespace

const DenseBackend* HighwayBackend() {
  static const Highway backend;
  return &backend;
}

}  // namespace recur::backends
