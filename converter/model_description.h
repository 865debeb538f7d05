// The converter's in-memory description of a model: what a config.json says
// (in any layout) and what the writer turns into the FlatBuffer of
// runtime/schema/recur.fbs. Tensors are keyed by their recur-layout names
// (models/configs/README.md), whatever layout they were imported from.
#ifndef RECUR_CONVERTER_MODEL_DESCRIPTION_H_
#define RECUR_CONVERTER_MODEL_DESCRIPTION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/model_file.h"

namespace recur::impl::converter {

// The source layouts recur-convert reads: kAuto (detect), then one per line
// of converter/layouts/layouts.inc.
enum class Layout {
  kAuto,
#define RECUR_LAYOUT(Id, name, file) k##Id,
#include "converter/layouts/layouts.inc"
#undef RECUR_LAYOUT
};

enum class InputKind { kTokens, kFeatures };
enum class NormPlacement { kPre, kPost };
// What every norm of a model computes (recur.fbs NormKind; config "norm").
enum class NormKind {
  kLayerNorm,     // weight, bias [d_model]
  kRmsNorm,       // x/√(mean(x²) + eps) ⊙ weight [d_model]
  kScaleNorm,     // g·x / max(‖x‖₂, eps), g = weight [1]
  kScaleNormRms,  // g·x / max(‖x‖₂/√d_model, eps), g = weight [1]
};
enum class Activation { kRelu, kGelu, kReluSquared, kSilu };
enum class HeadActivation { kNone, kSoftmax, kLogSoftmax };
struct InputDescription {
  InputKind kind = InputKind::kTokens;
  uint32_t vocab_size = 0;     // tokens
  uint32_t feature_width = 0;  // features
  bool projection = false;     // features: a Dense [d_model, feature_width] in front
  uint32_t max_positions = 0;  // > 0: learned absolute positions [max_positions, d_model]
  bool norm = false;           // a LayerNorm (input.norm) after the positions
  // Fixed sinusoidal positions (config "positions"), with a learned scalar
  // scale (input.position_scale [1]) or none.
  bool sinusoid = false;
  double sinusoid_base = 10000.0;
  bool sinusoid_scale = false;
  // The frequencies as stored (input.position_freq [d_model/2]), not from
  // the base (config "positions" "freq": "stored").
  bool sinusoid_freq = false;
};

// Rotary position embeddings of a mixer's q and k (config "rotary";
// docs/attention-math.md §12): in each head, pair i of the first `dims`
// features turns by t·base^(−2i/dims) at position t, or by t·θ_i with θ as
// stored, or by a stored table's sine and cosine of t.
struct RotaryDescription {
  uint32_t dims = 0;  // 0: no rotation
  double base = 10000.0;
  bool half = false;  // pairs (i, i + dims/2) ("half"); else (2i, 2i + 1) ("interleaved")
  bool theta = false;       // θ from blocks.<i>.mixer.rotary.theta [dims/2] ("theta": "stored")
  uint32_t table_rows = 0;  // > 0: [sin | cos] rows blocks.<i>.mixer.rotary.table [rows, dims]
};

// The parameters of one block's mixer. Each mixer declares its own struct,
// derived from MixerParamsOf<itself>, in converter/mixers/<file>.h (e.g.
// LinearAttentionParams in converter/mixers/linear_attention.h).
struct MixerParams {
  virtual ~MixerParams() = default;
  // A copy of the derived struct.
  virtual std::unique_ptr<MixerParams> Clone() const = 0;

  bool causal = true;  // false: the encoder form (whole sequences only)
  // Set only by the mixers that take "rotary" (softmax_attention,
  // linear_attention, sliding_window, flash).
  RotaryDescription rotary;
};

// Gives a mixer's parameter struct its Clone().
template <class Self>
struct MixerParamsOf : MixerParams {
  std::unique_ptr<MixerParams> Clone() const override {
    return std::make_unique<Self>(static_cast<const Self&>(*this));
  }
};

struct MixerType;  // converter/mixers/mixer_converter.h: union tag, config name, converter

// One block's mixer: its type (a line of runtime/mixers/mixers.inc with the
// converter that implements it) and its parameters. A value: copies clone
// the parameters.
class MixerDescription {
 public:
  MixerDescription() = default;
  MixerDescription(const MixerType* type, std::unique_ptr<MixerParams> params)
      : type_(type), params_(std::move(params)) {}
  MixerDescription(const MixerDescription& other)
      : type_(other.type_), params_(other.params_ ? other.params_->Clone() : nullptr) {}
  MixerDescription& operator=(const MixerDescription& other) {
    if (this != &other) *this = MixerDescription(other);
    return *this;
  }
  MixerDescription(MixerDescription&&) noexcept = default;
  MixerDescription& operator=(MixerDescription&&) noexcept = default;

