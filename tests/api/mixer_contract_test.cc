// The contract every causal mixer keeps (docs/design.md principle 9), checked for
// each member of the schema's Mixer union, the one list the runtime's
// registry is built from: a mixer without a test model here fails.
//   - N steps == one prefill of N positions (outputs and state), the prefill
//     walking several chunks;
//   - prefill(a) + prefill(b) == prefill(a + b);
//   - saving the state after a positions and loading it into a fresh session
//     continues exactly as the uninterrupted session does;
// and linear attention keeps it with plain state sums too.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "recur/recur.h"
#include "schema/recur_generated.h"
#include "test_models.h"
#include "tolerance.h"

namespace {

using recur::impl::testing::TinyModelOutputBound;
using recur::impl::testing::TinyModelStateBound;
using recur::impl::testing::WorstRelative;

namespace fb = recur::fb;

const std::map<std::string, const char*>& TestModels() {
  return recur::impl::testing::TinyModelPerMixer();
}

struct Model {
  explicit Model(const char* config, recur_state_sums sums = RECUR_STATE_SUMS_COMPENSATED)
      : state_sums(sums) {
    bytes = recur::impl::testing::BuildTestModel(config, 11);
    REQUIRE(!bytes.empty());
    REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
    info.struct_size = sizeof(info);
    REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
  }
  ~Model() { recur_model_free(model); }

  recur_session* Session(uint32_t chunk) const {
    recur_session_options options{};
    options.struct_size = sizeof(options);
    options.prefill_chunk = chunk;
    options.prefill_min = 1;
    options.state_sums = state_sums;
    recur_session* s = nullptr;
    REQUIRE(recur_session_create(model, &options, &s) == RECUR_OK);
    return s;
  }
  // Positions [from, from + n) of a fixed input sequence.
  recur_input Input(size_t from, size_t n) {
    const bool tokens = info.input_kind == RECUR_INPUT_TOKENS;
    ids.resize(n);
    frames.resize(n * info.feature_width);
    for (size_t i = 0; i < n; ++i) ids[i] = int32_t(((from + i) * 5 + 3) % std::max(info.vocab_size, 1u));
    for (size_t i = 0; i < frames.size(); ++i) {
      frames[i] = std::sin(0.3f * float(from * info.feature_width + i));
    }
    return tokens ? recur_input{ids.data(), nullptr, n} : recur_input{nullptr, frames.data(), frames.size()};
  }
  std::vector<float> Prefill(recur_session* s, size_t from, size_t n) {
    std::vector<float> out(n * info.output_width);
    recur_input in = Input(from, n);
    REQUIRE(recur_session_prefill(s, n, &in, out.data()) == RECUR_OK);
    return out;
  }
  std::vector<float> Steps(recur_session* s, size_t from, size_t n) {
    std::vector<float> all, out(info.output_width);
    for (size_t t = 0; t < n; ++t) {
      recur_input in = Input(from + t, 1);
      REQUIRE(recur_session_step(s, &in, out.data()) == RECUR_OK);
      all.insert(all.end(), out.begin(), out.end());
    }
    return all;
  }
  std::vector<unsigned char> Save(recur_session* s) const {
    size_t size = 0;
    REQUIRE(recur_session_state_size(s, &size) == RECUR_OK);
    std::vector<unsigned char> blob(size);
    REQUIRE(recur_session_state_save(s, 0, blob.data(), size) == RECUR_OK);
    return blob;
  }

