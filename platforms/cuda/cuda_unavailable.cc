// CreateCudaDevice for builds without the CUDA path (RECUR_CUDA off, or no
// nvcc found).
#include "gpu_device.h"

namespace recur::impl::gpu {

Status CreateCudaDevice(int /*ordinal*/, std::unique_ptr<Device>* /*out*/) {
  return Unsupported("this build has no CUDA path: configure with -DRECUR_CUDA=ON on a machine "
                     "with nvcc (docs/correctness.md, \"recur-parity and the CUDA path\")");
}

bool CudaBuilt() { return false; }

}  // namespace recur::impl::gpu
