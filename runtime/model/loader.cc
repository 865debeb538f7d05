// Model loading: size prefix → identifier → Verifier → version → tensor
// table → structure, each check with a message that names what failed.
#include <cmath>
#include <cstring>
#include <string>

#include "core/hash.h"
#include "kernels/dense/dense_ref.h"
#include "kernels/dispatch/target_limit.h"
#include "mixers/mixer.h"
#include "model/model.h"
#include "recur/recur.h"

namespace recur {
namespace {

constexpr uint64_t kSegmentAlignment = 64;
// Widths above this are rejected so that products of dims fit in 32 bits.
constexpr uint32_t kMaxWidth = 1u << 20;

std::string ShapeString(const flatbuffers::Vector<int64_t>* shape) {
  std::string s = "[";
  for (uint32_t i = 0; i < shape->size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape->Get(i));
  }
  return s + "]";
}

std::string ShapeString(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  for (auto it = shape.begin(); it != shape.end(); ++it) {
    if (it != shape.begin()) s += ",";
    s += std::to_string(*it);
  }
  return s + "]";
}

size_t DTypeSize(fb::DType t) {
  switch (t) {
    case fb::DType::F32: return 4;
    case fb::DType::F16:
    case fb::DType::BF16: return 2;
    case fb::DType::I8: return 1;
    case fb::DType::I4: return 1;  // two per byte: CheckTensorTable halves the count
  }
  return 0;
}

// The input group sizes an I4 tensor may have: multiples of the packed block
// up to the widest row the integer kernels take.
constexpr uint32_t kMaxI4Group = 16384;

Status CheckWidth(uint32_t value, const char* what) {
  if (value == 0 || value > kMaxWidth) {
    return InvalidModel("%s must be in [1, %u], got %u", what, kMaxWidth, value);
  }
  return Status::Ok();
}

}  // namespace

Model::Model() = default;
Model::~Model() { platform::UnmapFile(&file); }

uint64_t Model::fingerprint() const {
  std::call_once(fingerprint_once, [this] { fingerprint_value = Fnv1a64Words(bytes, size); });
  return fingerprint_value;
}

Status TensorResolver::CheckTensorTable() const {
  const auto* tensors = root_->tensors();
  for (uint32_t i = 0; i < tensors->size(); ++i) {
    const fb::Tensor* t = tensors->Get(i);
    const char* name = t->name()->c_str();
    const size_t elem = DTypeSize(t->dtype());
    if (elem == 0) return InvalidModel("tensor %u '%s': unknown dtype %d", i, name, int(t->dtype()));
    // The Verifier checks a vector's 4-byte length prefix, not that 8-byte
    // elements are 8-byte aligned (FlatBuffers 2.0.8); a shifted offset would
    // make every read of the shape a misaligned (undefined) load.
    if (reinterpret_cast<uintptr_t>(t->shape()->data()) % alignof(int64_t) != 0) {
      return InvalidModel("tensor %u '%s': its shape vector is not 8-byte aligned", i, name);
    }
    uint64_t count = 1;
    for (int64_t dim : *t->shape()) {
      if (dim <= 0 || dim > (int64_t{1} << 32)) {
        return InvalidModel("tensor '%s': bad dimension %lld in shape %s", name,
                            static_cast<long long>(dim), ShapeString(t->shape()).c_str());
      }
      count *= static_cast<uint64_t>(dim);
      if (count > segment_size_) {
        return InvalidModel("tensor '%s': shape %s is larger than the data segment", name,
                            ShapeString(t->shape()).c_str());
      }
    }
    if (t->dtype() == fb::DType::I4) {
      // Two per byte, rows of whole 32-input blocks (recur.fbs: I4 layout).
      if (t->shape()->size() != 2 || t->shape()->Get(1) % int64_t(kernels::kI4Block) != 0) {
        return InvalidModel("tensor '%s': int4 needs a 2-D [out, in] shape with in a multiple "
                            "of %zu, got %s", name, kernels::kI4Block,
                            ShapeString(t->shape()).c_str());
      }
      count /= 2;
    }
    if (t->size() != count * elem) {
      if (t->dtype() == fb::DType::I4) {
        return InvalidModel("tensor '%s': size %llu bytes does not match shape %s of int4 "
                            "elements (two per byte: %llu)", name,
                            static_cast<unsigned long long>(t->size()),
                            ShapeString(t->shape()).c_str(),
                            static_cast<unsigned long long>(count));
      }
      return InvalidModel("tensor '%s': size %llu bytes does not match shape %s of %zu-byte "
                          "elements", name, static_cast<unsigned long long>(t->size()),
                          ShapeString(t->shape()).c_str(), elem);
    }
    if (t->offset() % kSegmentAlignment != 0) {
      return InvalidModel("tensor '%s': offset %llu is not 64-byte aligned", name,
                          static_cast<unsigned long long>(t->offset()));
    }
    if (t->offset() > segment_size_ || t->size() > segment_size_ - t->offset()) {
      return InvalidModel("tensor '%s': bytes [%llu, %llu) lie outside the %llu-byte data segment",
                          name, static_cast<unsigned long long>(t->offset()),
                          static_cast<unsigned long long>(t->offset() + t->size()),
                          static_cast<unsigned long long>(segment_size_));
    }
  }
  return Status::Ok();
}

