// The host emulation of a GPU device (gpu_device.h): the kernels in a loop
// over their thread indices and sgemm by its BLAS definition, with the same
// arguments the CUDA device passes to cuBLAS.
#include <cstdlib>
#include <cstring>

#include "gpu_device.h"

namespace recur::impl::gpu {
namespace {

// The BLAS definition of sgemm, column-major: C[i + j·ldc] =
// Σ_l op(A)[i, l]·op(B)[l, j] + beta·C (C not read when beta is 0, as BLAS).
// Summed in f32 in order, as cuBLAS sums in f32 (in its own order): the
// emulation's rounding is no smaller than the device's.
void ReferenceSgemm(const Sgemm& g) {
  for (int j = 0; j < g.n; ++j) {
    for (int i = 0; i < g.m; ++i) {
      float acc = 0.0f;
      for (int l = 0; l < g.k; ++l) {
        const float a = g.transpose_a ? g.a[l + size_t(i) * g.lda] : g.a[i + size_t(l) * g.lda];
        const float b = g.transpose_b ? g.b[j + size_t(l) * g.ldb] : g.b[l + size_t(j) * g.ldb];
        acc += a * b;
      }
      float& c = g.c[i + size_t(j) * g.ldc];
      c = g.beta != 0.0f ? acc + g.beta * c : acc;
    }
  }
}

class HostDevice final : public Device {
 public:
  std::string name() const override { return "host emulation"; }

  Status Allocate(size_t bytes, void** out) override {
    *out = std::calloc(bytes == 0 ? 1 : bytes, 1);
    if (*out == nullptr) return OutOfMemory("host emulation: cannot allocate %zu bytes", bytes);
    return Status::Ok();
  }
  void Free(void* p) override { std::free(p); }
  Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return Copy(dst, src, bytes);
  }
  Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    return Copy(dst, src, bytes);
  }
  Status CopyOnDevice(void* dst, const void* src, size_t bytes) override {
    return Copy(dst, src, bytes);
  }

  Status Gemm(const Sgemm& call) override {
    ReferenceSgemm(call);
    return Status::Ok();
  }

#define RECUR_GPU_HOST_LAUNCH(Kernel)                           \
  Status Launch(const Kernel& kernel, size_t n) override {      \
    for (size_t i = 0; i < n; ++i) kernel(i);                   \
    return Status::Ok();                                        \
  }
  RECUR_GPU_KERNELS(RECUR_GPU_HOST_LAUNCH)
#undef RECUR_GPU_HOST_LAUNCH

 private:
  static Status Copy(void* dst, const void* src, size_t bytes) {
    if (bytes != 0) std::memmove(dst, src, bytes);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Device> CreateHostDevice() { return std::make_unique<HostDevice>(); }

}  // namespace recur::impl::gpu
