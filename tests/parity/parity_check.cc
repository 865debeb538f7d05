// parity_check: runs a .recur model in step mode over a golden file's input
// and compares outputs, per-layer residual streams and final states with the
// float64 PyTorch reference. Prints a table; exits 1 past the tolerances.
//
//   parity_check MODEL.recur GOLDEN.bin [--abs 1e-4] [--rel 1e-5] [--batch B]
//                [--roundtrip-at K] [--prefill P] [--chunk T]
//
// --batch B steps B streams fed the same sequence (exercises the batched
// kernels; every stream is checked). --roundtrip-at K saves every stream's
// state after K steps, loads it into a fresh session and continues there.
// --prefill P feeds the first P positions through the chunked-parallel
// prefill (chunks of T positions) and steps the rest. --encode runs the
// whole sequence through recur_session_encode (the only mode of non-causal
// models); final states are then not compared (an encoder keeps none).
// rel is ‖Δ‖₂ / ‖ref‖₂ over the whole array. For final states (sums that
// grow with N) the max|Δ| limit is --abs × max(1, max|ref|).
//
// RECUR_PARITY_MAX_STEPS=N in the environment (the test presets of the slower
// builds set it: docs/testing.md) runs a causal check over the golden's first
// N positions only, with --prefill and --roundtrip-at scaled by N / steps:
// the same code paths in less time. Outputs and layers are compared over
// those positions; the final states, which the golden holds for the whole
// sequence, are not. --encode checks run the whole sequence, but for
// RECUR_PARITY_ENCODE_MAX_STEPS=N (the aarch64 test preset sets it) a causal
// model's (every block's mixer causal: a position's outputs depend on it and
// the positions before only) encodes its first N positions and compares
// those; a non-causal model's (an encoder's) outputs depend on every
// position, so its --encode checks always run whole.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/platform.h"
#include "engine/model_loader.h"
#include "engine/session.h"
#include "golden.h"
#include "mixers/mixer.h"
#include "model/model.h"
#include "parity_diff.h"
#include "session_options.h"

