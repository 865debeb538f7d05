// recur_session_prefill: the chunked-parallel form leaves the state and
// gives the outputs of step mode, and refuses bad input like step does.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "recur/recur.h"
#include "converter/config.h"
#include "converter/writer.h"
#include "test_models.h"
#include "tolerance.h"

namespace {

using recur::impl::testing::BuildTestModel;
using recur::impl::testing::kTinyFeaturesConfig;
using recur::impl::testing::kTinyTokensConfig;
using recur::impl::testing::TinyModelOutputBound;
using recur::impl::testing::TinyModelStateBound;

struct Fixture {
  explicit Fixture(const char* config) {
    bytes = BuildTestModel(config, 5);
    REQUIRE(!bytes.empty());
    REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
    info.struct_size = sizeof(info);
    REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
  }
  ~Fixture() { recur_model_free(model); }
  recur_session* Session(uint32_t batch, uint32_t chunk = 0, uint32_t prefill_min = 0) {
    recur_session_options options = recur_session_options_default();
    options.batch = batch;
    options.prefill_chunk = chunk;
    options.prefill_min = prefill_min;
    recur_session* s = nullptr;
    REQUIRE(recur_session_create(model, &options, &s) == RECUR_OK);
    return s;
  }
  bool tokens() const { return info.input_kind == RECUR_INPUT_TOKENS; }
  // Stream-major inputs for `steps` positions of `batch` streams.
  recur_input Input(size_t batch, size_t steps, size_t offset) {
    ids.resize(batch * steps);
    frames.resize(batch * steps * info.feature_width);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7 + offset * 3) % std::max(info.vocab_size, 1u));
    for (size_t i = 0; i < frames.size(); ++i) frames[i] = std::sin(0.1f * float(i + offset));
    return tokens() ? recur_input{ids.data(), nullptr, ids.size()}
                    : recur_input{nullptr, frames.data(), frames.size()};
  }
  std::vector<float> State(recur_session* s, int stream) {
    size_t size = 0;
    REQUIRE(recur_session_state_size(s, &size) == RECUR_OK);
    std::vector<unsigned char> blob(size);
    REQUIRE(recur_session_state_save(s, stream, blob.data(), size) == RECUR_OK);
    std::vector<float> state((size - 48) / sizeof(float));
    std::memcpy(state.data(), blob.data() + 48, size - 48);
    return state;
  }

  recur::impl::converter::AlignedBytes bytes;
  recur_model* model = nullptr;
  recur_model_info info{};
  std::vector<int32_t> ids;
  std::vector<float> frames;
};

void CheckClose(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  REQUIRE(a.size() == b.size());
  CHECK(recur::impl::testing::WorstRelative(a, b) <= tol);
}

}  // namespace

TEST_CASE("prefill equals stepping: outputs, state, and the steps after") {
  // Batched streams and features inputs; every mixer type: mixer_contract_test.cc.
  for (const char* config :
       {kTinyTokensConfig, kTinyFeaturesConfig, recur::impl::testing::kTinySoftmaxFeaturesConfig}) {
    Fixture f(config);
    const size_t batch = 3, steps = 45, w = f.info.output_width;
    const size_t width = f.tokens() ? 1 : f.info.feature_width;
    recur_session* chunked = f.Session(batch, 8);
    recur_session* stepped = f.Session(batch);
    recur_input all = f.Input(batch, steps, 0);
    std::vector<float> prefill_out(batch * steps * w);
    REQUIRE(recur_session_prefill(chunked, steps, &all, prefill_out.data()) == RECUR_OK);

    std::vector<float> step_out(batch * steps * w), out(batch * w);
    for (size_t t = 0; t < steps; ++t) {
      std::vector<int32_t> ids(batch);
      std::vector<float> frames(batch * width);
      for (size_t b = 0; b < batch; ++b) {
        if (f.tokens()) ids[b] = f.ids[b * steps + t];
        else std::copy_n(&f.frames[(b * steps + t) * width], width, &frames[b * width]);
      }
      recur_input in = f.tokens() ? recur_input{ids.data(), nullptr, batch}
                                  : recur_input{nullptr, frames.data(), frames.size()};
      REQUIRE(recur_session_step(stepped, &in, out.data()) == RECUR_OK);
      for (size_t b = 0; b < batch; ++b) {
        std::copy_n(&out[b * w], w, &step_out[(b * steps + t) * w]);
      }
    }
    // Chunked sums and batched GEMMs against step-by-step ones: the order of
    // the sums differs (tolerance.h).
    const unsigned layers = f.info.num_layers;
    CheckClose(prefill_out, step_out, TinyModelOutputBound(layers));
    for (int b = 0; b < int(batch); ++b) {
      CheckClose(f.State(chunked, b), f.State(stepped, b), TinyModelStateBound(layers));
    }

    // Stepping continues seamlessly after the prefill.
    recur_input next = f.Input(batch, 1, 99);
    std::vector<float> a(batch * w), b(batch * w);
    REQUIRE(recur_session_step(chunked, &next, a.data()) == RECUR_OK);
    REQUIRE(recur_session_step(stepped, &next, b.data()) == RECUR_OK);
    CheckClose(a, b, TinyModelOutputBound(layers));
    recur_session_free(chunked);
    recur_session_free(stepped);
  }
}

