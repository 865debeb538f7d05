// The converter's layout registry: layouts.inc, expanded; and the helpers the
// layouts share.
#include <string>
#include <vector>

#include "converter/layouts/layout_converter.h"

namespace recur::impl::converter {

// Defined by converter/layouts/<file>.cc for each layout Id.
#define RECUR_LAYOUT(Id, name, file) const LayoutConverter& Id##Layout();
#include "converter/layouts/layouts.inc"
#undef RECUR_LAYOUT

const std::vector<LayoutType>& LayoutTypes() {
  static const std::vector<LayoutType> types = {
#define RECUR_LAYOUT(Id, name, file) {Layout::k##Id, name, &Id##Layout()},
#include "converter/layouts/layouts.inc"
#undef RECUR_LAYOUT
  };
  return types;
}

const LayoutType* FindLayoutType(Layout layout) {
  for (const LayoutType& type : LayoutTypes()) {
    if (type.id == layout) return &type;
  }
  return nullptr;
}

const std::vector<std::string>& LayoutChoices() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out = {"auto"};
    for (const LayoutType& type : LayoutTypes()) {
      out.push_back(type.name);
      for (const std::string& alias : type.converter->Aliases()) out.push_back(alias);
    }
    return out;
  }();
  return names;
}

const std::vector<std::string>& LayoutNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out = {"auto"};
    for (const LayoutType& type : LayoutTypes()) out.push_back(type.name);
    return out;
  }();
  return names;
}

bool ParseLayout(const std::string& name, Layout* out) {
  if (name == "auto") {
    *out = Layout::kAuto;
    return true;
  }
  for (const LayoutType& type : LayoutTypes()) {
    bool match = name == type.name;
    for (const std::string& alias : type.converter->Aliases()) match = match || name == alias;
    if (match) {
      *out = type.id;
      return true;
    }
  }
  return false;
}

const char* LayoutName(Layout layout) {
  const LayoutType* type = FindLayoutType(layout);
  return type ? type->name : "auto";
}

Status ParseLayerCount(const KeyReader& r, const nlohmann::json& root, const char* key,
                       uint32_t* n_layers) {
  RECUR_RETURN_IF_ERROR(r.UInt(root, key, "", 1, n_layers));
  if (*n_layers > kMaxLayers) {
    return r.Invalid(key, "must be at most " + std::to_string(kMaxLayers));
  }
  return Status::Ok();
}

Status ParseMetadata(const KeyReader& r, const nlohmann::json& root, MetadataDescription* meta) {
  RECUR_RETURN_IF_ERROR(r.OptionalString(root, "notes", &meta->notes));
  RECUR_RETURN_IF_ERROR(r.OptionalString(root, "input_description", &meta->input_description));
  RECUR_RETURN_IF_ERROR(r.OptionalString(root, "output_description", &meta->output_description));
  return Status::Ok();
}

bool SplitBlockName(const std::string& name, uint32_t* block, std::string* rest) {
  static const std::string kPrefix = "blocks.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  const std::size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos || dot == kPrefix.size()) return false;
  uint64_t i = 0;
  for (std::size_t c = kPrefix.size(); c < dot; ++c) {
    if (name[c] < '0' || name[c] > '9' || i > kMaxLayers) return false;
    i = i * 10 + static_cast<uint64_t>(name[c] - '0');
  }
  *block = static_cast<uint32_t>(i);
  *rest = name.substr(dot + 1);
  return true;
}

}  // namespace recur::impl::converter