  recur_state_sums state_sums;
  recur::impl::converter::AlignedBytes bytes;
  recur_model* model = nullptr;
  recur_model_info info{};
  std::vector<int32_t> ids;
  std::vector<float> frames;
};

// The state payload (after the 48-byte header), as floats.
std::vector<float> Payload(const std::vector<unsigned char>& blob) {
  std::vector<float> f((blob.size() - 48) / sizeof(float));
  std::memcpy(f.data(), blob.data() + 48, f.size() * sizeof(float));
  return f;
}

// Encoder-only models: no recurrent form (a clear error), and each stream's
// encoding depends on that stream alone.
void CheckEncoderContract(Model& m) {
  REQUIRE(m.info.input_kind == RECUR_INPUT_FEATURES);  // the encoder test models take frames
  const size_t n = 20, w = m.info.output_width;
  recur_session* one = m.Session(0);
  recur_input first = m.Input(0, n);
  std::vector<float> out(n * w);
  CHECK(recur_session_step(one, &first, out.data()) == RECUR_UNSUPPORTED);
  CHECK(std::string(recur_last_error()).find("no recurrent form") != std::string::npos);
  CHECK(recur_session_prefill(one, n, &first, out.data()) == RECUR_UNSUPPORTED);
  REQUIRE(recur_session_encode(one, n, &first, out.data()) == RECUR_OK);
  const std::vector<float> alone = out;
  // The same sequence as stream 1 of 2 (stream 0 different): the same output.
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.batch = 2;
  recur_session* two = nullptr;
  REQUIRE(recur_session_create(m.model, &options, &two) == RECUR_OK);
  recur_input other = m.Input(50, n);
  std::vector<float> frames(other.features, other.features + other.count);
  m.Input(0, n);
  frames.insert(frames.end(), m.frames.begin(), m.frames.end());
  recur_input both{nullptr, frames.data(), frames.size()};
  std::vector<float> out2(2 * n * w);
  REQUIRE(recur_session_encode(two, n, &both, out2.data()) == RECUR_OK);
  // Batch 2 against batch 1: GEMMs of other row counts may sum in another order.
  CHECK(WorstRelative(std::vector<float>(out2.begin() + n * w, out2.end()), alone) <=
        TinyModelOutputBound(m.info.num_layers));
  recur_session_free(one);
  recur_session_free(two);
}

// Steps == prefill, split prefills, exact resume, for one model.
void CheckContract(const char* config,
                   recur_state_sums sums = RECUR_STATE_SUMS_COMPENSATED) {
  Model m(config, sums);
  if (m.info.state_bytes == 0 && m.info.state_bytes_per_position == 0) {
    return CheckEncoderContract(m);
  }
  const size_t n = 40, a = 17;

  recur_session* stepped = m.Session(0);
  recur_session* whole = m.Session(8);  // 5 chunks
  recur_session* split = m.Session(6);
  const std::vector<float> y_steps = m.Steps(stepped, 0, n);
  const std::vector<float> y_whole = m.Prefill(whole, 0, n);
  std::vector<float> y_split = m.Prefill(split, 0, a);
  const std::vector<float> y_rest = m.Prefill(split, a, n - a);
  y_split.insert(y_split.end(), y_rest.begin(), y_rest.end());
  // Chunked against stepped sums, batched GEMMs against mat-vecs: the same
  // math in another order (tolerance.h).
  const unsigned layers = m.info.num_layers;
  CHECK(WorstRelative(y_whole, y_steps) <= TinyModelOutputBound(layers));
  CHECK(WorstRelative(y_split, y_whole) <= TinyModelOutputBound(layers));
  CHECK(WorstRelative(Payload(m.Save(whole)), Payload(m.Save(stepped))) <= TinyModelStateBound(layers));
  CHECK(WorstRelative(Payload(m.Save(split)), Payload(m.Save(whole))) <= TinyModelStateBound(layers));

  // Save after a steps, load into a fresh session: it continues exactly.
  recur_session* first = m.Session(0);
  recur_session* resumed = m.Session(0);
  m.Steps(first, 0, a);
  const std::vector<unsigned char> blob = m.Save(first);
  REQUIRE(recur_session_state_load(resumed, 0, blob.data(), blob.size()) == RECUR_OK);
  CHECK(m.Steps(resumed, a, n - a) == m.Steps(first, a, n - a));
  for (recur_session* s : {stepped, whole, split, first, resumed}) recur_session_free(s);
}

}  // namespace