namespace {

// The tensor `index` refers to (*out = null if absent and `optional`).
Status FindTensor(const fb::Model* root, int32_t index, const char* what,
                  std::initializer_list<int64_t> shape, bool optional, const fb::Tensor** out) {
  *out = nullptr;
  const auto* tensors = root->tensors();
  if (index < 0) {
    if (optional) return Status::Ok();
    return InvalidModel("%s is missing (expected shape %s)", what, ShapeString(shape).c_str());
  }
  if (static_cast<uint32_t>(index) >= tensors->size()) {
    return InvalidModel("%s refers to tensor %d, but the model has %u tensors", what, index,
                        tensors->size());
  }
  *out = tensors->Get(static_cast<uint32_t>(index));
  return Status::Ok();
}

Status CheckShape(const fb::Tensor* t, const char* what, std::initializer_list<int64_t> shape) {
  bool same = t->shape()->size() == shape.size();
  for (uint32_t i = 0; same && i < shape.size(); ++i) {
    same = t->shape()->Get(i) == shape.begin()[i];
  }
  if (!same) {
    return InvalidModel("%s: tensor '%s' has shape %s, expected %s", what, t->name()->c_str(),
                        ShapeString(t->shape()).c_str(), ShapeString(shape).c_str());
  }
  return Status::Ok();
}

// Per-output-row scales of an int8 dense weight [out, in]: quant.axis 0,
// `out` scales, each finite and > 0.
Status CheckInt8Scales(const fb::Tensor* t, const char* what, uint32_t out_features,
                       const float** scales) {
  const char* name = t->name()->c_str();
  const fb::Quantization* q = t->quant();
  if (q == nullptr || q->scales() == nullptr) {
    return InvalidModel("%s: int8 tensor '%s' has no quantization scales", what, name);
  }
  if (q->axis() != 0) {
    return Unsupported("%s: int8 tensor '%s' is quantized along axis %d; dense weights need "
                       "one scale per output row (axis 0)", what, name, q->axis());
  }
  if (q->scales()->size() != out_features) {
    return InvalidModel("%s: int8 tensor '%s' has %u scales, expected %u (one per output row)",
                        what, name, q->scales()->size(), out_features);
  }
  for (uint32_t o = 0; o < out_features; ++o) {
    const float s = q->scales()->Get(o);
    if (!(s > 0.0f) || !std::isfinite(s)) {
      return InvalidModel("%s: int8 tensor '%s': scale %u is %g; scales must be finite and "
                          "positive", what, name, o, static_cast<double>(s));
    }
  }
  *scales = q->scales()->data();
  return Status::Ok();
}

// Group scales of an int4 dense weight [out, in]: quant.axis 1, a group
// size that is a multiple of 32 and divides `in`, out·in/group f16 scales,
// each finite and > 0.
Status CheckInt4Scales(const fb::Tensor* t, const char* what, uint32_t out_features,
                       uint32_t in_features, const uint16_t** scales, uint32_t* group) {
  const char* name = t->name()->c_str();
  const fb::Quantization* q = t->quant();
  if (q == nullptr || q->scales_f16() == nullptr) {
    return InvalidModel("%s: int4 tensor '%s' has no group scales (quant.scales_f16)", what,
                        name);
  }
  if (q->axis() != 1) {
    return Unsupported("%s: int4 tensor '%s' is quantized along axis %d; int4 dense weights "
                       "are grouped along the input dimension (axis 1)", what, name, q->axis());
  }
  const uint32_t g = q->group_size();
  if (g == 0 || g % kernels::kI4Block != 0 || g > kMaxI4Group || in_features % g != 0) {
    return InvalidModel("%s: int4 tensor '%s' has group size %u; it must be a multiple of %zu, "
                        "at most %u, that divides the %u inputs", what, name, g,
                        kernels::kI4Block, kMaxI4Group, in_features);
  }
  const uint64_t expected = uint64_t{out_features} * (in_features / g);
  if (q->scales_f16()->size() != expected) {
    return InvalidModel("%s: int4 tensor '%s' has %u group scales, expected %llu (%u rows x "
                        "%u groups of %u)", what, name, q->scales_f16()->size(),
                        static_cast<unsigned long long>(expected), out_features,
                        in_features / g, g);
  }
  for (uint32_t k = 0; k < q->scales_f16()->size(); ++k) {
    const float s = kernels::ref::F16ToF32(q->scales_f16()->Get(k));
    if (!(s > 0.0f) || !std::isfinite(s)) {
      return InvalidModel("%s: int4 tensor '%s': group scale %u (row %u) is %g; scales must be "
                          "finite and positive", what, name, k, k / (in_features / g),
                          static_cast<double>(s));
    }
  }
  *scales = q->scales_f16()->data();
  *group = g;
  return Status::Ok();
}

}  // namespace

