// Where the GPU path runs its kernels (gpu_kernels.h): a CUDA device with
// cuBLAS (cuda_device.cu, built when RECUR_CUDA finds nvcc), or the host
// emulation (host_device.cc, always built), which runs the same kernel
// structs in a loop and the same sgemm calls through a reference BLAS, so
// that everything but the CUDA runtime calls is tested without a GPU.
//
// Compiled by nvcc too: includes nothing but the kernels and core/status.h.
// A Device is single-threaded; calls are ordered (one CUDA stream) and
// CopyToHost waits for the work before it.
#ifndef RECUR_PLATFORMS_CUDA_GPU_DEVICE_H_
#define RECUR_PLATFORMS_CUDA_GPU_DEVICE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "core/status.h"
#include "gpu_kernels.h"

namespace recur::impl::gpu {

class Device {
 public:
  virtual ~Device() = default;

  // "cuda: NVIDIA H100 80GB HBM3 (sm_90)" or "host emulation".
  virtual std::string name() const = 0;

  // Zero-filled device memory of `bytes`, owned by the caller until Free;
  // OutOfMemory when there is none (*out null). Free(nullptr) is a no-op;
  // Free waits for queued work that may use the memory.
  virtual Status Allocate(size_t bytes, void** out) = 0;
  virtual void Free(void* p) = 0;
  // Copies `bytes` (host to device, device to host, device to device).
  // CopyToHost returns once the data, and every call queued before it, is
  // done; a kernel's fault is reported by the next CopyToHost (Internal).
  virtual Status CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual Status CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual Status CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;

  // C = op(A)·op(B) + beta·C in full f32 (cuBLAS with TF32 off), queued;
  // Internal when the call is refused.
  virtual Status Gemm(const Sgemm& call) = 0;

  // Queues `kernel` for i in [0, n); Internal when the launch is refused.
#define RECUR_GPU_DECLARE_LAUNCH(Kernel) virtual Status Launch(const Kernel& kernel, size_t n) = 0;
  RECUR_GPU_KERNELS(RECUR_GPU_DECLARE_LAUNCH)
#undef RECUR_GPU_DECLARE_LAUNCH
};

// The host emulation: never fails.
std::unique_ptr<Device> CreateHostDevice();

// CUDA device `ordinal`. Unsupported when this build has no CUDA path
// (RECUR_CUDA off or no nvcc); Unsupported with the CUDA runtime's message
// when there is no usable device or driver ("CUDA driver version is
// insufficient for CUDA runtime version" on a machine without a GPU).
Status CreateCudaDevice(int ordinal, std::unique_ptr<Device>* out);

// Whether this build includes the CUDA path.
bool CudaBuilt();

}  // namespace recur::impl::gpu

#endif  // RECUR_PLATFORMS_CUDA_GPU_DEVICE_H_
