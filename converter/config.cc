#include "converter/config.h"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/file_util.h"
#include "converter/json_util.h"
#include "converter/key_reader.h"
#include "converter/layouts/layout_converter.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

Result<ImportedConfig> ParseConfigImpl(const std::string& text, Layout layout,
                                       const std::string& source_name) {
  KeyReader r(source_name);
  json root;
  DuplicateKey duplicate;
  try {
    const std::string quoted = QuotePythonConstants(text);
    root = ParseJson(quoted.begin(), quoted.end(), &duplicate);
  } catch (const std::exception& e) {
    return r.Error("not valid JSON: " + JsonWhat(e));
  }
  if (!duplicate.key.empty()) {
    return r.Error("the key \"" + duplicate.key + "\" appears twice in one object" +
                   (duplicate.top_level ? " (at the top level)" : ""));
  }
  if (!root.is_object()) return r.Error("the top level must be a JSON object");

  std::string layout_names;
  for (const LayoutType& type : LayoutTypes()) {
    layout_names += std::string(layout_names.empty() ? "" : ", ") + "\"" + type.name + "\"";
  }
  Layout declared = Layout::kAuto;
  auto layout_it = root.find("layout");
  if (layout_it != root.end()) {
    if (!layout_it->is_string() || !ParseLayout(layout_it->get<std::string>(), &declared) ||
        declared == Layout::kAuto) {
      return r.Invalid("layout", "must be one of " + layout_names);
    }
  }
  if (layout != Layout::kAuto && declared != Layout::kAuto && declared != layout) {
    return r.Error(std::string("\"layout\" is \"") + LayoutName(declared) + "\", but layout " +
                   LayoutName(layout) + " was requested");
  }
  if (layout == Layout::kAuto) layout = declared;
  // Detected: the first library layout that recognises the config, else
  // recur's own. `unrecognised`: not even recur's (none of its keys).
  bool unrecognised = false;
  if (layout == Layout::kAuto) {
    layout = Layout::kRecur;
    for (const LayoutType& type : LayoutTypes()) {
      if (type.id != Layout::kRecur && type.converter->Recognizes(root)) {
        layout = type.id;
        break;
      }
    }
    const LayoutType* recur = FindLayoutType(Layout::kRecur);
    unrecognised = layout == Layout::kRecur && recur && !recur->converter->Recognizes(root);
  }

  ImportedConfig out;
  out.layout = layout;
  const LayoutType* type = FindLayoutType(layout);
  if (!type) return r.Error("no layout was chosen");
  const Status parsed = type->converter->Parse(r, root, &out.desc);
  if (!parsed.ok() && unrecognised) {
    return r.Error("no \"layout\" key, and no layout recognises this config (it has none of "
                   "recur's own keys, and no library's model class or keys); add \"layout\": "
                   "one of " + layout_names);
  }
  RECUR_RETURN_IF_ERROR(parsed);
  return out;
}

void AddLinear(std::vector<ExpectedTensor>* out, const std::string& name, int64_t rows,
               int64_t cols) {
  out->emplace_back(name + ".weight", std::vector<int64_t>{rows, cols});
  out->emplace_back(name + ".bias", std::vector<int64_t>{rows});
}

// A norm's tensors: weight and bias [d_model] (layer norm), weight [d_model]
// (RMS norm) or the scalar g as weight [1] (scale norms).
void AddNorm(std::vector<ExpectedTensor>* out, const std::string& name, NormKind kind,
             int64_t d_model) {
  switch (kind) {
    case NormKind::kLayerNorm:
      out->emplace_back(name + ".weight", std::vector<int64_t>{d_model});
      out->emplace_back(name + ".bias", std::vector<int64_t>{d_model});
      break;
    case NormKind::kRmsNorm:
      out->emplace_back(name + ".weight", std::vector<int64_t>{d_model});
      break;
    case NormKind::kScaleNorm:
    case NormKind::kScaleNormRms:
      out->emplace_back(name + ".weight", std::vector<int64_t>{1});
      break;
  }
}

}  // namespace

Result<ImportedConfig> ParseConfig(const std::string& json_text, Layout layout,
                                   const std::string& source_name) {
  try {
    return ParseConfigImpl(json_text, layout, source_name);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, source_name + ": " + e.what());
  }
}

