#include "converter/import.h"

#include <algorithm>
#include <cmath>
#include <set>

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
// e.SourceShape(), checked) and, for kProject, P's (of e.project_shape).
Result<std::vector<float>> Transform(const ExpectedTensor& e, std::vector<float> source,
                                     const std::vector<float>& project) {
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
    case SourceTransform::kProject: {
      const std::vector<int64_t>& p = e.project_shape;
      if (from.empty() || e.shape.empty() || p.size() != 2 || e.repeat < 1 ||
          from[0] != e.repeat * p[0] || e.shape[0] != e.repeat * p[1] ||
          Elements(e.shape) * static_cast<uint64_t>(from[0]) !=
              Elements(from) * static_cast<uint64_t>(e.shape[0])) {
        break;
      }
      const auto in = static_cast<std::size_t>(p[0]), m = static_cast<std::size_t>(p[1]);
      const std::size_t row = from[0] == 0 ? 0 : source.size() / static_cast<std::size_t>(from[0]);
      std::vector<float> out(Elements(e.shape));
      std::vector<double> acc(row);
      for (std::size_t h = 0; h < static_cast<std::size_t>(e.repeat); ++h) {
        for (std::size_t j = 0; j < m; ++j) {
          std::fill(acc.begin(), acc.end(), 0.0);
          for (std::size_t i = 0; i < in; ++i) {
            const double w = project[i * m + j];
            const float* src = source.data() + (h * in + i) * row;
            for (std::size_t c = 0; c < row; ++c) acc[c] += w * src[c];
          }
          float* dst = out.data() + (h * m + j) * row;
          for (std::size_t c = 0; c < row; ++c) dst[c] = static_cast<float>(acc[c]);
        }
      }
      return out;
    }
    case SourceTransform::kZeros:
      break;
  }
  return Status(StatusCode::kInternal, e.name + ": cannot be made from " + e.source_name + " " +
                                           ShapeString(from) + " (a layout's tensor map is wrong)");
}

// The float32 values of the source tensor `name`, which must exist with
// `shape` and be finite.
Result<std::vector<float>> SourceValues(const std::string& name, const std::vector<int64_t>& shape,
                                        const TensorViewMap& source) {
  auto it = source.find(name);
  if (it == source.end()) {
    return Status(StatusCode::kInvalidArgument, name + ": missing tensor, expected shape " +
                                                    ShapeString(shape) + PrefixHint(name, source));
  }
  const TensorView& view = it->second;
  if (view.shape != shape) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": shape " + ShapeString(view.shape) + ", expected " + ShapeString(shape));
  }
  auto data = ToFloat32(name, view);
  if (!data.ok()) return data.status();
  if (data->size() != Elements(shape)) {
    return Status(StatusCode::kInvalidArgument, name + ": " + std::to_string(data->size()) +
                                                    " elements, expected " +
                                                    std::to_string(Elements(shape)));
  }
  Status finite = CheckFinite(name, data->data(), data->size(), shape);
  if (!finite.ok()) return finite;
  return data;
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

Result<TensorMap> ImportTensors(const ModelDescription& desc, Layout layout,
                                const TensorViewMap& source, const ImportOptions& options,
                                std::vector<std::string>* warnings) {
  try {
    const std::vector<ExpectedTensor> expected = ExpectedTensors(desc, layout);
    std::set<std::string> used;
    TensorMap out;
    for (const ExpectedTensor& e : expected) {
      if (e.transform == SourceTransform::kZeros) {
        out[e.name] = Tensor{e.shape, std::vector<float>(Elements(e.shape), 0.0f)};
        continue;
      }
      auto data = SourceValues(e.source_name, e.SourceShape(), source);
      if (!data.ok()) return data.status();
      used.insert(e.source_name);
      std::vector<float> project;
      if (e.transform == SourceTransform::kProject) {
        auto p = SourceValues(e.project_name, e.project_shape, source);
        if (!p.ok()) return p.status();
        project = std::move(p).value();
        used.insert(e.project_name);
      }
      auto made = Transform(e, std::move(data).value(), project);
      if (!made.ok()) return made.status();
      if (e.scale != 1.0f) {
        for (float& v : *made) v = static_cast<float>(static_cast<double>(v) * e.scale);
      }
      out[e.name] = Tensor{e.shape, std::move(made).value()};
    }
    for (const auto& [name, view] : source) {
      (void)view;
      if (used.count(name)) continue;
      if (!options.allow_extra) {
        return Status(StatusCode::kInvalidArgument,
                      name +
                          ": unexpected tensor, not used by this config (allow with --allow-extra)");
      }
      if (warnings) warnings->push_back(name + ": unused tensor ignored");
    }
    return out;
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("importing tensors: ") + e.what());
  }
}

}  // namespace recur::impl::converter
