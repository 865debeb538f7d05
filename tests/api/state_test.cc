// State save/load and fork: exact round trips, and refusal of blobs that do
// not belong to the session.
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "core/hash.h"
#include "recur/recur.hpp"
#include "test_models.h"

namespace {

using recur::impl::testing::BuildTestModel;
using recur::impl::testing::kTinyTokensConfig;

std::vector<float> Run(recur::Session& s, int32_t first, int steps) {
  std::vector<float> out(11), all;
  for (int t = 0; t < steps; ++t) {
    int32_t token = (first + t * 5) % 11;
    REQUIRE(s.StepTokens(&token, 1, out.data()).ok());
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

struct Fixture {
  recur::impl::converter::AlignedBytes bytes = BuildTestModel(kTinyTokensConfig, 1);
  recur::Model model = std::move(*recur::Model::FromBuffer(bytes.data(), bytes.size()));
};

// `blob` with its header's position replaced and the checksum made valid
// again (state_blob.cc: position at byte 32, checksum at 40 over the header
// with the checksum zeroed, then the payload): a forgery only the position
// checks can refuse.
std::vector<uint8_t> WithPosition(const std::vector<uint8_t>& blob, uint64_t position) {
  std::vector<uint8_t> forged = blob;
  std::memcpy(forged.data() + 32, &position, 8);
  std::memset(forged.data() + 40, 0, 8);
  const uint64_t checksum = recur::impl::Fnv1a64(forged.data() + 48, forged.size() - 48,
                                                 recur::impl::Fnv1a64(forged.data(), 48));
  std::memcpy(forged.data() + 40, &checksum, 8);
  return forged;
}

}  // namespace

TEST_CASE("save then load continues exactly where the stream was") {
  Fixture f;
  auto a = recur::Session::Create(f.model);
  REQUIRE(a.ok());
  Run(*a, 0, 17);
  auto blob = a->SaveState(0);
  REQUIRE(blob.ok());
  const auto expected = Run(*a, 3, 20);

  auto b = recur::Session::Create(f.model);
  REQUIRE(b.ok());
  Run(*b, 9, 4);  // some other history, to be overwritten
  REQUIRE(b->LoadState(0, *blob).ok());
  CHECK(Run(*b, 3, 20) == expected);  // bitwise
}

TEST_CASE("a blob moves between streams of a batch") {
  Fixture f;
  auto single = recur::Session::Create(f.model);
  auto batched = recur::Session::Create(f.model, 3);
  REQUIRE(single.ok());
  REQUIRE(batched.ok());
  Run(*single, 2, 6);
  auto blob = single->SaveState(0);
  REQUIRE(blob.ok());
  REQUIRE(batched->LoadState(2, *blob).ok());
  std::vector<float> out(33), ref(11);
  int32_t tokens[3] = {1, 1, 1};
  REQUIRE(batched->StepTokens(tokens, 3, out.data()).ok());
  REQUIRE(single->StepTokens(tokens, 1, ref.data()).ok());
  for (int i = 0; i < 11; ++i) CHECK(out[22 + i] == doctest::Approx(ref[i]).epsilon(1e-6));
}

TEST_CASE("fork gives an independent copy") {
  Fixture f;
  auto a = recur::Session::Create(f.model);
  REQUIRE(a.ok());
  Run(*a, 1, 9);
  auto b = a->Fork();
  REQUIRE(b.ok());
  const auto from_a = Run(*a, 4, 10);
  CHECK(Run(*b, 4, 10) == from_a);
  Run(*a, 7, 3);  // advancing a does not move b
  auto c = recur::Session::Create(f.model);
  REQUIRE(c.ok());
  Run(*c, 1, 9);
  Run(*c, 4, 10);
  CHECK(Run(*b, 0, 5) == Run(*c, 0, 5));
}

TEST_CASE("a blob from another model is refused") {
  Fixture f;
  auto other_bytes = BuildTestModel(kTinyTokensConfig, 2);  // same shapes, other weights
  auto other = recur::Model::FromBuffer(other_bytes.data(), other_bytes.size());
  REQUIRE(other.ok());
  auto a = recur::Session::Create(f.model);
  auto b = recur::Session::Create(*other);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto blob = a->SaveState(0);
  REQUIRE(blob.ok());
  recur::Status s = b->LoadState(0, *blob);
  CHECK(s.code() == RECUR_INVALID_STATE);
  CHECK(s.message().find("another model") != std::string::npos);
}

TEST_CASE("blobs of plain and of compensated state sums do not mix, a fork keeps its kind") {
  Fixture f;
  recur_session_options options{};
  options.struct_size = sizeof(options);
  options.state_sums = RECUR_STATE_SUMS_PLAIN;
  auto plain = recur::Session::Create(f.model, options);
  auto compensated = recur::Session::Create(f.model);
  REQUIRE(plain.ok());
  REQUIRE(compensated.ok());
  Run(*plain, 2, 11);
  Run(*compensated, 2, 11);
  auto plain_blob = plain->SaveState(0);
  auto comp_blob = compensated->SaveState(0);
  REQUIRE(plain_blob.ok());
  REQUIRE(comp_blob.ok());
  recur::Status s = compensated->LoadState(0, *plain_blob);
  CHECK(s.code() == RECUR_INVALID_STATE);
  CHECK(s.message() == "state blob was saved by a session with plain state sums; this session "
                       "keeps compensated sums (state_sums must match)");
  s = plain->LoadState(0, *comp_blob);
  CHECK(s.code() == RECUR_INVALID_STATE);
  CHECK(s.message().find("saved by a session with compensated state sums; this session keeps "
                         "plain sums") != std::string::npos);
  // A plain blob resumes exactly in another plain session, and in a fork.
  auto resumed = recur::Session::Create(f.model, options);
  REQUIRE(resumed.ok());
  REQUIRE(resumed->LoadState(0, *plain_blob).ok());
  auto fork = plain->Fork();
  REQUIRE(fork.ok());
  const auto expected = Run(*plain, 5, 9);
  CHECK(Run(*resumed, 5, 9) == expected);
  CHECK(Run(*fork, 5, 9) == expected);
  auto fork_blob = fork->SaveState(0);
  REQUIRE(fork_blob.ok());
  CHECK(compensated->LoadState(0, *fork_blob).code() == RECUR_INVALID_STATE);

  // A model without running sums (softmax attention's KV cache) has one
  // layout, whichever state_sums: its blobs load into either kind.
  auto softmax_bytes = BuildTestModel(recur::impl::testing::kTinySoftmaxConfig, 1);
  auto softmax = recur::Model::FromBuffer(softmax_bytes.data(), softmax_bytes.size());
  REQUIRE(softmax.ok());
  auto sp = recur::Session::Create(*softmax, options);
  auto sc = recur::Session::Create(*softmax);
  REQUIRE(sp.ok());
  REQUIRE(sc.ok());
  auto softmax_blob = sp->SaveState(0);
  REQUIRE(softmax_blob.ok());
  CHECK(sc->LoadState(0, *softmax_blob).ok());
}

TEST_CASE("truncated, padded and corrupted blobs are refused, leaving the stream unchanged") {
  Fixture f;
  auto a = recur::Session::Create(f.model);
  REQUIRE(a.ok());
  Run(*a, 0, 5);
  auto blob = a->SaveState(0);
  REQUIRE(blob.ok());
  auto probe = a->Fork();
  REQUIRE(probe.ok());
  const auto expected = Run(*probe, 2, 4);

  std::vector<uint8_t> truncated(blob->begin(), blob->end() - 1);
  recur::Status s = a->LoadState(0, truncated);
  CHECK(s.code() == RECUR_INVALID_STATE);
  std::vector<uint8_t> header_only(blob->begin(), blob->begin() + 10);
  CHECK(a->LoadState(0, header_only).code() == RECUR_INVALID_STATE);
  CHECK(a->LoadState(0, {}).code() == RECUR_INVALID_ARGUMENT);  // null buffer
  std::vector<uint8_t> padded = *blob;
  padded.push_back(0);
  CHECK(a->LoadState(0, padded).code() == RECUR_INVALID_STATE);

  for (size_t i : {size_t(0), size_t(9), size_t(20), blob->size() / 2, blob->size() - 1}) {
    std::vector<uint8_t> bad = *blob;
    bad[i] ^= 0x10;
    s = a->LoadState(0, bad);
    CHECK_MESSAGE(s.code() == RECUR_INVALID_STATE, "flipped byte ", i);
  }
  std::vector<uint8_t> bad = *blob;
  bad[bad.size() - 3] ^= 0x01;
  s = a->LoadState(0, bad);
  CHECK(s.message().find("checksum") != std::string::npos);
  CHECK(Run(*a, 2, 4) == expected);  // every refusal left the stream as it was
}

TEST_CASE("a well-formed blob whose position passes the KV cache is refused") {
  // Found by fuzz_state_load: a blob stamped with a valid checksum but a
  // position beyond max_context made the next step write past the cache.
  auto bytes = BuildTestModel(recur::impl::testing::kTinySoftmaxFeaturesConfig, 1);
  auto model = recur::Model::FromBuffer(bytes.data(), bytes.size());
  REQUIRE(model.ok());
  recur_session_options options = recur_session_options_default();
  options.max_context = 16;
  auto a = recur::Session::Create(*model, options);
  REQUIRE(a.ok());
  const float frame[5] = {0.5f, -1, 0.25f, 2, 0};
  std::vector<float> out(12);
  for (int t = 0; t < 3; ++t) REQUIRE(a->StepFeatures(frame, 5, out.data()).ok());
  auto blob = a->SaveState(0);
  REQUIRE(blob.ok());
  for (uint64_t position : {uint64_t{17}, ~uint64_t{0}}) {
    CAPTURE(position);
    recur::Status s = a->LoadState(0, WithPosition(*blob, position));
    CHECK(s.code() == RECUR_INVALID_STATE);
    CHECK(s.message().find(position == 17 ? "exceeds the session's max_context of 16"
                                          : "past any stream's length") != std::string::npos);
  }
  // Exactly full is a valid state: the next step is refused, not run.
  auto full = recur::Session::Create(*model, options);
  REQUIRE(full.ok());
  for (int t = 0; t < 16; ++t) REQUIRE(full->StepFeatures(frame, 5, out.data()).ok());
  auto full_blob = full->SaveState(0);
  REQUIRE(full_blob.ok());
  REQUIRE(a->LoadState(0, *full_blob).ok());
  CHECK(a->StepFeatures(frame, 5, out.data()).code() == RECUR_OUT_OF_RANGE);
}

TEST_CASE("a blob from a session with another max_context, or passed with its buffer's capacity, says so") {
  auto bytes = BuildTestModel(recur::impl::testing::kTinySoftmaxFeaturesConfig, 1);
  auto model = recur::Model::FromBuffer(bytes.data(), bytes.size());
  REQUIRE(model.ok());
  recur_session_options options = recur_session_options_default();
  options.max_context = 16;
  auto small = recur::Session::Create(*model, options);
  options.max_context = 32;
  auto large = recur::Session::Create(*model, options);
  REQUIRE(small.ok());
  REQUIRE(large.ok());
  auto blob = small->SaveState(0);
  REQUIRE(blob.ok());
  recur::Status s = large->LoadState(0, *blob);
  CHECK(s.code() == RECUR_INVALID_STATE);
  CHECK(s.message().find("saved by a session with another max_context") != std::string::npos);

  std::vector<uint8_t> capacity = *blob;
  capacity.resize(blob->size() + 64);  // a larger buffer, its capacity passed as the size
  s = small->LoadState(0, capacity);
  CHECK(s.code() == RECUR_INVALID_STATE);
  CHECK(s.message().find("pass the blob's exact length") != std::string::npos);
}

TEST_CASE("a well-formed blob with an absurd position is refused, whatever the mixer") {
  // AFT-conv without learned positions must refuse position 2^64 - 1: its
  // next step would read far outside the bias table.
  for (const char* config :
       {recur::impl::testing::kTinyAftConvConfig, recur::impl::testing::kTinyFeaturesConfig}) {
    CAPTURE(config);
    auto bytes = BuildTestModel(config, 1);
    auto model = recur::Model::FromBuffer(bytes.data(), bytes.size());
    REQUIRE(model.ok());
    auto a = recur::Session::Create(*model);
    REQUIRE(a.ok());
    const recur_model_info info = model->info();
    const std::vector<float> frame(info.feature_width, 0.5f);
    std::vector<float> out(info.output_width);
    for (int t = 0; t < 3; ++t) REQUIRE(a->StepFeatures(frame.data(), frame.size(), out.data()).ok());
    auto blob = a->SaveState(0);
    REQUIRE(blob.ok());
    for (uint64_t position : {(uint64_t{1} << 62) + 1, ~uint64_t{0}}) {
      recur::Status s = a->LoadState(0, WithPosition(*blob, position));
      CHECK(s.code() == RECUR_INVALID_STATE);
      CHECK(s.message().find("past any stream's length") != std::string::npos);
    }
    CHECK(a->StepFeatures(frame.data(), frame.size(), out.data()).ok());
  }
}

TEST_CASE("save/load argument errors") {
  Fixture f;
  auto a = recur::Session::Create(f.model, 2);
  REQUIRE(a.ok());
  size_t size = 0;
  REQUIRE(recur_session_state_size(a->get(), &size) == RECUR_OK);
  CHECK(size == 48 + 2 * 2 * 2 * (8 * 8 + 8) * sizeof(float));  // sums + compensations
  std::vector<uint8_t> buffer(size);
  CHECK(recur_session_state_save(a->get(), 2, buffer.data(), size) == RECUR_OUT_OF_RANGE);
  CHECK(recur_session_state_save(a->get(), -1, buffer.data(), size) == RECUR_OUT_OF_RANGE);
  CHECK(recur_session_state_save(a->get(), 0, buffer.data(), size - 1) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("needs") != std::string::npos);
  CHECK(recur_session_state_save(a->get(), 0, nullptr, size) == RECUR_INVALID_ARGUMENT);
  REQUIRE(recur_session_state_save(a->get(), 1, buffer.data(), size) == RECUR_OK);
  CHECK(recur_session_state_load(a->get(), 5, buffer.data(), size) == RECUR_OUT_OF_RANGE);
  CHECK(recur_session_state_load(a->get(), 0, nullptr, size) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_session_state_load(a->get(), 0, buffer.data(), size) == RECUR_OK);
}
