// recur-speech: the streaming spoken-digit demo. A causal model over
// log-mel frames (models/zoo/speech_digits) with a CTC head, run frame by frame:
//
//   recur-speech transcribe MODEL AUDIO.wav        (or - for a WAV on stdin)
//   recur-speech eval MODEL --corpus DIR [--split test] [--limit N]
//   recur-speech features AUDIO.wav -o frames.npy   (the front-end alone)
//
// transcribe reads the audio 10 ms at a time, computes log-mels as samples
// arrive (log_mel.h), steps the model once per STACK frames and prints the
// greedy CTC transcript whenever it changes; memory does not grow with the
// audio. eval transcribes every utterance of a corpus split that way, checks it
// against the whole-utterance (chunked prefill) transcript, and prints the digit
// error rate, the exact-match rate and the real-time factor.
#include <sndfile.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "log_mel.h"
#include "npy.h"
#include "recur/recur.hpp"

namespace {

using speech::kMels;
using speech::kSampleRate;

constexpr uint32_t kClasses = 11;  // blank, digits 0..9
constexpr size_t kBlock = 160;     // samples read at a time (10 ms)

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// An open 16 kHz mono audio file (any format libsndfile reads), or stdin for "-".
class Audio {
 public:
  ~Audio() {
    if (file_) sf_close(file_);
  }
  bool Open(const std::string& path, std::string* error) {
    SF_INFO info{};
    file_ = path == "-" ? sf_open_fd(0, SFM_READ, &info, 0) : sf_open(path.c_str(), SFM_READ, &info);
    const std::string name = path == "-" ? "stdin" : path;
    if (file_ == nullptr) {
      *error = name + ": cannot read audio (" + sf_strerror(nullptr) + ")";
      return false;
    }
    if (info.samplerate != kSampleRate) {
      *error = name + ": sample rate " + std::to_string(info.samplerate) + " Hz, the model needs " +
               std::to_string(kSampleRate) + " Hz (e.g. sox in.wav -r 16000 out.wav)";
      return false;
    }
    if (info.channels != 1) {
      *error = name + ": " + std::to_string(info.channels) + " channels, the model needs mono" +
               " (e.g. sox in.wav -c 1 out.wav)";
      return false;
    }
    return true;
  }
  // Up to `count` samples in [-1, 1]; 0 at the end.
  size_t Read(float* samples, size_t count) {
    return static_cast<size_t>(sf_read_float(file_, samples, static_cast<sf_count_t>(count)));
  }

 private:
  SNDFILE* file_ = nullptr;
};

// Greedy CTC over steps: best class per step, repeats merged, blanks dropped.
class CtcGreedy {
 public:
  // Returns true when the transcript changed.
  bool Push(const float* log_probs) {
    int best = 0;
    for (uint32_t c = 1; c < kClasses; ++c)
      if (log_probs[c] > log_probs[best]) best = static_cast<int>(c);
    const bool emit = best != 0 && best != previous_;
    previous_ = best;
    if (emit) text_ += static_cast<char>('0' + best - 1);
    return emit;
  }
  const std::string& text() const { return text_; }

