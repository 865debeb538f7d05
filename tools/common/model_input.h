// A model's input sequence from a .npy file, for the tools (recur-run,
// recur-soak, recur-parity): token ids (N,) for token models, frames
// (N, feature_width) for feature models, or a batch of either ((B, N),
// (B, N, F)) where the tool takes one; checked against the model with messages
// that name the file.
#ifndef RECUR_TOOLS_COMMON_MODEL_INPUT_H_
#define RECUR_TOOLS_COMMON_MODEL_INPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "model_file.h"
#include "recur/recur.hpp"

namespace tools {

struct ModelInput {
  std::vector<int32_t> tokens;  // token models: (batch, n), stream-major
  std::vector<float> frames;    // feature models: (batch, n, feature_width)
  int64_t n = 0;                // elements per stream
  int64_t batch = 1;            // streams
  bool batched = false;         // the file had the leading batch axis
};

// Which shapes a tool takes: one stream only, or also a batch of streams
// ((B, N) token ids, (B, N, F) frames).
enum class Streams { kOne, kBatch };

// Reads `path` for a model described by `info`. False with *error set on an
// unreadable or malformed file or a shape the model does not take.
bool ReadModelInput(const std::string& path, const recur_model_info& info, ModelInput* out,
                    std::string* error, Streams streams = Streams::kOne);

// Loads the model at `model_path` (a .recur or a GGUF file: LoadModelFile,
// whose *note it sets) and reads `input_path` for it. False with *error set
// (the runtime's or the converter's message for the model) on failure.
bool LoadModelAndInput(const std::string& model_path, const std::string& input_path,
                       recur::Model* model, ModelInput* input, std::string* error,
                       std::string* note, Streams streams = Streams::kOne);

}  // namespace tools

#endif  // RECUR_TOOLS_COMMON_MODEL_INPUT_H_
