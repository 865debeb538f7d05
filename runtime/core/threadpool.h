// Intra-op threads: one pool per session, sized by the session options.
// Worker threads of its own that spin between calls before they sleep, so
// the µs-apart layers of a one-stream step pay no system call to wake them
// (docs/design.md, "Threads"); a build without threads (RECUR_WITH_THREADS
// off) has one thread, the caller's.
#ifndef RECUR_CORE_THREADPOOL_H_
#define RECUR_CORE_THREADPOOL_H_

#include <algorithm>
#include <cstddef>
#include <memory>
#include <type_traits>

#include "core/status.h"

namespace recur::impl {

// The grain of element-wise passes (activations, residual adds): fewer floats
// per thread cost more in wake-ups than they save, so passes up to this many
// floats (a batch-1 step's vectors of the shipped models) stay on the calling
// thread while a prefill chunk's are split.
inline constexpr size_t kElementsPerTask = 4096;

class ThreadPool {
 public:
  // `threads` counts the calling thread; 1 means no worker threads.
  static Status Create(size_t threads, std::unique_ptr<ThreadPool>* out);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t threads() const { return threads_; }

  // Calls task(context, i) for every i in [0, n), spread over the pool's
  // threads (the calling thread among them); returns when all calls are
  // done. Not reentrant, and one caller at a time.
  using Task = void (*)(void* context, size_t i);
  void ParallelFor(size_t n, Task task, void* context);

  // Calls fn(worker, i) for every i in [0, n), item i on worker i mod
  // threads(), in parallel: each worker may use scratch indexed by `worker`.
  template <typename F>
  void ForEachStrided(size_t n, F&& fn) {
    auto work = [&](size_t w) {
      for (size_t i = w; i < n; i += threads_) fn(w, i);
    };
    ParallelFor(threads_, [](void* c, size_t w) { (*static_cast<decltype(work)*>(c))(w); },
                &work);
  }

  // Splits [0, n) into one contiguous range per thread (none shorter than
  // `grain`) and calls fn(begin, end) for each, in parallel.
  template <typename F>
  void ParallelRanges(size_t n, size_t grain, F&& fn) {
    const size_t chunks = std::min(threads_, grain == 0 ? n : (n + grain - 1) / grain);
    if (chunks <= 1) {
      if (n > 0) fn(size_t{0}, n);
      return;
    }
    struct Context {
      std::remove_reference_t<F>* fn;
      size_t n, per;
    } context{&fn, n, (n + chunks - 1) / chunks};
    ParallelFor(chunks, [](void* c, size_t i) {
      auto* ctx = static_cast<Context*>(c);
      const size_t begin = i * ctx->per;
      const size_t end = std::min(ctx->n, begin + ctx->per);
      if (begin < end) (*ctx->fn)(begin, end);
    }, &context);
  }

  // A pool of one thread, the caller's, shared by everyone (it holds no
  // state, so concurrent use from many threads is safe); never allocates.
  static ThreadPool* CallerOnly();

  // Whether this build can run more than one thread.
  static bool Available();

 private:
  struct Workers;
  explicit ThreadPool(size_t threads) : threads_(threads) {}
  size_t threads_;
  Workers* workers_ = nullptr;  // null for one thread
};

}  // namespace recur::impl

#endif  // RECUR_CORE_THREADPOOL_H_
