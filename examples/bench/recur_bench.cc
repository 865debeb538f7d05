// recur-bench: per-step latency of a model in RNN mode.
//
//   recur-bench MODEL.recur [--batch B] [--threads T] [--steps N] [--warmup W] [--json]
//
// Prints median/p10/p90 step latency after warm-up, steps/s and elements/s
// (steps × batch), state bytes per stream, peak RSS and the SIMD target.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>

#include "recur/recur.hpp"

namespace {

double PeakRssMiB() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: KiB
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Benchmark recur step latency"};
  std::string model_path;
  uint32_t batch = 1, threads = 1;
  int steps = 1000, warmup = 50;
  bool json = false;
  app.add_option("model", model_path, "Model file (.recur)")->required();
  app.add_option("--batch,-b", batch, "Streams stepped together")->check(CLI::Range(1, 65536));
  app.add_option("--threads,-t", threads, "Intra-op threads")->check(CLI::Range(1, 256));
  app.add_option("--steps,-n", steps, "Timed steps")->check(CLI::Range(1, 100000000));
  app.add_option("--warmup,-w", warmup, "Untimed steps first")->check(CLI::Range(0, 1000000));
  app.add_flag("--json", json, "One JSON object instead of text");
  CLI11_PARSE(app, argc, argv);

  auto model = recur::Model::Load(model_path);
  if (!model) {
    std::fprintf(stderr, "error: %s\n", model.error().c_str());
    return 1;
  }
  const recur_model_info info = model->info();
  auto session = recur::Session::Create(*model, batch, threads);
  if (!session) {
    std::fprintf(stderr, "error: %s\n", session.error().c_str());
    return 1;
  }

  std::mt19937 rng(1234);
  const size_t input_width = info.input_kind == RECUR_INPUT_TOKENS ? 1 : info.feature_width;
  std::vector<int32_t> tokens(batch);
  std::vector<float> frames(batch * input_width);
  std::vector<float> out(size_t{batch} * info.output_width);
  std::uniform_int_distribution<int32_t> token_dist(0, int32_t(std::max(info.vocab_size, 1u)) - 1);
  std::normal_distribution<float> frame_dist(0.0f, 1.0f);
  std::vector<double> times_us;
  times_us.reserve(size_t(steps));
  const uint32_t max_pos = info.max_positions;
  uint64_t position = 0;
  for (int i = 0; i < warmup + steps; ++i) {
    if (max_pos != 0 && position == max_pos) {  // learned positions end: start over
      session->Reset();
      position = 0;
    }
    for (auto& t : tokens) t = token_dist(rng);
    for (auto& f : frames) f = frame_dist(rng);
    const auto start = std::chrono::steady_clock::now();
    recur::Status s = info.input_kind == RECUR_INPUT_TOKENS
                          ? session->StepTokens(tokens.data(), tokens.size(), out.data())
                          : session->StepFeatures(frames.data(), frames.size(), out.data());
    const auto end = std::chrono::steady_clock::now();
    ++position;
    if (!s) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 1;
    }
    if (i >= warmup) times_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  std::sort(times_us.begin(), times_us.end());
  auto pct = [&](double p) { return times_us[size_t(p * double(times_us.size() - 1))]; };
  const double median = pct(0.5), p10 = pct(0.1), p90 = pct(0.9);
  const double steps_per_s = 1e6 / median;
  if (json) {
    std::printf("{\"model\": \"%s\", \"batch\": %u, \"threads\": %u, \"steps\": %d, "
                "\"median_us\": %.2f, \"p10_us\": %.2f, \"p90_us\": %.2f, \"steps_per_s\": %.1f, "
                "\"elements_per_s\": %.1f, \"state_bytes_per_stream\": %zu, "
                "\"parameters\": %llu, \"peak_rss_mib\": %.1f, \"simd_target\": \"%s\"}\n",
                model_path.c_str(), batch, threads, steps, median, p10, p90, steps_per_s,
                steps_per_s * batch, info.state_bytes,
                static_cast<unsigned long long>(info.parameter_count), PeakRssMiB(),
                recur_simd_target());
  } else {
    std::printf("model            %s (%llu parameters, %u layers)\n", model_path.c_str(),
                static_cast<unsigned long long>(info.parameter_count), info.num_layers);
    std::printf("batch / threads  %u / %u\n", batch, threads);
    std::printf("step latency     median %.1f us  p10 %.1f us  p90 %.1f us  (%d steps)\n",
                median, p10, p90, steps);
    std::printf("throughput       %.1f steps/s  %.1f elements/s\n", steps_per_s,
                steps_per_s * batch);
    std::printf("state            %zu bytes per stream\n", info.state_bytes);
    std::printf("peak RSS         %.1f MiB\n", PeakRssMiB());
    std::printf("SIMD target      %s\n", recur_simd_target());
  }
  return 0;
}
