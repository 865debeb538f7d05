// What the Hugging Face transformers layouts share: a config.json as
// `save_pretrained` writes it (hf_longformer.cc, hf_reformer.cc).
#ifndef RECUR_CONVERTER_LAYOUTS_HF_CONFIG_H_
#define RECUR_CONVERTER_LAYOUTS_HF_CONFIG_H_

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "converter/key_reader.h"
#include "core/status.h"

namespace recur::impl::converter {

// Refuses, by name, any key of `root` that is neither one of `model_keys`
// (read by the layout), one of `ignored_keys` (the model's own keys that
// change no output: dropout rates, memory-saving chunk sizes), nor one of
// PretrainedConfig's keys that change no output (generation settings,
// labels, bookkeeping). `config_class` names the transformers class in the
// message ("LongformerConfig").
Status CheckTransformersKeys(const KeyReader& r, const nlohmann::json& root,
                             std::initializer_list<const char*> model_keys,
                             std::initializer_list<const char*> ignored_keys,
                             const char* config_class);

// `layer` + `rest` with rest's first matching recur prefix (names[k].first)
// replaced by transformers' (names[k].second); unmatched: layer + rest.
std::string RenamedSource(const std::string& layer, const std::string& rest,
                          std::initializer_list<std::pair<const char*, const char*>> names);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_LAYOUTS_HF_CONFIG_H_