TEST_CASE("every mixer: steps == prefill, prefill(a) + prefill(b) == prefill(a + b), exact resume") {
  const fb::Mixer* tags = fb::EnumValuesMixer();
  for (size_t i = 0; i <= size_t(fb::Mixer::MAX); ++i) {  // EnumValuesMixer: MAX + 1 tags
    if (tags[i] == fb::Mixer::NONE) continue;
    const std::string name = fb::EnumNameMixer(tags[i]);
    CAPTURE(name);
    auto it = TestModels().find(name);
    REQUIRE_MESSAGE(it != TestModels().end(), "mixer " << name << " has no contract test model");
    {  // TinyStepModels (the arena and no-allocation tests) leaves out exactly these
      const Model m(it->second);
      CHECK(recur::impl::testing::EncoderOnly(name) == (m.info.recurrent == 0));
      CHECK(m.info.recurrent == (m.info.state_bytes > 0 || m.info.state_bytes_per_position > 0));
    }
    CheckContract(it->second);
  }
}

TEST_CASE("a mixed model (a different mixer per block) keeps the same contract") {
  CheckContract(recur::impl::testing::kTinyMixedConfig);
}

TEST_CASE("rotary position embeddings (softmax, linear, sliding window, FLASH) keep the contract") {
  CheckContract(recur::impl::testing::kTinyRotaryConfig);
}

TEST_CASE("token shift keeps the contract: its carried features are state, saved and restored") {
  CheckContract(recur::impl::testing::kTinyTokenShiftConfig);
  CheckContract(recur::impl::testing::kTinyTokenShiftEncoderConfig);  // shifts -1, 0 and 1
  // The state per stream adds, per block, the previous position's shift-1
  // features (5 + 4) of the mixer's and the FFN's inputs, after the mixer's.
  Model shifted(recur::impl::testing::kTinyTokenShiftConfig);
  std::string plain_config = recur::impl::testing::kTinyTokenShiftConfig;
  const std::string key = R"("token_shift": {"segments": [[5, 1], [3, 0], [4, 1]], "ffn": true},)";
  plain_config.erase(plain_config.find(key), key.size());
  Model plain(plain_config.c_str());
  CHECK(shifted.info.state_bytes == plain.info.state_bytes + 2 * 2 * 9 * sizeof(float));
  CHECK(shifted.info.state_bytes_per_position == plain.info.state_bytes_per_position);
  recur_session* a = shifted.Session(0);
  recur_session* b = plain.Session(0);
  size_t with = 0, without = 0;
  REQUIRE(recur_session_state_size(a, &with) == RECUR_OK);
  REQUIRE(recur_session_state_size(b, &without) == RECUR_OK);
  CHECK(with == without + 2 * 2 * 9 * sizeof(float));
  // The carried features are the last floats of each block's state: after one
  // step they are what the next position will read, so a reset stream and a
  // loaded one differ exactly there.
  shifted.Steps(a, 0, 3);
  const std::vector<float> after = Payload(shifted.Save(a));
  CHECK(std::any_of(after.end() - 18, after.end(), [](float v) { return v != 0.0f; }));
  REQUIRE(recur_session_reset(a, -1) == RECUR_OK);
  const std::vector<float> reset = Payload(shifted.Save(a));
  CHECK(std::all_of(reset.begin(), reset.end(), [](float v) { return v == 0.0f; }));
  recur_session_free(a);
  recur_session_free(b);
  // An encoder block carries nothing: it sees whole sequences.
  Model encoder(recur::impl::testing::kTinyTokenShiftEncoderConfig);
  CHECK(encoder.info.state_bytes == 0);
}

TEST_CASE(
    "model-level options (reversible blocks with a token shift, scale and RMS norms, GLU, "
    "sinusoidal positions, no feed-forward) keep the same contract") {
  CheckContract(recur::impl::testing::kTinyReversibleConfig);
  CheckContract(recur::impl::testing::kTinyNoFfnConfig);
}

