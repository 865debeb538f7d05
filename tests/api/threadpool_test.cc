// The intra-op pool (core/threadpool.h): every item runs once per call and
// before the call returns, back to back (workers spinning) and after a pause
// (workers asleep), and pools come and go. Part of the concurrency tests, so
// the tsan preset runs it under ThreadSanitizer.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "core/threadpool.h"
#include "recur/recur.h"

namespace recur::impl {
namespace {

// Runs ParallelFor over n items and checks each ran exactly once, and that
// the writes of every item are visible when it returns.
void CheckOnce(ThreadPool* pool, size_t n) {
  std::vector<std::atomic<int>> runs(n);
  std::vector<size_t> values(n, 0);
  struct Context {
    std::vector<std::atomic<int>>* runs;
    std::vector<size_t>* values;
  } context{&runs, &values};
  pool->ParallelFor(
      n,
      [](void* c, size_t i) {
        auto* ctx = static_cast<Context*>(c);
        (*ctx->runs)[i].fetch_add(1, std::memory_order_relaxed);
        (*ctx->values)[i] = i * 3 + 1;  // plain writes the caller reads after
      },
      &context);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += runs[i].load() != 1 || values[i] != i * 3 + 1;
  CHECK(wrong == 0);
}

TEST_CASE("ThreadPool: every item once, back to back and after the workers sleep") {
  if (!ThreadPool::Available()) {
    std::unique_ptr<ThreadPool> pool;
    const Status s = ThreadPool::Create(2, &pool);
    CHECK(s.code() == StatusCode::kUnsupported);
    CHECK(s.message().find("threads") != std::string::npos);
    CHECK(recur_max_threads() == 1);
    return;
  }
  CHECK(recur_max_threads() > 1);
  for (size_t threads : {1, 2, 3, 8}) {
    CAPTURE(threads);
    std::unique_ptr<ThreadPool> pool;
    REQUIRE(ThreadPool::Create(threads, &pool).ok());
    CHECK(pool->threads() == threads);
    for (int round = 0; round < 200; ++round) {
      for (size_t n : {0, 1, 2, 3, 7, 64}) CheckOnce(pool.get(), n);
    }
    // Past the spinning: the workers sleep and the next call wakes them.
    for (int round = 0; round < 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      CheckOnce(pool.get(), 5);
    }
    // ParallelRanges covers [0, n) with disjoint ranges.
    std::vector<std::atomic<int>> hits(1000);
    pool->ParallelRanges(1000, 16, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    });
    size_t wrong = 0;
    for (auto& h : hits) wrong += h.load() != 1;
    CHECK(wrong == 0);
  }
  // Pools destroyed while their workers spin, and while they sleep.
  for (int i = 0; i < 20; ++i) {
    std::unique_ptr<ThreadPool> pool;
    REQUIRE(ThreadPool::Create(4, &pool).ok());
    CheckOnce(pool.get(), 9);
    if (i % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace
}  // namespace recur::impl