  // Null only for a default-constructed description (no mixer yet).
  const MixerType* type() const { return type_; }
  const MixerParams& params() const { return *params_; }
  MixerParams* mutable_params() { return params_.get(); }
  bool causal() const { return params_ && params_->causal; }

  // The parameters as mixer P's struct; null when they are another mixer's.
  template <class P>
  const P* As() const { return dynamic_cast<const P*>(params_.get()); }
  template <class P>
  P* As() { return dynamic_cast<P*>(params_.get()); }

 private:
  const MixerType* type_ = nullptr;
  std::unique_ptr<MixerParams> params_;
};

// Token shift of a block's normalised inputs (config "token_shift";
// docs/attention-math.md §13): consecutive segments of (width, shift), shift
// 0 (pass), 1 (the previous position's) or −1 (the next's, encoders only).
struct TokenShiftDescription {
  std::vector<std::pair<uint32_t, int32_t>> segments;  // empty: no token shift
  bool ffn = false;                                    // the FFN's input shifts too
};

struct BlockDescription {
  MixerDescription mixer;
  uint32_t d_ff = 0;  // 0: the block has no feed-forward and no norm2
  Activation activation = Activation::kRelu;
  TokenShiftDescription token_shift;
  bool glu = false;  // linear1 [2·d_ff, d_model], h = act(first d_ff) ⊙ (second d_ff)
  // The FFN's input is h + (h₋₁ − h) ⊙ ffn.token_mix [d_model] (RWKV's channel
  // mix; recur.fbs FeedForward.token_mix); pre-norm only.
  bool token_mix = false;
};

struct HeadDescription {
  uint32_t out = 0;
  HeadActivation activation = HeadActivation::kNone;
};

struct MetadataDescription {
  std::string producer;
  std::string source_hash;
  std::string notes;
  std::string input_description;
  std::string output_description;
};

// A model's vocabulary (recur.fbs Tokenizer, kind Rwkv): each token's bytes,
// id = index; end_of_text's are empty.
// recur.fbs TokenizerKind.
enum class VocabularyKind { kRwkv, kGpt2Bpe };

// recur.fbs TokenMerge.
struct TokenMergeDescription {
  uint32_t left = 0, right = 0, result = 0;
};

struct VocabularyDescription {
  std::vector<std::string> tokens;
  int32_t end_of_text = -1;  // -1: none
  VocabularyKind kind = VocabularyKind::kRwkv;
  // kGpt2Bpe: the merges by rank and the added tokens (recur.fbs Tokenizer).
  std::vector<TokenMergeDescription> merges;
  std::vector<uint32_t> added_raw, added_normalized;
};

// What a source layout keeps from its config for its MapTensors (a struct of
// its own, derived from this; converter/layouts/): options that decide where
// tensors come from but not what the model computes.
struct LayoutOptions {
  virtual ~LayoutOptions() = default;
};

struct ModelDescription {
  uint32_t d_model = 0;
  NormPlacement norm_placement = NormPlacement::kPre;
  NormKind norm = NormKind::kLayerNorm;
  // The final norm's kind when it differs from the blocks' (FLASH-pytorch: a
  // LayerNorm after ScaleNorm blocks); unset: `norm`.
  std::optional<NormKind> final_norm_kind;
  float layer_norm_eps = 1e-5f;  // the eps of every norm, whatever its kind
  // Two residual streams (config "residual": "reversible"; recur.fbs Residual):
  // pre-norm only, every block with a feed-forward.
  bool reversible = false;
  // With `reversible`: [x1 | x2] (2·d_model) reach the final norm and head
  // ("reversible_concat"; Hugging Face's Reformer), else x1 + x2.
  bool concat_streams = false;
  InputDescription input;
  std::vector<BlockDescription> blocks;
  bool final_norm = true;
  bool has_head = false;
  HeadDescription head;
  MetadataDescription metadata;
  // The vocabulary the file carries, if any (converter/vocab_file.h reads the
  // rwkv package's text format; a GGUF file holds its own).
  std::optional<VocabularyDescription> vocabulary;
  // The recur layout's config key "tokenizer": a vocabulary file, relative
  // to the config's folder, that the converter reads (empty: none).
  std::string tokenizer_file;
  std::shared_ptr<const LayoutOptions> layout_options;  // null for layouts that need none
};

// A float32 tensor, row-major. nn.Linear weights are [out, in].
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Tensors by name. std::map: iteration order is deterministic.
using TensorMap = std::map<std::string, Tensor>;

// How a tensor of the model is made from its source tensor.
enum class SourceTransform {
  kCopy,       // as it is (source shape == shape)
  kRows,       // rows [row_offset, row_offset + shape[0] / repeat) of the source's first
               // dimension (a slice of a fused projection), the slice repeated `repeat`
               // times (one key head that every head shares)
  kTranspose,  // a 2-D source of shape [shape[1], shape[0]], transposed
  kZeros,      // no source tensor: zeros (a bias the source model does not have)
  kComputed,   // `compute` of the source tensors `inputs` (a table the library builds from
               // its parameters at run time, parameters it folds together)
  kIgnored,    // not a tensor of the model (name empty): a source tensor the converted
               // model does not use (a pooler the outputs never reach), accepted if present
};

// One tensor the model needs: its recur-layout name, its name in the source
// layout (the same for the recur layout; empty for kZeros), its shape, and
// how it is made from the source tensor.
struct ExpectedTensor {
  ExpectedTensor(std::string name_in, std::vector<int64_t> shape_in)
      : name(std::move(name_in)), source_name(name), shape(std::move(shape_in)) {}

