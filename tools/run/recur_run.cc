// recur-run: feeds input sequences through a model and writes the outputs,
// so users can compare a converted model against their PyTorch numbers.
//
//   recur-run MODEL.recur --input IN.npy --output OUT.npy [--mode step|prefill|encode]
//             [--chunk N] [--state-in S.bin] [--state-out S.bin] [--threads T]
//   IN: int32/int64 token ids (N,) or (B, N); float32/float64 frames (N, F) or (B, N, F)
//   OUT: float32 (N, output_width), or (B, N, output_width) for a batch of B streams
//
// Modes: step (one element at a time, the RNN form), prefill (chunked-parallel,
// chunks of --chunk positions), encode (whole sequences, for non-causal models).
// The default is step, or encode for a model with non-causal blocks. A state
// file holds B blobs of recur_session_state_size bytes, stream 0 first.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "converter/file_util.h"
#include "model_input.h"
#include "npy.h"
#include "recur/recur.hpp"
#include "session_options.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

// Steps every stream through its n elements; out is (batch, n, width). An
// empty string, or the failing step's message.
std::string RunSteps(recur::Session* session, const recur_model_info& info,
                     const tools::ModelInput& in, float* out) {
  const size_t batch = size_t(in.batch), n = size_t(in.n), fw = info.feature_width;
  const size_t width = info.output_width;
  std::vector<int32_t> ids(batch);
  std::vector<float> frames(batch * fw), y(batch * width);
  const bool tokens = info.input_kind == RECUR_INPUT_TOKENS;
  for (size_t t = 0; t < n; ++t) {
    for (size_t b = 0; b < batch; ++b) {
      if (tokens) {
        ids[b] = in.tokens[b * n + t];
      } else {
        std::copy_n(&in.frames[(b * n + t) * fw], fw, &frames[b * fw]);
      }
    }
    const recur::Status s = tokens ? session->StepTokens(ids.data(), batch, y.data())
                                   : session->StepFeatures(frames.data(), frames.size(), y.data());
    if (!s) return "step " + std::to_string(t) + ": " + s.message();
    for (size_t b = 0; b < batch; ++b) {
      std::copy_n(&y[b * width], width, out + (b * n + t) * width);
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Run a recur model over input sequences (step, prefill or encode)"};
  std::string model_path, input_path, output_path, mode = "auto", state_in, state_out;
  uint32_t chunk = 0, threads = 1;
  app.add_option("model", model_path, tools::kModelFileHelp)->required();
  app.add_option("--input,-i", input_path,
                 "Input .npy: token ids (N,) or (B, N); frames (N, F) or (B, N, F)")
      ->required();
  app.add_option("--output,-o", output_path,
                 "Output .npy: float32 (N, output_width), or (B, N, output_width) for a batch")
      ->required();
  app.add_option("--mode", mode,
                 "step (RNN form), prefill (chunked-parallel) or encode (whole sequences); "
                 "auto: encode for models with non-causal blocks, else step")
      ->check(CLI::IsMember({"auto", "step", "prefill", "encode"}));
  app.add_option("--chunk", chunk, "Positions per prefill chunk (--mode prefill; 0: the default)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--state-in", state_in,
                 "Start from these stream states (B blobs of recur_session_state_size bytes)");
  app.add_option("--state-out", state_out, "Write the streams' states after the run (B blobs)");
  app.add_option("--threads,-t", threads, "Threads of the session")->check(CLI::Range(1, 256));
  recur_state_sums state_sums = RECUR_STATE_SUMS_COMPENSATED;
  tools::AddStateSumsOption(&app, &state_sums);
  recur_int8_activations int8_activations = RECUR_INT8_ACTIVATIONS_AUTO;
  tools::AddInt8ActivationsOption(&app, &int8_activations);
  CLI11_PARSE(app, argc, argv);

  std::string error;
  if (!npy::CheckOutputIsNotAnInput(output_path, {model_path, input_path, state_in}, &error) ||
      (!state_out.empty() &&
       !npy::CheckOutputIsNotAnInput(state_out, {model_path, input_path, state_in, output_path},
                                     &error))) {
    return Fail(error);
  }
  recur::Model model;
  tools::ModelInput input;
  std::string note;
  if (!tools::LoadModelAndInput(model_path, input_path, &model, &input, &error, &note,
                                tools::Streams::kBatch)) {
    return Fail(error);
  }
  tools::PrintNote(note);
  const recur_model_info info = model.info();
  if (mode == "auto") mode = info.recurrent ? "step" : "encode";
  if (!info.recurrent && mode != "encode") {
    return Fail(model_path + " has non-causal (encoder) blocks: it has no recurrent form and "
                "runs with --mode encode only (its default)");
  }
  if (chunk != 0 && mode != "prefill") return Fail("--chunk applies to --mode prefill only");
  if (mode == "encode" && (!state_in.empty() || !state_out.empty())) {
    return Fail("--state-in and --state-out need --mode step or prefill: encode runs every "
                "sequence from an empty history and leaves no state");
  }
  if (input.batch == 0) return Fail(input_path + ": a batch of 0 streams");

  recur_session_options options = recur_session_options_default();
  options.batch = static_cast<uint32_t>(input.batch);
  options.threads = threads;
  options.prefill_chunk = chunk;
  options.state_sums = state_sums;
  options.int8_activations = int8_activations;
  auto session = recur::Session::Create(model, options);
  if (!session) return Fail(session.error());

  const size_t batch = size_t(input.batch), n = size_t(input.n);
  if (!state_in.empty()) {
    size_t blob = 0;
    const recur::Status sized(recur_session_state_size(session->get(), &blob));
    if (!sized) return Fail(sized.message());
    auto bytes = recur::impl::converter::ReadFileBytes(state_in);
    if (!bytes.ok()) return Fail(bytes.status().message());
    if (bytes->size() != batch * blob) {
      return Fail(state_in + ": " + std::to_string(bytes->size()) + " bytes, expected " +
                  std::to_string(batch) + " stream state(s) of " + std::to_string(blob) +
                  " bytes for this model and session");
    }
    for (size_t b = 0; b < batch; ++b) {
      const std::vector<uint8_t> one(bytes->begin() + b * blob, bytes->begin() + (b + 1) * blob);
      const recur::Status s = session->LoadState(int(b), one);
      if (!s) return Fail(state_in + ": stream " + std::to_string(b) + ": " + s.message());
    }
  }

  std::vector<float> output(batch * n * info.output_width);
  const bool tokens = info.input_kind == RECUR_INPUT_TOKENS;
  recur::Status s;
  if (mode == "step") {
    const std::string failed = RunSteps(&*session, info, input, output.data());
    if (!failed.empty()) return Fail(failed);
  } else if (mode == "prefill") {
    s = tokens ? session->PrefillTokens(n, input.tokens.data(), input.tokens.size(), output.data())
               : session->PrefillFeatures(n, input.frames.data(), input.frames.size(),
                                          output.data());
  } else {
    s = tokens ? session->EncodeTokens(n, input.tokens.data(), input.tokens.size(), output.data())
               : session->EncodeFeatures(n, input.frames.data(), input.frames.size(),
                                         output.data());
  }
  if (!s) return Fail(mode + ": " + s.message());

  std::vector<int64_t> shape = {int64_t(n), int64_t{info.output_width}};
  if (input.batched) shape.insert(shape.begin(), int64_t(batch));
  if (!npy::WriteFloat32(output_path, shape, output.data(), &error)) return Fail(error);
  if (!state_out.empty()) {
    std::string blobs;
    for (size_t b = 0; b < batch; ++b) {
      auto blob = session->SaveState(int(b));
      if (!blob) return Fail(blob.error());
      blobs.append(reinterpret_cast<const char*>(blob->data()), blob->size());
    }
    const recur::impl::Status w =
        recur::impl::converter::WriteFileAtomic(state_out, blobs.data(), blobs.size());
    if (!w.ok()) return Fail(w.message());
  }
  std::fprintf(stderr, "recur-run: %s, %zu stream(s) x %zu elements, wrote %s%s%s\n", mode.c_str(),
               batch, n, output_path.c_str(), state_out.empty() ? "" : " and ",
               state_out.c_str());
  return 0;
}