TEST_CASE("prefill_min: shorter prefills run as steps, exactly, 1 forces the chunked form") {
  Fixture f(kTinyTokensConfig);
  const size_t batch = 2, steps = 5, w = f.info.output_width;
  recur_session* as_steps = f.Session(batch, 0, 6);
  recur_session* as_chunk = f.Session(batch, 0, 1);
  recur_session* stepped = f.Session(batch);
  recur_input all = f.Input(batch, steps, 3);
  std::vector<float> out_steps(batch * steps * w), out_chunk(batch * steps * w);
  REQUIRE(recur_session_prefill(as_steps, steps, &all, out_steps.data()) == RECUR_OK);
  REQUIRE(recur_session_prefill(as_chunk, steps, &all, out_chunk.data()) == RECUR_OK);
  std::vector<float> step_out(batch * steps * w), out(batch * w);
  for (size_t t = 0; t < steps; ++t) {
    std::vector<int32_t> ids(batch);
    for (size_t b = 0; b < batch; ++b) ids[b] = f.ids[b * steps + t];
    recur_input in{ids.data(), nullptr, batch};
    REQUIRE(recur_session_step(stepped, &in, out.data()) == RECUR_OK);
    for (size_t b = 0; b < batch; ++b) std::copy_n(&out[b * w], w, &step_out[(b * steps + t) * w]);
  }
  CHECK(out_steps == step_out);  // the same kernels in the same order
  CheckClose(out_chunk, step_out, TinyModelOutputBound(f.info.num_layers));
  recur_session_free(as_steps);
  recur_session_free(as_chunk);
  recur_session_free(stepped);
}

TEST_CASE("prefill(a) + prefill(b) == prefill(a + b), whatever the chunk") {
  Fixture f(kTinyTokensConfig);
  const size_t steps = 50;
  recur_session* whole = f.Session(1, 64);
  recur_session* split = f.Session(1, 5);
  recur_input all = f.Input(1, steps, 0);
  std::vector<int32_t> ids = f.ids;
  REQUIRE(recur_session_prefill(whole, steps, &all, nullptr) == RECUR_OK);
  recur_input first{ids.data(), nullptr, 20}, second{ids.data() + 20, nullptr, 30};
  REQUIRE(recur_session_prefill(split, 20, &first, nullptr) == RECUR_OK);
  REQUIRE(recur_session_prefill(split, 30, &second, nullptr) == RECUR_OK);
  CheckClose(f.State(whole, 0), f.State(split, 0), TinyModelStateBound(f.info.num_layers));
  recur_session_free(whole);
  recur_session_free(split);
}

TEST_CASE("prefill refuses bad input and leaves the session unchanged") {
  Fixture f(kTinyTokensConfig);
  recur_session* s = f.Session(2);
  recur_input in = f.Input(2, 10, 0);
  REQUIRE(recur_session_prefill(s, 10, &in, nullptr) == RECUR_OK);
  const auto before = f.State(s, 1);

  in.count = 19;
  CHECK(recur_session_prefill(s, 10, &in, nullptr) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("expected 2 streams x 10 steps = 20") != std::string::npos);
  in.count = 20;
  f.ids[13] = 11;  // stream 1, step 3
  CHECK(recur_session_prefill(s, 10, &in, nullptr) == RECUR_OUT_OF_RANGE);
  CHECK(std::string(recur_last_error()).find("stream 1: token id 11 at step 3") != std::string::npos);
  f.ids[13] = 1;
  // 10 done + 60 more passes the 64 learned positions.
  recur_input long_in = f.Input(2, 60, 0);
  CHECK(recur_session_prefill(s, 60, &long_in, nullptr) == RECUR_OUT_OF_RANGE);
  CHECK(std::string(recur_last_error()).find("learned positions") != std::string::npos);
  CHECK(recur_session_prefill(s, 10, nullptr, nullptr) == RECUR_INVALID_ARGUMENT);
  CHECK(f.State(s, 1) == before);
  CHECK(recur_session_prefill(s, 0, &in, nullptr) == RECUR_OK);  // an empty prompt
  CHECK(f.State(s, 1) == before);
  recur_session_free(s);
}

