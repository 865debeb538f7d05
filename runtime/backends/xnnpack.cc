// The XNNPACK backend (Debian's 2022 snapshot): f32 weights only.
// xnn_create_fully_connected_nc_f32 packs the weights into XNNPACK's own
// buffer, so a layer on this backend costs its f32 weight bytes again in
// memory (memory_bytes() reports it). Threads: the output features are split
// into one operator per pool thread, each run on its thread with no
// pthreadpool of XNNPACK's own, so the session's pool stays the only one.
// XNNPACK has no y += form: accumulating layers go through a scratch block.
#include <xnnpack.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>

#include "backends/gemm_backend.h"
#include "hwy/aligned_allocator.h"

namespace recur::impl::backends {
namespace {

constexpr size_t kMinFeaturesPerSlice = 64;
constexpr size_t kMaxScratchRows = 256;

Status InitializeXnnpack() {
  static xnn_status status = xnn_initialize(nullptr);
  if (status != xnn_status_success) {
    return Unsupported("xnnpack: xnn_initialize failed (status %d): this CPU may lack what the "
                       "library needs", int(status));
  }
  return Status::Ok();
}

struct Slice {
  xnn_operator_t op = nullptr;
  size_t begin = 0, end = 0;  // output features
};

class XnnpackDense final : public PreparedDense {
 public:
  ~XnnpackDense() override {
    for (Slice& s : slices_) {
      if (s.op != nullptr) xnn_delete_operator(s.op);
    }
  }

  Status Init(const DenseView& d, const DensePlan& plan) {
    d_ = d;
    pool_ = plan.pool;
    const size_t threads = pool_ == nullptr ? 1 : pool_->threads();
    const size_t n = std::max<size_t>(1, std::min(threads, d.out / kMinFeaturesPerSlice));
    const size_t block = ((d.out + n - 1) / n + 15) / 16 * 16;
    const auto* w = static_cast<const float*>(d.weight);
    for (size_t begin = 0; begin < d.out; begin += block) {
      Slice s;
      s.begin = begin;
      s.end = std::min<size_t>(d.out, begin + block);
      const xnn_status st = xnn_create_fully_connected_nc_f32(
          d.in, s.end - s.begin, d.in, plan.accumulate ? d.out : d.out, w + begin * d.in,
          d.bias == nullptr ? nullptr : d.bias + begin, -std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::infinity(), 0, &s.op);
      if (st != xnn_status_success) {
        return Unsupported("xnnpack: cannot create a fully-connected operator %ux%u (status %d)",
                           d.out, d.in, int(st));
      }
      slices_.push_back(s);
    }
    if (plan.accumulate) {
      scratch_rows_ = std::min(plan.rows.back(), kMaxScratchRows);
      scratch_ = hwy::AllocateAligned<float>(scratch_rows_ * d.out + 16);
      if (!scratch_) return OutOfMemory("xnnpack: cannot allocate accumulation scratch");
    }
    return Status::Ok();
  }

  size_t memory_bytes() const override {
    return size_t{d_.in} * d_.out * sizeof(float) + (d_.bias ? d_.out * sizeof(float) : 0) +
           scratch_rows_ * d_.out * sizeof(float);
  }

  void Run(const float* x, size_t rows, float* y, bool accumulate) override {
    if (rows == 0) return;
    Call call{this, x, rows, y, accumulate};
    if (slices_.size() == 1) {
      call.RunSlice(0);
    } else {
      pool_->ParallelFor(slices_.size(), &Call::Task, &call);
    }
  }

 private:
  struct Call {
    XnnpackDense* self;
    const float* x;
    size_t rows;
    float* y;
    bool accumulate;
    static void Task(void* c, size_t i) { static_cast<Call*>(c)->RunSlice(i); }
    void RunSlice(size_t i) {
      const Slice& s = self->slices_[i];
      const size_t out = self->d_.out, in = self->d_.in;
      if (!accumulate) {
        xnn_setup_fully_connected_nc_f32(s.op, rows, x, y + s.begin, nullptr);
        xnn_run_operator(s.op, nullptr);
        return;
      }
      float* tmp = self->scratch_.get();
      for (size_t r0 = 0; r0 < rows; r0 += self->scratch_rows_) {
        const size_t n = std::min(self->scratch_rows_, rows - r0);
        xnn_setup_fully_connected_nc_f32(s.op, n, x + r0 * in, tmp + s.begin, nullptr);
        xnn_run_operator(s.op, nullptr);
        for (size_t r = 0; r < n; ++r) {
          float* dst = y + (r0 + r) * out;
          const float* src = tmp + r * out;
          for (size_t o = s.begin; o < s.end; ++o) dst[o] += src[o];
        }
      }
    }
  };

  DenseView d_;
  ThreadPool* pool_ = nullptr;
  std::vector<Slice> slices_;
  size_t scratch_rows_ = 0;
  hwy::AlignedFreeUniquePtr<float[]> scratch_;
};

class Xnnpack final : public DenseBackend {
 public:
  const char* name() const override { return "xnnpack"; }
  bool always_copies_weights() const override { return true; }
  bool Supports(const DenseView& d) const override {
    return d.type == kernels::WeightType::kF32 && d.in > 0 && d.out > 0;
  }
  Status Prepare(const DenseView& d, const DensePlan& plan,
                 std::unique_ptr<PreparedDense>* out) const override {
    if (!Supports(d)) return Unsupported("xnnpack: only f32 weights");
    RECUR_RETURN_IF_ERROR(InitializeXnnpack());
    auto op = std::make_unique<XnnpackDense>();
    RECUR_RETURN_IF_ERROR(op->Init(d, plan));
    *out = std::move(op);
    return Status::Ok();
  }
};

}  // namespace

const DenseBackend* XnnpackBackend() {
  static const Xnnpack backend;
  return &backend;
}

}  // namespace recur::impl::backends
