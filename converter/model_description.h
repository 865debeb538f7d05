// The converter's in-memory description of a model: what a config.json says
// (in either layout) and what the writer turns into the FlatBuffer of
// runtime/schema/recur.fbs. Tensors are keyed by their recur-layout names
// (models/configs/README.md), whatever layout they were imported from.
#ifndef RECUR_CONVERTER_MODEL_DESCRIPTION_H_
#define RECUR_CONVERTER_MODEL_DESCRIPTION_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <new>
#include <string>
#include <vector>

namespace recur::converter {

enum class Layout { kAuto, kRecur, kFastTransformers };

enum class InputKind { kTokens, kFeatures };
enum class NormPlacement { kPre, kPost };
// See runtime/schema/recur.fbs (FeatureMap) for the maps and their widths.
enum class FeatureMap { kEluPlusOne, kRelu, kPoly2, kFavor, kFavorHyperbolic };
enum class Activation { kRelu, kGelu };
enum class HeadActivation { kNone, kSoftmax, kLogSoftmax };
enum class MixerType {
  kLinearAttention,
  kSoftmaxAttention,
  kSlidingWindow,
  kAftSimple,
  kFlash,
  kLinformer,
  kAftLocal,  // window bias shared by channels
  kAftConv,   // window bias per head
  kAftFull,   // pairwise bias up to max_length
  kGau,       // gated attention unit, relu² over positions below max_length
  kReformer,  // LSH attention, encoder only
};
enum class LinformerSharing { kNone, kHeadwise, kKeyValue, kLayerwise };

struct InputDescription {
  InputKind kind = InputKind::kTokens;
  uint32_t vocab_size = 0;     // tokens
  uint32_t feature_width = 0;  // features
  bool projection = false;     // features: a Dense [d_model, feature_width] in front
  uint32_t max_positions = 0;  // > 0: learned absolute positions [max_positions, d_model]
};

struct LinearAttentionDescription {
  uint32_t heads = 0;
  uint32_t dk = 0;
  uint32_t dv = 0;
  FeatureMap feature_map = FeatureMap::kEluPlusOne;
  float eps = 1e-6f;
  bool causal = true;  // false: the encoder form (whole sequences only)
  // kFavor / kFavorHyperbolic: m (fast-transformers' n_dims) and the
  // temperature (default 1/√dk); the tensor mixer.feature_map.omega is
  // [dk, OmegaColumns()].
  uint32_t favor_features = 0;
  float softmax_temp = 0.0f;
  // Sliding window: window w, one dilation per head (empty: all 1), the
  // first global_tokens positions global.
  uint32_t window = 0;
  std::vector<uint32_t> dilation;
  uint32_t global_tokens = 0;
  // FLASH: expansion E, qk width s, chunk C, scale (default 1/C).
  uint32_t expansion_dim = 0;
  uint32_t qk_dim = 0;
  uint32_t chunk = 0;
  float scale = 0.0f;
  // Linformer: sequence length n, projected length k, sharing of E and F.
  uint32_t seq_len = 0;
  uint32_t proj_dim = 0;
  LinformerSharing sharing = LinformerSharing::kNone;
  // AFT-full and GAU: T (GAU also uses expansion_dim, qk_dim and scale,
  // default 1/T). AFT-full: the factorised bias's rank (0: a full [T, T] bias) and
  // whether logits are k·w (fast-transformers) rather than k + w.
  uint32_t max_length = 0;
  // Reformer: hash buckets and rounds (chunk: its chunk length).
  uint32_t n_buckets = 0;
  uint32_t rounds = 0;
  uint32_t bias_rank = 0;
  bool multiply = false;

  bool favor() const {
    return feature_map == FeatureMap::kFavor || feature_map == FeatureMap::kFavorHyperbolic;
  }
  uint32_t OmegaColumns() const {
    return feature_map == FeatureMap::kFavor ? favor_features : favor_features / 2;
  }
};

struct BlockDescription {
  MixerType mixer = MixerType::kLinearAttention;
  // The attention's shape (heads, dk, dv, causal) for either mixer type; the
  // feature map, Favor fields and eps apply to linear attention only.
  LinearAttentionDescription linear_attention;
  uint32_t d_ff = 0;
  Activation activation = Activation::kRelu;
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

struct ModelDescription {
  uint32_t d_model = 0;
  NormPlacement norm_placement = NormPlacement::kPre;
  float layer_norm_eps = 1e-5f;
  InputDescription input;
  std::vector<BlockDescription> blocks;
  bool final_norm = true;
  bool has_head = false;
  HeadDescription head;
  MetadataDescription metadata;
};

// A float32 tensor, row-major. nn.Linear weights are [out, in].
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Tensors by name. std::map: iteration order is deterministic.
using TensorMap = std::map<std::string, Tensor>;

// One tensor the model needs: its recur-layout name, its name in the source
// layout (the same for the recur layout) and its expected shape.
struct ExpectedTensor {
  std::string name;
  std::string source_name;
  std::vector<int64_t> shape;
};

// Every tensor `desc` needs, in file order, named for `layout` (kAuto and
// kRecur: recur names). Defined in config.cc.
std::vector<ExpectedTensor> ExpectedTensors(const ModelDescription& desc,
                                            Layout layout = Layout::kRecur);

// 64-byte aligned storage, so model bytes can go straight to
// recur_model_load_buffer (which reads weights in place with aligned loads).
inline constexpr std::size_t kAlignment = 64;

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
const char* LayoutName(Layout layout);           // "recur", "fast-transformers", "auto"
const char* InputKindName(InputKind kind);       // "tokens", "features"
const char* NormPlacementName(NormPlacement p);  // "pre", "post"
const char* FeatureMapName(FeatureMap f);        // "elu_plus_one", ..., "favor (fast-transformers)"
const char* ActivationName(Activation a);        // "relu", "gelu"
const char* HeadActivationName(HeadActivation a);// "none", "softmax", "log_softmax"

// "[64,32]"
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace recur::converter

#endif  // RECUR_CONVERTER_MODEL_DESCRIPTION_H_
