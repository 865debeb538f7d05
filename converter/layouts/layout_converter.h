// What the converter knows of each source layout, one file per layout.
//
// converter/layouts/layouts.inc lists the layouts, one line each:
//   RECUR_LAYOUT(Id, "name", file)
// and converter/layouts/<file>.cc defines `const LayoutConverter& IdLayout()`.
// A layout does two jobs: read its config (a library's constructor
// arguments, or recur's own keys) into a ModelDescription, and say where
// each tensor of that description (ExpectedTensors: recur names and shapes)
// comes from among the source's tensors, and how (TensorSource: a copy, a
// slice of a fused projection, a transpose, zeros for a bias the library
// does not have). Everything else (validation, quantisation, writing) is
// shared.
#ifndef RECUR_CONVERTER_LAYOUTS_LAYOUT_CONVERTER_H_
#define RECUR_CONVERTER_LAYOUTS_LAYOUT_CONVERTER_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/key_reader.h"
#include "converter/model_description.h"
#include "converter/safetensors.h"
#include "core/status.h"

namespace recur::impl::converter {

class LayoutConverter {
 public:
  virtual ~LayoutConverter() = default;

  // Other names --layout and "layout" accept for this layout.
  virtual std::vector<std::string> Aliases() const { return {}; }

  // Whether a config with no "layout" key is this layout's (detection).
  virtual bool Recognizes(const nlohmann::json& root) const {
    (void)root;
    return false;
  }

  // For checkpoints shared without a config (BlinkDL's RWKV-7 .pth): sets
  // *recognized when the tensors' names are this layout's and then writes
  // the config their shapes imply (this layout's keys) into *config; an
  // error names a tensor whose shape does not fit. Default: not recognised.
  virtual Status ConfigFromTensors(const TensorViewMap& tensors, bool* recognized,
                                   nlohmann::json* config) const {
    (void)tensors;
    (void)config;
    *recognized = false;
    return Status::Ok();
  }
  // Reads every key of the config, refusing any the layout does not have
  // (naming it), into `desc`. The "layout" key itself may be present.
  virtual Status Parse(const KeyReader& r, const nlohmann::json& root,
                       ModelDescription* desc) const = 0;

  // Points each tensor of `tensors` (recur names and shapes, in file order,
  // source_name == name on entry) at its source tensor, in place.
  virtual void MapTensors(const ModelDescription& desc,
                          std::vector<ExpectedTensor>* tensors) const = 0;
};

// A layouts.inc line.
struct LayoutType {
  Layout id;
  const char* name;
  const LayoutConverter* converter;
};

// The type of `layout`; null for kAuto.
const LayoutType* FindLayoutType(Layout layout);
// Every layout, in list order.
const std::vector<LayoutType>& LayoutTypes();
// Every name --layout accepts: "auto", then each layout's name and aliases.
const std::vector<std::string>& LayoutChoices();
// "auto", then each layout's name (no aliases): what --help and the Python
// package's recur.layouts() list.
const std::vector<std::string>& LayoutNames();

// Shared by the layouts' parsers.
// The largest n_layers a config may ask for: far above any real model (96
// blocks for GPT-3), low enough that a typo cannot make the converter
// allocate gigabytes of block descriptions.
inline constexpr uint32_t kMaxLayers = 4096;
// "<key>": a positive integer up to kMaxLayers.
Status ParseLayerCount(const KeyReader& r, const nlohmann::json& root, const char* key,
                       uint32_t* n_layers);
// The optional "notes", "input_description", "output_description".
Status ParseMetadata(const KeyReader& r, const nlohmann::json& root, MetadataDescription* meta);
// Whether "class" names one of `classes`: the layouts whose configs carry the
// library's model class recognise them by it (no two libraries share a name).
template <size_t N>
bool ClassIsOneOf(const nlohmann::json& root, const char* const (&classes)[N]) {
  const auto it = root.find("class");
  if (it == root.end() || !it->is_string()) return false;
  for (const char* name : classes) {
    if (it->get<std::string>() == name) return true;
  }
  return false;
}

// A source tensor the converted model does not use (kIgnored): accepted if
// present. `shape` is what a made-up checkpoint holds (tests), not checked.
inline ExpectedTensor IgnoredSource(std::string name, std::vector<int64_t> shape = {}) {
  ExpectedTensor t("", std::move(shape));
  t.source_name = std::move(name);
  t.transform = SourceTransform::kIgnored;
  return t;
}

// `t` made of the source tensors `inputs` (each checked for its shape),
// concatenated in order (their float32 values, row-major): several vectors
// stacked into a table, or one tensor reshaped ([1, 1, C] read as [C]).
inline void MakeConcatenation(ExpectedTensor* t, std::vector<ExpectedTensor::Input> inputs) {
  t->source_name.clear();
  t->transform = SourceTransform::kComputed;
  t->inputs = std::move(inputs);
  t->compute = [](const std::vector<std::vector<float>>& in) {
    std::vector<float> out;
    for (const std::vector<float>& part : in) out.insert(out.end(), part.begin(), part.end());
    return out;
  };
}

// `t` made of zeros, with no source tensor (a bias the library does not have).
inline void MakeZeros(ExpectedTensor* t) {
  t->source_name.clear();
  t->transform = SourceTransform::kZeros;
}

// Block i's attention and feed-forward wrappers under `net` in lucidrains'
// SequentialSequence ("<net>layers.<i>.0." and ".1.") or ReversibleSequence
// ("<net>blocks.<i>.f.net." and ".g.net."): linformer, performer-pytorch.
struct Sublayers {
  std::string attn, ff;
};
inline Sublayers LucidrainsSublayers(const std::string& net, uint32_t block, bool reversible) {
  const std::string layer =
      net + (reversible ? "blocks." : "layers.") + std::to_string(block) + ".";
  return {layer + (reversible ? "f.net." : "0."), layer + (reversible ? "g.net." : "1.")};
}

// "blocks.<i>.<rest>": true with i and rest; false for any other name.
bool SplitBlockName(const std::string& name, uint32_t* block, std::string* rest);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_LAYOUTS_LAYOUT_CONVERTER_H_
