// The loaded model: resolved, validated views into the model bytes. Built
// once by the loader (engine/model_loader.h), immutable afterwards, shared by
// every session.
#ifndef RECUR_MODEL_MODEL_H_
#define RECUR_MODEL_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backends/dense_runner.h"
#include "core/platform.h"
#include "core/status.h"
#include "model/model_file.h"
#include "schema/recur_generated.h"
#include "text/vocabulary.h"

namespace recur::impl {

class Mixer;  // mixers/mixer.h, a layer above: the model holds mixers by pointer only

// Widths above this are rejected so that products of dims fit in 32 bits.
inline constexpr uint32_t kMaxWidth = 1u << 20;
// InvalidModel naming `what` unless 0 < value <= kMaxWidth.
Status CheckWidth(uint32_t value, const char* what);

struct NormView {
  fb::NormKind kind = fb::NormKind::LayerNorm;
  const float* gamma = nullptr;  // (d_model); the scale norms: their g, (1)
  const float* beta = nullptr;   // (d_model), layer norm only
  float eps = 1e-5f;
};

// A block without a feed-forward (FeedForward.d_ff 0) has linear1.weight
// null, and no norm2.
struct FeedForwardView {
  DenseView linear1;  // d_model → d_ff (glu: → 2·d_ff)
  DenseView linear2;  // d_ff → d_model
  fb::Activation activation = fb::Activation::Relu;
  bool glu = false;  // act(first d_ff of linear1) ⊙ (second d_ff)
  // (d_model) the token mix of the FFN's input (recur.fbs FeedForward.token_mix), or null.
  const float* token_mix = nullptr;
  size_t token_mix_width = 0;  // d_model with a token mix, else 0
  bool present() const { return linear1.weight != nullptr; }
  // Floats of the block's state per stream for the token mix: h₋₁.
  size_t token_mix_floats() const { return token_mix_width; }
};

// A block's token shift (docs/attention-math.md §13): the segments of its
// normalised inputs that move, each `shift` positions (1: from the previous
// position, −1: from the next).
struct TokenShiftView {
  struct Segment {
    size_t offset = 0, width = 0;
    int shift = 0;
  };
  std::vector<Segment> moved;  // the segments with shift ±1, in feature order
  bool present = false;        // the block has a token shift (all its segments may pass)
  bool ffn = false;            // norm2's output shifts too
  // Floats one shifted input carries from a position to the next (Σ width of
  // the shift-1 segments) in a causal block's state; 0 in an encoder block,
  // which sees whole sequences.
  size_t carried = 0;
  // The block's token-shift state per stream: `carried` for the mixer's
  // input, and as many again for the FFN's.
  size_t state_floats() const { return carried * (ffn ? 2 : 1); }
};

struct BlockView {
  NormView norm1;
  NormView norm2;                // gamma null when the block has no feed-forward
  const Mixer* mixer = nullptr;  // owned by Model::mixers
  FeedForwardView ffn;
  TokenShiftView token_shift;
};

struct Model {
  platform::MappedFile file;  // released with the model when loaded from a file
  const fb::Model* root = nullptr;
  const uint8_t* bytes = nullptr;  // the whole file
  size_t size = 0;
  const uint8_t* segment = nullptr;  // the data segment (tensors, root->data_size() bytes)

  // Identifies the model (metadata and weights) in state blobs. Computed on
  // first use, not at load, so that loading never reads every weight page.
  uint64_t fingerprint() const;

  uint32_t d_model = 0;
  fb::NormPlacement norm_placement = fb::NormPlacement::Pre;
  bool reversible = false;  // fb::Residual::Reversible(Concat): two residual streams
  bool concat_streams = false;  // fb::Residual::ReversibleConcat: [x1 | x2] at the end
  // The width of what reaches the final norm and head: d_model, or 2·d_model
  // when a reversible model's streams are concatenated.
  uint32_t stream_width() const { return concat_streams ? 2 * d_model : d_model; }

  fb::InputKind input_kind = fb::InputKind::Tokens;
  uint32_t vocab_size = 0;
  uint32_t feature_width = 0;
  // (vocab_size, d_model) of any weight type; a token's row is decoded to
  // f32 on lookup (kernels::DecodeWeightRows). bias unused.
  DenseView embedding;
  // Token ids ↔ bytes (recur.fbs Tokenizer); vocabulary.available() says
  // why not when the model has none.
  text::Vocabulary vocabulary;
  DenseView input_projection;         // weight null: frames go in as they are
  const float* positions = nullptr;   // (max_positions, d_model) or null
  // Positions per stream: the fewest rows of the learned positions and the
  // mixers' rotary tables (Mixer::max_positions); 0 = unbounded. What ends
  // there, for messages after "the": "model's learned positions", "rotary
  // table rows of blocks.1".
  uint32_t max_positions = 0;
  std::string max_positions_source = "model's learned positions";
  // Fixed sinusoidal positions: the frequencies f_i (d_model/2; empty: none;
  // from base or as stored) and the learned scale (1) or null.
  std::vector<double> sinusoid_freq;
  const float* position_scale = nullptr;