TEST_CASE("a steps count whose input size wraps around is refused, not read") {
  // batch 2 × 2^63 steps × 5 features wraps to a small number; a count equal
  // to the wrapped product must not pass (it once read far past the input).
  Fixture f(kTinyFeaturesConfig);
  const std::string linear_encoder = std::string(kTinyFeaturesConfig).replace(
      std::string(kTinyFeaturesConfig).find("\"eps\": 1e-6}"), 12,
      "\"eps\": 1e-6, \"causal\": false}");
  Fixture enc(linear_encoder.c_str());
  const size_t huge = size_t{1} << 63;
  for (Fixture* fx : {&f, &enc}) {
    recur_session* s = fx->Session(2);
    recur_input in = fx->Input(2, 1, 0);
    in.count = 2 * huge * fx->info.feature_width;  // wraps to 0
    std::vector<float> out(16);
    if (fx == &f) {
      CHECK(recur_session_prefill(s, huge, &in, out.data()) == RECUR_INVALID_ARGUMENT);
    } else {
      CHECK(recur_session_encode(s, huge, &in, out.data()) == RECUR_OUT_OF_RANGE);
      CHECK(std::string(recur_last_error()) ==
            "encode takes at most 16777216 positions per call, got 9223372036854775808");
      // Below the cap: a count that does not match is the usual error.
      const size_t big = size_t{1} << 24;
      in.count = 0;
      CHECK(recur_session_encode(s, big, &in, out.data()) == RECUR_INVALID_ARGUMENT);
    }
    CHECK(recur_last_error() != std::string());
    recur_session_free(s);
  }
  recur_session* s = f.Session(2);
  recur_input in = f.Input(2, 1, 0);
  in.count = 0;
  CHECK(recur_session_prefill(s, size_t{1} << 62, &in, nullptr) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()) == "4611686018427387904 steps x 2 streams is too large an "
                                           "input");
  recur_session_free(s);
}

