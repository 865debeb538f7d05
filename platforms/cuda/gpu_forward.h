// The optional GPU path: the forward pass of a loaded .recur model
// on a gpu::Device, for parity against GPU training runs (recur-parity). It
// computes the same model as the CPU session, not the same way: each layer is
// a cuBLAS product (f32, TF32 off) and the kernels of gpu_kernels.h; the
// linear attention layers run the paper's Algorithm 1 (LinearAttentionScan).
//
// Covered: token or feature inputs (embedding, input projection, learned
// positions), pre- and post-norm blocks, every mixer of mixers.inc in its
// causal and encoder forms (linear attention with every feature map,
// softmax, sliding window, AFT simple/local/conv/full, FLASH, GAU, and the
// encoder-only Linformer and Reformer), the FFN (relu, gelu), final norm,
// head (none, softmax, log-softmax), and f32/f16/bf16/int8 weights (narrow
// weights are decoded to f32 once, at upload). Not covered (Create fails
// with Unsupported, naming the block): rotary position embeddings
// (mixer.rotary, whether from a base, a stored θ or a stored table) and token
// shift. Sinusoidal positions run from the loaded model's frequencies, the
// stored ones (input.position_freq) included.
//
// One stream, from an empty state. Layers whose CPU state is a ring or a
// cache keep every position of the sequence here (keys and values of
// (n, width)): this path is for parity runs, not for unbounded streams.
#ifndef RECUR_PLATFORMS_CUDA_GPU_FORWARD_H_
#define RECUR_PLATFORMS_CUDA_GPU_FORWARD_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "gpu_device.h"
#include "model/model.h"

namespace recur::impl::gpu {

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
  // InvalidArgument for out-of-vocabulary tokens or a missing input or
  // output; Unsupported for kStep on an encoder; OutOfRange past learned
  // positions or a mixer's bound (Mixer::max_sequence); these leave `out`
  // untouched. A device error (OutOfMemory, Internal) may leave it partly
  // written. Not thread-safe: one Run at a time per GpuModel (and Device).
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
    NormKind kind = NormKind::kLayerNorm;
    float scale = 1.0f;  // kScaleNorm: c
  };
  enum class Kind { kLinear, kSoftmax, kAft, kLinformer, kGated, kReformer };
  struct Block {
    Norm norm1, norm2;
    Kind kind = Kind::kLinear;
    bool causal = true;
    // Widths: q and k (H·dk; AFT: D; gated: s), v and o (H·dv; AFT: D; gated: E).
    size_t heads = 1, dk = 0, dv = 0, c = 0;
    float scale = 1.0f;  // softmax family, Linformer, Reformer: 1/√dk; gated: its scale
    // linear attention: φ
    bool poly2 = false;
    FeatureMap feature_map = FeatureMap::kEluPlusOne;
    float* omega = nullptr;  // Favor: (dk, cols), device; null otherwise
    size_t omega_cols = 0;
    float favor_temp = 0.0f, favor_log_m = 0.0f;
    float eps = 0.0f;
    // sliding window
    bool sliding = false;
    size_t window = 0, globals = 0;
    uint32_t* dilation = nullptr;  // (heads), device
    // AFT
    AftKind aft = AftKind::kSimple;
    float* aft_bias = nullptr;  // local: (offsets, D)
    float *aft_w = nullptr, *aft_u = nullptr, *aft_v = nullptr;  // full
    size_t aft_rank = 0, t_max = 0;  // full and GAU: max_length
    bool aft_multiply = false;
    // Linformer: E, F (H or 1, k, n)
    float *lin_e = nullptr, *lin_f = nullptr;
    bool e_per_head = false, f_per_head = false;
    size_t proj_rows = 0, seq_len = 0;
    // GAU (chunk 0) and FLASH: scale/offset rows (qk_rows, s) and the bias
    float *gamma = nullptr, *beta = nullptr, *rel_bias = nullptr;
    size_t qk_rows = 0, chunk = 0;
    // Reformer
    float* rotations = nullptr;  // (rounds, dk, buckets / 2)
    size_t buckets = 0, rounds = 0;
    // Dense layers: query, key, value, out; gated: u_proj, v_proj, z_proj, out;
    // Reformer: query, value, out (key unused).
    Dense query, key, value, out;
    Dense ffn1, ffn2;
    Activation activation = Activation::kRelu;
    bool glu = false;  // ffn1 is [2·d_ff, d_model]: act(a) ⊙ b
  };
  struct Buffers;

  GpuModel(const Model& model, Device* device) : model_(model), device_(device) {}
  Status Upload(const void* host, size_t bytes, void** out);
  Status UploadFloats(const float* host, size_t n, float** out);
  Status UploadDense(const DenseView& view, Dense* out);
  Status UploadNorm(const NormView& view, Norm* out);
  // A float tensor of the model by index and exact shape, uploaded.
  Status UploadTensor(int32_t index, const std::string& what,
                      std::initializer_list<int64_t> shape, float** out);
  Status LoadBlock(size_t layer, Block* out);
  Status LoadLinear(const fb::LinearAttention* t, const std::string& layer, Block* b);
  Status LoadAft(const fb::Block* table, const std::string& layer, Block* b);
  Status LoadGated(const fb::Block* table, const std::string& layer, Block* b);

  Status Linear(const Dense& d, const float* x, size_t rows, float* y, bool accumulate,
                Activation activation = Activation::kNone);
  Status Forward(Buffers& b, size_t rows, size_t p0, size_t n, float* out, LayerObserver observer,
                 void* user);
  Status RunBlock(Buffers& b, size_t layer, size_t rows, size_t p0, size_t n);
  Status Mixer(Buffers& b, size_t layer, const float* in, size_t rows, size_t p0, size_t n,
               float* y);
  Status LinearMixer(Buffers& b, size_t layer, const float* in, size_t rows);
  Status GatedMixer(Buffers& b, size_t layer, const float* in, size_t rows, size_t p0, size_t n);
  Status ReformerMixer(Buffers& b, size_t layer, const float* in, size_t n);

  const Model& model_;
  Device* device_;
  std::vector<void*> allocations_;  // weights, freed with the model
  std::vector<Block> blocks_;
  float* embedding_ = nullptr;
  float* positions_ = nullptr;
  double* sinusoid_freq_ = nullptr;  // (d_model / 2) or null: no sinusoidal positions
  float* position_scale_ = nullptr;
  Dense input_projection_, head_;
  Norm input_norm_;
  Norm final_norm_;
  // Widest per-row buffers: q/k (max_qk_), features (max_c_), v/o/num
  // (max_v_), the FFN, and the gated mixers' u (max_e_).
  size_t max_qk_ = 0, max_v_ = 0, max_c_ = 0, max_ff_ = 0, max_e_ = 0;
};

}  // namespace recur::impl::gpu

#endif  // RECUR_PLATFORMS_CUDA_GPU_FORWARD_H_
