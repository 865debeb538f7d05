// A session: B streams of one model in RNN mode. Plans every buffer at
// creation; Step binds pointers and runs, with no allocation.
#ifndef RECUR_ENGINE_SESSION_H_
#define RECUR_ENGINE_SESSION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/dense_runner.h"
#include "core/arena.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "kernels/dense/dense.h"
#include "model/model.h"

namespace recur::impl {

struct SessionOptions {
  size_t batch = 1;
  size_t threads = 1;
  size_t prefill_chunk = 0;  // positions per chunk in Prefill; 0 = DefaultPrefillChunk
  size_t prefill_min = 0;    // Prefill of fewer positions steps instead; 0 = default
  // GEMM backend for every dense layer it supports (highway for the rest):
  // "highway", "xnnpack", "onednn"; null, "" or "auto" = the fastest per
  // layer shape and row count, measured at creation (backends/dense_runner.h),
  // among backends that do not allocate per call: "onednn" must be named.
  const char* backend = nullptr;
  // recur_weight_packing: 0 auto (pack when batch >= backends::kPackedMinRows), 1 off, 2 on.
  uint32_t weight_packing = 0;
  // Positions a stream may hold when a mixer's state grows with the sequence
  // (a KV cache); 0 = DefaultMaxContext. Ignored by fixed-state models.
  size_t max_context = 0;
  // recur_state_sums: 0 = linear attention's running sums S and z are
  // compensated (Kahan), 1 = plain float sums: half that state and its
  // memory traffic, for sequences short enough not to drift
  // (docs/reliability.md "Long runs"). Blobs saved under one load only into sessions with the same.
  uint32_t state_sums = 0;
  // recur_int8_activations: how highway runs int8 layers: 0 auto
  // (kernels::DenseI8DotPreferred), 1 float activations, 2 quantised
  // (kernels::DenseI8Dot), 3 blocks as llama.cpp (kernels::DenseBlockQ8). Heap
  // sessions only; an arena session runs float.
  uint32_t int8_activations = 0;
};

class Session;
// Deletes a heap session; only destroys one that lives in a caller's arena.
struct SessionDeleter {
  void operator()(Session* session) const;
};
using SessionPtr = std::unique_ptr<Session, SessionDeleter>;

// The model's learned positions when it has them, else 4096; a session
// created with max_context 0 takes this, capped at MaxContextBound.
size_t DefaultMaxContext(const Model& model);

// The most positions a stream can hold because a causal mixer's parameters
// end there (AFT-full's and GAU's max_length); 0 = no such bound. *block (if
// not null) is set to the first block with the smallest bound.
size_t MaxContextBound(const Model& model, size_t* block = nullptr);


// Positions per Prefill chunk when the options leave it 0. A chunk streams
// every weight once, so a model whose step reads more than 8 MiB of weights
// gets chunks of at least 256 rows (batch × positions); otherwise 64
// positions. Measured (docs/performance.md "Prefill chunk", recur-bench --prefill
// 128,1024,4096 --chunk 64|256 on paper_mnist, AMD EPYC): 256 positions at
// batch 1 are 3-4% faster for 1,024 positions and more, on 1 and 2 threads,
// and 2-3 points slower at 128.
size_t DefaultPrefillChunk(size_t batch, uint64_t step_weight_bytes);
// Prefills shorter than this run as steps. Measured (docs/performance.md "Prefill
// threshold", recur-bench --prefill 1,2,3,4,8 --prefill-min 1 vs 100000): a
// model whose step streams more weights than L2 holds gains from a chunk at
// 2 positions already (paper_mnist, 25 MB: 0.98 vs 1.8 ms), while a model
// that stays in cache steps faster up to ~8 (0.3 MB: 8 positions 25.6 µs
// either way, 2 positions 6.6 vs 11 µs).
size_t DefaultPrefillMin(uint64_t step_weight_bytes);

// Called after each block with the residual stream, (batch, steps, d_model);
// for parity tests and debugging. A reversible model (two streams x1, x2)
// passes x1 + x2: what goes on to the final norm and head after the last
// block, and the reference's "layer.{i}".
using LayerObserver = void (*)(void* context, size_t layer, const float* x, size_t batch,
                               size_t steps);

class Session {
 public:
  // A session on the heap: one block for the session's buffers (plus the
  // thread pool and the dense layers' prepared ops).
  static Status Create(const Model* model, const SessionOptions& options, SessionPtr* out);

