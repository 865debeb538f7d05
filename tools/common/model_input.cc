#include "model_input.h"

#include <utility>

#include "npy.h"

namespace tools {

bool ReadModelInput(const std::string& path, const recur_model_info& info, ModelInput* out,
                    std::string* error) {
  npy::Array input;
  if (!npy::ReadFile(path, &input, error)) return false;
  if (info.input_kind == RECUR_INPUT_TOKENS) {
    if (input.shape.size() != 1) {
      *error = path + ": this model takes token ids of shape (N,), got " +
               std::to_string(input.shape.size()) + "-D input";
      return false;
    }
    if (!npy::ToInt32(input, &out->tokens, error)) {
      *error = path + ": " + *error;
      return false;
    }
  } else {
    if (input.shape.size() != 2 || input.shape[1] != int64_t{info.feature_width}) {
      *error = path + ": this model takes frames of shape (N, " +
               std::to_string(info.feature_width) + ")";
      return false;
    }
    if (!npy::ToFloat32(input, &out->frames, error)) {
      *error = path + ": " + *error;
      return false;
    }
  }
  out->n = input.shape[0];
  return true;
}

bool LoadModelAndInput(const std::string& model_path, const std::string& input_path,
                       recur::Model* model, ModelInput* input, std::string* error) {
  auto loaded = recur::Model::Load(model_path);
  if (!loaded) {
    *error = loaded.error();
    return false;
  }
  *model = std::move(*loaded);
  return ReadModelInput(input_path, model->info(), input, error);
}

}  // namespace tools
