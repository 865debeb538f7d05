// recur-parity: where does a deployed model part from its training run? Runs
// a .recur model over one input sequence in CPU step mode and CPU chunked
// mode (encode, for encoder models), on the GPU path (platforms/cuda: every
// layer at once, and a position at a time for causal models), and compares
// them with each other and, when given, with the activations PyTorch
// computed on the same input (models/reference/dump_activations.py, on the
// GPU the model trained on): the residual stream after every block, and the
// output.
//
//   recur-parity MODEL.recur --input IN.npy [--reference DIR] [--chunk N]
//                [--gpu auto|cuda|host|none] [--abs A] [--rel R]
//   IN: token ids (N,) or frames (N, F), as recur-run takes.
//   DIR: output.npy (N, output_width) and layer_<i>.npy (N, d_model) for every
//        block i, float32 or float64.
//   --gpu: auto (default) runs CUDA device 0 when this build has the CUDA
//        path and the machine a GPU, and says why not otherwise; cuda
//        insists on it; host runs the GPU path's kernels on the CPU (its
//        emulation: slow, for telling the GPU kernels' math from the device).
//
// Prints one table per comparison (max|Δ|, max|ref|, ‖Δ‖/‖ref‖, NMSE =
// ‖Δ‖²/‖ref‖² per array). An array fails past max|Δ| > A × max(1, max|ref|)
// (residual streams grow to hundreds, where one f32 ulp is ~3e-5) or
// ‖Δ‖/‖ref‖ > R; defaults 1e-4 and 1e-5, the parity tolerance. Exits 1 when
// an array fails, 2 on bad input or a model the GPU path cannot run, 3 when
// --gpu cuda finds no CUDA path or device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "gpu_runs.h"
#include "model_input.h"
#include "npy.h"
#include "parity_diff.h"
#include "recur/recur.hpp"
#include "session_options.h"

namespace {

// One run's arrays: layers[i] is (N, d_model), output (N, output_width).
struct Run {
  std::string name;
  std::vector<std::vector<float>> layers;
  std::vector<float> output;
};

void CollectLayer(void* user, uint32_t layer, const float* x, size_t batch, size_t steps,
                  size_t width) {
  auto* run = static_cast<Run*>(user);
  std::vector<float>& rows = run->layers[layer];
  rows.insert(rows.end(), x, x + batch * steps * width);
}

// Runs the model over `input` (one stream) in `mode`: "step", "chunk" or
// "encode". The status of the first failure, with *error set.
recur_status RunModel(const recur::Model& model, const tools::ModelInput& input,
                      const std::string& mode, uint32_t chunk,
                      recur_int8_activations int8_activations, Run* run, std::string* error) {
  const recur_model_info info = model.info();
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.batch = 1;
  options.prefill_chunk = chunk;
  options.prefill_min = 1;  // chunked however short: this run is about the chunked form
  options.int8_activations = int8_activations;
  auto session = recur::Session::Create(model, options);
  if (!session) {
    *error = session.error();
    return session.status().code();
  }
  run->name = mode;
  run->layers.assign(info.num_layers, {});
  run->output.assign(static_cast<size_t>(input.n) * info.output_width, 0.0f);
  session->SetLayerCallback(CollectLayer, run);
  const bool tokens = info.input_kind == RECUR_INPUT_TOKENS;
  const size_t n = static_cast<size_t>(input.n);
  recur::Status s;
  if (mode == "step") {
    for (size_t t = 0; t < n && s; ++t) {
      float* out = run->output.data() + t * info.output_width;
      s = tokens ? session->StepTokens(&input.tokens[t], 1, out)
                 : session->StepFeatures(&input.frames[t * info.feature_width],
                                         info.feature_width, out);
    }
  } else if (mode == "chunk") {
    s = tokens ? session->PrefillTokens(n, input.tokens.data(), n, run->output.data())
               : session->PrefillFeatures(n, input.frames.data(), input.frames.size(),
                                          run->output.data());
  } else {
    s = tokens ? session->EncodeTokens(n, input.tokens.data(), n, run->output.data())
               : session->EncodeFeatures(n, input.frames.data(), input.frames.size(),
                                         run->output.data());
  }
  if (!s) *error = mode + ": " + s.message();
  return s.code();
}

// Reads DIR/NAME.npy as `rows` × `width` floats.
bool ReadReference(const std::string& dir, const std::string& name, int64_t rows, int64_t width,
                   std::vector<float>* out, std::string* error) {
  const std::string path = dir + "/" + name + ".npy";
  npy::Array a;
  if (!npy::ReadFile(path, &a, error)) return false;
  if (a.shape.size() != 2 || a.shape[0] != rows || a.shape[1] != width) {
    std::string shape;
    for (int64_t d : a.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    *error = path + ": shape (" + shape + "), expected (" + std::to_string(rows) + ", " +
             std::to_string(width) + ")";
    return false;
  }
  if (!npy::ToFloat32(a, out, error)) {
    *error = path + ": " + *error;
    return false;
  }
  return true;
}

// Prints `a` against `b` per array; returns the number of arrays past the
// tolerances.
int Table(const Run& a, const Run& b, double tol_abs, double tol_rel) {
  std::printf("\n%s vs %s\n  %-10s %12s %12s %12s %12s\n", a.name.c_str(), b.name.c_str(),
              "array", "max|d|", "max|ref|", "rel(L2)", "NMSE");
  int failures = 0;
  auto row = [&](const std::string& name, const std::vector<float>& x,
                 const std::vector<float>& ref) {
    const parity::Diff d = parity::Compare(x.data(), ref.data(), x.size());
    const bool bad = !d.Within(tol_abs, tol_rel);
    failures += bad;
    std::printf("  %-10s %12.3e %12.3e %12.3e %12.3e%s\n", name.c_str(), d.max_abs, d.max_ref,
                d.rel(), d.nmse(), bad ? "  FAIL" : "");
  };
  for (size_t i = 0; i < a.layers.size(); ++i) {
    row("layer." + std::to_string(i), a.layers[i], b.layers[i]);
  }
  row("output", a.output, b.output);
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Compare a recur model's CPU step and chunked runs and its GPU path with each "
               "other and with PyTorch's activations"};
  std::string model_path, input_path, reference_dir;
  uint32_t chunk = 64;
  double tol_abs = 1e-4, tol_rel = 1e-5;
  app.add_option("model", model_path, tools::kModelFileHelp)->required();
  app.add_option("--input,-i", input_path, "Input .npy: token ids (N,) or frames (N, F)")
      ->required();
  app.add_option("--reference,-r", reference_dir,
                 "Directory of PyTorch activations: output.npy, layer_<i>.npy "
                 "(models/reference/dump_activations.py)");
  app.add_option("--chunk", chunk, "Positions per chunk of the chunked run")
      ->check(CLI::Range(1, 4096));
  std::string gpu = "auto";
  app.add_option("--gpu", gpu, "GPU path: auto, cuda, host (its emulation) or none")
      ->check(CLI::IsMember({"auto", "cuda", "host", "none"}));
  app.add_option("--abs", tol_abs, "max |d| tolerance (times max(1, max|ref|))");
  app.add_option("--rel", tol_rel, "||d|| / ||ref|| tolerance");
  // The GPU path multiplies decoded weights by f32 activations: "float" runs
  // the CPU the same way, so that the columns compare the same arithmetic.
  recur_int8_activations int8_activations = RECUR_INT8_ACTIVATIONS_AUTO;
  tools::AddInt8ActivationsOption(&app, &int8_activations);
  CLI11_PARSE(app, argc, argv);

  recur::Model model;
  tools::ModelInput input;
  std::string error;
  std::string note;
  if (!tools::LoadModelAndInput(model_path, input_path, &model, &input, &error, &note)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 2;
  }
  tools::PrintNote(note);
  const recur_model_info info = model.info();
  if (input.n == 0) {
    std::fprintf(stderr, "error: %s holds no elements: nothing to compare\n", input_path.c_str());
    return 2;
  }

  std::vector<Run> runs(1);
  recur_status status =
      RunModel(model, input, "step", chunk, int8_activations, &runs[0], &error);
  if (status == RECUR_UNSUPPORTED) {
    // An encoder: no recurrent form, the whole sequence at once.
    std::printf("recur-parity: no step mode (%s): running encode\n", error.c_str());
    status = RunModel(model, input, "encode", chunk, int8_activations, &runs[0], &error);
  } else if (status == RECUR_OK) {
    runs.emplace_back();
    status = RunModel(model, input, "chunk", chunk, int8_activations, &runs[1], &error);
  }
  if (status != RECUR_OK) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 2;
  }