Result<ImportedConfig> ConfigFromTensors(const TensorViewMap& tensors, Layout layout,
                                         const std::string& source_name) {
  std::string readers;
  for (const LayoutType& type : LayoutTypes()) {
    if (layout != Layout::kAuto && type.id != layout) continue;
    bool recognized = false;
    nlohmann::json config;
    Status s = type.converter->ConfigFromTensors(tensors, &recognized, &config);
    if (!s.ok()) return Status(s.code(), source_name + ": " + s.message());
    if (recognized) return ParseConfig(config.dump(), type.id, source_name + " (its tensors)");
  }
  return Status(StatusCode::kInvalidArgument,
                source_name + ": no config given (--config), and no layout recognises the "
                              "checkpoint's tensors (only BlinkDL RWKV-7 checkpoints, layout "
                              "\"rwkv\", carry their configuration in their shapes); pass "
                              "--config CONFIG.json");
}

Result<ImportedConfig> ReadConfigFile(const std::string& path, Layout layout) {
  auto text = ReadFileText(path);
  if (!text.ok()) return text.status();
  return ParseConfig(*text, layout, BaseName(path));
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelDescription& d, Layout layout) {
  const int64_t dm = d.d_model;
  std::vector<ExpectedTensor> out;
  if (d.input.kind == InputKind::kTokens) {
    out.emplace_back("input.embedding", std::vector<int64_t>{d.input.vocab_size, dm});
  } else if (d.input.projection) {
    AddLinear(&out, "input.projection", d.d_model, d.input.feature_width);
  }
  if (d.input.max_positions > 0)
    out.emplace_back("input.positions", std::vector<int64_t>{d.input.max_positions, dm});
  if (d.input.sinusoid && d.input.sinusoid_scale)
    out.emplace_back("input.position_scale", std::vector<int64_t>{1});
  if (d.input.sinusoid && d.input.sinusoid_freq)
    out.emplace_back("input.position_freq", std::vector<int64_t>{dm / 2});
  if (d.input.norm) {
    out.emplace_back("input.norm.weight", std::vector<int64_t>{dm});
    out.emplace_back("input.norm.bias", std::vector<int64_t>{dm});
  }

  for (std::size_t i = 0; i < d.blocks.size(); ++i) {
    const BlockDescription& b = d.blocks[i];
    const std::string p = "blocks." + std::to_string(i) + ".";
    AddNorm(&out, p + "norm1", d.norm, dm);
    if (b.mixer.type()) {  // none only in a hand-made description, which the writer refuses
      MixerTensors mixer(p + "mixer.", dm, &out);
      b.mixer.type()->converter->AddTensors(b.mixer.params(), &mixer);
      mixer.AddRotary(b.mixer.params().rotary);
    }
    if (b.d_ff == 0) continue;  // no feed-forward, no norm2
    AddNorm(&out, p + "norm2", d.norm, dm);
    AddLinear(&out, p + "ffn.linear1", (b.glu ? 2 : 1) * int64_t{b.d_ff}, dm);
    AddLinear(&out, p + "ffn.linear2", dm, b.d_ff);
    if (b.token_mix) out.emplace_back(p + "ffn.token_mix", std::vector<int64_t>{dm});
  }
  const int64_t stream = d.concat_streams ? 2 * dm : dm;  // what reaches the final norm and head
  if (d.final_norm) AddNorm(&out, "final_norm", d.final_norm_kind.value_or(d.norm), stream);
  if (d.has_head) AddLinear(&out, "head", d.head.out, stream);
  if (const LayoutType* type = FindLayoutType(layout)) type->converter->MapTensors(d, &out);
  return out;
}

const char* InputKindName(InputKind kind) {
  return kind == InputKind::kTokens ? "tokens" : "features";
}

const char* NormPlacementName(NormPlacement p) { return p == NormPlacement::kPre ? "pre" : "post"; }

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kRelu: return "relu";
    case Activation::kGelu: return "gelu";
    case Activation::kReluSquared: return "relu_squared";
    case Activation::kSilu: return "silu";
  }
  return "?";
}

const char* HeadActivationName(HeadActivation a) {
  switch (a) {
    case HeadActivation::kNone: return "none";
    case HeadActivation::kSoftmax: return "softmax";
    case HeadActivation::kLogSoftmax: return "log_softmax";
  }
  return "?";
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace recur::impl::converter
