// recur-parity's GPU columns: the GPU path (platforms/cuda) on a CUDA device
// or on its host emulation. Kept apart from recur_parity.cc, which uses the
// public C++ wrapper: the runtime's internal types must not meet the
// wrapper's classes of the same names in one file.
#ifndef RECUR_TOOLS_PARITY_GPU_RUNS_H_
#define RECUR_TOOLS_PARITY_GPU_RUNS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "recur/recur.h"

namespace tools {

class GpuRuns {
 public:
  // The GPU path of `model` on CUDA device 0 (`cuda`) or the host emulation.
  // Null with *error (the reason) when the device or the model cannot be had;
  // *unavailable is then true when there is no CUDA path or device (as
  // opposed to a model the GPU path cannot run).
  static std::unique_ptr<GpuRuns> Open(const recur_model* model, bool cuda, bool* unavailable,
                                       std::string* error);
  ~GpuRuns();

  // "cuda: NVIDIA H100 80GB HBM3 (sm_90)" or "host emulation".
  std::string device_name() const;

  // One fresh stream over n positions, every layer at once (`step` false) or
  // the whole model a position at a time: layers[i] (n, d_model), output
  // (n, output_width). False with *error.
  bool Run(bool step, size_t n, const int32_t* tokens, const float* features,
           std::vector<std::vector<float>>* layers, std::vector<float>* output,
           std::string* error);

 private:
  struct Impl;
  explicit GpuRuns(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tools

#endif  // RECUR_TOOLS_PARITY_GPU_RUNS_H_