  const size_t cpu_runs = runs.size();
  if (gpu != "none") {
    bool unavailable = false;
    auto gpu_runs = tools::GpuRuns::Open(model.get(), gpu != "host", &unavailable, &error);
    if (gpu_runs == nullptr && gpu == "auto" && unavailable) {
      std::printf("recur-parity: no CUDA column: %s\n", error.c_str());
    } else if (gpu_runs == nullptr) {
      std::fprintf(stderr, "error: GPU path: %s\n", error.c_str());
      return unavailable ? 3 : 2;
    } else {
      std::printf("recur-parity: GPU path on %s\n", gpu_runs->device_name().c_str());
      const std::string name = gpu == "host" ? "emulated" : "cuda";
      // Step on the GPU path only where the CPU has a step run (causal models).
      for (bool step : {false, true}) {
        if (step && cpu_runs == 1) continue;
        Run& run = runs.emplace_back();
        run.name = step ? name + "-step" : name;
        if (!gpu_runs->Run(step, static_cast<size_t>(input.n),
                           input.tokens.empty() ? nullptr : input.tokens.data(),
                           input.frames.empty() ? nullptr : input.frames.data(), &run.layers,
                           &run.output, &error)) {
          std::fprintf(stderr, "error: %s: %s\n", run.name.c_str(), error.c_str());
          return 2;
        }
      }
    }
  }

  Run reference;
  if (!reference_dir.empty()) {
    reference.name = "pytorch";
    reference.layers.resize(info.num_layers);
    for (uint32_t i = 0; i < info.num_layers; ++i) {
      if (!ReadReference(reference_dir, "layer_" + std::to_string(i), input.n, info.d_model,
                         &reference.layers[i], &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
      }
    }
    if (!ReadReference(reference_dir, "output", input.n, info.output_width, &reference.output,
                       &error)) {
      std::fprintf(stderr, "error: %s\n", error.c_str());
      return 2;
    }
  }

  std::printf("recur-parity: %s, %lld positions, %u layers, chunk %u; tolerances max|d| <= "
              "%.1e x max(1, max|ref|), rel <= %.1e\n", model_path.c_str(), static_cast<long long>(input.n),
              info.num_layers, chunk, tol_abs, tol_rel);
  int failures = 0;
  // Every other run against the CPU's step run (encode for encoders).
  for (size_t i = 1; i < runs.size(); ++i) failures += Table(runs[i], runs[0], tol_abs, tol_rel);
  if (!reference_dir.empty()) {
    for (const Run& run : runs) failures += Table(run, reference, tol_abs, tol_rel);
  }
  std::printf("\n%s: %d array(s) past the tolerances\n", failures == 0 ? "PASS" : "FAIL",
              failures);
  return failures == 0 ? 0 : 1;
}
