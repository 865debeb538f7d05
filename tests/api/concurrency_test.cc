// One model shared by many sessions on many threads (recur.h: a model is
// immutable and thread-safe; a session belongs to one thread at a time).
// Every thread's results must equal the same work done on one thread, bit
// for bit. Built as its own executable so the TSan preset can run it alone.
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "recur/recur.h"
#include "test_models.h"

namespace {

using recur::impl::testing::BuildTestModel;

constexpr int kThreads = 8;
constexpr uint32_t kBatch = 2;

// What one thread does with its own session: steps, a chunked prefill, a
// state round trip between streams, a fork, a refused call (its message must
// be this thread's), and more steps. Returns every output, or an empty vector
// and a reason on the first unexpected status.
std::vector<float> Workload(const recur_model* model, int seed, std::string* failure) {
  recur_model_info info{};
  info.struct_size = sizeof(info);
  recur_model_get_info(model, &info);
  const size_t width = info.output_width;
  const int32_t vocab = int32_t(info.vocab_size);
  std::vector<float> all;
  auto fail = [&](const char* what) {
    *failure = std::string(what) + ": " + recur_last_error();
    return std::vector<float>{};
  };
  // Two intra-op threads per session where the build has worker threads (the
  // tsan preset's has, instrumented; the minimal preset's has not).
  recur_session_options options = recur_session_options_default();
  options.batch = kBatch;
  options.threads = 2;
  recur_session* s = nullptr;
  recur_status status = recur_session_create(model, &options, &s);
  if (status == RECUR_UNSUPPORTED) {
    options.threads = 1;
    status = recur_session_create(model, &options, &s);
  }
  if (status != RECUR_OK) return fail("create");
  std::vector<float> out(kBatch * 12 * width);
  auto tokens = [&](int t) {
    std::vector<int32_t> v(kBatch * 12);
    for (size_t i = 0; i < v.size(); ++i) v[i] = int32_t((seed * 7 + t * 3 + i * 5) % vocab);
    return v;
  };
  bool ok = true;
  for (int t = 0; t < 20 && ok; ++t) {
    auto v = tokens(t);
    recur_input in{v.data(), nullptr, kBatch};
    ok = recur_session_step(s, &in, out.data()) == RECUR_OK;
    all.insert(all.end(), out.begin(), out.begin() + kBatch * width);
  }
  auto prompt = tokens(100);
  recur_input chunk{prompt.data(), nullptr, prompt.size()};
  ok = ok && recur_session_prefill(s, 12, &chunk, out.data()) == RECUR_OK;
  all.insert(all.end(), out.begin(), out.end());
  size_t blob_size = 0;
  ok = ok && recur_session_state_size(s, &blob_size) == RECUR_OK;
  std::vector<unsigned char> blob(blob_size);
  ok = ok && recur_session_state_save(s, 0, blob.data(), blob.size()) == RECUR_OK &&
       recur_session_state_load(s, 1, blob.data(), blob.size()) == RECUR_OK;
  recur_session* fork = nullptr;
  ok = ok && recur_session_fork(s, &fork) == RECUR_OK;
  if (!ok) {
    recur_session_free(s);
    return fail("step, prefill, state or fork");
  }
  const int32_t bad[kBatch] = {vocab, 0};
  recur_input refused{bad, nullptr, kBatch};
  const std::string expected = "token id " + std::to_string(vocab);
  if (recur_session_step(s, &refused, out.data()) != RECUR_OUT_OF_RANGE ||
      std::string(recur_last_error()).find(expected) == std::string::npos) {
    *failure = std::string("refused step: message '") + recur_last_error() + "'";
    ok = false;
  }
  for (recur_session* session : {s, fork}) {
    for (int t = 0; t < 10 && ok; ++t) {
      auto v = tokens(200 + t);
      recur_input in{v.data(), nullptr, kBatch};
      ok = recur_session_step(session, &in, out.data()) == RECUR_OK;
      all.insert(all.end(), out.begin(), out.begin() + kBatch * width);
    }
  }
  recur_session_free(fork);
  recur_session_free(s);
  if (!ok && failure->empty()) return fail("steps after the fork");
  return ok ? all : std::vector<float>{};
}

void CheckConcurrentEqualsSerial(const char* config) {
  auto bytes = BuildTestModel(config, 3);
  REQUIRE(!bytes.empty());
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);

  // All threads start together, so that session creation (which measures and
  // caches backend choices process-wide) races as well as the stepping.
  std::vector<std::vector<float>> results(kThreads);
  std::vector<std::string> failures(kThreads);
  std::atomic<int> waiting{kThreads};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      waiting.fetch_sub(1);
      while (waiting.load() > 0) std::this_thread::yield();
      results[i] = Workload(model, i, &failures[i]);
    });
  }
  for (auto& t : threads) t.join();

  for (int i = 0; i < kThreads; ++i) {
    CAPTURE(i);
    std::string failure;
    const std::vector<float> serial = Workload(model, i, &failure);
    REQUIRE_MESSAGE(failures[i].empty(), failures[i]);
    REQUIRE_MESSAGE(failure.empty(), failure);
    REQUIRE(results[i].size() == serial.size());
    CHECK(std::memcmp(results[i].data(), serial.data(), serial.size() * sizeof(float)) == 0);
  }
  recur_model_free(model);
}

}  // namespace

TEST_CASE("sessions on many threads share one model and equal serial runs") {
  SUBCASE("linear attention") {
    CheckConcurrentEqualsSerial(recur::impl::testing::kTinyTokensConfig);
  }
  SUBCASE("mixed blocks") { CheckConcurrentEqualsSerial(recur::impl::testing::kTinyMixedConfig); }
}

TEST_CASE("sessions on many threads share a model loaded from a file") {
  // The file form maps the bytes; the mapping is shared read-only.
  auto bytes = BuildTestModel(recur::impl::testing::kTinySlidingWindowConfig, 5);
  REQUIRE(!bytes.empty());
  const std::string path = "concurrency_test_model.recur";
  FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_file(path.c_str(), nullptr, &model) == RECUR_OK);
  std::vector<std::vector<float>> results(kThreads);
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { results[i] = Workload(model, i % 2, &failures[i]); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    CAPTURE(i);
    REQUIRE_MESSAGE(failures[i].empty(), failures[i]);
    CHECK(results[i] == results[i % 2]);
  }
  recur_model_free(model);
  std::remove(path.c_str());
}
