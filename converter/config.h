// config.json import for both layouts of models/configs/README.md.
//
//   recur              the reference exporter's config (d_model, n_layers,
//                      input, mixer, ffn, final_norm, head, ...).
//   fast-transformers  the builder keyword arguments of a fast-transformers
//                      TransformerEncoder / RecurrentEncoder (n_layers,
//                      n_heads, query_dimensions, value_dimensions,
//                      feed_forward_dimensions, activation,
//                      final_normalization). Mapped onto the same
//                      ModelDescription by one function in config.cc.
//
// Layout::kAuto takes the config's "layout" key; without one, a config with
// "query_dimensions" and no "d_model" is fast-transformers, else recur.
// Messages are prefixed with `source_name`:
//   config.json: "mixer.heads" must be a positive integer
#ifndef RECUR_CONVERTER_CONFIG_H_
#define RECUR_CONVERTER_CONFIG_H_

#include <string>

#include "converter/model_description.h"
#include "core/result.h"
#include "core/status.h"

namespace recur::impl::converter {

struct ImportedConfig {
  Layout layout = Layout::kRecur;  // never kAuto
  ModelDescription desc;           // metadata: notes/input/output descriptions if given
};

Result<ImportedConfig> ParseConfig(const std::string& json_text, Layout layout = Layout::kAuto,
                                   const std::string& source_name = "config.json");

Result<ImportedConfig> ReadConfigFile(const std::string& path, Layout layout = Layout::kAuto);

// "recur" | "fast-transformers" | "auto".
bool ParseLayout(const std::string& name, Layout* out);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_CONFIG_H_
