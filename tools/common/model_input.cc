#include "model_input.h"

#include <utility>

#include "npy.h"

namespace tools {

bool ReadModelInput(const std::string& path, const recur_model_info& info, ModelInput* out,
                    std::string* error, Streams streams) {
  npy::Array input;
  if (!npy::ReadFile(path, &input, error)) return false;
  const bool tokens = info.input_kind == RECUR_INPUT_TOKENS;
  const size_t rank = tokens ? 1 : 2;  // of one stream
  const bool batched = streams == Streams::kBatch && input.shape.size() == rank + 1;
  const std::string fw = std::to_string(info.feature_width);
  const std::string takes =
      tokens ? (streams == Streams::kBatch ? "token ids of shape (N,) or (B, N)" : "token ids of shape (N,)")
             : (streams == Streams::kBatch ? "frames of shape (N, " + fw + ") or (B, N, " + fw + ")"
                                           : "frames of shape (N, " + fw + ")");
  if ((input.shape.size() != rank && !batched) ||
      (!tokens && input.shape.back() != int64_t{info.feature_width})) {
    *error = path + ": this model takes " + takes + ", got " +
             std::to_string(input.shape.size()) + "-D input";
    return false;
  }
  if (!(tokens ? npy::ToInt32(input, &out->tokens, error)
               : npy::ToFloat32(input, &out->frames, error))) {
    *error = path + ": " + *error;
    return false;
  }
  out->batched = batched;
  out->batch = batched ? input.shape[0] : 1;
  out->n = input.shape[batched ? 1 : 0];
  return true;
}

bool LoadModelAndInput(const std::string& model_path, const std::string& input_path,
                       recur::Model* model, ModelInput* input, std::string* error,
                       std::string* note, Streams streams) {
  if (!LoadModelFile(model_path, 0, model, error, note)) return false;
  return ReadModelInput(input_path, model->info(), input, error, streams);
}

}  // namespace tools