namespace {

using parity::Diff;

struct Capture {
  size_t d_model = 0, steps = 0, step = 0, batch = 1;  // step: positions observed so far
  std::vector<std::vector<float>> layers;  // [layer] (batch, steps, d_model)
  // x: (batch, n, d_model) for positions [step, step + n) of every stream;
  // calls come layer by layer, so the last layer's call ends the positions.
  static void Observe(void* ctx, size_t layer, const float* x, size_t batch, size_t n) {
    auto* c = static_cast<Capture*>(ctx);
    auto& dst = c->layers[layer];
    for (size_t b = 0; b < batch; ++b) {
      std::copy(x + b * n * c->d_model, x + (b + 1) * n * c->d_model,
                dst.begin() + (b * c->steps + c->step) * c->d_model);
    }
    if (layer + 1 == c->layers.size()) c->step += n;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Compare recur against a PyTorch golden file"};
  std::string model_path, golden_path;
  double tol_abs = 1e-4, tol_rel = 1e-5;
  size_t batch = 1;
  long roundtrip_at = -1;
  app.add_option("model", model_path)->required();
  app.add_option("golden", golden_path)->required();
  app.add_option("--abs", tol_abs, "max |Δ| tolerance");
  app.add_option("--rel", tol_rel, "‖Δ‖/‖ref‖ tolerance");
  app.add_option("--batch", batch)->check(CLI::Range(1, 1024));
  app.add_option("--roundtrip-at", roundtrip_at);
  size_t prefill = 0, chunk = 0;
  bool encode = false;
  app.add_flag("--encode", encode, "run the whole sequence with Encode");
  app.add_option("--prefill", prefill, "positions fed through prefill before stepping");
  app.add_option("--chunk", chunk, "prefill chunk (0 = the runtime's default)");
  std::string backend;
  app.add_option("--backend", backend,
                 "GEMM backend for every dense layer it supports (default: automatic)");
  recur_state_sums state_sums = RECUR_STATE_SUMS_COMPENSATED;
  tools::AddStateSumsOption(&app, &state_sums);
  recur_int8_activations int8_activations = RECUR_INT8_ACTIVATIONS_AUTO;
  tools::AddInt8ActivationsOption(&app, &int8_activations);
  CLI11_PARSE(app, argc, argv);

  std::map<std::string, recur::impl::golden::Record> g;
  std::string error;
  if (!recur::impl::golden::Read(golden_path, &g, &error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  for (const char* key : {"input", "output", "meta"}) {
    if (!g.count(key)) {
      std::fprintf(stderr, "error: %s has no '%s' record\n", golden_path.c_str(), key);
      return 1;
    }
  }

  recur::impl::platform::MappedFile file;
  recur::impl::Status s = recur::impl::platform::MapFile(model_path.c_str(), false, &file);
  std::unique_ptr<recur::impl::Model> model;
  if (s.ok()) s = recur::impl::LoadModel(file.data, file.size, {}, &model);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 1;
  }
  model->file = file;
  const recur::impl::Model& m = *model;
  const auto& in = g["input"];
  const size_t steps = size_t(in.shape[0]);
  bool causal = true;
  for (const auto& block : m.blocks) causal = causal && block.mixer->causal();
  // Positions run and compared: all, or the first RECUR_PARITY_MAX_STEPS
  // (RECUR_PARITY_ENCODE_MAX_STEPS for a causal model's --encode).
  size_t run = steps;
  const char* limit_name = encode ? "RECUR_PARITY_ENCODE_MAX_STEPS" : "RECUR_PARITY_MAX_STEPS";
  if (const char* limit = std::getenv(limit_name); limit && (!encode || causal)) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(limit, &end, 10);
    if (*limit == '\0' || *end != '\0' || n == 0) {
      std::fprintf(stderr, "error: %s=%s: not a positive number\n", limit_name, limit);
      return 1;
    }
    if (n < steps) {
      run = size_t(n);
      prefill = prefill * run / steps;
      if (roundtrip_at > 0) roundtrip_at = std::max(1L, long(size_t(roundtrip_at) * run / steps));
    }
  }
  const bool tokens = m.input_kind == recur::fb::InputKind::Tokens;
  const size_t width = tokens ? 1 : m.feature_width;
  if ((tokens && in.dtype != 2) || (!tokens && (in.dtype != 0 || in.shape.size() != 2 ||
                                               size_t(in.shape[1]) != width))) {
    std::fprintf(stderr, "error: golden input does not match the model's input kind/width\n");
    return 1;
  }

  recur::impl::SessionPtr session;
  // A KV cache holds exactly the golden's positions, so that its layout
  // (K (H, steps, dk), V (H, steps, dv)) is the golden's state records.
  const recur::impl::SessionOptions options{batch,
                                            1,
                                            chunk,
                                            0,
                                            backend.c_str(),
                                            0,
                                            steps,
                                            uint32_t(state_sums),
                                            uint32_t(int8_activations)};
  s = recur::impl::Session::Create(model.get(), options, &session);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 1;
  }
  std::printf("dense backends: %s\n", session->dense_summary().c_str());
  Capture cap;
  cap.d_model = m.d_model;
  cap.steps = steps;
  cap.batch = batch;
  cap.layers.assign(m.blocks.size(), std::vector<float>(batch * steps * m.d_model));
  session->set_layer_observer(&Capture::Observe, &cap);