Status TensorResolver::Get(int32_t index, const char* what, std::initializer_list<int64_t> shape,
                           bool optional, const float** out) {
  *out = nullptr;
  const fb::Tensor* t = nullptr;
  RECUR_RETURN_IF_ERROR(FindTensor(root_, index, what, shape, optional, &t));
  if (t == nullptr) return Status::Ok();
  if (t->dtype() != fb::DType::F32) {
    return Unsupported("%s: tensor '%s' has dtype %s; only dense-layer weights may be f16, "
                       "bf16, int8 or int4, this tensor must be f32", what, t->name()->c_str(),
                       fb::EnumNameDType(t->dtype()));
  }
  RECUR_RETURN_IF_ERROR(CheckShape(t, what, shape));
  *out = reinterpret_cast<const float*>(segment_ + t->offset());
  parameter_count_ += t->size() / sizeof(float);
  return Status::Ok();
}

Status TensorResolver::GetDense(const fb::Dense* dense, const std::string& what,
                                uint32_t out_features, uint32_t in_features, DenseView* out) {
  *out = DenseView();
  if (dense == nullptr) {
    return InvalidModel("%s is missing (expected weight [%u,%u])", what.c_str(), out_features,
                        in_features);
  }
  // The weight may be f32, f16, bf16, int8 (per-row scales) or int4 (per-group
  // scales); the bias is f32.
  const std::string weight_what = what + ".weight";
  const fb::Tensor* t = nullptr;
  RECUR_RETURN_IF_ERROR(FindTensor(root_, dense->weight(), weight_what.c_str(),
                                   {out_features, in_features}, false, &t));
  kernels::WeightType type = kernels::WeightType::kF32;
  switch (t->dtype()) {
    case fb::DType::F32: type = kernels::WeightType::kF32; break;
    case fb::DType::F16: type = kernels::WeightType::kF16; break;
    case fb::DType::BF16: type = kernels::WeightType::kBF16; break;
    case fb::DType::I8: type = kernels::WeightType::kI8; break;
    case fb::DType::I4: type = kernels::WeightType::kI4; break;
    default:
      return Unsupported("%s: tensor '%s' has dtype %d, not supported by this runtime",
                         weight_what.c_str(), t->name()->c_str(), int(t->dtype()));
  }
  RECUR_RETURN_IF_ERROR(CheckShape(t, weight_what.c_str(), {out_features, in_features}));
  if (type == kernels::WeightType::kI8) {
    RECUR_RETURN_IF_ERROR(CheckInt8Scales(t, weight_what.c_str(), out_features, &out->scales));
  }
  if (type == kernels::WeightType::kI4) {
    RECUR_RETURN_IF_ERROR(CheckInt4Scales(t, weight_what.c_str(), out_features, in_features,
                                          &out->group_scales, &out->group));
  }
  out->weight = segment_ + t->offset();
  out->type = type;
  parameter_count_ += uint64_t{out_features} * in_features;
  RECUR_RETURN_IF_ERROR(
      Get(dense->bias(), (what + ".bias").c_str(), {out_features}, true, &out->bias));
  out->in = in_features;
  out->out = out_features;
  return Status::Ok();
}

