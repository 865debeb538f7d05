// The C API: loading, stepping, batching, and every error path it has.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "recur/recur.h"
#include "recur/recur.hpp"
#include "test_models.h"
#include "tolerance.h"

namespace {

using recur::impl::testing::BuildTestModel;
using recur::impl::testing::kTinyFeaturesConfig;
using recur::impl::testing::kTinyTokensConfig;

bool ErrorContains(const char* needle) {
  return std::string(recur_last_error()).find(needle) != std::string::npos;
}

struct Loaded {
  recur::impl::converter::AlignedBytes bytes;
  recur_model* model = nullptr;
  explicit Loaded(const char* config, unsigned seed = 1) {
    bytes = BuildTestModel(config, seed);
    REQUIRE(!bytes.empty());
    REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  }
  ~Loaded() { recur_model_free(model); }
};

recur_session* NewSession(const recur_model* model, uint32_t batch = 1) {
  recur_session_options options = recur_session_options_default();
  options.batch = batch;
  recur_session* session = nullptr;
  REQUIRE(recur_session_create(model, &options, &session) == RECUR_OK);
  return session;
}

std::vector<float> StepTokens(recur_session* s, std::vector<int32_t> tokens, size_t width) {
  std::vector<float> out(tokens.size() * width);
  recur_input in{tokens.data(), nullptr, tokens.size()};
  REQUIRE(recur_session_step(s, &in, out.data()) == RECUR_OK);
  return out;
}

}  // namespace

TEST_CASE("model info describes the model") {
  Loaded m(kTinyTokensConfig);
  recur_model_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(recur_model_get_info(m.model, &info) == RECUR_OK);
  CHECK(info.input_kind == RECUR_INPUT_TOKENS);
  CHECK(info.vocab_size == 11);
  CHECK(info.d_model == 16);
  CHECK(info.num_layers == 2);
  CHECK(info.output_width == 11);
  CHECK(info.max_positions == 64);
  CHECK(info.output_kind == RECUR_OUTPUT_PROBABILITIES);
  // 2 layers × 2 heads × (S 8×8 + z 8), and their compensations (Kahan sums).
  CHECK(info.state_bytes == 2 * 2 * 2 * (8 * 8 + 8) * sizeof(float));
  CHECK(info.state_bytes_plain_sums == info.state_bytes / 2);  // without the compensations
  CHECK(info.step_integer_flops == 0);  // f32 weights
  CHECK(info.recurrent == 1);
  // embedding 11·16 + positions 64·16 + per block (2 norms 4·16, q/k/v/o 4·(16·16+16),
  // ffn 32·16+32 + 16·32+16) + final norm 2·16 + head 11·16+11
  const uint64_t block = 4 * 16 + 4 * (16 * 16 + 16) + (32 * 16 + 32) + (16 * 32 + 16);
  CHECK(info.parameter_count == 11 * 16 + 64 * 16 + 2 * block + 2 * 16 + 11 * 16 + 11);
}