  std::vector<int32_t> tok(batch);
  std::vector<float> feat(batch * width);
  std::vector<float> out(batch * steps * m.output_width);
  std::vector<float> step_out(batch * m.output_width);
  const int32_t* in_tokens = reinterpret_cast<const int32_t*>(in.bytes.data());
  const float* in_feats = reinterpret_cast<const float*>(in.bytes.data());
  if (encode) {
    // The first `run` positions (all but for a causal model under
    // RECUR_PARITY_ENCODE_MAX_STEPS), then each stream's outputs to its place in out.
    std::vector<int32_t> etok(tokens ? batch * run : 0);
    std::vector<float> efeat(tokens ? 0 : batch * run * width);
    for (size_t b = 0; b < batch; ++b) {
      if (tokens)
        std::copy(in_tokens, in_tokens + run, etok.begin() + b * run);
      else
        std::copy(in_feats, in_feats + run * width, efeat.begin() + b * run * width);
    }
    std::vector<float> eout(batch * run * m.output_width);
    s = session->Encode(run, tokens ? etok.data() : nullptr, tokens ? nullptr : efeat.data(),
                        tokens ? etok.size() : efeat.size(), eout.data());
    if (!s.ok()) {
      std::fprintf(stderr, "error: encode: %s\n", s.message().c_str());
      return 1;
    }
    for (size_t b = 0; b < batch; ++b) {
      std::copy(eout.begin() + b * run * m.output_width,
                eout.begin() + (b + 1) * run * m.output_width,
                out.begin() + b * steps * m.output_width);
    }
  }
  for (size_t t = 0; t < run && !encode; ++t) {
    if (long(t) == roundtrip_at) {
      recur::impl::SessionPtr fresh;
      s = recur::impl::Session::Create(model.get(), options, &fresh);
      std::vector<uint8_t> blob(session->state_blob_size());
      for (size_t b = 0; s.ok() && b < batch; ++b) {
        s = session->SaveState(int(b), blob.data(), blob.size());
        if (s.ok()) s = fresh->LoadState(int(b), blob.data(), blob.size());
      }
      if (!s.ok()) {
        std::fprintf(stderr, "error: state round trip: %s\n", s.message().c_str());
        return 1;
      }
      session = std::move(fresh);
      session->set_layer_observer(&Capture::Observe, &cap);
    }
    if (t < prefill) {
      // Positions [t, end) of every stream in one prefill call, stream-major.
      size_t end = std::min(prefill, run);
      if (roundtrip_at > long(t) && size_t(roundtrip_at) < end) end = size_t(roundtrip_at);
      const size_t n = end - t;
      std::vector<int32_t> ptok(tokens ? batch * n : 0);
      std::vector<float> pfeat(tokens ? 0 : batch * n * width);
      std::vector<float> pout(batch * n * m.output_width);
      for (size_t b = 0; b < batch; ++b) {
        if (tokens) std::copy(in_tokens + t, in_tokens + end, ptok.begin() + b * n);
        else std::copy(in_feats + t * width, in_feats + end * width, pfeat.begin() + b * n * width);
      }
      s = session->Prefill(n, tokens ? ptok.data() : nullptr, tokens ? nullptr : pfeat.data(),
                           tokens ? ptok.size() : pfeat.size(), pout.data());
      if (!s.ok()) {
        std::fprintf(stderr, "error: prefill at %zu: %s\n", t, s.message().c_str());
        return 1;
      }
      for (size_t b = 0; b < batch; ++b) {
        std::copy(pout.begin() + b * n * m.output_width, pout.begin() + (b + 1) * n * m.output_width,
                  out.begin() + (b * steps + t) * m.output_width);
      }
      t = end - 1;
      continue;
    }
    for (size_t b = 0; b < batch; ++b) {
      if (tokens) tok[b] = in_tokens[t];
      else std::copy(in_feats + t * width, in_feats + (t + 1) * width, feat.begin() + b * width);
    }
    s = session->Step(tokens ? tok.data() : nullptr, tokens ? nullptr : feat.data(),
                      tokens ? tok.size() : feat.size(), step_out.data());
    if (!s.ok()) {
      std::fprintf(stderr, "error: step %zu: %s\n", t, s.message().c_str());
      return 1;
    }
    for (size_t b = 0; b < batch; ++b) {
      std::copy(step_out.begin() + b * m.output_width, step_out.begin() + (b + 1) * m.output_width,
                out.begin() + (b * steps + t) * m.output_width);
    }
  }

