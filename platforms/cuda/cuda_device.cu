// The CUDA device (gpu_device.h): one stream, one cuBLAS handle in pedantic
// f32 math (no TF32: parity, not speed, is what this path is for), and a
// grid-stride launch of each kernel struct of gpu_kernels.h.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "gpu_device.h"

namespace recur::impl::gpu {
namespace {

Status CudaError(const char* what, cudaError_t e) {
  return Status(StatusCode::kInternal,
                std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

Status CublasError(const char* what, cublasStatus_t s) {
  return Status(StatusCode::kInternal, std::string("cublas: ") + what + ": status " +
                                           std::to_string(static_cast<int>(s)));
}

template <class Kernel>
__global__ void RunKernel(Kernel kernel, size_t n) {
  const size_t stride = size_t{blockDim.x} * gridDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) kernel(i);
}

class CudaDevice final : public Device {
 public:
  ~CudaDevice() override {
    (void)cudaSetDevice(ordinal_);
    if (blas_ != nullptr) cublasDestroy(blas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  static Status Create(int ordinal, std::unique_ptr<Device>* out) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      return Unsupported("no CUDA device: %s", cudaGetErrorString(e));
    }
    if (ordinal < 0 || ordinal >= count) {
      return Unsupported("no CUDA device %d: this machine has %d", ordinal, count);
    }
    cudaDeviceProp prop{};
    cudaError_t r = cudaGetDeviceProperties(&prop, ordinal);
    if (r != cudaSuccess) return CudaError("device properties", r);
    if (prop.major * 10 + prop.minor < 75) {  // CMAKE_CUDA_ARCHITECTURES starts at 75
      return Unsupported("CUDA device %d (%s) is sm_%d%d; this build runs on sm_75 and newer",
                         ordinal, prop.name, prop.major, prop.minor);
    }
    auto d = std::unique_ptr<CudaDevice>(new CudaDevice());
    d->ordinal_ = ordinal;
    r = cudaSetDevice(ordinal);
    if (r == cudaSuccess) r = cudaStreamCreate(&d->stream_);
    if (r != cudaSuccess) return CudaError("device setup", r);
    cublasStatus_t b = cublasCreate(&d->blas_);
    if (b == CUBLAS_STATUS_SUCCESS) b = cublasSetStream(d->blas_, d->stream_);
    if (b == CUBLAS_STATUS_SUCCESS) b = cublasSetMathMode(d->blas_, CUBLAS_PEDANTIC_MATH);
    if (b != CUBLAS_STATUS_SUCCESS) return CublasError("setup", b);
    char name[320];
    std::snprintf(name, sizeof(name), "cuda: %s (sm_%d%d)", prop.name, prop.major, prop.minor);
    d->name_ = name;
    d->blocks_ = 4 * prop.multiProcessorCount;
    *out = std::move(d);
    return Status::Ok();
  }

  std::string name() const override { return name_; }

  Status Allocate(size_t bytes, void** out) override {
    *out = nullptr;
    RECUR_RETURN_IF_ERROR(Select());
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: later calls must not report it
      return OutOfMemory("cuda: cannot allocate %zu bytes: %s", bytes, cudaGetErrorString(e));
    }
    if (e == cudaSuccess) e = cudaMemsetAsync(p, 0, bytes, stream_);
    if (e != cudaSuccess) {
      if (p != nullptr) cudaFree(p);
      return CudaError("allocate", e);
    }
    *out = p;
    return Status::Ok();
  }
  void Free(void* p) override {
    if (p != nullptr && Select().ok()) cudaFree(p);  // waits for queued work
  }
  Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return Copy(dst, src, bytes, cudaMemcpyHostToDevice);
  }
  Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    return Copy(dst, src, bytes, cudaMemcpyDeviceToHost);
  }
  Status CopyOnDevice(void* dst, const void* src, size_t bytes) override {
    return Copy(dst, src, bytes, cudaMemcpyDeviceToDevice);
  }

  Status Gemm(const Sgemm& g) override {
    RECUR_RETURN_IF_ERROR(Select());
    const float alpha = 1.0f;
    const cublasStatus_t s = cublasSgemm(
        blas_, g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
        g.m, g.n, g.k, &alpha, g.a, g.lda, g.b, g.ldb, &g.beta, g.c, g.ldc);
    return s == CUBLAS_STATUS_SUCCESS ? Status::Ok() : CublasError("sgemm", s);
  }

#define RECUR_GPU_CUDA_LAUNCH(Kernel)                                  \
  Status Launch(const Kernel& kernel, size_t n) override { return Grid(kernel, n); }
  RECUR_GPU_KERNELS(RECUR_GPU_CUDA_LAUNCH)
#undef RECUR_GPU_CUDA_LAUNCH

 private:
  CudaDevice() = default;

  // Makes this device current for the calling thread (a process may use
  // others, and CUDA's current device is per thread).
  Status Select() const {
    const cudaError_t e = cudaSetDevice(ordinal_);
    return e == cudaSuccess ? Status::Ok() : CudaError("select device", e);
  }

  template <class Kernel>
  Status Grid(const Kernel& kernel, size_t n) {
    if (n == 0) return Status::Ok();
    RECUR_RETURN_IF_ERROR(Select());
    constexpr unsigned kThreads = 128;
    const size_t wanted = (n + kThreads - 1) / kThreads;
    const unsigned blocks = static_cast<unsigned>(wanted < size_t(blocks_) ? wanted : blocks_);
    RunKernel<<<blocks, kThreads, 0, stream_>>>(kernel, n);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? Status::Ok() : CudaError("kernel launch", e);
  }

  Status Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return Status::Ok();
    RECUR_RETURN_IF_ERROR(Select());
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, stream_);
    // A host copy returns data; every other copy stays ordered on the stream.
    // A kernel's fault surfaces here, at the next synchronisation.
    if (e == cudaSuccess && kind != cudaMemcpyDeviceToDevice) e = cudaStreamSynchronize(stream_);
    return e == cudaSuccess ? Status::Ok() : CudaError("memcpy (or the kernels before it)", e);
  }

  std::string name_;
  int ordinal_ = 0;
  int blocks_ = 1;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
};

}  // namespace

Status CreateCudaDevice(int ordinal, std::unique_ptr<Device>* out) {
  return CudaDevice::Create(ordinal, out);
}

bool CudaBuilt() { return true; }

}  // namespace recur::impl::gpu
