// The loaded model's tensors: the tensor table's checks and the resolver the
// loader (engine/model_loader.cc) and the mixers' factories read weights
// through, each check with a message that names what failed.
#include "model/model.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/hash.h"
#include "kernels/dense/dense_ref.h"

namespace recur::impl {
namespace {

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

// The input group sizes a tensor with per-group scales may have: multiples
// of its type's block up to the widest row the integer kernels take.
constexpr uint32_t kMaxGroup = 16384;

}  // namespace

Status CheckWidth(uint32_t value, const char* what) {
  if (value == 0 || value > kMaxWidth) {
    return InvalidModel("%s must be in [1, %u], got %u", what, kMaxWidth, value);
  }
  return Status::Ok();
}

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
    kernels::WeightType type;
    if (!WeightTypeOf(t->dtype(), &type)) {
      return InvalidModel("tensor %u '%s': unknown dtype %d", i, name, int(t->dtype()));
    }
    const kernels::WeightTypeTraits& traits = kernels::Traits(type);
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
    if (traits.block > 1) {
      // Rows of whole blocks (recur.fbs: the layouts of the packed types).
      if (t->shape()->size() != 2 || t->shape()->Get(1) % int64_t(traits.block) != 0) {
        return InvalidModel(
            "tensor '%s': %s needs a 2-D [out, in] shape with in a multiple "
            "of %zu, got %s",
            name, traits.name, traits.block, ShapeString(t->shape()).c_str());
      }
    }
    const uint64_t bytes = count / traits.block * traits.block_bytes;
    if (t->size() != bytes) {
      if (traits.block > 1) {
        const std::string packing = traits.block == 2 * traits.block_bytes
                                        ? std::string("two per byte")
                                        : std::to_string(traits.block) + " per " +
                                              std::to_string(traits.block_bytes) + " bytes";
        return InvalidModel(
            "tensor '%s': size %llu bytes does not match shape %s of %s "
            "elements (%s: %llu)",
            name, static_cast<unsigned long long>(t->size()), ShapeString(t->shape()).c_str(),
            traits.name, packing.c_str(), static_cast<unsigned long long>(bytes));
      }
      return InvalidModel(
          "tensor '%s': size %llu bytes does not match shape %s of %zu-byte "
          "elements",
          name, static_cast<unsigned long long>(t->size()), ShapeString(t->shape()).c_str(),
          traits.block_bytes);
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

// Group scales of a dense weight [out, in] of a type with per-group scales:
// quant.axis 1, a group size that is a multiple of the type's block and
// divides `in`, out·in/group f16 scales, each finite. Any sign and zero are
// taken as they are (real = scale·q): GGUF blocks carry negative scales
// (Q4_0: d = max/−8) and zero ones (a block of zeros), kept so that every
// weight is the block's exactly.
Status CheckGroupScales(const fb::Tensor* t, kernels::WeightType type, const char* what,
                        uint32_t out_features, uint32_t in_features, const uint16_t** scales,
                        uint32_t* group) {
  const char* name = t->name()->c_str();
  const char* type_name = kernels::WeightTypeName(type);
  const size_t block = kernels::Traits(type).block;
  const fb::Quantization* q = t->quant();
  if (q == nullptr || q->scales_f16() == nullptr) {
    return InvalidModel("%s: %s tensor '%s' has no group scales (quant.scales_f16)", what,
                        type_name, name);
  }
  if (q->axis() != 1) {
    return Unsupported(
        "%s: %s tensor '%s' is quantized along axis %d; %s dense weights "
        "are grouped along the input dimension (axis 1)",
        what, type_name, name, q->axis(), type_name);
  }
  const uint32_t g = q->group_size();
  if (g == 0 || g % block != 0 || g > kMaxGroup || in_features % g != 0) {
    return InvalidModel(
        "%s: %s tensor '%s' has group size %u; it must be a multiple of %zu, "
        "at most %u, that divides the %u inputs",
        what, type_name, name, g, block, kMaxGroup, in_features);
  }
  const uint64_t expected = uint64_t{out_features} * (in_features / g);
  if (q->scales_f16()->size() != expected) {
    return InvalidModel(
        "%s: %s tensor '%s' has %u group scales, expected %llu (%u rows x "
        "%u groups of %u)",
        what, type_name, name, q->scales_f16()->size(), static_cast<unsigned long long>(expected),
        out_features, in_features / g, g);
  }
  for (uint32_t k = 0; k < q->scales_f16()->size(); ++k) {
    const float s = kernels::ref::F16ToF32(q->scales_f16()->Get(k));
    if (!std::isfinite(s)) {
      return InvalidModel(
          "%s: %s tensor '%s': group scale %u (row %u) is %g; scales must be "
          "finite",
          what, type_name, name, k, k / (in_features / g), static_cast<double>(s));
    }
  }
  *scales = q->scales_f16()->data();
  *group = g;
  return Status::Ok();
}

}  // namespace

void AddSinusoidPositions(const Model& model, uint64_t position, float* x) {
  const size_t half = model.sinusoid_freq.size();
  const double scale = model.position_scale != nullptr ? model.position_scale[0] : 1.0;
  const double t = static_cast<double>(position);
  for (size_t i = 0; i < half; ++i) {
    const double a = t * model.sinusoid_freq[i];
    x[i] += static_cast<float>(std::sin(a) * scale);
    x[half + i] += static_cast<float>(std::cos(a) * scale);
  }
}

Status TensorResolver::Get(int32_t index, const char* what, std::initializer_list<int64_t> shape,
                           bool optional, const float** out) {
  *out = nullptr;
  const fb::Tensor* t = nullptr;
  RECUR_RETURN_IF_ERROR(FindTensor(root_, index, what, shape, optional, &t));
  if (t == nullptr) return Status::Ok();
  if (t->dtype() != fb::DType::F32) {
    return Unsupported("%s: tensor '%s' has dtype %s; only dense-layer weights and the token "
                       "embedding may be %s, this tensor must be f32", what, t->name()->c_str(),
                       fb::EnumNameDType(t->dtype()), kernels::WeightTypeNames(true).c_str());
  }
  RECUR_RETURN_IF_ERROR(CheckShape(t, what, shape));
  *out = reinterpret_cast<const float*>(segment_ + t->offset());
  Count(index, t->size() / sizeof(float));
  return Status::Ok();
}

Status TensorResolver::GetRows(int32_t index, const char* what, int64_t cols, bool optional,
                               const float** out, int64_t* rows) {
  *out = nullptr;
  *rows = 0;
  const fb::Tensor* t = nullptr;
  RECUR_RETURN_IF_ERROR(FindTensor(root_, index, what, {-1, cols}, optional, &t));
  if (t == nullptr) return Status::Ok();
  const int64_t n = t->shape()->size() == 2 ? t->shape()->Get(0) : 0;
  if (n <= 0 || n > (int64_t{1} << 31)) {
    return InvalidModel("%s: tensor '%s' has shape %s, expected [rows, %lld] with rows in "
                        "[1, 2^31]", what, t->name()->c_str(), ShapeString(t->shape()).c_str(),
                        static_cast<long long>(cols));
  }
  RECUR_RETURN_IF_ERROR(Get(index, what, {n, cols}, false, out));
  *rows = n;
  return Status::Ok();
}

Status TensorResolver::DenseRows(const fb::Dense* dense, const std::string& what,
                                 uint32_t in_features, uint32_t* rows) const {
  *rows = 0;
  const std::string weight_what = what + ".weight";
  if (dense == nullptr) {
    return InvalidModel("%s is missing (expected weight [rows, %u])", what.c_str(), in_features);
  }
  const fb::Tensor* t = nullptr;
  RECUR_RETURN_IF_ERROR(
      FindTensor(root_, dense->weight(), weight_what.c_str(), {-1, in_features}, false, &t));
  const int64_t n = t->shape()->size() == 2 ? t->shape()->Get(0) : 0;
  if (t->shape()->size() != 2 || t->shape()->Get(1) != in_features || n <= 0 || n > kMaxWidth) {
    return InvalidModel("%s: tensor '%s' has shape %s, expected [rows, %u] with rows in [1, %u]",
                        weight_what.c_str(), t->name()->c_str(), ShapeString(t->shape()).c_str(),
                        in_features, kMaxWidth);
  }
  *rows = static_cast<uint32_t>(n);
  return Status::Ok();
}

Status TensorResolver::GetWeight(int32_t index, const std::string& what, uint32_t out_features,
                                 uint32_t in_features, DenseView* out) {
  *out = DenseView();
  // Any type of the list (kernels/dense/weight_types.inc), with per-row,
  // per-group or in-block scales as its line says.
  const fb::Tensor* t = nullptr;
  RECUR_RETURN_IF_ERROR(
      FindTensor(root_, index, what.c_str(), {out_features, in_features}, false, &t));
  kernels::WeightType type;
  if (!WeightTypeOf(t->dtype(), &type)) {
    return Unsupported("%s: tensor '%s' has dtype %d, not supported by this runtime",
                       what.c_str(), t->name()->c_str(), int(t->dtype()));
  }
  RECUR_RETURN_IF_ERROR(CheckShape(t, what.c_str(), {out_features, in_features}));
  switch (kernels::Traits(type).scales) {
    case kernels::WeightScales::kNone:
      break;
    case kernels::WeightScales::kPerRow:
      RECUR_RETURN_IF_ERROR(CheckInt8Scales(t, what.c_str(), out_features, &out->scales));
      break;
    case kernels::WeightScales::kPerGroup:
      RECUR_RETURN_IF_ERROR(CheckGroupScales(t, type, what.c_str(), out_features, in_features,
                                             &out->group_scales, &out->group));
      break;
    case kernels::WeightScales::kInBlock:
      // The scales are the blocks' own (CheckTensorTable checked the rows of
      // whole blocks and the size); any finite half is a weight's, and
      // `verify` scans them for NaN and Inf, as it does f16 weights.
      break;
  }
  out->weight = segment_ + t->offset();
  out->type = type;
  out->in = in_features;
  out->out = out_features;
  Count(index, uint64_t{out_features} * in_features);
  return Status::Ok();
}

Status TensorResolver::GetDense(const fb::Dense* dense, const std::string& what,
                                uint32_t out_features, uint32_t in_features, DenseView* out) {
  *out = DenseView();
  if (dense == nullptr) {
    return InvalidModel("%s is missing (expected weight [%u,%u])", what.c_str(), out_features,
                        in_features);
  }
  RECUR_RETURN_IF_ERROR(
      GetWeight(dense->weight(), what + ".weight", out_features, in_features, out));
  // The bias is f32.
  RECUR_RETURN_IF_ERROR(
      Get(dense->bias(), (what + ".bias").c_str(), {out_features}, true, &out->bias));
  return Status::Ok();
}

void TensorResolver::Count(int32_t index, uint64_t parameters) {
  if (counted_.insert(index).second) parameter_count_ += parameters;
}

Status TensorResolver::GetNorm(const fb::LayerNorm* norm, const std::string& what, uint32_t width,
                               NormView* out) {
  *out = NormView();
  if (norm == nullptr) return InvalidModel("%s is missing", what.c_str());
  if (!(norm->eps() > 0.0f) || !std::isfinite(norm->eps())) {
    return InvalidModel("%s: eps must be positive and finite", what.c_str());
  }
  const std::string weight = what + ".weight", bias = what + ".bias";
  switch (norm->kind()) {
    case fb::NormKind::LayerNorm:
      RECUR_RETURN_IF_ERROR(Get(norm->weight(), weight.c_str(), {width}, false, &out->gamma));
      RECUR_RETURN_IF_ERROR(Get(norm->bias(), bias.c_str(), {width}, false, &out->beta));
      break;
    case fb::NormKind::RmsNorm:
    case fb::NormKind::ScaleNorm:
    case fb::NormKind::ScaleNormRms: {
      if (norm->bias() >= 0) {
        return InvalidModel("%s: norm kind %s has no bias, but the file gives one", what.c_str(),
                            fb::EnumNameNormKind(norm->kind()));
      }
      const int64_t n = norm->kind() == fb::NormKind::RmsNorm ? width : 1;
      RECUR_RETURN_IF_ERROR(Get(norm->weight(), weight.c_str(), {n}, false, &out->gamma));
      break;
    }
    default:
      return Unsupported("%s: norm kind %d is not supported by this runtime (newer model?)",
                         what.c_str(), int(norm->kind()));
  }
  out->kind = norm->kind();
  out->eps = norm->eps();
  return Status::Ok();
}

}  // namespace recur::impl