TEST_CASE("AFT-conv (the per-head kernel of the AftLocal table) keeps the same contract") {
  CheckContract(recur::impl::testing::kTinyAftConvConfig);
}

TEST_CASE("linformer: sequences past seq_len are refused, up to it accepted") {
  Model m(recur::impl::testing::kTinyLinformerConfig);
  recur_session* s = m.Session(0);
  std::vector<float> out(33 * m.info.output_width);
  recur_input full = m.Input(0, 32);
  CHECK(recur_session_encode(s, 32, &full, out.data()) == RECUR_OK);
  recur_input over = m.Input(0, 33);
  CHECK(recur_session_encode(s, 33, &over, out.data()) == RECUR_OUT_OF_RANGE);
  CHECK(std::string(recur_last_error()) ==
        "blocks.0 takes sequences of at most 32 positions (its mixer's seq_len or max_length); "
        "got 33");
  recur_session_free(s);
}

// A mixer's max_length (48 in the test models) bounds the KV cache: the
// model reports it, a session asking for more is refused with the block
// named, the default session holds exactly 48 positions, and the message at
// the bound does not suggest a larger max_context.
static void CheckBoundedByMaxLength(const char* config) {
  Model m(config);
  CHECK(m.info.max_context_bound == 48);
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.max_context = 49;
  recur_session* s = nullptr;
  CHECK(recur_session_create(m.model, &options, &s) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()) ==
        "max_context 49 is more than blocks.0 holds: its parameters cover 48 positions "
        "(max_length)");
  options.max_context = 0;
  REQUIRE(recur_session_create(m.model, &options, &s) == RECUR_OK);
  std::vector<float> out(49 * m.info.output_width);
  recur_input all = m.Input(0, 48);
  CHECK(recur_session_prefill(s, 48, &all, out.data()) == RECUR_OK);
  recur_input one = m.Input(48, 1);
  CHECK(recur_session_step(s, &one, out.data()) == RECUR_OUT_OF_RANGE);
  const std::string error = recur_last_error();
  CHECK(error.find("max_context of 48 positions") != std::string::npos);
  CHECK(error.find("the model's max_length: no session holds more") != std::string::npos);
  CHECK(error.find("larger max_context") == std::string::npos);
  recur_session_free(s);
}

TEST_CASE("AFT-full: the KV cache is bounded by max_length, and max_context cannot pass it") {
  CheckBoundedByMaxLength(recur::impl::testing::kTinyAftFullConfig);
}

TEST_CASE("GAU: the KV cache is bounded by max_length, and its encoder keeps the encoder contract") {
  CheckBoundedByMaxLength(recur::impl::testing::kTinyGauConfig);
  std::string encoder = recur::impl::testing::kTinyGauConfig;
  const std::string key = "\"scale\": 0.05";
  encoder.replace(encoder.find(key), key.size(), key + ", \"causal\": false");
  CheckContract(encoder.c_str());
}

TEST_CASE("plain state sums keep the contract, and stay close to compensated ones") {
  for (const char* config :
       {recur::impl::testing::kTinyTokensConfig, recur::impl::testing::kTinyMixedConfig}) {
    CheckContract(config, RECUR_STATE_SUMS_PLAIN);
    // Over 40 steps plain and compensated sums differ by rounding only.
    Model plain(config, RECUR_STATE_SUMS_PLAIN), compensated(config);
    recur_session* a = plain.Session(0);
    recur_session* b = compensated.Session(0);
    const std::vector<float> y_plain = plain.Steps(a, 0, 40);
    const std::vector<float> y_comp = compensated.Steps(b, 0, 40);
    CHECK(WorstRelative(y_plain, y_comp) <= TinyModelOutputBound(plain.info.num_layers));
    CHECK(y_plain != y_comp);  // the two sessions did sum differently
    // Plain sums leave the compensations out of the state.
    size_t plain_bytes = 0, comp_bytes = 0;
    REQUIRE(recur_session_state_size(a, &plain_bytes) == RECUR_OK);
    REQUIRE(recur_session_state_size(b, &comp_bytes) == RECUR_OK);
    CHECK(plain_bytes < comp_bytes);
    recur_session_free(a);
    recur_session_free(b);
  }
}