  std::vector<BlockView> blocks;
  // shared_ptr: its deleter is bound where the mixer is made, so this layer
  // destroys mixers without seeing their type.
  std::vector<std::shared_ptr<const Mixer>> mixers;
  NormView input_norm;                // gamma null: none; after the positions
  NormView final_norm;                // gamma null: no final norm
  DenseView head;                     // weight null: output is the d_model stream
  fb::HeadActivation head_activation = fb::HeadActivation::None;

  // Every dense layer in model order: the input projection, per block the
  // mixer's (Mixer::CollectDense), ffn.linear1 and ffn.linear2 (y +=), then
  // the head. Sessions prepare a GEMM backend or plan scratch for each.
  std::vector<DenseLayerUse> dense_layers;

  uint32_t output_width = 0;
  uint64_t parameter_count = 0;
  // Recurrent state per stream, all layers: state_floats +
  // state_floats_per_position × a session's max_context (KV caches).
  size_t state_floats = 0;
  size_t state_floats_per_position = 0;
  // Of state_floats, the compensations that a session with plain sums omits
  // (Mixer::compensation_floats).
  size_t compensation_floats = 0;

  Model();
  ~Model();
  mutable std::once_flag fingerprint_once;
  mutable uint64_t fingerprint_value = 0;

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
};

// x (d_model) += the model's sinusoidal positions at stream position
// `position` (recur.fbs SinusoidPositions): angles and sin/cos in double, one
// rounding to float per element, so that any position (no length limit) is
// as exact as the first.
void AddSinusoidPositions(const Model& model, uint64_t position, float* x);

// What one RNN step of one stream costs in its dense layers: the weight bytes
// it streams and the FLOPs (2 per multiply-add), of which integer_flops on
// weights with integer dot-product kernels (kernels::HasIntegerDot: int8 and
// int4). Mixer arithmetic, norms and activations are small beside them and
// not counted.
struct StepCost {
  uint64_t weight_bytes = 0;
  uint64_t flops = 0;
  uint64_t integer_flops = 0;
};
StepCost EstimateStepCost(const Model& model);

// Resolves tensor references during loading and checks them against the
// shapes the model structure implies; one place for every shape rule.
class TensorResolver {
 public:
  TensorResolver(const fb::Model* root, const uint8_t* segment, uint64_t segment_size)
      : root_(root), segment_(segment), segment_size_(segment_size) {}

  // Validates every tensor record (bounds, alignment, dtype, byte size).
  Status CheckTensorTable() const;

  // A float tensor of exactly `shape`. `what` names the use in messages
  // ("blocks.3.mixer.key.weight"). index -1 is an error unless `optional`.
  Status Get(int32_t index, const char* what, std::initializer_list<int64_t> shape,
             bool optional, const float** out);
  // A float tensor [rows, cols] of any rows in [1, 2³¹] (a table with a row
  // per position), with *rows set; index -1 is an error unless `optional`
  // (then *rows = 0).
  Status GetRows(int32_t index, const char* what, int64_t cols, bool optional, const float** out,
                 int64_t* rows);
  // The rows (out) of a dense layer's weight [out, in], of any weight type,
  // for a layer whose table does not give its width (a low-rank path's rank);
  // InvalidModel unless the weight is 2-D with in == `in_features` and out in
  // [1, kMaxWidth]. Counts no parameters (GetDense does).
  Status DenseRows(const fb::Dense* dense, const std::string& what, uint32_t in_features,
                   uint32_t* rows) const;
  // A matrix [out, in] of any weight type with its scales, checked as a
  // dense layer's weight is (the head's, or the token embedding, read a row
  // at a time by kernels::DecodeWeightRows). `what` names it in messages.
  Status GetWeight(int32_t index, const std::string& what, uint32_t out_features,
                   uint32_t in_features, DenseView* out);
  // nn.Linear weight [out, in] (GetWeight) and, if present, bias [out].
  Status GetDense(const fb::Dense* dense, const std::string& what, uint32_t out_features,
                  uint32_t in_features, DenseView* out);
  Status GetNorm(const fb::LayerNorm* norm, const std::string& what, uint32_t width,
                 NormView* out);

  // The parameters of the tensors resolved so far, each tensor counted once
  // (a head tied to the embedding is one tensor referenced twice).
  uint64_t parameter_count() const { return parameter_count_; }

 private:
  // Adds `parameters` for tensor `index` unless it was counted before.
  void Count(int32_t index, uint64_t parameters);

  const fb::Model* root_;
  const uint8_t* segment_;
  uint64_t segment_size_;
  uint64_t parameter_count_ = 0;
  std::set<int32_t> counted_;
};

}  // namespace recur::impl

#endif  // RECUR_MODEL_MODEL_H_
