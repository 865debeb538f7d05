// Lifetimes and files: the order of the free calls does not matter, and the
// documented contract for a model file that changes on disk while loaded
// (docs/reliability.md "Threat model"): replace it by rename, or load with
// RECUR_LOAD_NO_MMAP. Meaningful under the asan preset, where a use after
// free or a leak fails the test.
#include <cstdio>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "recur/recur.h"
#include "test_models.h"

namespace {

using recur::impl::testing::BuildTestModel;
using recur::impl::testing::kTinyTokensConfig;

void WriteFile(const std::string& path, const recur::impl::converter::AlignedBytes& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  REQUIRE(std::fclose(f) == 0);
}

std::vector<float> Steps(recur_session* s, int n) {
  std::vector<float> all, out(11);
  for (int32_t t = 0; t < n; ++t) {
    const int32_t token = t % 11;
    recur_input in{&token, nullptr, 1};
    REQUIRE(recur_session_step(s, &in, out.data()) == RECUR_OK);
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

recur_session* NewSession(const recur_model* model) {
  recur_session* s = nullptr;
  REQUIRE(recur_session_create(model, nullptr, &s) == RECUR_OK);
  return s;
}

}  // namespace

TEST_CASE("freeing the model before its sessions is safe: they keep it alive") {
  auto bytes = BuildTestModel(kTinyTokensConfig, 2);
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  recur_session* reference = NewSession(model);
  const std::vector<float> expected = Steps(reference, 20);
  recur_session_free(reference);

  recur_session* a = NewSession(model);
  recur_session* b = nullptr;
  REQUIRE(recur_session_fork(a, &b) == RECUR_OK);
  recur_model_free(model);  // the wrong order: sessions first is the usual one
  CHECK(Steps(a, 20) == expected);
  recur_session_free(a);
  CHECK(Steps(b, 20) == expected);  // the fork holds the model too
  recur_session_free(b);
}

TEST_CASE("a mapped model file replaced by rename keeps serving the old model") {
  const std::string path = "lifetime_test_model.recur", next = "lifetime_test_model.next";
  WriteFile(path, BuildTestModel(kTinyTokensConfig, 2));
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_file(path.c_str(), nullptr, &model) == RECUR_OK);
  recur_session* before = NewSession(model);
  const std::vector<float> expected = Steps(before, 20);
  recur_session_free(before);

  WriteFile(next, BuildTestModel(kTinyTokensConfig, 9));  // other weights
  REQUIRE(std::rename(next.c_str(), path.c_str()) == 0);
  recur_session* after = NewSession(model);
  CHECK(Steps(after, 20) == expected);
  recur_session_free(after);

  recur_model* reloaded = nullptr;  // a new load sees the new file
  REQUIRE(recur_model_load_file(path.c_str(), nullptr, &reloaded) == RECUR_OK);
  recur_session* fresh = NewSession(reloaded);
  CHECK(Steps(fresh, 20) != expected);
  recur_session_free(fresh);
  recur_model_free(reloaded);
  recur_model_free(model);
  std::remove(path.c_str());
}

TEST_CASE("a model loaded with RECUR_LOAD_NO_MMAP is unaffected by rewriting its file") {
  const std::string path = "lifetime_test_nommap.recur";
  const auto original = BuildTestModel(kTinyTokensConfig, 2);
  WriteFile(path, original);
  recur_load_options options = recur_load_options_default();
  options.flags = RECUR_LOAD_NO_MMAP;
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_file(path.c_str(), &options, &model) == RECUR_OK);
  recur_session* before = NewSession(model);
  const std::vector<float> expected = Steps(before, 20);
  recur_session_free(before);

  // In place, same size, other weights; then truncated to nothing.
  WriteFile(path, BuildTestModel(kTinyTokensConfig, 9));
  recur_session* rewritten = NewSession(model);
  CHECK(Steps(rewritten, 20) == expected);
  recur_session_free(rewritten);
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  std::fclose(f);
  recur_session* truncated = NewSession(model);
  CHECK(Steps(truncated, 20) == expected);
  recur_session_free(truncated);
  recur_model_free(model);
  std::remove(path.c_str());
}
