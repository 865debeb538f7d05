// The whole `recur-convert convert` pipeline: config + weights (safetensors or
// torch.save) → .recur; or a GGUF file (llama.cpp's, architecture rwkv7 or mamba2),
// which carries its configuration, → .recur.
#ifndef RECUR_CONVERTER_CONVERT_H_
#define RECUR_CONVERTER_CONVERT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "converter/model_description.h"
#include "converter/quantize.h"
#include "core/status.h"

namespace recur::impl::converter {

struct ConvertOptions {
  // .safetensors, a torch.save checkpoint (.pt, .bin: pt_reader.h), or a GGUF
  // file (recognised by its magic: gguf.h, layouts/gguf.cc)
  std::string weights_path;
  std::string state_dict_key;  // checkpoints: the key path of a nested state dict ("model")
  std::string config_path;   // config.json
  std::string output_path;   // .recur
  // --tokenizer: a vocabulary in the rwkv package's text format
  // (vocab_file.h) for the file to carry; empty: the config's "tokenizer"
  // (recur layout, relative to the config), a GGUF file's own, or none.
  std::string tokenizer_path;
  Layout layout = Layout::kAuto;
  std::string notes;         // appended to the config's "notes"
  bool allow_extra = false;  // unused tensors: warnings instead of an error
  // --dtype: storage of the blocks' weight matrices; --quantize-head: and of
  // head.weight (quantize.h). Everything else stays f32. Unset: f32; for a
  // GGUF file, the types it stores those matrices, the head and the token
  // embedding in (F16, BF16, F32; Q4_0 as int4 in groups of 32; Q8_0 as
  // q8_0; Q4_K, Q5_K and Q6_K as q4_k, q5_k and q6_k; exactly:
  // BuildOptions::keep_source_types).
  std::optional<WeightType> dtype;
  bool quantize_head = false;
  int group = kInt4Groups[0];  // --group: int4 inputs per scale (kInt4Groups)
};

struct ConvertReport {
  Layout layout = Layout::kRecur;
  std::size_t tensors = 0;
  std::size_t file_bytes = 0;
  std::size_t narrow_tensors = 0;  // tensors stored in a dtype other than f32
  std::map<WeightType, std::size_t> narrow_types;  // how many in each of those
  std::string source_hash;
  std::vector<std::string> warnings;
};

// Reads the config and the weights, imports and validates them, builds the
// model, loads it with the runtime as a self-check and writes it atomically.
Status ConvertFiles(const ConvertOptions& options, ConvertReport* report);

// Whether the file at `path` starts with GGUF's magic (false for a file that
// cannot be read: its loader names the problem).
bool IsGgufFile(const std::string& path);

// Converts `path` (a file that carries its configuration: a GGUF file) as
// ConvertFiles with no other option does, into model.recur in a fresh folder
// under the system's temporary folder (TMPDIR, else /tmp), calls load(that
// file's path), then removes the folder, whatever the conversion or the load
// returned (a file the load mapped stays readable while it is mapped).
// *seconds: the conversion's time. Returns the conversion's error (the
// converter's message), the folder's (kIoError, naming TMPDIR), or load's.
Status ConvertThroughTemporary(const std::string& path,
                               const std::function<Status(const std::string& recur_path)>& load,
                               ConvertReport* report, double* seconds);

// The narrow weight matrices of a report: "12 weight matrices int4" or, of
// several types, "14 weight matrices (12 int4, 2 f16)"; empty when all are f32.
std::string NarrowWeightsText(const ConvertReport& report);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_CONVERT_H_