Status TensorResolver::GetNorm(const fb::LayerNorm* norm, const std::string& what, uint32_t width,
                               NormView* out) {
  *out = NormView();
  if (norm == nullptr) return InvalidModel("%s is missing", what.c_str());
  if (!(norm->eps() > 0.0f) || !std::isfinite(norm->eps())) {
    return InvalidModel("%s: eps must be positive and finite", what.c_str());
  }
  RECUR_RETURN_IF_ERROR(Get(norm->weight(), (what + ".weight").c_str(), {width}, false, &out->gamma));
  RECUR_RETURN_IF_ERROR(Get(norm->bias(), (what + ".bias").c_str(), {width}, false, &out->beta));
  out->eps = norm->eps();
  return Status::Ok();
}

namespace {

Status BuildInput(const fb::InputAdapter* in, TensorResolver* tensors, Model* m) {
  m->input_kind = in->kind();
  switch (in->kind()) {
    case fb::InputKind::Tokens:
      RECUR_RETURN_IF_ERROR(CheckWidth(in->vocab_size(), "input.vocab_size"));
      m->vocab_size = in->vocab_size();
      RECUR_RETURN_IF_ERROR(tensors->Get(in->embedding(), "input.embedding",
                                         {in->vocab_size(), m->d_model}, false, &m->embedding));
      break;
    case fb::InputKind::Features:
      RECUR_RETURN_IF_ERROR(CheckWidth(in->feature_width(), "input.feature_width"));
      m->feature_width = in->feature_width();
      if (in->projection() != nullptr) {
        RECUR_RETURN_IF_ERROR(tensors->GetDense(in->projection(), "input.projection", m->d_model,
                                                in->feature_width(), &m->input_projection));
      } else if (in->feature_width() != m->d_model) {
        return InvalidModel("input.feature_width is %u but there is no input projection, so it "
                            "must equal d_model (%u)", in->feature_width(), m->d_model);
      }
      break;
    default:
      return Unsupported("input kind %d is not supported by this runtime", int(in->kind()));
  }
  if (in->positions() >= 0) {
    const fb::Tensor* t = in->positions() < int32_t(m->root->tensors()->size())
                              ? m->root->tensors()->Get(uint32_t(in->positions())) : nullptr;
    if (t == nullptr || t->shape()->size() != 2) {
      return InvalidModel("input.positions must be a [max_positions, d_model] tensor");
    }
    const int64_t rows = t->shape()->Get(0);
    if (rows <= 0 || rows > (int64_t{1} << 31)) {
      return InvalidModel("input.positions has %lld rows", static_cast<long long>(rows));
    }
    RECUR_RETURN_IF_ERROR(tensors->Get(in->positions(), "input.positions", {rows, m->d_model},
                                       false, &m->positions));
    m->max_positions = static_cast<uint32_t>(rows);
  }
  return Status::Ok();
}

Status BuildBlock(const fb::Block* fbb, uint32_t index, TensorResolver* tensors, Model* m) {
  const std::string layer = "blocks." + std::to_string(index);
  BlockView block;
  RECUR_RETURN_IF_ERROR(tensors->GetNorm(fbb->norm1(), layer + ".norm1", m->d_model, &block.norm1));
  RECUR_RETURN_IF_ERROR(tensors->GetNorm(fbb->norm2(), layer + ".norm2", m->d_model, &block.norm2));

  const MixerEntry* entry = FindMixer(fbb->mixer_type());
  if (entry == nullptr) {
    return Unsupported("%s: mixer type %d is not supported by this runtime (newer model?)",
                       layer.c_str(), int(fbb->mixer_type()));
  }
  if (entry->create == nullptr) {
    return Unsupported("%s: mixer %s is not built into this runtime (CMake RECUR_MIXERS)",
                       layer.c_str(), entry->name);
  }
  std::unique_ptr<Mixer> mixer;
  RECUR_RETURN_IF_ERROR(entry->create(fbb->mixer(), layer, m->d_model, tensors, &mixer));

  const fb::FeedForward* ffn = fbb->ffn();
  RECUR_RETURN_IF_ERROR(CheckWidth(ffn->d_ff(), (layer + ".ffn.d_ff").c_str()));
  if (ffn->activation() != fb::Activation::Relu && ffn->activation() != fb::Activation::Gelu) {
    return Unsupported("%s.ffn: activation %d is not supported", layer.c_str(),
                       int(ffn->activation()));
  }
  block.ffn.activation = ffn->activation();
  RECUR_RETURN_IF_ERROR(tensors->GetDense(ffn->linear1(), layer + ".ffn.linear1", ffn->d_ff(),
                                          m->d_model, &block.ffn.linear1));
  RECUR_RETURN_IF_ERROR(tensors->GetDense(ffn->linear2(), layer + ".ffn.linear2", m->d_model,
                                          ffn->d_ff(), &block.ffn.linear2));

  m->state_floats += mixer->state_floats();
  m->state_floats_per_position += mixer->state_floats_per_position();
  m->compensation_floats += mixer->compensation_floats();
  block.mixer = mixer.get();
  m->mixers.push_back(std::move(mixer));
  m->blocks.push_back(block);
  return Status::Ok();
}

}  // namespace