  std::string name;
  std::string source_name;
  std::vector<int64_t> shape;
  SourceTransform transform = SourceTransform::kCopy;
  std::vector<int64_t> source_shape;  // the source tensor's shape; empty: `shape`
  int64_t row_offset = 0;             // kRows
  int64_t repeat = 1;                 // kRows
  // kComputed: the source tensors read (each checked like a copied one: present, of
  // this shape, finite) and the function of their float32 values that makes this one.
  struct Input {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<Input> inputs;
  std::function<std::vector<float>(const std::vector<std::vector<float>>&)> compute;

  const std::vector<int64_t>& SourceShape() const {
    return source_shape.empty() ? shape : source_shape;
  }
};

// Every tensor `desc` needs, in file order, with recur names and shapes,
// each pointed at its source tensor in `layout` (kAuto and kRecur: the same
// names; others: converter/layouts/). Defined in config.cc.
std::vector<ExpectedTensor> ExpectedTensors(const ModelDescription& desc,
                                            Layout layout = Layout::kRecur);

// 64-byte aligned storage, so model bytes can go straight to
// recur_model_load_buffer (which reads weights in place with aligned loads).
inline constexpr std::size_t kAlignment = kSegmentAlignment;  // model/model_file.h
// n rounded up to a multiple of a (the data section's offsets, aligned to kAlignment).
constexpr uint64_t RoundUp(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() noexcept = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}  // NOLINT
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kAlignment)));
  }
  void deallocate(T* p, std::size_t) noexcept {
    ::operator delete(p, std::align_val_t(kAlignment));
  }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const noexcept { return true; }
  template <class U>
  bool operator!=(const AlignedAllocator<U>&) const noexcept { return false; }
};

using AlignedBytes = std::vector<uint8_t, AlignedAllocator<uint8_t>>;

// Names for messages and `inspect`.
const char* LayoutName(Layout layout);           // its layouts.inc name, or "auto"
const char* InputKindName(InputKind kind);       // "tokens", "features"
const char* NormPlacementName(NormPlacement p);  // "pre", "post"
const char* ActivationName(Activation a);        // "relu", "gelu", "relu_squared"
const char* HeadActivationName(HeadActivation a);// "none", "softmax", "log_softmax"

// "[64,32]"
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MODEL_DESCRIPTION_H_