 private:
  int previous_ = 0;
  std::string text_;
};

// The model must take stacks of log-mel frames and give blank + 10 digit classes.
bool CheckSpeechModel(const std::string& path, const recur_model_info& info, int* stack,
                      std::string* error) {
  if (info.input_kind != RECUR_INPUT_FEATURES || info.feature_width % kMels != 0 ||
      info.output_width != kClasses) {
    *error = path + ": not a speech model (expected feature frames of a multiple of 40 log-mels"
             " and 11 outputs: blank and 10 digits; this model takes " +
             (info.input_kind == RECUR_INPUT_TOKENS
                  ? "token ids"
                  : "frames of width " + std::to_string(info.feature_width)) +
             " and gives " + std::to_string(info.output_width) + " outputs)";
    return false;
  }
  *stack = static_cast<int>(info.feature_width / kMels);
  return true;
}

struct Transcript {
  std::string text;
  double audio_seconds = 0;
  double compute_seconds = 0;
  std::vector<float> inputs;  // every model input (steps × feature_width), when kept
};

// Streams `path` through the front-end and the model, one step per `stack` frames.
// `on_change(seconds, text)` is called whenever the transcript changes.
template <typename OnChange>
bool Stream(const std::string& path, recur::Session* session, int stack, bool keep_inputs,
            Transcript* t, std::string* error, OnChange on_change) {
  Audio audio;
  if (!audio.Open(path, error)) return false;
  speech::LogMel front_end;
  CtcGreedy ctc;
  std::vector<float> samples(kBlock), frames, log_probs(kClasses);
  const size_t width = static_cast<size_t>(stack) * kMels;
  size_t total = 0, steps = 0;
  session->Reset();
  const auto start = std::chrono::steady_clock::now();
  for (size_t n; (n = audio.Read(samples.data(), samples.size())) > 0;) {
    total += n;
    front_end.Push(samples.data(), n, &frames);
    for (; frames.size() >= width; ++steps) {
      recur::Status s = session->StepFeatures(frames.data(), width, log_probs.data());
      if (!s) {
        *error = path + ": step " + std::to_string(steps) + ": " + s.message();
        return false;
      }
      if (keep_inputs) t->inputs.insert(t->inputs.end(), frames.begin(), frames.begin() + width);
      frames.erase(frames.begin(), frames.begin() + width);
      if (ctc.Push(log_probs.data())) on_change(static_cast<double>(total) / kSampleRate, ctc.text());
    }
  }
  t->compute_seconds = Seconds(start);
  t->audio_seconds = static_cast<double>(total) / kSampleRate;
  t->text = ctc.text();
  return true;
}

int Transcribe(const recur::Model& model, int stack, const std::string& path) {
  auto session = recur::Session::Create(model);
  if (!session) return Fail(session.error());
  Transcript t;
  std::string error;
  const bool ok = Stream(path, &*session, stack, false, &t, &error,
                         [](double at, const std::string& text) {
                           std::printf("[%6.2f s] %s\n", at, text.c_str());
                           std::fflush(stdout);
                         });
  if (!ok) return Fail(error);
  std::printf("transcript: %s\n(%.2f s of audio in %.3f s: real-time factor %.4f)\n",
              t.text.empty() ? "(nothing)" : t.text.c_str(), t.audio_seconds, t.compute_seconds,
              t.compute_seconds / std::max(t.audio_seconds, 1e-9));
  return 0;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

int Eval(const recur::Model& model, int stack, const std::string& corpus, const std::string& split,
         int limit, bool verbose) {
  const std::string manifest = corpus + "/" + split + ".tsv";
  std::ifstream in(manifest);
  if (!in) return Fail(manifest + ": cannot open (make one with models/reference/make_speech_corpus.py)");
  auto stream = recur::Session::Create(model);
  auto whole = recur::Session::Create(model);
  if (!stream) return Fail(stream.error());
  if (!whole) return Fail(whole.error());
  std::string line;
  std::getline(in, line);  // header: file, digits, ...
  size_t utterances = 0, exact = 0, errors = 0, digits = 0, mismatches = 0;
  double audio = 0, compute = 0;
  const size_t width = static_cast<size_t>(stack) * kMels;
  std::vector<float> log_probs;
  while (std::getline(in, line) && (limit <= 0 || utterances < static_cast<size_t>(limit))) {
    std::istringstream fields(line);
    std::string file, reference;
    if (!std::getline(fields, file, '\t') || !std::getline(fields, reference, '\t'))
      return Fail(manifest + ": malformed line: " + line);
    Transcript t;
    std::string error;
    if (!Stream(corpus + "/" + split + "/" + file, &*stream, stack, true, &t, &error,
                [](double, const std::string&) {}))
      return Fail(error);
    // The same inputs as one whole-utterance prefill (chunked-parallel form).
    const size_t steps = t.inputs.size() / width;
    log_probs.resize(steps * kClasses);
    whole->Reset();
    recur::Status s = whole->PrefillFeatures(steps, t.inputs.data(), t.inputs.size(), log_probs.data());
    if (!s) return Fail(file + ": prefill: " + s.message());
    CtcGreedy ctc;
    for (size_t i = 0; i < steps; ++i) ctc.Push(&log_probs[i * kClasses]);
    mismatches += ctc.text() != t.text;
    ++utterances;
    exact += t.text == reference;
    errors += EditDistance(reference, t.text);
    digits += reference.size();
    audio += t.audio_seconds;
    compute += t.compute_seconds;
    if (verbose || t.text != reference)
      std::printf("%s  reference %-8s  heard %-8s%s\n", file.c_str(), reference.c_str(),
                  t.text.c_str(), t.text == reference ? "" : "  (error)");
    if (utterances % 100 == 0)
      std::fprintf(stderr, "  %zu utterances, exact match so far %.4f\n", utterances,
                   static_cast<double>(exact) / utterances);
  }
  if (utterances == 0) return Fail(manifest + ": no utterances");
  std::printf("%zu utterances (%.1f s of audio): digit error rate %.4f, exact match %.4f, "
              "real-time factor %.4f (1 thread, streaming, front-end included)\n",
              utterances, audio, static_cast<double>(errors) / digits,
              static_cast<double>(exact) / utterances, compute / audio);
  std::printf("streaming transcript == whole-utterance transcript on %zu of %zu utterances\n",
              utterances - mismatches, utterances);
  return mismatches == 0 ? 0 : 1;
}

int Features(const std::string& path, const std::string& out) {
  Audio audio;
  std::string error;
  if (!audio.Open(path, &error)) return Fail(error);
  speech::LogMel front_end;
  std::vector<float> samples(kBlock), frames;
  for (size_t n; (n = audio.Read(samples.data(), samples.size())) > 0;)
    front_end.Push(samples.data(), n, &frames);
  const int64_t count = static_cast<int64_t>(frames.size() / kMels);
  if (!npy::WriteFloat32(out, {count, kMels}, frames.data(), &error)) return Fail(error);
  std::printf("wrote %s: %lld frames of %d log-mels\n", out.c_str(), static_cast<long long>(count),
              kMels);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"recur speech demo: streaming spoken-digit recognition"};
  app.require_subcommand(1);
  std::string model_path, audio_path, corpus, split = "test", out;
  int limit = 0;
  bool verbose = false;
  CLI::App* transcribe = app.add_subcommand("transcribe", "Transcribe a WAV file as it streams");
  transcribe->add_option("model", model_path, "Model file (.recur)")->required();
  transcribe->add_option("audio", audio_path, "16 kHz mono audio file, or - for stdin")->required();
  CLI::App* eval = app.add_subcommand("eval", "Digit error rate of a corpus split");
  eval->add_option("model", model_path, "Model file (.recur)")->required();
  eval->add_option("--corpus", corpus, "make_speech_corpus.py's output directory")->required();
  eval->add_option("--split", split, "Manifest name (SPLIT.tsv, audio in SPLIT/)");
  eval->add_option("--limit", limit, "Only the first N utterances")->check(CLI::Range(1, 10000000));
  eval->add_flag("--verbose", verbose, "Print every utterance, not only the errors");
  CLI::App* features = app.add_subcommand("features", "Write the log-mel frames of a file (.npy)");
  features->add_option("audio", audio_path, "16 kHz mono audio file, or - for stdin")->required();
  features->add_option("-o,--output", out, "Output .npy (frames, 40) float32")->required();
  CLI11_PARSE(app, argc, argv);

  if (*features) return Features(audio_path, out);
  auto model = recur::Model::Load(model_path);
  if (!model) return Fail(model.error());
  int stack = 0;
  std::string error;
  if (!CheckSpeechModel(model_path, model->info(), &stack, &error)) return Fail(error);
  if (*transcribe) return Transcribe(*model, stack, audio_path);
  return Eval(*model, stack, corpus, split, limit, verbose);
}
