// recur-run: feeds an input sequence through a model in step (RNN) mode and
// writes the outputs, so users can compare a converted model against their
// PyTorch numbers.
//
//   recur-run MODEL.recur --input IN.npy --output OUT.npy
//   IN: int32/int64 token ids (N,) or float32 frames (N, F); OUT: float32 (N, output_width)
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "model_input.h"
#include "npy.h"
#include "recur/recur.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Run a recur model in step mode over an input sequence"};
  std::string model_path, input_path, output_path;
  app.add_option("model", model_path, "Model file (.recur)")->required();
  app.add_option("--input,-i", input_path, "Input .npy: token ids (N,) or frames (N, F)")
      ->required();
  app.add_option("--output,-o", output_path, "Output .npy: float32 (N, output_width)")
      ->required();
  CLI11_PARSE(app, argc, argv);

  std::string error;
  if (!npy::CheckOutputIsNotAnInput(output_path, {model_path, input_path}, &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  recur::Model model;
  tools::ModelInput input;
  if (!tools::LoadModelAndInput(model_path, input_path, &model, &input, &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  const recur_model_info info = model.info();
  const int64_t n = input.n;
  const std::vector<int32_t>& tokens = input.tokens;
  const std::vector<float>& frames = input.frames;

  auto session = recur::Session::Create(model);
  if (!session) {
    std::fprintf(stderr, "error: %s\n", session.error().c_str());
    return 1;
  }
  std::vector<float> output(static_cast<size_t>(n) * info.output_width);
  for (int64_t t = 0; t < n; ++t) {
    float* out = output.data() + t * info.output_width;
    recur::Status s = info.input_kind == RECUR_INPUT_TOKENS
                          ? session->StepTokens(&tokens[t], 1, out)
                          : session->StepFeatures(&frames[t * info.feature_width],
                                                  info.feature_width, out);
    if (!s) {
      std::fprintf(stderr, "error: step %lld: %s\n", static_cast<long long>(t), s.message().c_str());
      return 1;
    }
  }
  if (!npy::WriteFloat32(output_path, {n, int64_t{info.output_width}}, output.data(), &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  std::fprintf(stderr, "recur-run: %lld steps, wrote %s (%lld, %u)\n", static_cast<long long>(n),
               output_path.c_str(), static_cast<long long>(n), info.output_width);
  return 0;
}
