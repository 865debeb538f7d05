// The optional GPU path (issue 8): the forward pass of a loaded .recur model
// on a gpu::Device, for parity against GPU training runs (recur-parity). It
// computes the same model as the CPU session, not the same way: each layer is
// a cuBLAS product (f32, TF32 off) and the kernels of gpu_kernels.h; the
// linear attention layers run the paper's Algorithm 1 (LinearAttentionScan).
//
// Covered: token or feature inputs (embedding, input projection, learned
// positions), pre- and post-norm blocks, linear attention (elu+1, relu and
// poly2 feature maps; causal and encoder), softmax attention and sliding-
// window attention (causal and encoder), the FFN (relu, gelu), final norm,
// head (none, softmax, log-softmax), and f32/f16/bf16/int8 weights (narrow
// weights are decoded to f32 once, at upload). Other mixers and the Favor
// feature maps are Unsupported, naming the block.
//
// One stream, from an empty state. Keys and values of the softmax-family
// layers are kept for the whole sequence (not a ring buffer): this path is
// for parity runs, not for unbounded streams.
#ifndef RECUR_PLATFORMS_CUDA_GPU_FORWARD_H_
#define RECUR_PLATFORMS_CUDA_GPU_FORWARD_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "gpu_device.h"
#include "model/model.h"

namespace recur::gpu {

enum class Mode {
  kParallel,  // every layer over all n positions at once (encoders: the only mode)
  kStep,      // the whole model one position at a time (the RNN form; causal models)
};

// Called after every block with the residual stream of the positions just
// computed, on the host: (rows, d_model), rows = n (kParallel) or 1 (kStep).
using LayerObserver = void (*)(void* user, size_t layer, const float* x, size_t rows);

class GpuModel {
 public:
  // Uploads `model`'s weights to `device`. `model` and `device` must outlive
  // the GpuModel. Unsupported, naming the block, for what the GPU path lacks.
  static Status Create(const Model& model, Device* device, std::unique_ptr<GpuModel>* out);
  ~GpuModel();

  // Runs one fresh stream over n positions: tokens (n) or features
  // (n, feature_width), the other null. out: (n, output_width) floats.
  // InvalidArgument for out-of-vocabulary tokens or a missing input;
  // Unsupported for kStep on an encoder; OutOfRange past learned positions.
  Status Run(Mode mode, size_t n, const int32_t* tokens, const float* features, float* out,
             LayerObserver observer = nullptr, void* user = nullptr);

  GpuModel(const GpuModel&) = delete;
  GpuModel& operator=(const GpuModel&) = delete;

 private:
  struct Dense {
    float* weight = nullptr;  // (out, in), f32
    float* bias = nullptr;    // (out) or null
    size_t in = 0, out = 0;
  };
  struct Norm {
    float* gamma = nullptr;
    float* beta = nullptr;
    float eps = 0.0f;
  };
  struct Block {
    Norm norm1, norm2;
    bool linear = false;  // linear attention; else the softmax family
    bool causal = true;
    size_t heads = 0, dk = 0, dv = 0, c = 0;
    // linear attention
    bool poly2 = false;
    FeatureMap feature_map = FeatureMap::kEluPlusOne;
    float eps = 0.0f;
    // softmax family
    bool sliding = false;
    size_t window = 0, globals = 0;
    uint32_t* dilation = nullptr;  // (heads), device
    float scale = 1.0f;
    Dense query, key, value, out;
    Dense ffn1, ffn2;
    Activation activation = Activation::kRelu;
  };
  struct Buffers;

  GpuModel(const Model& model, Device* device) : model_(model), device_(device) {}
  Status Upload(const void* host, size_t bytes, void** out);
  Status UploadFloats(const float* host, size_t n, float** out);
  Status UploadDense(const DenseView& view, Dense* out);
  Status UploadNorm(const NormView& view, Norm* out);
  Status LoadBlock(size_t layer, Block* out);

  Status Linear(const Dense& d, const float* x, size_t rows, float* y, bool accumulate,
                Activation activation = Activation::kNone);
  Status Forward(Buffers& b, size_t rows, size_t p0, size_t n, float* out, LayerObserver observer,
                 void* user);
  Status RunBlock(Buffers& b, size_t layer, size_t rows, size_t p0, size_t n);
  Status Mixer(Buffers& b, size_t layer, const float* in, size_t rows, size_t p0, size_t n,
               float* y);

  const Model& model_;
  Device* device_;
  std::vector<void*> allocations_;  // weights, freed with the model
  std::vector<Block> blocks_;
  float* embedding_ = nullptr;
  float* positions_ = nullptr;
  Dense input_projection_, head_;
  Norm final_norm_;
  size_t max_qk_ = 0, max_v_ = 0, max_c_ = 0, max_ff_ = 0;  // widest per-row buffers
};

}  // namespace recur::gpu

#endif  // RECUR_PLATFORMS_CUDA_GPU_FORWARD_H_
