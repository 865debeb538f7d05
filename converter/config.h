// config.json import: the layout is chosen here, and its file in
// converter/layouts/ reads the rest (layouts.inc lists them).
//
// Layout::kAuto takes the config's "layout" key; without one, the first
// layout whose Recognizes() accepts the config (fast-transformers: builder
// keywords with "query_dimensions" and no "d_model"), else recur.
// Messages are prefixed with `source_name`:
//   config.json: "mixer.heads" must be a positive integer
#ifndef RECUR_CONVERTER_CONFIG_H_
#define RECUR_CONVERTER_CONFIG_H_

#include <string>
#include <vector>

#include "converter/gguf.h"
#include "converter/model_description.h"
#include "converter/safetensors.h"
#include "core/result.h"
#include "core/status.h"

namespace recur::impl::converter {

struct ImportedConfig {
  Layout layout = Layout::kRecur;  // never kAuto
  ModelDescription desc;           // metadata: notes/input/output descriptions if given
  std::vector<std::string> warnings;  // what was left out (a GGUF vocabulary recur cannot use)
};

Result<ImportedConfig> ParseConfig(const std::string& json_text, Layout layout = Layout::kAuto,
                                   const std::string& source_name = "config.json");

Result<ImportedConfig> ReadConfigFile(const std::string& path, Layout layout = Layout::kAuto);

// The config of a checkpoint shared without one (BlinkDL's RWKV-7 .pth),
// from its tensors' names and shapes (LayoutConverter::ConfigFromTensors):
// the first layout (or `layout`, unless kAuto) that recognises them. An error
// names the tensor whose shape does not fit, or says that no layout
// recognises the tensors and a config is needed. `source_name` prefixes
// messages ("model.pth").
Result<ImportedConfig> ConfigFromTensors(const TensorViewMap& tensors, Layout layout,
                                         const std::string& source_name);

// The model of a GGUF file (layout "gguf", converter/layouts/gguf.cc): its
// architecture ("rwkv7") and hyperparameters from llama.cpp's metadata keys,
// the vocabulary size from token_embd's shape, and the vocabulary itself for
// tokenizer model "rwkv" (tokenizer.ggml.tokens; any other model: none, and
// a warning saying so). An error names the key or tensor
// (after `source_name`, "model.gguf").
Result<ImportedConfig> ConfigFromGguf(const GgufFile& file, const std::string& source_name);

// A layout's name or alias (layouts.inc), or "auto"; false for any other.
bool ParseLayout(const std::string& name, Layout* out);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_CONFIG_H_