  std::printf("parity %s vs %s: %zu steps%s (%zu by %s), batch %zu%s\n", model_path.c_str(),
              golden_path.c_str(), run,
              run < steps ? (" of " + std::to_string(steps) + " (" + limit_name + ")").c_str() : "",
              encode ? run : std::min(prefill, run), encode ? "encode" : "prefill", batch,
              roundtrip_at >= 0
                  ? (", state round trip at step " + std::to_string(roundtrip_at)).c_str()
                  : "");
  std::printf("  %-12s %12s %12s %12s\n", "array", "max|d|", "max|ref|", "rel(L2)");
  bool ok = true;
  // States are sums over the whole sequence (S grows like N), so their
  // absolute tolerance scales with their magnitude.
  auto report = [&](const std::string& name, const Diff& d, bool scale_abs = false) {
    const bool pass = d.Within(tol_abs, tol_rel, scale_abs);
    ok = ok && pass;
    std::printf("  %-12s %12.3e %12.3e %12.3e %s\n", name.c_str(), d.max_abs, d.max_ref, d.rel(),
                pass ? "" : "FAIL");
  };
  // The first `compared` of the record's `per_stream` values of each stream.
  auto compare = [&](const std::string& name, const float* got, size_t per_stream,
                     size_t stream_stride, size_t compared) {
    if (!g.count(name)) {
      std::printf("  %-12s missing from golden\n", name.c_str());
      ok = false;
      return;
    }
    const std::vector<double> want = g[name].AsDouble();
    if (want.size() != per_stream) {
      std::printf("  %-12s size %zu, golden has %zu FAIL\n", name.c_str(), per_stream, want.size());
      ok = false;
      return;
    }
    Diff d;
    for (size_t b = 0; b < batch; ++b) {
      for (size_t i = 0; i < compared; ++i) d.Add(got[b * stream_stride + i], want[i]);
    }
    report(name, d);
  };
  for (size_t l = 0; l < m.blocks.size(); ++l) {
    compare("layer." + std::to_string(l), cap.layers[l].data(), steps * m.d_model,
            steps * m.d_model, run * m.d_model);
  }
  compare("output", out.data(), steps * m.output_width, steps * m.output_width,
          run * m.output_width);
  if (run < steps && !encode) {
    std::printf("  final states not compared: the golden's are after %zu positions\n", steps);
  }
  // Final state: the runtime's per-layer state starts with the golden's
  // mixer records for that layer (for linear attention: S then z), flattened
  // in order; what follows them (linear attention's compensation terms) has
  // no counterpart in the reference. A token shift's records
  // (state.<l>.shift.mixer, then .ffn) are the layer state's last floats.
  for (size_t l = 0; l < m.blocks.size() && !encode && run == steps; ++l) {
    const std::string prefix = "state." + std::to_string(l) + ".";
    const std::string shift_prefix = prefix + "shift.";
    std::vector<double> want, shift;
    for (const char* which : {"mixer", "ffn", "ffn_mix"}) {
      if (g.count(shift_prefix + which)) {
        auto v = g[shift_prefix + which].AsDouble();
        shift.insert(shift.end(), v.begin(), v.end());
      }
    }
    for (const auto& [name, rec] : g) {
      if (name.rfind(prefix, 0) == 0 && name != prefix + "z" && name.rfind(shift_prefix, 0) != 0) {
        auto v = rec.AsDouble();
        want.insert(want.end(), v.begin(), v.end());
      }
    }
    if (g.count(prefix + "z")) {
      auto v = g[prefix + "z"].AsDouble();
      want.insert(want.end(), v.begin(), v.end());
    }
    const size_t n = want.size(), floats = session->layer_state_floats(l);
    if (floats < n + shift.size()) {
      std::printf("  state.%zu: runtime has %zu floats, golden %zu FAIL\n", l, floats,
                  n + shift.size());
      ok = false;
      continue;
    }
    Diff d;
    for (size_t b = 0; b < batch; ++b) {
      const float* st = session->layer_state(b, l);
      for (size_t i = 0; i < n; ++i) d.Add(st[i], want[i]);
    }
    report("state." + std::to_string(l), d, /*scale_abs=*/true);
    if (!shift.empty()) {
      Diff ds;
      for (size_t b = 0; b < batch; ++b) {
        const float* tail = session->layer_state(b, l) + floats - shift.size();
        for (size_t i = 0; i < shift.size(); ++i) ds.Add(tail[i], shift[i]);
      }
      report("shift." + std::to_string(l), ds, /*scale_abs=*/true);
    }
  }
  std::printf("%s (tolerances: max|d| <= %.1e, rel <= %.1e)\n", ok ? "PASS" : "FAIL", tol_abs,
              tol_rel);
  return ok ? 0 : 1;
}
