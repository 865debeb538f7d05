// recur_session_prefill: the chunked-parallel form leaves the state and
// gives the outputs of step mode, and refuses bad input like step does.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "recur/recur.h"
#include "test_models.h"

namespace {

using recur::testing::BuildTestModel;
using recur::testing::kTinyFeaturesConfig;
using recur::testing::kTinyTokensConfig;

struct Fixture {
  explicit Fixture(const char* config) {
    bytes = BuildTestModel(config, 5);
    REQUIRE(!bytes.empty());
    REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
    info.struct_size = sizeof(info);
    REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
  }
  ~Fixture() { recur_model_free(model); }
  recur_session* Session(uint32_t batch, uint32_t chunk = 0) {
    recur_session_options options{sizeof(options), batch, 1, chunk};
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

  recur::converter::AlignedBytes bytes;
  recur_model* model = nullptr;
  recur_model_info info{};
  std::vector<int32_t> ids;
  std::vector<float> frames;
};

void CheckClose(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / (1.0 + std::fabs(double(b[i]))));
  }
  CHECK(worst <= tol);
}

}  // namespace

TEST_CASE("prefill equals stepping: outputs, state, and the steps after") {
  for (const char* config : {kTinyTokensConfig, kTinyFeaturesConfig}) {
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
    CheckClose(prefill_out, step_out, 2e-5);
    for (int b = 0; b < int(batch); ++b) CheckClose(f.State(chunked, b), f.State(stepped, b), 2e-5);

    // Stepping continues seamlessly after the prefill.
    recur_input next = f.Input(batch, 1, 99);
    std::vector<float> a(batch * w), b(batch * w);
    REQUIRE(recur_session_step(chunked, &next, a.data()) == RECUR_OK);
    REQUIRE(recur_session_step(stepped, &next, b.data()) == RECUR_OK);
    CheckClose(a, b, 2e-5);
    recur_session_free(chunked);
    recur_session_free(stepped);
  }
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
  CheckClose(f.State(whole, 0), f.State(split, 0), 2e-5);
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

TEST_CASE("prefill_chunk bounds") {
  Fixture f(kTinyTokensConfig);
  recur_session_options options{sizeof(options), 1, 1, 5000};
  recur_session* s = nullptr;
  CHECK(recur_session_create(f.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("prefill_chunk") != std::string::npos);
}
