#include "converter/import.h"

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
      auto it = source.find(e.source_name);
      if (it == source.end()) {
        return Status(StatusCode::kInvalidArgument,
                      e.source_name + ": missing tensor, expected shape " + ShapeString(e.shape) +
                          PrefixHint(e.source_name, source));
      }
      const TensorView& view = it->second;
      if (view.shape != e.shape) {
        return Status(StatusCode::kInvalidArgument,
                      e.source_name + ": shape " + ShapeString(view.shape) + ", expected " +
                          ShapeString(e.shape));
      }
      auto data = ToFloat32(e.source_name, view);
      if (!data.ok()) return data.status();
      if (data->size() != Elements(e.shape)) {
        return Status(StatusCode::kInvalidArgument,
                      e.source_name + ": " + std::to_string(data->size()) + " elements, expected " +
                          std::to_string(Elements(e.shape)));
      }
      Status finite = CheckFinite(e.source_name, data->data(), data->size(), e.shape);
      if (!finite.ok()) return finite;
      used.insert(e.source_name);
      out[e.name] = Tensor{e.shape, std::move(data).value()};
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