TEST_CASE("prefill_chunk bounds") {
  Fixture f(kTinyTokensConfig);
  recur_session_options options = recur_session_options_default();
  options.prefill_chunk = 5000;
  recur_session* s = nullptr;
  CHECK(recur_session_create(f.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("prefill_chunk") != std::string::npos);
}

TEST_CASE("default prefill_chunk: 64 positions, at least 256 rows when a step streams > 8 MiB") {
  // One block of d_model 512, d_ff 2048: 4·512² + 2·512·2048 floats = 12 MiB of weights a step.
  std::string config = kTinyTokensConfig;
  auto set = [&config](const std::string& from, const std::string& to) {
    config.replace(config.find(from), from.size(), to);
  };
  set("\"d_model\": 16", "\"d_model\": 512");
  set("\"n_layers\": 2", "\"n_layers\": 1");
  set("\"heads\": 2, \"dk\": 8, \"dv\": 8", "\"heads\": 8, \"dk\": 64, \"dv\": 64");
  set("\"d_ff\": 32", "\"d_ff\": 2048");
  Fixture small(kTinyTokensConfig);
  Fixture large(config.c_str());
  auto arena = [](const Fixture& f, uint32_t batch, uint32_t chunk) {
    recur_session_options options = recur_session_options_default();
    options.batch = batch;
    options.prefill_chunk = chunk;
    options.weight_packing = RECUR_PACKING_OFF;
    size_t bytes = 0;
    REQUIRE(recur_session_arena_size(f.model, &options, &bytes) == RECUR_OK);
    return bytes;
  };
  CHECK(arena(small, 1, 0) == arena(small, 1, 64));
  CHECK(arena(small, 1, 0) != arena(small, 1, 256));
  CHECK(arena(large, 1, 0) == arena(large, 1, 256));
  CHECK(arena(large, 1, 0) != arena(large, 1, 64));
  CHECK(arena(large, 3, 0) == arena(large, 3, 86));  // ceil(256 / 3)
  CHECK(arena(large, 8, 0) == arena(large, 8, 64));  // 512 rows already
}

TEST_CASE("encoders run only whole sequences, encode of a causal model is reset + prefill") {
  const std::string linear_encoder = std::string(kTinyFeaturesConfig).replace(
      std::string(kTinyFeaturesConfig).find("\"eps\": 1e-6}"), 12, "\"eps\": 1e-6, \"causal\": false}");
  const std::string softmax_features = recur::impl::testing::kTinySoftmaxFeaturesConfig;
  const std::string softmax_encoder = std::string(softmax_features).replace(
      softmax_features.find("\"dv\": 4}"), 8, "\"dv\": 4, \"causal\": false}");
  for (const std::string& encoder_config : {linear_encoder, softmax_encoder}) {
  CAPTURE(encoder_config);
  Fixture enc(encoder_config.c_str());
  CHECK(enc.info.state_bytes == 0);  // an encoder keeps nothing between calls
  CHECK(enc.info.state_bytes_per_position == 0);
  recur_session* s = enc.Session(2);
  recur_input in = enc.Input(2, 12, 0);
  std::vector<float> out(2 * 12 * enc.info.output_width);
  CHECK(recur_session_step(s, &in, out.data()) == RECUR_UNSUPPORTED);
  CHECK(std::string(recur_last_error()).find("blocks.0 is non-causal (an encoder)") != std::string::npos);
  CHECK(recur_session_prefill(s, 12, &in, nullptr) == RECUR_UNSUPPORTED);
  REQUIRE(recur_session_encode(s, 12, &in, out.data()) == RECUR_OK);
  // Non-causal: the first output depends on the last input.
  std::vector<float> out2(out.size());
  enc.frames[11 * enc.info.feature_width] += 1.0f;  // stream 0, last step
  REQUIRE(recur_session_encode(s, 12, &in, out2.data()) == RECUR_OK);
  CHECK(out2[0] != out[0]);
  CHECK(std::equal(out.begin() + 12 * enc.info.output_width, out.end(),
                   out2.begin() + 12 * enc.info.output_width));  // stream 1 unchanged
  CHECK(recur_session_encode(s, 12, &in, nullptr) == RECUR_INVALID_ARGUMENT);
  recur_session_free(s);
  }

  for (const char* config : {kTinyTokensConfig, recur::impl::testing::kTinySoftmaxConfig,
                             recur::impl::testing::kTinySlidingWindowConfig}) {
    Fixture causal(config);
    recur_session* a = causal.Session(2);
    recur_session* b = causal.Session(2);
    recur_input warm = causal.Input(2, 5, 3);
    REQUIRE(recur_session_prefill(a, 5, &warm, nullptr) == RECUR_OK);  // encode ignores this
    const auto state_before = causal.State(a, 0);
    recur_input seq = causal.Input(2, 20, 0);
    std::vector<float> ya(2 * 20 * 11), yb(2 * 20 * 11);
    REQUIRE(recur_session_encode(a, 20, &seq, ya.data()) == RECUR_OK);
    REQUIRE(recur_session_prefill(b, 20, &seq, yb.data()) == RECUR_OK);
    CheckClose(ya, yb, TinyModelOutputBound(causal.info.num_layers));
    CHECK(causal.State(a, 0) == state_before);  // streams untouched
    recur_session_free(a);
    recur_session_free(b);
  }
}

TEST_CASE("AFT-local encoder: a strongly negative window bias neither loses precision nor gives NaN") {
  // Every position lies in every window (6 positions, window 8), so a uniform
  // bias b cancels: the outputs equal those of b = 0. Taking the window's
  // e^{k} back out of a global sum would cancel catastrophically for b << 0
  // (b = -17: max|d| 3.4; b = -20: NaN).
  const char* config = R"({
    "layout": "recur", "d_model": 8, "n_layers": 1, "norm_placement": "pre",
    "layer_norm_eps": 1e-5, "input": {"kind": "features", "feature_width": 4, "projection": true},
    "max_positions": 0,
    "mixer": {"type": "aft_local", "heads": 2, "dk": 3, "window": 8, "causal": false},
    "ffn": {"d_ff": 16, "activation": "relu"}, "final_norm": false, "head": null})";
  auto parsed = recur::impl::converter::ParseConfig(config);
  REQUIRE_MESSAGE(parsed.ok(), parsed.message());
  std::vector<float> reference;
  for (float bias : {0.0f, -5.0f, -20.0f, -40.0f, 20.0f}) {
    CAPTURE(bias);
    auto tensors = recur::impl::testing::RandomTensors(parsed.value().desc, 3);
    auto& pos_bias = tensors.at("blocks.0.mixer.pos_bias").data;
    REQUIRE(pos_bias.size() == 15);
    std::fill(pos_bias.begin(), pos_bias.end(), bias);
    auto bytes = recur::impl::converter::BuildModel(parsed.value().desc, tensors);
    REQUIRE_MESSAGE(bytes.ok(), bytes.message());
    recur_model* model = nullptr;
    REQUIRE(recur_model_load_buffer(bytes.value().data(), bytes.value().size(), nullptr, &model) ==
            RECUR_OK);
    recur_session* s = nullptr;
    REQUIRE(recur_session_create(model, nullptr, &s) == RECUR_OK);
    std::vector<float> frames(6 * 4), out(6 * 8);
    for (size_t i = 0; i < frames.size(); ++i) frames[i] = std::sin(0.7f * float(i));
    recur_input in{nullptr, frames.data(), frames.size()};
    REQUIRE(recur_session_encode(s, 6, &in, out.data()) == RECUR_OK);
    if (reference.empty()) {
      reference = out;
    } else {
      // Sums of 6 exponentials and reductions of at most 16 terms, 6 deep.
      CheckClose(out, reference, recur::impl::testing::Float32OrderBound(16, 6));
    }
    recur_session_free(s);
    recur_model_free(model);
  }
}

