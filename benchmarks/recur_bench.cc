// recur-bench: decode, prefill and generation speed of a model, each row
// printed beside the machine's measured limits (llama-bench style).
//
//   recur-bench MODEL.recur [--batch 1,64] [--threads 1,2] [--steps N]
//               [--prefill 128,1024] [--chunk T] [--generate LEN] [--encode 512] [--json]
//               [--backend auto|highway|xnnpack|onednn] [--packing auto|off|on]
//               [--state-sums compensated|plain] [--sessions S] [--no-mmap]
//
// Rows:
//   step       one RNN step of B streams: median/p10/p90 µs, elements/s
//   prefill N  N positions of one stream through the chunked-parallel form
//              (200000 / N runs, 3 to 50, until 20 s of them; encode likewise)
//   gen LEN    LEN-step sequences sampled from the output distribution, B at
//              a time (images/s for 784-pixel images); "gen LEN xS": S such
//              sessions at once, one thread each (--sessions S)
//   step @P    one step at position P (after a prefill of P positions): constant
//              for fixed-state mixers, growing with P for a KV cache (--at 1,1024)
//   encode N   B whole sequences of N positions through the encoder form (the
//              only form of Linformer and Reformer); --encode replaces the step rows
// "bound" is the time the hardware needs at best: max(weight bytes / read
// bandwidth, (f32 FLOPs / FMA peak + int8/int4-weight FLOPs / int8 dot peak) /
// threads), the read bandwidth that of the row's threads reading at once
// (MeasureReadBandwidth), the int8 dot peak only where int8 activations are
// not "float" (docs/performance.md, "Which bound for narrow weights");
// "%bound" = bound / measured.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "machine_limits.h"
#include "model_file.h"
#include "recur/recur.hpp"
#include "session_options.h"