  // A session carved from `arena` (the caller's memory): the Session object
  // and every buffer come from it, and nothing is allocated on the heap from
  // here to the session's end. Such a session runs on the calling thread
  // only (options.threads 1), every dense layer on highway unpacked
  // (backend null, "", "auto" or "highway"; weight_packing not on), and has
  // no Encode or Fork (both would need memory the plan does not hold):
  // RECUR_UNSUPPORTED otherwise. An arena with too little room is
  // RECUR_OUT_OF_MEMORY; ArenaBytes says how much is enough.
  static Status CreateInArena(const Model* model, const SessionOptions& options, Arena* arena,
                              SessionPtr* out);
  // Adds what CreateInArena(model, options, ...) takes to `counter`, a
  // counting arena (after anything the caller carves first).
  static Status CountArena(const Model* model, const SessionOptions& options, Arena* counter);

  // One element per stream: tokens (batch) or features (batch, feature_width);
  // `count` values. Writes (batch, output_width) floats. Validates every
  // input before any state changes, so a failed step leaves the session as
  // it was.
  Status Step(const int32_t* tokens, const float* features, size_t count, float* out);

  // `steps` elements for every stream in chunked-parallel mode: tokens
  // (batch, steps) or features (batch, steps, feature_width), stream-major.
  // Writes (batch, steps, output_width) floats to `out`, or nothing when out
  // is null. Leaves the state `steps` calls of Step would leave.
  Status Prefill(size_t steps, const int32_t* tokens, const float* features, size_t count,
                 float* out);

  // Runs every stream's whole sequence of `steps` elements from an empty
  // history and writes (batch, steps, output_width) floats; the session's
  // stream states are neither used nor changed. The only way to run
  // non-causal (encoder) models; for causal ones it equals reset + prefill.
  // Allocates working memory for batch × steps rows per call.
  Status Encode(size_t steps, const int32_t* tokens, const float* features, size_t count,
                float* out);

  // stream -1 resets all streams.
  Status Reset(int stream);

  size_t state_blob_size() const;
  // Blobs carry the model's fingerprint, tagged when this session's plain
  // sums change the state's layout (state_blob.cc).
  uint64_t state_fingerprint(bool compensated_sums) const;
  Status SaveState(int stream, void* buffer, size_t size) const;
  Status LoadState(int stream, const void* buffer, size_t size);
  Status Fork(SessionPtr* out) const;

  void set_layer_observer(LayerObserver observer, void* context) {
    observer_ = observer;
    observer_context_ = context;
  }

  const Model& model() const { return *model_; }
  // Which backend runs the dense layers, per planned row count:
  // "rows 64: onednn x33 highway x2; rows 4096: ...".
  std::string dense_summary() const { return dense_ ? dense_->Summary() : std::string(); }
  size_t batch() const { return batch_; }
  uint64_t position(size_t stream) const { return positions_[stream]; }
  // Stream b's recurrent state (state_floats() floats), and layer l's part.
  const float* stream_state(size_t b) const { return state_ + b * state_stride_; }
  const float* layer_state(size_t b, size_t l) const { return stream_state(b) + layer_offsets_[l]; }
  size_t layer_state_floats(size_t l) const { return layer_offsets_[l + 1] - layer_offsets_[l]; }
  size_t state_floats() const { return layer_offsets_[model_->blocks.size()]; }
  // 0 for models whose state does not grow with the sequence.
  size_t max_context() const { return grows_ ? max_context_ : 0; }