TEST_CASE("RetNet: the chunked form on two threads (one task per stream and head) equals one") {
  Model m(recur::impl::testing::kTinyRetNetConfig);
  const size_t n = 40, batch = 3, w = m.info.output_width;
  std::vector<int32_t> ids(batch * n);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7 + i / n) % m.info.vocab_size);
  std::vector<std::vector<float>> outs, states;
  for (uint32_t threads : {1u, std::min(2u, recur_max_threads())}) {
    recur_session_options options{};
    options.struct_size = sizeof(options);
    options.batch = batch;
    options.threads = threads;
    options.prefill_chunk = 16;
    options.prefill_min = 1;
    recur_session* s = nullptr;
    REQUIRE(recur_session_create(m.model, &options, &s) == RECUR_OK);
    recur_input in{ids.data(), nullptr, ids.size()};
    std::vector<float> out(batch * n * w);
    REQUIRE(recur_session_prefill(s, n, &in, out.data()) == RECUR_OK);
    outs.push_back(out);
    std::vector<float> state;
    for (int b = 0; b < int(batch); ++b) {
      size_t size = 0;
      REQUIRE(recur_session_state_size(s, &size) == RECUR_OK);
      std::vector<unsigned char> blob(size);
      REQUIRE(recur_session_state_save(s, b, blob.data(), size) == RECUR_OK);
      const std::vector<float> p = Payload(blob);
      state.insert(state.end(), p.begin(), p.end());
    }
    states.push_back(state);
    recur_session_free(s);
  }
  // Each (stream, head) runs the same arithmetic on either thread; the dense
  // layers split by output rows may sum in another order (tolerance.h).
  CHECK(WorstRelative(outs[1], outs[0]) <= TinyModelOutputBound(m.info.num_layers));
  CHECK(WorstRelative(states[1], states[0]) <= TinyModelStateBound(m.info.num_layers));
}

TEST_CASE(
    "Reformer's transformers form keeps the encoder contract; padded, hashed and one-chunk "
    "lengths on two threads equal one") {
  CheckContract(recur::impl::testing::kTinyReformerTransformersConfig);  // 20 positions: no pads
  Model m(recur::impl::testing::kTinyReformerTransformersConfig);
  const size_t batch = 2, w = m.info.output_width;
  // 3 ≤ pad_above: one chunk, no hashing; 7: padded to 10 slots; 23: padded to 30.
  for (size_t n : {size_t{3}, size_t{7}, size_t{23}}) {
    CAPTURE(n);
    std::vector<std::vector<float>> outs;
    for (uint32_t threads : {1u, std::min(2u, recur_max_threads())}) {
      recur_session_options options{};
      options.struct_size = sizeof(options);
      options.batch = batch;
      options.threads = threads;
      recur_session* s = nullptr;
      REQUIRE(recur_session_create(m.model, &options, &s) == RECUR_OK);
      std::vector<float> frames(batch * n * m.info.feature_width);
      for (size_t i = 0; i < frames.size(); ++i) frames[i] = std::sin(0.37f * float(i));
      recur_input in{nullptr, frames.data(), frames.size()};
      std::vector<float> out(batch * n * w);
      REQUIRE(recur_session_encode(s, n, &in, out.data()) == RECUR_OK);
      for (float v : out) REQUIRE(std::isfinite(v));
      outs.push_back(out);
      recur_session_free(s);
    }
    CHECK(WorstRelative(outs[1], outs[0]) <= TinyModelOutputBound(m.info.num_layers));
  }
}
