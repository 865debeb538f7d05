// recur-soak: the long-run benchmark. Steps one stream of a model
// through millions of elements in RNN mode, cycling through an input
// sequence, and reports at checkpoints: throughput, non-finite outputs (must
// be 0) and the process's resident memory (must not grow). It saves the
// outputs of the `window` steps before each checkpoint, so that
// tools/soak/soak_reference.py can measure their drift from a float64
// PyTorch run of the same stream.
//
//   recur-soak MODEL.recur --input IN.npy [--steps 1000000]
//              [--checkpoints 1000,10000,100000,1000000] [--window 16] [--out DIR]
//   IN: token ids (N,) or frames (N, F), as recur-run; element t is row t mod N.
//   DIR/outputs_<step>.npy: float32 (window, output_width), steps step-window .. step-1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "model_input.h"
#include "npy.h"
#include "recur/recur.hpp"
#include "session_options.h"

namespace {

// Resident and peak resident set size in MiB from /proc/self/status (Linux);
// -1 where that file does not exist.
double ProcStatusMiB(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::string(key).size())) / 1024.0;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Step a model for a long run; report non-finite outputs, memory and speed"};
  std::string model_path, input_path, out_dir;
  int64_t steps = 1000000;
  std::vector<int64_t> checkpoints = {1000, 10000, 100000, 1000000};
  int64_t window = 16;
  app.add_option("model", model_path, tools::kModelFileHelp)->required();
  app.add_option("--input,-i", input_path, "Input .npy, cycled: token ids (N,) or frames (N, F)")
      ->required();
  app.add_option("--steps", steps, "Elements to step")->check(CLI::PositiveNumber);
  CLI::Option* given_checkpoints =
      app.add_option("--checkpoints", checkpoints, "Steps after which to report (and save outputs)")
          ->delimiter(',');
  app.add_option("--window", window, "Outputs saved before each checkpoint")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--out", out_dir, "Directory for outputs_<step>.npy (none if not given)");
  recur_state_sums state_sums = RECUR_STATE_SUMS_COMPENSATED;
  tools::AddStateSumsOption(&app, &state_sums);
  CLI11_PARSE(app, argc, argv);

  recur::Model model;
  tools::ModelInput input;
  std::string error;
  std::string note;
  if (!tools::LoadModelAndInput(model_path, input_path, &model, &input, &error, &note)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  tools::PrintNote(note);
  const recur_model_info info = model.info();
  if (input.n == 0) {
    std::fprintf(stderr, "error: %s holds no elements\n", input_path.c_str());
    return 1;
  }
  if (info.max_positions != 0 && steps > int64_t{info.max_positions}) {
    std::fprintf(stderr, "error: %s has learned positions: a stream holds at most %u steps, "
                 "not %lld\n", model_path.c_str(), info.max_positions, (long long)steps);
    return 1;
  }
  // Each checkpoint saves the `window` outputs before it, so it needs that
  // many steps behind it; the run ends with one at `steps`.
  if (steps < window) {
    std::fprintf(stderr, "error: --steps %lld is fewer than --window %lld\n", (long long)steps,
                 (long long)window);
    return 1;
  }
  std::sort(checkpoints.begin(), checkpoints.end());
  checkpoints.erase(std::unique(checkpoints.begin(), checkpoints.end()), checkpoints.end());
  if (given_checkpoints->count() == 0) {  // the defaults that fit this run
    checkpoints.erase(std::remove_if(checkpoints.begin(), checkpoints.end(),
                                     [&](int64_t c) { return c < window || c > steps; }),
                      checkpoints.end());
  }
  for (int64_t c : checkpoints) {
    if (c < window || c > steps) {
      std::fprintf(stderr, "error: checkpoint %lld is outside [--window %lld, --steps %lld]\n",
                   (long long)c, (long long)window, (long long)steps);
      return 1;
    }
  }
  if (checkpoints.empty() || checkpoints.back() != steps) checkpoints.push_back(steps);

  recur_session_options options = recur_session_options_default();
  options.state_sums = state_sums;
  // Softmax attention's cache grows with the stream: give it room for the whole run.
  if (info.state_bytes_per_position) options.max_context = uint32_t(std::min<int64_t>(steps, 1 << 30));
  auto session = recur::Session::Create(model, options);
  if (!session) {
    std::fprintf(stderr, "error: %s\n", session.error().c_str());
    return 1;
  }
  const size_t width = info.output_width;
  std::vector<float> recent(size_t(window) * width);  // ring of the last `window` outputs
  std::vector<float> saved(recent.size());
  int64_t non_finite = 0;
  std::printf("recur-soak: %s, %lld steps, input %s cycled every %lld, SIMD %s\n",
              model_path.c_str(), (long long)steps, input_path.c_str(), (long long)input.n,
              recur_simd_target());
  std::printf("%12s %10s %12s %12s %10s %10s\n", "steps", "seconds", "steps/s", "non-finite",
              "RSS MiB", "peak MiB");
  const auto start = std::chrono::steady_clock::now();
  size_t next = 0;
  for (int64_t t = 0; t < steps; ++t) {
    const int64_t row = t % input.n;
    float* out = recent.data() + size_t(t % window) * width;
    recur::Status s = info.input_kind == RECUR_INPUT_TOKENS
                          ? session->StepTokens(&input.tokens[size_t(row)], 1, out)
                          : session->StepFeatures(&input.frames[size_t(row) * info.feature_width],
                                                  info.feature_width, out);
    if (!s) {
      std::fprintf(stderr, "error: step %lld: %s\n", (long long)t, s.message().c_str());
      return 1;
    }
    for (size_t i = 0; i < width; ++i) non_finite += !std::isfinite(out[i]);
    if (t + 1 != checkpoints[next]) continue;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%12lld %10.1f %12.0f %12lld %10.1f %10.1f\n", (long long)(t + 1), seconds,
                double(t + 1) / seconds, (long long)non_finite, ProcStatusMiB("VmRSS:"),
                ProcStatusMiB("VmHWM:"));
    std::fflush(stdout);
    if (!out_dir.empty()) {
      for (int64_t i = 0; i < window; ++i) {  // oldest first
        const int64_t step = t + 1 - window + i;
        std::copy_n(recent.data() + size_t(step % window) * width, width,
                    saved.data() + size_t(i) * width);
      }
      const std::string path = out_dir + "/outputs_" + std::to_string(t + 1) + ".npy";
      if (!npy::WriteFloat32(path, {window, int64_t(width)}, saved.data(), &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 1;
      }
    }
    ++next;
  }
  if (non_finite) {
    std::fprintf(stderr, "error: %lld non-finite output values\n", (long long)non_finite);
    return 1;
  }
  return 0;
}
