#include "converter/import.h"

#include <cmath>
#include <set>
#include <utility>

#include "converter/quantize.h"
#include "kernels/dense/dense.h"  // kKQuantBlock

namespace recur::impl::converter {
namespace {

uint64_t Elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// "[1,2]": the multi-index of flat element `i` in `shape`.
std::string MultiIndex(std::size_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    const auto d = static_cast<std::size_t>(shape[k]);
    if (d == 0) return "[]";
    idx[k] = static_cast<int64_t>(i % d);
    i /= d;
  }
  return ShapeString(idx);
}

// A hint when a missing tensor seems to be there under a prefix.
std::string PrefixHint(const std::string& name, const TensorViewMap& source) {
  const std::string suffix = "." + name;
  for (const auto& [other, view] : source) {
    (void)view;
    if (other.size() > suffix.size() &&
        other.compare(other.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return " (the source has \"" + other + "\": a different layout or a name prefix?)";
    }
  }
  return "";
}

// The recur tensor `e` from its source tensor's float32 values (of
// e.SourceShape(), checked).
Result<std::vector<float>> Transform(const ExpectedTensor& e, std::vector<float> source) {
  const std::vector<int64_t>& from = e.SourceShape();
  switch (e.transform) {
    case SourceTransform::kCopy:
      if (from == e.shape) return source;
      break;
    case SourceTransform::kRows: {
      // rows of the source's first dimension; a row is the rest of its shape.
      if (from.empty() || e.shape.empty() || e.repeat < 1 || e.shape[0] % e.repeat != 0) break;
      const uint64_t row = Elements(from) / static_cast<uint64_t>(from[0] == 0 ? 1 : from[0]);
      const int64_t rows = e.shape[0] / e.repeat;
      if (e.row_offset < 0 || e.row_offset + rows > from[0] ||
          Elements(e.shape) != row * static_cast<uint64_t>(e.shape[0])) {
        break;
      }
      std::vector<float> out;
      out.reserve(Elements(e.shape));
      const auto first = source.begin() + static_cast<std::ptrdiff_t>(row * e.row_offset);
      for (int64_t r = 0; r < e.repeat; ++r) {
        out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(row * rows));
      }
      return out;
    }
    case SourceTransform::kTranspose: {
      if (from.size() != 2 || e.shape.size() != 2 || from[0] != e.shape[1] ||
          from[1] != e.shape[0]) {
        break;
      }
      const auto rows = static_cast<std::size_t>(from[0]), cols = static_cast<std::size_t>(from[1]);
      std::vector<float> out(source.size());
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < cols; ++c) out[c * rows + r] = source[r * cols + c];
      }
      return out;
    }
    case SourceTransform::kZeros:
    case SourceTransform::kComputed:
    case SourceTransform::kIgnored:
      break;
  }
  return Status(StatusCode::kInternal, e.name + ": cannot be made from " + e.source_name + " " +
                                           ShapeString(from) + " (a layout's tensor map is wrong)");
}

// Whether a and b are one shape but for leading dimensions of 1, which hold
// the same elements in the same order: GGUF files may carry either (ggml
// counts a tensor's dimensions up to its last one above 1, so llama-quantize
// writes [512] where llama.cpp's converter wrote [1, 512]).
bool SameShapeUpToLeadingOnes(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  auto strip = [](const std::vector<int64_t>& s) {
    std::size_t i = 0;
    while (i + 1 < s.size() && s[i] == 1) ++i;
    return std::vector<int64_t>(s.begin() + static_cast<std::ptrdiff_t>(i), s.end());
  };
  return strip(a) == strip(b);
}

}  // namespace

Status CheckFinite(const std::string& name, const float* data, std::size_t n,
                   const std::vector<int64_t>& shape) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(data[i])) {
      const char* what = std::isnan(data[i]) ? "NaN" : (data[i] > 0 ? "+Inf" : "-Inf");
      std::string where = "index " + std::to_string(i);
      if (shape.size() > 1) where += " (" + MultiIndex(i, shape) + ")";
      return Status(StatusCode::kInvalidArgument, name + ": " + what + " at " + where);
    }
  }
  return Status::Ok();
}