Status LoadModel(const void* data, size_t size, const LoadOptions& options,
                 std::unique_ptr<Model>* out) {
  out->reset();
  // Every session runs a loaded model: the first load fixes the dispatch cap.
  RECUR_RETURN_IF_ERROR(kernels::ApplyTargetLimitFromEnvironment());
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (data == nullptr) return InvalidArgument("model data is null");
  if (reinterpret_cast<uintptr_t>(data) % kSegmentAlignment != 0) {
    return InvalidArgument("model bytes must be 64-byte aligned (use aligned_alloc(64, ...) or "
                           "recur_model_load_file)");
  }
  if (size < 8 + sizeof(flatbuffers::uoffset_t)) {
    return InvalidModel("file too small (%zu bytes) to be a recur model", size);
  }
  if (std::memcmp(bytes + 8, fb::ModelIdentifier(), 4) != 0) {
    return InvalidModel("not a recur model: file identifier is not \"RCUR\"");
  }
  uint32_t fb_size;
  std::memcpy(&fb_size, bytes, 4);
  if (fb_size > size - 4) {
    return InvalidModel("truncated: the header announces %u bytes of metadata but the file has "
                        "%zu", fb_size, size - 4);
  }
  const uint64_t segment_start = (uint64_t{4} + fb_size + kSegmentAlignment - 1) /
                                 kSegmentAlignment * kSegmentAlignment;
  if (!options.trusted) {
    flatbuffers::Verifier verifier(bytes, 4 + size_t{fb_size});
    if (!fb::VerifySizePrefixedModelBuffer(verifier)) {
      return InvalidModel("metadata failed FlatBuffers verification (corrupted file)");
    }
  }
  auto m = std::make_unique<Model>();
  m->root = fb::GetSizePrefixedModel(bytes);
  const fb::Model* root = m->root;
  if (root->format_version() > RECUR_FORMAT_VERSION) {
    return Unsupported("model format version %u is newer than this runtime reads (%d); upgrade "
                       "recur", root->format_version(), RECUR_FORMAT_VERSION);
  }
  if (root->format_version() == 0) return InvalidModel("model format_version is missing");
  if (segment_start > size || root->data_size() != size - segment_start) {
    return InvalidModel("file is %zu bytes, expected %llu (metadata + %llu bytes of weights): "
                        "truncated or padded", size,
                        static_cast<unsigned long long>(segment_start + root->data_size()),
                        static_cast<unsigned long long>(root->data_size()));
  }
  // The Verifier checks offsets only; required fields must also be present
  // when it was skipped, so check what the code below dereferences.
  if (root->input() == nullptr || root->blocks() == nullptr || root->tensors() == nullptr) {
    return InvalidModel("model lacks input, blocks or tensors");
  }
  for (const fb::Tensor* t : *root->tensors()) {
    if (t->name() == nullptr || t->shape() == nullptr) return InvalidModel("tensor without name or shape");
  }
  for (const fb::Block* b : *root->blocks()) {
    if (b->mixer() == nullptr || b->ffn() == nullptr) return InvalidModel("block without mixer or ffn");
  }
  m->bytes = bytes;
  m->size = size;
  m->segment = bytes + segment_start;

  TensorResolver tensors(root, m->segment, root->data_size());
  RECUR_RETURN_IF_ERROR(tensors.CheckTensorTable());
  RECUR_RETURN_IF_ERROR(CheckWidth(root->d_model(), "d_model"));
  m->d_model = root->d_model();
  if (root->norm_placement() != fb::NormPlacement::Pre &&
      root->norm_placement() != fb::NormPlacement::Post) {
    return Unsupported("norm placement %d is not supported", int(root->norm_placement()));
  }
  m->norm_placement = root->norm_placement();
  RECUR_RETURN_IF_ERROR(BuildInput(root->input(), &tensors, m.get()));
  if (root->blocks()->size() == 0) return InvalidModel("model has no blocks");
  for (uint32_t i = 0; i < root->blocks()->size(); ++i) {
    RECUR_RETURN_IF_ERROR(BuildBlock(root->blocks()->Get(i), i, &tensors, m.get()));
  }
  if (root->final_norm() != nullptr) {
    RECUR_RETURN_IF_ERROR(tensors.GetNorm(root->final_norm(), "final_norm", m->d_model,
                                          &m->final_norm));
  }
  m->output_width = m->d_model;
  if (root->head() != nullptr) {
    const fb::Dense* dense = root->head()->dense();
    const fb::Tensor* w = dense && dense->weight() >= 0 &&
                                  uint32_t(dense->weight()) < root->tensors()->size()
                              ? root->tensors()->Get(uint32_t(dense->weight())) : nullptr;
    if (w == nullptr || w->shape()->size() != 2 || w->shape()->Get(0) <= 0 ||
        w->shape()->Get(0) > kMaxWidth) {
      return InvalidModel("head.weight must be an [output_width, d_model] tensor");
    }
    const uint32_t width = static_cast<uint32_t>(w->shape()->Get(0));
    RECUR_RETURN_IF_ERROR(tensors.GetDense(dense, "head", width, m->d_model, &m->head));
    const auto act = root->head()->activation();
    if (act != fb::HeadActivation::None && act != fb::HeadActivation::Softmax &&
        act != fb::HeadActivation::LogSoftmax) {
      return Unsupported("head activation %d is not supported", int(act));
    }
    m->head_activation = act;
    m->output_width = width;
  }
  m->parameter_count = tensors.parameter_count();
  if (m->input_projection.weight != nullptr) m->dense_layers.push_back({&m->input_projection, false});
  std::vector<const DenseView*> mixer_layers;
  for (const BlockView& b : m->blocks) {
    mixer_layers.clear();
    b.mixer->CollectDense(&mixer_layers);
    for (const DenseView* d : mixer_layers) m->dense_layers.push_back({d, false});
    m->dense_layers.push_back({&b.ffn.linear1, false});
    m->dense_layers.push_back({&b.ffn.linear2, true});
  }
  if (m->head.weight != nullptr) m->dense_layers.push_back({&m->head, false});
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace recur