TEST_CASE("a softmax head outputs a distribution at every step") {
  Loaded m(kTinyTokensConfig);
  recur_session* s = NewSession(m.model);
  for (int t = 0; t < 20; ++t) {
    auto out = StepTokens(s, {t % 11}, 11);
    double sum = 0;
    for (float p : out) {
      CHECK(p >= 0.0f);
      sum += p;
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
  }
  recur_session_free(s);
}

TEST_CASE("streams of a batch are independent and equal single-stream runs") {
  Loaded m(kTinyTokensConfig);
  const size_t batch = 5, steps = 30;
  recur_session* batched = NewSession(m.model, batch);
  std::vector<recur_session*> singles;
  for (size_t b = 0; b < batch; ++b) singles.push_back(NewSession(m.model));
  for (size_t t = 0; t < steps; ++t) {
    std::vector<int32_t> tokens(batch);
    for (size_t b = 0; b < batch; ++b) tokens[b] = int32_t((t * 7 + b * 3) % 11);
    auto out = StepTokens(batched, tokens, 11);
    for (size_t b = 0; b < batch; ++b) {
      auto single = StepTokens(singles[b], {tokens[b]}, 11);
      for (size_t i = 0; i < 11; ++i) CHECK(out[b * 11 + i] == doctest::Approx(single[i]).epsilon(1e-5));
    }
  }
  for (auto* s : singles) recur_session_free(s);
  recur_session_free(batched);
}

TEST_CASE("null arguments are refused with a message") {
  Loaded m(kTinyTokensConfig);
  recur_model* model = nullptr;
  CHECK(recur_model_load_file(nullptr, nullptr, &model) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("path is null"));
  CHECK(recur_model_load_buffer(nullptr, 100, nullptr, &model) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_model_load_buffer(m.bytes.data(), m.bytes.size(), nullptr, nullptr) ==
        RECUR_INVALID_ARGUMENT);
  recur_session* s = nullptr;
  CHECK(recur_session_create(nullptr, nullptr, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("model is null"));
  s = NewSession(m.model);
  CHECK(recur_session_step(s, nullptr, nullptr) == RECUR_INVALID_ARGUMENT);
  int32_t token = 1;
  recur_input in{&token, nullptr, 1};
  CHECK(recur_session_step(s, &in, nullptr) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("output buffer is null"));
  CHECK(recur_session_step(nullptr, &in, nullptr) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_model_get_info(m.model, nullptr) == RECUR_INVALID_ARGUMENT);
  recur_session_free(s);
  recur_session_free(nullptr);
  recur_model_free(nullptr);
}

TEST_CASE("every session call refuses a null session or a null out-pointer") {
  Loaded m(kTinyTokensConfig);
  recur_session* s = NewSession(m.model);
  int32_t token = 1;
  recur_input in{&token, nullptr, 1};
  float out[11];
  size_t size = 0;
  unsigned char blob[8] = {};
  recur_session* copy = nullptr;
  CHECK(recur_session_prefill(nullptr, 1, &in, out) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_encode(nullptr, 1, &in, out) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_encode(s, 1, &in, nullptr) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("output buffer is null"));
  CHECK(recur_session_reset(nullptr, -1) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_state_size(nullptr, &size) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_state_size(s, nullptr) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_state_save(nullptr, 0, blob, sizeof(blob)) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_state_save(s, 0, nullptr, 1000) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_state_load(nullptr, 0, blob, sizeof(blob)) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_state_load(s, 0, nullptr, 1000) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_fork(nullptr, &copy) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_fork(s, nullptr) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_set_layer_callback(nullptr, nullptr, nullptr) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_backends(nullptr) == nullptr);
  recur_model_info info{};
  info.struct_size = sizeof(info);
  CHECK(recur_model_get_info(nullptr, &info) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_arena_size(nullptr, nullptr, &size) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_arena_size(m.model, nullptr, nullptr) == RECUR_INVALID_ARGUMENT);
  // Each refusal left the session usable.
  CHECK(recur_session_step(s, &in, out) == RECUR_OK);
  recur_session_free(s);
}

TEST_CASE("prefill and encode refuse NaN and infinite features, wrong counts and bad tokens") {
  Loaded features_model(kTinyFeaturesConfig);
  recur_session* fs = NewSession(features_model.model);
  std::vector<float> frames(3 * 5, 0.5f), out(3 * 12);
  recur_input in{nullptr, frames.data(), frames.size()};
  frames[7] = std::numeric_limits<float>::quiet_NaN();  // step 1, feature 2
  CHECK(recur_session_prefill(fs, 3, &in, out.data()) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("stream 0: feature 2 at step 1 is NaN"));
  CHECK(recur_session_encode(fs, 3, &in, out.data()) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("stream 0: feature 2 at step 1 is NaN"));
  frames[7] = -std::numeric_limits<float>::infinity();
  CHECK(recur_session_encode(fs, 3, &in, out.data()) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("is infinite"));
  frames[7] = 0.5f;
  in.count = 14;
  CHECK(recur_session_encode(fs, 3, &in, out.data()) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("input has 14 feature values, expected 1 streams x 3 steps x 5 features"));
  recur_session_free(fs);

  Loaded tokens_model(kTinyTokensConfig);  // 11 tokens, 64 learned positions
  recur_session* ts = NewSession(tokens_model.model);
  std::vector<int32_t> ids(65, 1);
  std::vector<float> probs(65 * 11);
  recur_input tin{ids.data(), nullptr, 3};
  ids[2] = 11;
  CHECK(recur_session_encode(ts, 3, &tin, probs.data()) == RECUR_OUT_OF_RANGE);
  CHECK(ErrorContains("token id 11 at step 2 is outside the vocabulary [0, 11)"));
  ids[2] = 1;
  tin.count = 65;
  CHECK(recur_session_encode(ts, 65, &tin, probs.data()) == RECUR_OUT_OF_RANGE);
  CHECK(ErrorContains("learned positions"));
  tin.count = 64;
  CHECK(recur_session_encode(ts, 64, &tin, probs.data()) == RECUR_OK);
  recur_session_free(ts);
}

TEST_CASE("options structs with a bad struct_size are refused") {
  Loaded m(kTinyTokensConfig);
  recur_session_options options = recur_session_options_default();
  options.struct_size = 3;
  recur_session* s = nullptr;
  CHECK(recur_session_create(m.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("struct_size"));
  options.struct_size = sizeof(options) + 8;
  CHECK(recur_session_create(m.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  recur_model_info info{};
  info.struct_size = 1;
  CHECK(recur_model_get_info(m.model, &info) == RECUR_INVALID_ARGUMENT);
}

TEST_CASE("a struct_size that ends inside a field is refused, one between fields is an older struct") {
  Loaded m(kTinyTokensConfig);
  recur_session_options options{};
  options.backend = "highway";
  recur_session* s = nullptr;
  // Half of the backend pointer: reading it would follow a torn pointer.
  options.struct_size = offsetof(recur_session_options, backend) + 4;
  CHECK(recur_session_create(m.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("recur_session_options.struct_size is 28, which ends inside a field"));
  CHECK(s == nullptr);
  // An older struct that ends before backend: the rest is zero (defaults).
  options.struct_size = offsetof(recur_session_options, backend);
  REQUIRE(recur_session_create(m.model, &options, &s) == RECUR_OK);
  recur_session_free(s);
  // One from before state_sums: what lies past it is not read (compensated sums).
  options.struct_size = offsetof(recur_session_options, state_sums);
  options.state_sums = RECUR_STATE_SUMS_PLAIN;
  REQUIRE(recur_session_create(m.model, &options, &s) == RECUR_OK);
  size_t old_blob = 0, plain_blob = 0;
  REQUIRE(recur_session_state_size(s, &old_blob) == RECUR_OK);
  recur_session_free(s);
  options.struct_size = sizeof(options);
  REQUIRE(recur_session_create(m.model, &options, &s) == RECUR_OK);
  REQUIRE(recur_session_state_size(s, &plain_blob) == RECUR_OK);
  recur_session_free(s);
  recur_model_info sizes{};
  sizes.struct_size = sizeof(sizes);
  REQUIRE(recur_model_get_info(m.model, &sizes) == RECUR_OK);
  CHECK(old_blob - plain_blob == sizes.state_bytes - sizes.state_bytes_plain_sums);
  CHECK(plain_blob < old_blob);

  recur_model_info info{};
  info.struct_size = offsetof(recur_model_info, parameter_count) + 2;
  CHECK(recur_model_get_info(m.model, &info) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("recur_model_info.struct_size"));
  info.struct_size = offsetof(recur_model_info, parameter_count);
  CHECK(recur_model_get_info(m.model, &info) == RECUR_OK);
  CHECK(info.d_model == 16);
  CHECK(info.parameter_count == 0);  // past the caller's struct: not written
  // One from before state_bytes_plain_sums: accepted, the field left alone.
  recur_model_info older{};
  older.struct_size = offsetof(recur_model_info, state_bytes_plain_sums);
  older.state_bytes_plain_sums = 12345;
  CHECK(recur_model_get_info(m.model, &older) == RECUR_OK);
  CHECK(older.state_bytes > 0);
  CHECK(older.state_bytes_plain_sums == 12345);

  recur_load_options load{};
  load.struct_size = offsetof(recur_load_options, flags) + 2;
  recur_model* other = nullptr;
  CHECK(recur_model_load_buffer(m.bytes.data(), m.bytes.size(), &load, &other) ==
        RECUR_INVALID_ARGUMENT);
  CHECK(other == nullptr);
}

TEST_CASE("the options defaults set struct_size and leave every field at its default") {
  const recur_load_options load = recur_load_options_default();
  CHECK(load.struct_size == sizeof(recur_load_options));
  CHECK(load.flags == 0);
  const recur_session_options options = recur_session_options_default();
  CHECK(options.struct_size == sizeof(recur_session_options));
  CHECK(options.batch == 0);
  CHECK(options.threads == 0);
  CHECK(options.prefill_chunk == 0);
  CHECK(options.backend == nullptr);
  CHECK(options.weight_packing == RECUR_PACKING_AUTO);
  CHECK(options.prefill_min == 0);
  CHECK(options.max_context == 0);
  CHECK(options.arena == nullptr);
  CHECK(options.arena_size == 0);
  CHECK(options.state_sums == RECUR_STATE_SUMS_COMPENSATED);
  CHECK(options.int8_activations == RECUR_INT8_ACTIVATIONS_AUTO);

  // A model and a session from the defaults run as with NULL options (up to
  // the rounding of the backend each picks by timing).
  auto bytes = BuildTestModel(kTinyTokensConfig, 1);
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), &load, &model) == RECUR_OK);
  recur_session* a = nullptr;
  recur_session* b = nullptr;
  REQUIRE(recur_session_create(model, &options, &a) == RECUR_OK);
  REQUIRE(recur_session_create(model, nullptr, &b) == RECUR_OK);
  size_t blob_a = 0, blob_b = 0;
  REQUIRE(recur_session_state_size(a, &blob_a) == RECUR_OK);
  REQUIRE(recur_session_state_size(b, &blob_b) == RECUR_OK);
  CHECK(blob_a == blob_b);
  for (int32_t token : {3, 1, 4, 1, 5}) {
    CHECK(recur::impl::testing::WorstRelative(StepTokens(a, {token}, 11),
                                              StepTokens(b, {token}, 11)) < 1e-5);
  }
  recur_session_free(a);
  recur_session_free(b);
  recur_model_free(model);
}

TEST_CASE("session options: batch and thread bounds") {
  Loaded m(kTinyTokensConfig);
  recur_session* s = nullptr;
  recur_session_options options = recur_session_options_default();
  options.batch = 100000;
  CHECK(recur_session_create(m.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("batch"));
  options = recur_session_options_default();
  options.threads = 1000;
  CHECK(recur_session_create(m.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("threads must be in [1, 256], got 1000"));
  options = recur_session_options_default();
  options.weight_packing = 7;
  CHECK(recur_session_create(m.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("weight_packing must be 0 (auto), 1 (off) or 2 (on), got 7"));
  options = recur_session_options_default();
  options.state_sums = 2;
  CHECK(recur_session_create(m.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("state_sums must be 0 (compensated) or 1 (plain), got 2"));
  options.state_sums = RECUR_STATE_SUMS_COMPENSATED;
  options.int8_activations = static_cast<recur_int8_activations>(4);
  CHECK(recur_session_create(m.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains(
      "int8_activations must be 0 (auto), 1 (float), 2 (quantized) or 3 (blocks), got 4"));
  // A struct from before int8_activations: the field is not read (auto).
  options.struct_size = offsetof(recur_session_options, int8_activations);
  REQUIRE(recur_session_create(m.model, &options, &s) == RECUR_OK);
  recur_session_free(s);
  s = nullptr;
  options.struct_size = sizeof(options);
  CHECK(s == nullptr);
  // Two threads: a session in a build with worker threads; a precise refusal
  // in one without (the minimal configuration).
  options = recur_session_options_default();
  options.threads = 2;
  if (recur_max_threads() >= 2) {
    REQUIRE(recur_session_create(m.model, &options, &s) == RECUR_OK);
    recur_session_free(s);
  } else {
    CHECK(recur_max_threads() == 1);
    CHECK(recur_session_create(m.model, &options, &s) == RECUR_UNSUPPORTED);
    CHECK(ErrorContains("threads = 2, but this build has no worker threads"));
    CHECK(s == nullptr);
  }
}

TEST_CASE("more threads give the same results") {
  // d_model 256 and d_ff 512, so that dense layers are split across threads.
  const char* config = R"({
    "layout": "recur", "d_model": 256, "n_layers": 2, "norm_placement": "pre",
    "layer_norm_eps": 1e-5, "input": {"kind": "tokens", "vocab_size": 50}, "max_positions": 0,
    "mixer": {"type": "linear_attention", "heads": 4, "dk": 64, "dv": 64,
              "feature_map": "elu_plus_one", "eps": 1e-6},
    "ffn": {"d_ff": 512, "activation": "gelu"}, "final_norm": true,
    "head": {"out": 50, "activation": "none"}})";
  Loaded m(config);
  for (uint32_t batch : {1u, 40u}) {
    // One backend for both: the automatic choice is timed per thread count
    // and may differ, and backends round differently (backend_test.cc).
    recur_session_options one = recur_session_options_default();
    one.batch = batch;
    one.backend = "highway";
    recur_session_options two = one;
    two.threads = std::min(2u, recur_max_threads());  // 1 in the minimal build
    recur_session* a = nullptr;
    recur_session* b = nullptr;
    REQUIRE(recur_session_create(m.model, &one, &a) == RECUR_OK);
    REQUIRE(recur_session_create(m.model, &two, &b) == RECUR_OK);
    for (int t = 0; t < 10; ++t) {
      std::vector<int32_t> tokens(batch);
      for (uint32_t i = 0; i < batch; ++i) tokens[i] = int32_t((t * 13 + i) % 50);
      auto ya = StepTokens(a, tokens, 50);
      auto yb = StepTokens(b, tokens, 50);
      for (size_t i = 0; i < ya.size(); ++i) CHECK(yb[i] == doctest::Approx(ya[i]).epsilon(1e-5));
    }
    recur_session_free(a);
    recur_session_free(b);
  }
}

TEST_CASE("out-of-range tokens are refused and leave the session unchanged") {
  Loaded m(kTinyTokensConfig);
  recur_session* a = NewSession(m.model, 2);
  recur_session* b = NewSession(m.model, 2);
  StepTokens(a, {1, 2}, 11);
  StepTokens(b, {1, 2}, 11);
  for (int32_t bad : {11, -1, 1 << 30}) {
    std::vector<int32_t> tokens{3, bad};
    std::vector<float> out(22);
    recur_input in{tokens.data(), nullptr, tokens.size()};
    CHECK(recur_session_step(a, &in, out.data()) == RECUR_OUT_OF_RANGE);
    CHECK(ErrorContains(("stream 1: token id " + std::to_string(bad) +
                         " is outside the vocabulary [0, 11)").c_str()));
  }
  CHECK(StepTokens(a, {4, 5}, 11) == StepTokens(b, {4, 5}, 11));
  recur_session_free(a);
  recur_session_free(b);
}

TEST_CASE("the wrong kind of input is refused") {
  Loaded tokens_model(kTinyTokensConfig);
  Loaded features_model(kTinyFeaturesConfig);
  recur_session* ts = NewSession(tokens_model.model);
  recur_session* fs = NewSession(features_model.model);
  float frame[5] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  int32_t token = 1;
  std::vector<float> out(16);
  recur_input features_in{nullptr, frame, 5};
  recur_input tokens_in{&token, nullptr, 1};
  recur_input both{&token, frame, 1};
  CHECK(recur_session_step(ts, &features_in, out.data()) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("takes token ids"));
  CHECK(recur_session_step(fs, &tokens_in, out.data()) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("takes feature frames"));
  CHECK(recur_session_step(ts, &both, out.data()) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_step(fs, &both, out.data()) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_step(fs, &features_in, out.data()) == RECUR_OK);
  recur_session_free(ts);
  recur_session_free(fs);
}

TEST_CASE("a count that does not match the batch or the feature width is refused") {
  Loaded tokens_model(kTinyTokensConfig);
  Loaded features_model(kTinyFeaturesConfig);
  recur_session* ts = NewSession(tokens_model.model, 2);
  recur_session* fs = NewSession(features_model.model, 2);
  int32_t tokens[3] = {1, 2, 3};
  float frames[15] = {};
  std::vector<float> out(64);
  recur_input t{tokens, nullptr, 3};
  CHECK(recur_session_step(ts, &t, out.data()) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("input has 3 token ids, expected 2 streams x 1 steps = 2"));
  recur_input f{nullptr, frames, 12};  // width 6 instead of 5
  CHECK(recur_session_step(fs, &f, out.data()) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("input has 12 feature values, expected 2 streams x 1 steps x 5 features = 10"));
  f.count = 10;
  CHECK(recur_session_step(fs, &f, out.data()) == RECUR_OK);
  recur_session_free(ts);
  recur_session_free(fs);
}

TEST_CASE("non-finite features are refused (policy: reject, never propagate)") {
  Loaded m(kTinyFeaturesConfig);
  recur_session* s = NewSession(m.model);
  std::vector<float> out(12);
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    float frame[5] = {0.1f, 0.2f, bad, 0.4f, 0.5f};
    recur_input in{nullptr, frame, 5};
    CHECK(recur_session_step(s, &in, out.data()) == RECUR_INVALID_ARGUMENT);
    // A step call names no step (its caller numbers steps its own way).
    CHECK(ErrorContains(bad != bad ? "stream 0: feature 2 is NaN" : "stream 0: feature 2 is infinite"));
  }
  recur_session_free(s);
}

TEST_CASE("learned positions bound a stream's length, reset starts it over") {
  Loaded m(kTinyTokensConfig);
  recur_session* s = NewSession(m.model);
  for (int t = 0; t < 64; ++t) StepTokens(s, {t % 11}, 11);
  int32_t token = 0;
  std::vector<float> out(11);
  recur_input in{&token, nullptr, 1};
  CHECK(recur_session_step(s, &in, out.data()) == RECUR_OUT_OF_RANGE);
  CHECK(ErrorContains("learned positions, which end at 64"));
  CHECK(recur_session_reset(s, 0) == RECUR_OK);
  recur_session* fresh = NewSession(m.model);
  CHECK(StepTokens(s, {3}, 11) == StepTokens(fresh, {3}, 11));
  recur_session_free(s);
  recur_session_free(fresh);
}

TEST_CASE("reset: one stream, all streams, and out-of-range streams") {
  Loaded m(kTinyTokensConfig);
  recur_session* s = NewSession(m.model, 3);
  recur_session* fresh = NewSession(m.model, 3);
  for (int t = 0; t < 5; ++t) StepTokens(s, {1, 2, 3}, 11);
  CHECK(recur_session_reset(s, 1) == RECUR_OK);
  auto after = StepTokens(s, {4, 4, 4}, 11);
  auto first = StepTokens(fresh, {4, 4, 4}, 11);
  CHECK(std::equal(after.begin() + 11, after.begin() + 22, first.begin() + 11));
  CHECK(!std::equal(after.begin(), after.begin() + 11, first.begin()));
  CHECK(recur_session_reset(s, 3) == RECUR_OUT_OF_RANGE);
  CHECK(ErrorContains("stream 3 is out of range"));
  CHECK(recur_session_reset(s, -2) == RECUR_OUT_OF_RANGE);
  CHECK(recur_session_reset(s, -1) == RECUR_OK);
  recur_session_free(s);
  recur_session_free(fresh);
}

TEST_CASE("load_file: missing file, directory, empty file") {
  recur_model* model = nullptr;
  CHECK(recur_model_load_file("/nonexistent/model.recur", nullptr, &model) == RECUR_IO_ERROR);
  CHECK(ErrorContains("cannot open '/nonexistent/model.recur'"));
  CHECK(recur_model_load_file("/tmp", nullptr, &model) == RECUR_IO_ERROR);
  CHECK(ErrorContains("not a regular file"));
  const char* empty = "api_test_empty.recur";
  FILE* f = std::fopen(empty, "wb");
  REQUIRE(f != nullptr);
  std::fclose(f);
  CHECK(recur_model_load_file(empty, nullptr, &model) == RECUR_IO_ERROR);
  CHECK(ErrorContains("is empty"));
  CHECK(model == nullptr);
}

TEST_CASE("load_file: mmap and read-into-memory give the same model") {
  auto bytes = BuildTestModel(kTinyTokensConfig, 3);
  const char* path = "api_test_model.recur";
  FILE* f = std::fopen(path, "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
  std::vector<std::vector<float>> outs;
  for (uint32_t flags : {0u, uint32_t(RECUR_LOAD_NO_MMAP), uint32_t(RECUR_LOAD_TRUSTED)}) {
    auto model = recur::Model::Load(path, flags);
    REQUIRE(model.ok());
    auto session = recur::Session::Create(*model);
    REQUIRE(session.ok());
    std::vector<float> out(11);
    for (int32_t t = 0; t < 10; ++t) REQUIRE(session->StepTokens(&t, 1, out.data()).ok());
    outs.push_back(out);
  }
  CHECK(outs[0] == outs[1]);
  CHECK(outs[0] == outs[2]);
}

TEST_CASE("load_buffer refuses misaligned bytes") {
  auto bytes = BuildTestModel(kTinyTokensConfig, 1);
  std::vector<uint8_t, recur::impl::converter::AlignedAllocator<uint8_t>> shifted(bytes.size() + 8);
  std::memcpy(shifted.data() + 8, bytes.data(), bytes.size());
  recur_model* model = nullptr;
  CHECK(recur_model_load_buffer(shifted.data() + 8, bytes.size(), nullptr, &model) ==
        RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("64-byte aligned"));
}

TEST_CASE("status strings and version") {
  CHECK(std::string(recur_status_string(RECUR_OK)) == "RECUR_OK");
  CHECK(std::string(recur_status_string(RECUR_INVALID_STATE)) == "RECUR_INVALID_STATE");
  CHECK(std::string(recur_status_string(static_cast<recur_status>(99))) == "RECUR_UNKNOWN_STATUS");
  CHECK(std::string(recur_version_string()) == "0.1.0");
  CHECK(std::strlen(recur_simd_target()) > 0);
}

TEST_CASE("SIMD target cap: the kernels dispatch as a smaller CPU's would, between sessions") {
  const std::string native = recur_simd_target();
  CHECK(recur_set_max_simd_target("no-such-target") == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("unknown SIMD target 'no-such-target'"));
  CHECK(std::string(recur_simd_target()) == native);
  // The message lists this build's targets, best first: cap at the last one,
  // or, if the process already runs on it (an environment cap), lift to the first.
  const std::string error = recur_last_error();
  const size_t list = error.find("this build has ");
  REQUIRE(list != std::string::npos);
  const std::string names = error.substr(list + 15, error.size() - list - 16);
  const std::string worst = names.substr(names.rfind(' ') + 1);
  const std::string cap = worst != native ? worst : names.substr(0, names.find(','));
  INFO("targets: ", names, "; native: ", native, "; cap: ", cap);

  Loaded m(kTinyTokensConfig);
  const std::vector<int32_t> tokens = {3, 1, 4, 1, 5, 9, 2, 6};
  recur_session* s = NewSession(m.model);
  std::vector<float> native_out;
  for (int32_t t : tokens) native_out = StepTokens(s, {t}, 11);
  CHECK(recur_set_max_simd_target(cap.c_str()) == RECUR_INVALID_STATE);
  CHECK(ErrorContains("1 session(s) exist"));
  recur_session_free(s);

  REQUIRE(recur_set_max_simd_target(cap.c_str()) == RECUR_OK);
  CHECK(std::string(recur_simd_target()) != native);
  if (cap == worst) CHECK(std::string(recur_simd_target()) == worst);
  s = NewSession(m.model);
  std::vector<float> capped_out;
  for (int32_t t : tokens) capped_out = StepTokens(s, {t}, 11);
  recur_session_free(s);
  // Another target: other lane counts sum in another order, and the emulated
  // ones round a*b+c twice (tolerance.h).
  CHECK(recur::impl::testing::WorstRelative(capped_out, native_out) <=
        recur::impl::testing::TinyModelOutputBound(2));

  // Back to the process's cap: the environment's (a test preset may set one), or none.
  REQUIRE(recur_set_max_simd_target(std::getenv("RECUR_MAX_SIMD_TARGET")) == RECUR_OK);
  CHECK(std::string(recur_simd_target()) == native);
}

TEST_CASE("C++ wrapper reports errors without throwing") {
  auto model = recur::Model::Load("/nonexistent.recur");
  CHECK(!model.ok());
  CHECK(model.status().code() == RECUR_IO_ERROR);
  CHECK(model.error().find("cannot open") != std::string::npos);
}

TEST_CASE("layer callback: every block's residual stream, per call, until removed") {
  Loaded m(kTinyTokensConfig);
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.batch = 2;
  options.prefill_chunk = 4;
  options.prefill_min = 1;
  recur_session* s = nullptr;
  REQUIRE(recur_session_create(m.model, &options, &s) == RECUR_OK);
  struct Call {
    uint32_t layer;
    size_t batch, steps, width;
    float first;
  };
  std::vector<Call> calls;
  auto collect = [](void* user, uint32_t layer, const float* x, size_t batch, size_t steps,
                    size_t width) {
    static_cast<std::vector<Call>*>(user)->push_back({layer, batch, steps, width, x[0]});
  };
  REQUIRE(recur_session_set_layer_callback(s, collect, &calls) == RECUR_OK);
  StepTokens(s, {1, 2}, 11);
  REQUIRE(calls.size() == 2);  // two blocks
  CHECK(calls[0].layer == 0);
  CHECK(calls[1].layer == 1);
  CHECK(calls[1].batch == 2);
  CHECK(calls[1].steps == 1);
  CHECK(calls[1].width == 16);
  CHECK(calls[0].first != calls[1].first);  // block outputs, not one buffer twice
  calls.clear();
  std::vector<int32_t> tokens(2 * 10, 3);
  const recur_input in{tokens.data(), nullptr, tokens.size()};
  REQUIRE(recur_session_prefill(s, 10, &in, nullptr) == RECUR_OK);
  REQUIRE(calls.size() == 6);  // chunks of 4, 4 and 2 positions, two blocks each
  CHECK(calls[0].steps == 4);
  CHECK(calls[2].steps == 4);
  CHECK(calls[4].steps == 2);
  CHECK(calls[5].layer == 1);
  calls.clear();
  REQUIRE(recur_session_set_layer_callback(s, nullptr, nullptr) == RECUR_OK);
  StepTokens(s, {1, 2}, 11);
  CHECK(calls.empty());
  CHECK(recur_session_set_layer_callback(nullptr, collect, &calls) == RECUR_INVALID_ARGUMENT);
  CHECK(ErrorContains("session is null"));
  recur_session_free(s);
}