namespace {

using Clock = std::chrono::steady_clock;

double PeakRssMiB() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: KiB
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Whether a prefill or encode row has timed enough runs: three at least,
// then until their sum passes 20 s (a large model's prefill 512 can take
// seconds; its row would otherwise take minutes for its 50 runs).
bool RunsEnough(const std::vector<double>& times) {
  constexpr double kBudgetSeconds = 20.0;
  double sum = 0.0;
  for (double t : times) sum += t;
  return times.size() >= 3 && sum > kBudgetSeconds;
}

struct Row {
  std::string test;
  uint32_t batch, threads;
  double median_s, p10_s, p90_s;
  double rate;            // elements (or images) per second
  const char* rate_unit;
  double bound_s;         // hardware floor for the same work
  uint32_t sessions = 1;  // concurrent sessions (gen rows with --sessions)
};

struct Inputs {
  const recur_model_info& info;
  std::mt19937 rng{1234};
  std::vector<int32_t> tokens;
  std::vector<float> frames;
  explicit Inputs(const recur_model_info& i) : info(i) {}
  bool is_tokens() const { return info.input_kind == RECUR_INPUT_TOKENS; }
  // Fills `n` random elements; returns the matching recur_input.
  recur_input Make(size_t n) {
    if (is_tokens()) {
      std::uniform_int_distribution<int32_t> dist(0, int32_t(info.vocab_size) - 1);
      tokens.resize(n);
      for (auto& t : tokens) t = dist(rng);
      return {tokens.data(), nullptr, n};
    }
    std::normal_distribution<float> dist(0.0f, 1.0f);
    frames.resize(n * info.feature_width);
    for (auto& f : frames) f = dist(rng);
    return {nullptr, frames.data(), frames.size()};
  }
};

// A session through the C API, for the options recur::Session::Create lacks.
struct SessionHandle {
  recur_session* session = nullptr;
  ~SessionHandle() { recur_session_free(session); }
  recur_session* get() const { return session; }
  void Reset() { recur_session_reset(session, -1); }
  recur::Status StepTokens(const int32_t* tokens, size_t count, float* out) {
    recur_input in{tokens, nullptr, count};
    return recur::Status(recur_session_step(session, &in, out));
  }
};

// Generates one `length`-step sequence in each of the session's `batch`
// streams from token 0, sampling each next token from the output
// distribution. Returns an error message, or "" on success.
std::string Generate(SessionHandle* session, uint32_t batch, int length,
                     const recur_model_info& info, uint32_t seed) {
  session->Reset();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const size_t width = info.output_width;
  std::vector<float> out(size_t{batch} * width), weight(width);
  std::vector<int32_t> tokens(batch, 0);
  for (int t = 0; t < length; ++t) {
    recur::Status s = session->StepTokens(tokens.data(), batch, out.data());
    if (!s) return s.message();
    for (uint32_t b = 0; b < batch; ++b) {
      const float* p = out.data() + size_t{b} * width;
      const float mx = *std::max_element(p, p + width);
      double total = 0;
      for (size_t v = 0; v < width; ++v) {
        weight[v] = info.output_kind == RECUR_OUTPUT_PROBABILITIES ? p[v] : std::exp(p[v] - mx);
        total += weight[v];
      }
      double u = uniform(rng) * total;
      int32_t pick = int32_t(width) - 1;
      for (size_t v = 0; v < width; ++v) {
        u -= weight[v];
        if (u <= 0) {
          pick = int32_t(v);
          break;
        }
      }
      tokens[b] = pick;
    }
  }
  return "";
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "error: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Benchmark recur: decode, prefill and generation, beside the machine's limits"};
  std::string model_path;
  std::vector<uint32_t> batches{1}, thread_counts{1};
  std::vector<size_t> prefills;
  uint32_t chunk = 0;
  int steps = 500, warmup = 20, generate = 0;
  bool json = false;
  std::string backend = "auto";
  recur_weight_packing packing = RECUR_PACKING_AUTO;
  app.add_option("model", model_path, tools::kModelFileHelp)->required();
  app.add_option("--batch,-b", batches, "Streams stepped together (list)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 65536u));
  app.add_option("--threads,-t", thread_counts, "Intra-op threads (list)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 256u));
  app.add_option("--steps,-n", steps, "Timed steps per decode row")->check(CLI::Range(1, 100000000));
  app.add_option("--warmup,-w", warmup, "Untimed steps first")->check(CLI::Range(0, 1000000));
  app.add_option("--prefill,-p", prefills, "Prefill lengths (list)")->delimiter(',');
  app.add_option("--chunk", chunk, "Prefill chunk (0 = the runtime's default)");
  uint32_t prefill_min = 0;
  uint32_t max_context = 0;
  std::vector<size_t> at_positions;
  std::vector<size_t> encodes;
  app.add_option("--max-context", max_context,
                 "KV-cache models: positions a stream may hold (0 = the runtime's default); "
                 "raised as needed for --prefill and --at rows");
  app.add_option("--encode", encodes, "Encode lengths (list); no step rows then")
      ->delimiter(',');
  app.add_option("--at", at_positions, "Decode rows at these positions (list)")->delimiter(',');
  app.add_option("--prefill-min", prefill_min,
                 "Prefills shorter than this run as steps (0 = the runtime's default, 1 = never)");
  app.add_option("--generate,-g", generate, "Sequence length for generation rows (784 = image)")
      ->check(CLI::Range(0, 100000000));
  uint32_t sessions = 1;
  app.add_option("--sessions", sessions,
                 "Generation rows: this many sessions of --batch streams each, stepped "
                 "concurrently by their own threads (rate counts all their streams)")
      ->check(CLI::Range(1u, 64u));
  app.add_flag("--json", json, "JSON lines instead of a table");
  bool no_mmap = false;
  app.add_flag("--no-mmap", no_mmap,
               "Read the model into memory (huge pages where the OS gives them) instead of "
               "mapping the file");
  app.add_option("--backend", backend, "GEMM backend for the dense layers: auto (fastest per "
                 "shape, measured at session creation), highway, xnnpack, onednn");
  const std::map<std::string, recur_weight_packing> packings{
      {"auto", RECUR_PACKING_AUTO}, {"off", RECUR_PACKING_OFF}, {"on", RECUR_PACKING_ON}};
  app.add_option("--packing", packing, "Packed weight copies: auto (batch >= 4), off, on")
      ->transform(CLI::CheckedTransformer(packings));
  recur_state_sums state_sums = RECUR_STATE_SUMS_COMPENSATED;
  tools::AddStateSumsOption(&app, &state_sums);
  recur_int8_activations int8_activations = RECUR_INT8_ACTIVATIONS_AUTO;
  tools::AddInt8ActivationsOption(&app, &int8_activations);
  CLI11_PARSE(app, argc, argv);
  const char* sums_name = state_sums == RECUR_STATE_SUMS_PLAIN ? "plain" : "compensated";

  recur::Model loaded;
  std::string load_error, note;
  if (!tools::LoadModelFile(model_path, no_mmap ? uint32_t{RECUR_LOAD_NO_MMAP} : 0u, &loaded,
                            &load_error, &note)) {
    return Fail(load_error);
  }
  tools::PrintNote(note);
  recur::Model* model = &loaded;
  const recur_model_info info = model->info();
  const size_t state_bytes =
      state_sums == RECUR_STATE_SUMS_PLAIN ? info.state_bytes_plain_sums : info.state_bytes;
  const double peak = bench::MeasureFmaPeak();
  const double bandwidth = bench::MeasureReadBandwidth(info.step_weight_bytes);
  const double int8_peak =
      info.step_integer_flops == 0
          ? 0.0
          : bench::MeasureInt8DotPeak(std::string(recur_simd_target()) == "AVX3_VNNI");
  // Seconds of compute for one stream's step: integer-weight layers at the
  // int8 dot peak where they run as integer dot products (a target without
  // integer tiles measures 0 and runs them as f32).
  const bool integer = int8_peak > 0 && int8_activations != RECUR_INT8_ACTIVATIONS_FLOAT;
  const double integer_flops = integer ? double(info.step_integer_flops) : 0.0;
  const double step_compute_s =
      (double(info.step_flops) - integer_flops) / peak + (integer ? integer_flops / int8_peak : 0.0);
  // The read bandwidth of `threads` threads at once, measured once per count.
  std::map<uint32_t, double> bandwidths{{1u, bandwidth}};
  auto bandwidth_of = [&](uint32_t threads) {
    auto [it, added] = bandwidths.try_emplace(threads, 0.0);
    if (added) it->second = bench::MeasureReadBandwidth(info.step_weight_bytes, threads);
    return it->second;
  };
  // `bytes` of weights streamed and `steps` stream-steps computed.
  auto bound = [&](double bytes, double steps, uint32_t threads) {
    return std::max(bytes / bandwidth_of(threads), steps * step_compute_s / threads);
  };
  if (!json) {
    std::printf("model     %s: %llu parameters, %u layers, %.1f MB dense weights, %.1f MFLOP "
                "per step, state %zu bytes per stream (%s sums)%s\n",
                model_path.c_str(), static_cast<unsigned long long>(info.parameter_count),
                info.num_layers, info.step_weight_bytes / 1e6, info.step_flops / 1e6,
                state_bytes, sums_name, no_mmap ? "; read into memory" : "");
    std::printf("machine   SIMD %s, FMA peak %.1f GFLOP/s per core, read bandwidth %.1f GB/s per "
                "core over %.1f MB\n",
                recur_simd_target(), peak / 1e9, bandwidth / 1e9, info.step_weight_bytes / 1e6);
    if (info.step_integer_flops > 0) {
      std::printf("          int8 dot peak %.1f GOP/s per core; %.1f MFLOP a step on int8/int4 "
                  "weights%s\n",
                  int8_peak / 1e9, info.step_integer_flops / 1e6,
                  integer ? "" : ", bounded as f32 (float activations or no integer tiles)");
    }
    for (uint32_t threads : thread_counts) {
      if (threads > 1) {
        std::printf("          read bandwidth of %u threads at once %.1f GB/s\n", threads,
                    bandwidth_of(threads) / 1e9);
      }
    }
    std::printf(
        "          (bounds: the bandwidth of the row's threads at once; the peaks times "
        "threads)\n");
    std::printf("%-14s %5s %7s %11s %11s %11s %14s %11s %7s\n", "test", "batch", "threads",
                "median", "p10", "p90", "rate", "bound", "%bound");
  }
  std::vector<Row> rows;
  auto print = [&](const Row& r) {
    if (json) {
      std::printf(
          "{\"test\": \"%s\", \"batch\": %u, \"threads\": %u, \"median_us\": %.2f, "
          "\"p10_us\": %.2f, \"p90_us\": %.2f, \"rate\": %.2f, \"rate_unit\": \"%s\", "
          "\"bound_us\": %.2f, \"simd_target\": \"%s\", \"fma_peak_gflops\": %.1f, "
          "\"int8_peak_gops\": %.1f, "
          "\"bandwidth_gbs\": %.1f, \"bandwidth_threads_gbs\": %.1f, "
          "\"state_bytes_per_stream\": %zu, "
          "\"state_sums\": \"%s\", \"sessions\": %u, \"peak_rss_mib\": %.1f}\n",
          r.test.c_str(), r.batch, r.threads, r.median_s * 1e6, r.p10_s * 1e6, r.p90_s * 1e6,
          r.rate, r.rate_unit, r.bound_s * 1e6, recur_simd_target(), peak / 1e9, int8_peak / 1e9,
          bandwidth / 1e9, bandwidth_of(r.threads * r.sessions) / 1e9, state_bytes, sums_name,
          r.sessions, PeakRssMiB());
    } else {
      std::printf("%-14s %5u %7u %9.1fus %9.1fus %9.1fus %9.1f %-4s %9.1fus %6.0f%%\n",
                  r.test.c_str(), r.batch, r.threads, r.median_s * 1e6, r.p10_s * 1e6,
                  r.p90_s * 1e6, r.rate, r.rate_unit, r.bound_s * 1e6,
                  100.0 * r.bound_s / r.median_s);
    }
    std::fflush(stdout);
  };

  // Sessions with the bench's options; prints the backends each one chose.
  std::string last_backends;
  // The positions a session of this model holds before a reset: learned
  // positions, or a KV cache's max_context; 0 = unbounded.
  const bool grows = info.state_bytes_per_position > 0;
  const size_t default_context =
      max_context != 0 ? max_context : info.max_positions != 0 ? info.max_positions : 4096;
  auto create = [&](uint32_t batch, uint32_t threads, SessionHandle* out,
                    size_t min_context = 0) -> bool {
    recur_session_options options{};
    options.struct_size = sizeof(options);
    options.batch = batch;
    options.threads = threads;
    options.prefill_chunk = chunk;
    options.backend = backend.c_str();
    options.weight_packing = packing;
    options.prefill_min = prefill_min;
    options.max_context = uint32_t(std::max(default_context, min_context));
    options.state_sums = state_sums;
    options.int8_activations = int8_activations;
    const auto t0 = Clock::now();
    if (recur_session_create(model->get(), &options, &out->session) != RECUR_OK) return false;
    const double create_s = Seconds(t0, Clock::now());
    const std::string chosen = recur_session_backends(out->session);
    if (!json && chosen != last_backends) {
      std::printf("backends  %s (batch %u, threads %u; session created in %.0f ms)\n",
                  chosen.c_str(), batch, threads, create_s * 1e3);
      last_backends = chosen;
    }
    return true;
  };

  Inputs inputs(info);
  for (uint32_t threads : thread_counts) {
    for (uint32_t batch : encodes.empty() ? batches : std::vector<uint32_t>{}) {
      auto session = std::make_unique<SessionHandle>();
      if (!create(batch, threads, session.get())) return Fail(recur_last_error());
      std::vector<float> out(size_t{batch} * info.output_width);
      // A fixed-size reservoir of step times, so that long runs (10⁶ steps)
      // measure the session's memory, not the benchmark's.
      constexpr size_t kMaxSamples = 1 << 16;
      std::vector<double> times;
      times.reserve(std::min<size_t>(size_t(steps), kMaxSamples));
      std::uniform_int_distribution<uint64_t> reservoir;
      uint64_t position = 0, timed = 0;
      for (int i = 0; i < warmup + steps; ++i) {
        if ((info.max_positions != 0 && position == info.max_positions) ||
            (grows && position == default_context)) {
          session->Reset();
          position = 0;
        }
        recur_input in = inputs.Make(batch);
        const auto t0 = Clock::now();
        recur_status s = recur_session_step(session->get(), &in, out.data());
        const auto t1 = Clock::now();
        if (s != RECUR_OK) return Fail(recur_last_error());
        ++position;
        if (i < warmup) continue;
        if (times.size() < kMaxSamples) {
          times.push_back(Seconds(t0, t1));
        } else if (const uint64_t slot = reservoir(inputs.rng) % (timed + 1); slot < kMaxSamples) {
          times[slot] = Seconds(t0, t1);
        }
        ++timed;
      }
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      print({"step", batch, threads, median, times[times.size() / 10],
             times[times.size() * 9 / 10], batch / median, "el/s",
             bound(double(info.step_weight_bytes), double(batch), threads)});
    }
    for (size_t n : encodes) {
      for (uint32_t batch : batches) {
        auto session = std::make_unique<SessionHandle>();
        if (!create(batch, threads, session.get(), n)) return Fail(recur_last_error());
        recur_input in = inputs.Make(size_t{batch} * n);
        std::vector<float> out(size_t{batch} * n * info.output_width);
        std::vector<double> times;
        const int runs = int(std::clamp<size_t>(200000 / (n * batch), 3, 50));
        for (int r = 0; r < runs + 1 && !RunsEnough(times); ++r) {
          const auto t0 = Clock::now();
          if (recur_session_encode(session->get(), n, &in, out.data()) != RECUR_OK) {
            return Fail(recur_last_error());
          }
          const auto t1 = Clock::now();
          if (r > 0) times.push_back(Seconds(t0, t1));
        }
        std::sort(times.begin(), times.end());
        const double median = times[times.size() / 2];
        print({"encode " + std::to_string(n), batch, threads, median, times[times.size() / 10],
               times[times.size() * 9 / 10], double(n) * batch / median, "el/s",
               bound(0.0, double(n) * batch, threads)});
      }
    }
    for (size_t n : prefills) {
      if (info.max_positions != 0 && n > info.max_positions) {
        return Fail("--prefill " + std::to_string(n) + " exceeds the model's " +
                    std::to_string(info.max_positions) + " learned positions");
      }
      auto session = std::make_unique<SessionHandle>();
      if (!create(1, threads, session.get(), n)) return Fail(recur_last_error());
      // Fed in pieces of at most kPiece positions from one input buffer, so the
      // process's memory is the session's, not the input's (prefill(a) +
      // prefill(b) == prefill(a + b)).
      constexpr size_t kPiece = 4096;
      recur_input in = inputs.Make(std::min(n, kPiece));
      std::vector<double> times;
      const int runs = int(std::clamp<size_t>(200000 / n, 3, 50));
      for (int r = 0; r < runs + 1 && !RunsEnough(times); ++r) {
        session->Reset();
        const auto t0 = Clock::now();
        for (size_t done = 0; done < n;) {
          const size_t piece = std::min(kPiece, n - done);
          recur_input part = in;
          part.count = in.tokens != nullptr ? piece : piece * info.feature_width;
          if (recur_session_prefill(session->get(), piece, &part, nullptr) != RECUR_OK) {
            return Fail(recur_last_error());
          }
          done += piece;
        }
        const auto t1 = Clock::now();
        if (r > 0) times.push_back(Seconds(t0, t1));
      }
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      // Prefill reads each weight once per chunk: compute-bound.
      print({"prefill " + std::to_string(n), 1, threads, median, times[times.size() / 10],
             times[times.size() * 9 / 10], n / median, "el/s",
             bound(0.0, double(n), threads)});
    }
    for (size_t at : at_positions) {
      if (info.max_positions != 0 && at + size_t(warmup + steps) > info.max_positions) {
        return Fail("--at " + std::to_string(at) + " plus the steps exceeds the model's " +
                    std::to_string(info.max_positions) + " learned positions");
      }
      auto session = std::make_unique<SessionHandle>();
      if (!create(1, threads, session.get(), at + size_t(warmup + steps))) {
        return Fail(recur_last_error());
      }
      if (at > 0) {
        recur_input prompt = inputs.Make(at);
        if (recur_session_prefill(session->get(), at, &prompt, nullptr) != RECUR_OK) {
          return Fail(recur_last_error());
        }
      }
      std::vector<float> out(info.output_width);
      std::vector<double> times;
      for (int i = 0; i < warmup + steps; ++i) {
        recur_input in = inputs.Make(1);
        const auto t0 = Clock::now();
        recur_status s = recur_session_step(session->get(), &in, out.data());
        const auto t1 = Clock::now();
        if (s != RECUR_OK) return Fail(recur_last_error());
        if (i >= warmup) times.push_back(Seconds(t0, t1));
      }
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      print({"step @" + std::to_string(at), 1, threads, median, times[times.size() / 10],
             times[times.size() * 9 / 10], 1 / median, "el/s",
             bound(double(info.step_weight_bytes), 1.0, threads)});
    }
    if (generate > 0) {
      if (info.input_kind != RECUR_INPUT_TOKENS || info.output_width != info.vocab_size) {
        return Fail("--generate needs a token model whose output is over its vocabulary");
      }
      for (uint32_t batch : batches) {
        // `sessions` independent sessions of `batch` streams, each stepped by
        // its own thread (one session per core is how a device serves many
        // streams without per-layer synchronisation).
        std::vector<std::unique_ptr<SessionHandle>> pool;
        for (uint32_t i = 0; i < sessions; ++i) {
          pool.push_back(std::make_unique<SessionHandle>());
          if (!create(batch, threads, pool.back().get())) return Fail(recur_last_error());
        }
        std::vector<double> times;
        for (int r = 0; r < 3; ++r) {
          std::vector<std::string> errors(sessions);
          const auto t0 = Clock::now();
          std::vector<std::thread> workers;
          for (uint32_t i = 0; i < sessions; ++i) {
            workers.emplace_back([&, i] {
              errors[i] = Generate(pool[i].get(), batch, generate, info, 1000u * r + i);
            });
          }
          for (std::thread& w : workers) w.join();
          times.push_back(Seconds(t0, Clock::now()));
          for (const std::string& e : errors) {
            if (!e.empty()) return Fail(e);
          }
        }
        std::sort(times.begin(), times.end());
        const double median = times[1];
        const uint32_t streams = batch * sessions;
        print({"gen " + std::to_string(generate) + (sessions > 1 ? " x" + std::to_string(sessions) : ""),
               batch, threads, median, times[0], times[2], streams / median, "seq/s",
               generate * bound(double(info.step_weight_bytes) * sessions,
                                double(streams), threads * sessions),
               sessions});
      }
    }
  }
  if (!json) std::printf("peak RSS  %.1f MiB\n", PeakRssMiB());
  return 0;
}