TEST_CASE("softmax attention: the KV cache is bounded by max_context, with a clear error") {
  Fixture f(recur::impl::testing::kTinySoftmaxConfig);
  CHECK(f.info.state_bytes == 0);
  CHECK(f.info.state_bytes_per_position == 2 * 2 * (8 + 4) * sizeof(float));  // 2 layers
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.max_context = 10;
  recur_session* s = nullptr;
  REQUIRE(recur_session_create(f.model, &options, &s) == RECUR_OK);
  size_t blob = 0;
  REQUIRE(recur_session_state_size(s, &blob) == RECUR_OK);
  CHECK(blob == 48 + 10 * f.info.state_bytes_per_position);
  recur_input seven = f.Input(1, 7, 0);
  std::vector<float> out(7 * f.info.output_width);
  REQUIRE(recur_session_prefill(s, 7, &seven, out.data()) == RECUR_OK);
  recur_input four = f.Input(1, 4, 1);
  CHECK(recur_session_prefill(s, 4, &four, out.data()) == RECUR_OUT_OF_RANGE);
  CHECK(std::string(recur_last_error()) ==
        "stream 0 is at position 7; 4 more steps pass the session's max_context of 10 positions "
        "(the KV cache is full); reset the stream or create the session with a larger "
        "max_context");
  recur_input three = f.Input(1, 3, 1);
  CHECK(recur_session_prefill(s, 3, &three, out.data()) == RECUR_OK);  // exactly full
  recur_input one = f.Input(1, 1, 2);
  CHECK(recur_session_step(s, &one, out.data()) == RECUR_OUT_OF_RANGE);
  REQUIRE(recur_session_reset(s, -1) == RECUR_OK);
  CHECK(recur_session_step(s, &one, out.data()) == RECUR_OK);
  recur_session_free(s);

  // A state saved under one max_context does not load into another.
  options.max_context = 12;
  recur_session* a = nullptr;
  recur_session* b = nullptr;
  REQUIRE(recur_session_create(f.model, &options, &a) == RECUR_OK);
  options.max_context = 20;
  REQUIRE(recur_session_create(f.model, &options, &b) == RECUR_OK);
  size_t size_a = 0;
  REQUIRE(recur_session_state_size(a, &size_a) == RECUR_OK);
  std::vector<unsigned char> saved(size_a);
  REQUIRE(recur_session_state_save(a, 0, saved.data(), saved.size()) == RECUR_OK);
  CHECK(recur_session_state_load(b, 0, saved.data(), saved.size()) == RECUR_INVALID_STATE);
  recur_session_free(a);
  recur_session_free(b);

  options.max_context = (1u << 24) + 1;
  CHECK(recur_session_create(f.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("max_context must be at most 16777216") !=
        std::string::npos);
}
