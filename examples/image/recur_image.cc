// recur-image: the image demo. A pixel-by-pixel Fashion-MNIST model
// (models/zoo/fashion_*) run by the runtime:
//
//   recur-image sample   MODEL --count 64 [--batch 64] [--seed 1] -o samples.png
//   recur-image complete MODEL --data t10k-images-idx3-ubyte.gz --count 8 --samples 3 -o completions.png
//   recur-image eval     MODEL --data t10k-images-idx3-ubyte.gz [--images 10000]
//
// sample draws whole images in RNN mode, all streams of a batch stepped
// together; complete prefills the upper half of test images (chunked mode)
// and samples the lower half; eval prints the test set's bits/dim (mean
// −log2 p(pixel | earlier pixels)), running each batch of images as one prefill.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pixels.h"
#include "recur/recur.hpp"
#include "session_options.h"

namespace {

using image::kLevels;
using image::kPixels;
using image::kStartToken;

constexpr const char* kDefaultData = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

// The model must be a pixel model: tokens 0..256 in, 256 logits out, 784 positions.
bool CheckPixelModel(const std::string& path, const recur_model_info& info, std::string* error) {
  if (info.input_kind != RECUR_INPUT_TOKENS || info.vocab_size != kStartToken + 1 ||
      info.output_width != kLevels ||
      (info.max_positions != 0 && info.max_positions < static_cast<uint32_t>(kPixels))) {
    *error = path + ": not a pixel model (expected token input with vocabulary 257, 256 outputs"
             " and room for 784 positions; this model takes " +
             (info.input_kind == RECUR_INPUT_TOKENS
                  ? "tokens with vocabulary " + std::to_string(info.vocab_size)
                  : "feature frames of width " + std::to_string(info.feature_width)) +
             " and gives " + std::to_string(info.output_width) + " outputs)";
    return false;
  }
  return true;
}

struct Common {
  std::string model_path;
  uint32_t threads = 1;
  recur_state_sums state_sums = RECUR_STATE_SUMS_COMPENSATED;
  std::string backend = "auto";
  uint64_t seed = 1;
  float temperature = 1.0f;
  int scale = 2;
};

recur::Result<recur::Session> CreateSession(const recur::Model& model, int batch, const Common& c) {
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.batch = static_cast<uint32_t>(batch);
  options.threads = c.threads;
  options.state_sums = c.state_sums;
  options.backend = c.backend.c_str();
  return recur::Session::Create(model, options);
}

// Steps `session`'s streams from position `first` to the end of the image,
// sampling each pixel; `images` (batch × 784) holds the given pixels before
// `first`, and `logits` the outputs that predict pixel `first`.
recur::Status SampleRest(recur::Session* session, int first, const Common& c,
                         std::vector<float>* logits, std::vector<uint8_t>* images) {
  const size_t batch = images->size() / kPixels;
  std::mt19937_64 rng(c.seed);
  std::vector<int32_t> tokens(batch);
  for (int p = first; p < kPixels; ++p) {
    for (size_t b = 0; b < batch; ++b) {
      const int v = image::SamplePixel(&(*logits)[b * kLevels], c.temperature, &rng);
      (*images)[b * kPixels + p] = static_cast<uint8_t>(v);
      tokens[b] = v;
    }
    if (p + 1 == kPixels) break;
    recur::Status s = session->StepTokens(tokens.data(), batch, logits->data());
    if (!s) return s;
  }
  return recur::Status();
}

int Sample(const Common& c, const recur::Model& model, int count, int batch,
           const std::string& out) {
  if (count <= 0 || batch <= 0) return Fail("--count and --batch must be positive");
  auto session = CreateSession(model, batch, c);
  if (!session) return Fail(session.error());
  std::vector<uint8_t> all;
  std::vector<float> logits(static_cast<size_t>(batch) * kLevels);
  const auto start = std::chrono::steady_clock::now();
  Common per_batch = c;
  for (int done = 0; done < count; done += batch, ++per_batch.seed) {
    session->Reset();
    std::vector<int32_t> start_tokens(batch, kStartToken);
    recur::Status s = session->StepTokens(start_tokens.data(), batch, logits.data());
    std::vector<uint8_t> images(static_cast<size_t>(batch) * kPixels);
    if (s) s = SampleRest(&*session, 0, per_batch, &logits, &images);
    if (!s) return Fail(s.message());
    all.insert(all.end(), images.begin(), images.end());
  }
  const double seconds = Seconds(start);
  const int made = static_cast<int>(all.size() / kPixels);
  all.resize(static_cast<size_t>(count) * kPixels);
  std::printf("sampled %d images (%d at a time, %d steps each, %u thread%s) in %.2f s: "
              "%.1f images/s, %.0f steps/s per stream\n",
              made, batch, kPixels, c.threads, c.threads == 1 ? "" : "s", seconds, made / seconds,
              kPixels * (made / static_cast<double>(batch)) / seconds);
  std::string error;
  if (!image::WritePngGrid(out, all, std::min(count, 8), c.scale, &error)) return Fail(error);
  std::printf("wrote %s (%d images, 8 per row)\n", out.c_str(), count);
  return 0;
}

int Complete(const Common& c, const recur::Model& model, const std::string& data, int count,
             int samples, const std::string& out) {
  if (count <= 0 || samples <= 0) return Fail("--count and --samples must be positive");
  std::vector<uint8_t> test;
  size_t n = 0;
  std::string error;
  if (!image::ReadIdxImages(data, &test, &n, &error)) return Fail(error);
  if (static_cast<size_t>(count) > n)
    return Fail(data + " holds " + std::to_string(n) + " images, --count is " +
                std::to_string(count));
  const int batch = count * samples;  // stream i·samples + j: image i, sample j
  auto session = CreateSession(model, batch, c);
  if (!session) return Fail(session.error());
  constexpr int kGiven = kPixels / 2;  // the upper 14 rows
  // Prefill the start token and the given pixels 0..kGiven−1: the last output predicts pixel kGiven.
  std::vector<int32_t> prompt(static_cast<size_t>(batch) * (kGiven + 1));
  std::vector<uint8_t> images(static_cast<size_t>(batch) * kPixels);
  for (int b = 0; b < batch; ++b) {
    const uint8_t* src = &test[static_cast<size_t>(b / samples) * kPixels];
    prompt[static_cast<size_t>(b) * (kGiven + 1)] = kStartToken;
    for (int p = 0; p < kGiven; ++p) prompt[static_cast<size_t>(b) * (kGiven + 1) + 1 + p] = src[p];
    std::copy(src, src + kGiven, &images[static_cast<size_t>(b) * kPixels]);
  }
  std::vector<float> prompt_logits(static_cast<size_t>(batch) * (kGiven + 1) * kLevels);
  std::vector<float> logits(static_cast<size_t>(batch) * kLevels);
  const auto start = std::chrono::steady_clock::now();
  recur::Status s = session->PrefillTokens(kGiven + 1, prompt.data(), prompt.size(),
                                           prompt_logits.data());
  for (int b = 0; s && b < batch; ++b)
    std::copy_n(&prompt_logits[(static_cast<size_t>(b) * (kGiven + 1) + kGiven) * kLevels], kLevels,
                &logits[static_cast<size_t>(b) * kLevels]);
  if (s) s = SampleRest(&*session, kGiven, c, &logits, &images);
  if (!s) return Fail(s.message());
  std::printf("completed the lower halves of %d test images, %d samples each, in %.2f s\n", count,
              samples, Seconds(start));
  // Rows: the originals, the given upper halves, then one row per sample.
  std::vector<uint8_t> grid;
  for (int i = 0; i < count; ++i) grid.insert(grid.end(), &test[i * kPixels], &test[(i + 1) * kPixels]);
  for (int i = 0; i < count; ++i) {
    grid.insert(grid.end(), &test[i * kPixels], &test[i * kPixels + kGiven]);
    grid.insert(grid.end(), kPixels - kGiven, 128);
  }
  for (int j = 0; j < samples; ++j)
    for (int i = 0; i < count; ++i) {
      const uint8_t* img = &images[static_cast<size_t>(i * samples + j) * kPixels];
      grid.insert(grid.end(), img, img + kPixels);
    }
  if (!image::WritePngGrid(out, grid, count, c.scale, &error)) return Fail(error);
  std::printf("wrote %s (rows: originals, upper halves given, then %d completion%s)\n",
              out.c_str(), samples, samples == 1 ? "" : "s");
  return 0;
}

int Eval(const Common& c, const recur::Model& model, const std::string& data, int limit,
         int batch) {
  if (batch <= 0) return Fail("--batch must be positive");
  std::vector<uint8_t> test;
  size_t n = 0;
  std::string error;
  if (!image::ReadIdxImages(data, &test, &n, &error)) return Fail(error);
  if (n == 0) return Fail(data + ": holds no images");
  if (limit > 0) n = std::min(n, static_cast<size_t>(limit));
  auto session = CreateSession(model, batch, c);
  if (!session) return Fail(session.error());
  std::vector<int32_t> tokens(static_cast<size_t>(batch) * kPixels);
  std::vector<float> logits(tokens.size() * kLevels);
  double nats = 0;
  size_t done = 0, next_report = 1000;
  const auto start = std::chrono::steady_clock::now();
  while (done < n) {
    const size_t take = std::min(static_cast<size_t>(batch), n - done);
    for (size_t b = 0; b < static_cast<size_t>(batch); ++b) {  // short last batch: repeat images
      const uint8_t* img = &test[(done + std::min(b, take - 1)) * kPixels];
      tokens[b * kPixels] = kStartToken;
      for (int p = 1; p < kPixels; ++p) tokens[b * kPixels + p] = img[p - 1];
    }
    session->Reset();
    recur::Status s = session->PrefillTokens(kPixels, tokens.data(), tokens.size(), logits.data());
    if (!s) return Fail(s.message());
    for (size_t b = 0; b < take; ++b) {
      const uint8_t* img = &test[(done + b) * kPixels];
      for (int p = 0; p < kPixels; ++p)
        nats -= image::LogProbability(&logits[(b * kPixels + p) * kLevels], img[p]);
    }
    done += take;
    if (done >= next_report || done == n) {
      std::fprintf(stderr, "  %zu/%zu images, bits/dim so far %.4f, %.1f images/s\n", done, n,
                   nats / (done * kPixels * std::log(2.0)), done / Seconds(start));
      next_report += 1000;
    }
  }
  std::printf("test bits/dim over %zu images: %.6f (%.1f s, %.1f images/s)\n", n,
              nats / (n * kPixels * std::log(2.0)), Seconds(start), n / Seconds(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"recur image demo: sample, complete and evaluate a Fashion-MNIST pixel model"};
  app.require_subcommand(1);
  Common c;
  int count = 64, complete_count = 8, batch = 0, samples = 3, images = 0;
  std::string out, data = kDefaultData;
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("model", c.model_path, "Model file (.recur), e.g. out/main/fashion_linear.recur")
        ->required();
    sub->add_option("--threads", c.threads, "Intra-op threads")->check(CLI::Range(1, 256));
    tools::AddStateSumsOption(sub, &c.state_sums);
    sub->add_option("--backend", c.backend,
                    "GEMM backend for the dense layers: auto, highway, xnnpack, onednn");
  };
  auto add_sampling = [&](CLI::App* sub) {
    sub->add_option("--seed", c.seed, "Random seed");
    sub->add_option("--temperature", c.temperature, "Softmax temperature")
        ->check(CLI::Range(0.05f, 10.0f));
    sub->add_option("--scale", c.scale, "PNG pixels per image pixel")->check(CLI::Range(1, 16));
    sub->add_option("-o,--output", out, "PNG file")->required();
  };
  CLI::App* sample = app.add_subcommand("sample", "Sample unconditional images");
  add_common(sample);
  add_sampling(sample);
  sample->add_option("--count", count, "Images")->check(CLI::Range(1, 100000));
  sample->add_option("--batch", batch, "Streams stepped together (default: --count)")
      ->check(CLI::Range(1, 4096));
  CLI::App* complete = app.add_subcommand("complete", "Complete test images from their upper half");
  add_common(complete);
  add_sampling(complete);
  complete->add_option("--data", data, "IDX images (gzipped or not)");
  complete->add_option("--count", complete_count, "Test images (the first ones)")->check(CLI::Range(1, 1024));
  complete->add_option("--samples", samples, "Completions per image")->check(CLI::Range(1, 64));
  CLI::App* eval = app.add_subcommand("eval", "Bits/dim of a test set");
  add_common(eval);
  eval->add_option("--data", data, "IDX images (gzipped or not)");
  eval->add_option("--images", images, "Evaluate only the first N images (default: all)")
      ->check(CLI::Range(1, 1000000));
  eval->add_option("--batch", batch, "Images per prefill (default 50)")->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);

  auto model = recur::Model::Load(c.model_path);
  if (!model) return Fail(model.error());
  std::string error;
  if (!CheckPixelModel(c.model_path, model->info(), &error)) return Fail(error);
  if (*sample) return Sample(c, *model, count, batch ? batch : count, out);
  if (*complete) return Complete(c, *model, data, complete_count, samples, out);
  return Eval(c, *model, data, images, batch ? batch : 50);
}