TensorImport::TensorImport(const ModelDescription& desc, Layout layout,
                           const TensorViewMap& source, const ImportOptions& options,
                           std::vector<std::string>* warnings)
    : source_(source),
      options_(options),
      warnings_(warnings),
      gguf_shapes_(layout == Layout::kGguf) {
  for (ExpectedTensor& e : ExpectedTensors(desc, layout)) {
    if (e.transform == SourceTransform::kIgnored) {
      used_.insert(e.source_name);
    } else {
      tensors_.push_back(std::move(e));
    }
  }
}

uint64_t TensorImport::elements(std::size_t i) const { return Elements(tensors_[i].shape); }

// A source tensor's float32 values, checked: present, of `shape` (a GGUF
// file's up to leading ones), finite.
Result<std::vector<float>> TensorImport::Read(const std::string& name,
                                              const std::vector<int64_t>& shape) {
  auto it = source_.find(name);
  if (it == source_.end()) {
    return Status(StatusCode::kInvalidArgument, name + ": missing tensor, expected shape " +
                                                    ShapeString(shape) + PrefixHint(name, source_));
  }
  const TensorView& view = it->second;
  const bool same = gguf_shapes_ ? SameShapeUpToLeadingOnes(view.shape, shape) : view.shape == shape;
  if (!same) {
    return Status(StatusCode::kInvalidArgument, name + ": shape " + ShapeString(view.shape) +
                                                    ", expected " + ShapeString(shape));
  }
  auto data = ToFloat32(name, view);
  if (!data.ok()) return data.status();
  if (data->size() != Elements(shape)) {
    return Status(StatusCode::kInvalidArgument, name + ": " + std::to_string(data->size()) +
                                                    " elements, expected " +
                                                    std::to_string(Elements(shape)));
  }
  RECUR_RETURN_IF_ERROR(CheckFinite(name, data->data(), data->size(), shape));
  used_.insert(name);
  return data;
}

Status TensorImport::Make(const ExpectedTensor& e, std::vector<float>* values) {
  switch (e.transform) {
    case SourceTransform::kZeros:
      values->assign(Elements(e.shape), 0.0f);
      return Status::Ok();
    case SourceTransform::kComputed: {
      std::vector<std::vector<float>> inputs;
      for (const ExpectedTensor::Input& input : e.inputs) {
        auto data = Read(input.name, input.shape);
        if (!data.ok()) return data.status();
        inputs.push_back(std::move(data).value());
      }
      *values = e.compute(inputs);
      if (values->size() != Elements(e.shape)) {
        return Status(StatusCode::kInternal, e.name + ": computed " +
                                                 std::to_string(values->size()) +
                                                 " values for shape " + ShapeString(e.shape));
      }
      return CheckFinite(e.name, values->data(), values->size(), e.shape);
    }
    default: {
      auto data = Read(e.source_name, e.SourceShape());
      if (!data.ok()) return data.status();
      auto transformed = Transform(e, std::move(data).value());
      if (!transformed.ok()) return transformed.status();
      *values = std::move(transformed).value();
      return Status::Ok();
    }
  }
}

Status TensorImport::Get(std::size_t i, std::vector<float>* values) {
  try {
    return Make(tensors_[i], values);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("importing tensors: ") + e.what());
  }
}