 private:
  friend struct SessionDeleter;
  Session(const Model* model, const SessionOptions& options);
  ~Session() = default;
  static Status CheckOptions(const Model* model, const SessionOptions& options);
  static Status CheckArenaOptions(const SessionOptions& options);
  // Carves every buffer from `arena` in a fixed order; on a counting arena
  // it only counts (and leaves the pointers null).
  void Carve(Arena* arena);
  // Zero state, positions and layer offsets, once carved.
  void InitBuffers();
  Status PrepareDense();
  Status CheckInput(const int32_t* tokens, const float* features, size_t count,
                    size_t steps) const;
  // Where a forward pass works: buffers for batch × steps rows, the
  // streams' states and positions.
  struct Workspace {
    float* x;                    // (rows, d_model) residual stream
    float* h;                    // (rows, d_model)
    float* ffn;                  // (rows, max(d_ff, output_width))
    float* scratch;              // mixer scratch
    float* state;                // (batch, state_stride_)
    const uint64_t* positions;   // (batch) elements consumed before this pass
    float* x2;                   // (rows, d_model) a reversible model's second stream, or null
    float* shared;               // (rows, SharedRowFloats) StepContext::shared_rows, or null
  };
  Status CheckCausal(const char* call) const;
  // The model over `steps` positions of every stream; inputs are
  // (batch, steps[, F]) rows, `out` (batch, steps, output_width) or null.
  void Forward(const Workspace& ws, const int32_t* tokens, const float* features, size_t steps,
               float* out);
  void Embed(const Workspace& ws, const int32_t* tokens, const float* features, size_t steps);
  void RunBlock(const Workspace& ws, const BlockView& block, size_t layer, size_t steps);
  // Token shift (docs/attention-math.md §13) of block `layer`'s normalised
  // input h, (batch, steps, d_model): the mixer's, or the FFN's (`ffn`).
  // Shift-1 features come from the carried state in a causal block.
  void ShiftTokens(const Workspace& ws, const BlockView& block, size_t layer, size_t steps,
                   bool ffn, float* h);
  // A reversible block: x1 += mixer(norm1(x2)); x2 += ffn(norm2(x1)).
  // Where block `layer`'s carries start in a stream's state: after its mixer's
  // state (BlockStateFloats: the token shift's, then the FFN token mix's).
  size_t CarriesAt(const BlockView& block, size_t layer) const;
  // h (batch, steps, d_model), norm2's output, ← h + (h₋₁ − h) ⊙ ffn.token_mix,
  // h₋₁ carried in the block's state.
  void MixFfnTokens(const Workspace& ws, const BlockView& block, size_t layer, size_t steps,
                    float* h);
  void RunReversibleBlock(const Workspace& ws, const BlockView& block, size_t layer, size_t steps);
  void RunFeedForward(const Workspace& ws, const FeedForwardView& ffn, const float* x, float* y,
                      size_t rows);
  void Norm(const NormView& norm, const float* x, float* y, size_t rows);
  void NormRows(const NormView& norm, const float* x, float* y, size_t rows, size_t width);
  // x += delta over n floats, split over the pool.
  void AddResidual(const float* delta, float* x, size_t n);
  // The final norm (in place) and head of x (rows, stream_width) into out.
  void Head(float* x, float* out, size_t rows);
  // A concatenating reversible model's output: x2 ← [x1 | x2] per row.
  void ConcatStreams(const float* x1, float* x2, size_t rows);
  Workspace StreamWorkspace() { return {x_, h_, ffn_, scratch_, state_, positions_, x2_, shared_}; }

  const Model* model_;
  uint64_t weight_bytes_;  // EstimateStepCost(*model_).weight_bytes: a step's weights
  size_t batch_;
  size_t threads_;
  bool in_arena_ = false;                         // carved from the caller's arena
  ThreadPool* pool_ = nullptr;                    // owned_pool_, or the shared caller-only pool
  std::unique_ptr<ThreadPool> owned_pool_;        // threads > 1
  std::unique_ptr<DenseRunner> dense_;            // the dense layers' prepared ops (heap only)
  size_t chunk_;                                  // max positions per Forward
  size_t prefill_min_;
  std::string backend_;                           // SessionOptions::backend
  uint32_t weight_packing_;                       // SessionOptions::weight_packing
  uint32_t int8_activations_;                     // SessionOptions::int8_activations
  bool compensated_sums_;                         // SessionOptions::state_sums == 0
  size_t max_context_;                            // SessionOptions::max_context, resolved
  bool grows_ = false;                            // some mixer keeps a KV cache
  // Steps per call whose batch × steps × widest row of floats stays within
  // size_t (CheckInput; planned once, not per call).
  size_t max_steps_ = 0;
  bool causal_ = true;                            // every block has a recurrent form
  size_t state_stride_ = 0;                       // floats per stream, padded to 16
  // The session's buffers, carved from one block (Carve): the caller's
  // arena, or owned_block_ on the heap.
  std::unique_ptr<void, void (*)(void*)> owned_block_{nullptr, nullptr};
  size_t* layer_offsets_ = nullptr;               // (layers + 1) into a stream's state
  float* state_ = nullptr;                        // (batch, state_stride_)
  uint64_t* positions_ = nullptr;                 // (batch) elements consumed per stream
  float* x_ = nullptr;                            // (batch·chunk, d_model) residual stream
  float* h_ = nullptr;                            // (batch·chunk, d_model)
  float* x2_ = nullptr;                           // reversible models: the second stream
  float* ffn_ = nullptr;                          // (batch·chunk, max(d_ff, output_width))
  float* scratch_ = nullptr;                      // mixer scratch, max over layers
  float* shared_ = nullptr;                       // the mixers' shared rows, or null
  float** layer_states_ = nullptr;                // (batch) pointers, rebound per layer
  int32_t* tokens_stage_ = nullptr;               // (batch, chunk): one Prefill chunk
  float* features_stage_ = nullptr;               // (batch, chunk, feature_width)
  // Arena sessions: the dense kernels' scratch, planned for every dense
  // layer at Step's and Prefill's row counts and bound while they run.
  kernels::DenseScratch dense_scratch_;
  LayerObserver observer_ = nullptr;
  void* observer_context_ = nullptr;
};

}  // namespace recur::impl

#endif  // RECUR_ENGINE_SESSION_H_