TensorFeed::SourceStorage TensorImport::source_storage(std::size_t i) const {
  const ExpectedTensor& e = tensors_[i];
  if (e.transform != SourceTransform::kCopy) return {};
  const auto it = source_.find(e.source_name);
  if (it == source_.end() || it->second.shape != e.shape) return {};
  switch (it->second.dtype) {
    case DType::kF16:
      return {WeightType::kF16, 0};
    case DType::kBF16:
      return {WeightType::kBF16, 0};
    case DType::kQ4_0:
      if (e.shape.size() == 2 && e.shape[1] % static_cast<int64_t>(kQ4_0Block) == 0) {
        return {WeightType::kI4, static_cast<int>(kQ4_0Block)};
      }
      return {};
    case DType::kQ8_0:
      if (e.shape.size() == 2 && e.shape[1] % static_cast<int64_t>(kQ8_0Block) == 0) {
        return {WeightType::kQ8_0, static_cast<int>(kQ8_0Block)};
      }
      return {};
    default:
      break;
  }
  // K-quant blocks, as the recur type of the same blocks (rows of whole blocks).
  if (WeightType type; KQuantWeightType(it->second.dtype, &type)) {
    if (e.shape.size() == 2 && e.shape[1] % static_cast<int64_t>(kernels::kKQuantBlock) == 0) {
      return {type, 0};
    }
  }
  return {};
}

std::size_t TensorImport::same_as(std::size_t i) const {
  const ExpectedTensor& e = tensors_[i];
  if (e.transform != SourceTransform::kCopy) return i;
  for (std::size_t j = 0; j < i; ++j) {
    const ExpectedTensor& f = tensors_[j];
    if (f.transform == SourceTransform::kCopy && f.source_name == e.source_name &&
        f.shape == e.shape && f.SourceShape() == e.SourceShape()) {
      return j;
    }
  }
  return i;
}

Status TensorImport::GetStored(std::size_t i, StoredTensor* out) {
  const SourceStorage storage = source_storage(i);
  std::vector<float> values;
  RECUR_RETURN_IF_ERROR(Get(i, &values));  // present, of its shape, finite
  const ExpectedTensor& e = tensors_[i];
  try {
    Result<StoredTensor> stored = Status(StatusCode::kInternal, e.name + ": not stored narrow");
    if (storage.dtype == WeightType::kI4) {
      const TensorView& view = source_.at(e.source_name);
      stored = Int4FromQ4_0(e.source_name, view.data, view.nbytes, e.shape);
    } else if (storage.dtype == WeightType::kQ8_0) {
      const TensorView& view = source_.at(e.source_name);
      stored = Q8_0FromGguf(e.source_name, view.data, view.nbytes, e.shape);
    } else if (kernels::IsKQuant(storage.dtype)) {
      const TensorView& view = source_.at(e.source_name);
      stored = KQuantFromGguf(e.source_name, storage.dtype, view.data, view.nbytes, e.shape);
    } else if (storage.dtype != WeightType::kF32) {
      // f16 and bf16 widen to float32 exactly, and narrow back to the same bits.
      stored = EncodeTensor(e.name, Tensor{e.shape, std::move(values)}, storage.dtype);
    }
    if (!stored.ok()) return stored.status();
    *out = std::move(stored).value();
    return Status::Ok();
  } catch (const std::exception& ex) {
    return Status(StatusCode::kInternal, std::string("importing tensors: ") + ex.what());
  }
}

Status TensorImport::Finish() {
  for (const auto& [name, view] : source_) {
    (void)view;
    if (used_.count(name)) continue;
    if (!options_.allow_extra) {
      return Status(StatusCode::kInvalidArgument,
                    name + ": unexpected tensor, not used by this config (allow with --allow-extra)");
    }
    if (warnings_) warnings_->push_back(name + ": unused tensor ignored");
  }
  return Status::Ok();
}

Result<TensorMap> ImportTensors(const ModelDescription& desc, Layout layout,
                                const TensorViewMap& source, const ImportOptions& options,
                                std::vector<std::string>* warnings) {
  try {
    TensorImport import(desc, layout, source, options, warnings);
    TensorMap out;
    for (std::size_t i = 0; i < import.count(); ++i) {
      std::vector<float> values;
      RECUR_RETURN_IF_ERROR(import.Get(i, &values));
      out[import.name(i)] = Tensor{import.shape(i), std::move(values)};
    }
    RECUR_RETURN_IF_ERROR(import.Finish());
    return out;
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("importing tensors: ") + e.what());
  }
}

}  // namespace recur::impl::converter
