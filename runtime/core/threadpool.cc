#include "core/threadpool.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "core/cpu_relax.h"

namespace recur::impl {
namespace {

// How long an idle worker spins on the generation before it sleeps: a few
// hundred µs (PAUSE takes 10-140 cycles), so the layers of a step, µs apart,
// find it awake and pay no system call; between steps of a slow caller it
// sleeps.
constexpr int kSpinsBeforeSleep = 1 << 14;
// The calling thread's wait for the workers yields its CPU after this many spins.
constexpr int kSpinsBeforeYield = 1 << 16;

}  // namespace

// Worker threads and the one call they share. ParallelFor publishes a call by
// bumping `generation` (the call's fields are written before, read after);
// each worker takes items from `next` until none is left, then adds itself to
// `finished`; the caller takes items too and returns once every worker has
// finished, so no worker touches a call's fields after ParallelFor returns.
// Sleep: a worker that spun kSpinsBeforeSleep times without a new generation
// counts itself in `sleeping` and waits on `wake`; the caller notifies only
// when someone sleeps (the seq_cst pairs generation/sleeping make sure a
// worker that is about to sleep sees the new generation, or is seen).
struct ThreadPool::Workers {
  std::vector<std::thread> threads;
  alignas(64) std::atomic<uint64_t> generation{0};
  alignas(64) std::atomic<size_t> next{0};
  alignas(64) std::atomic<size_t> finished{0};
  std::atomic<int> sleeping{0};
  Task task = nullptr;
  void* context = nullptr;
  size_t n = 0;
  bool stop = false;
  std::mutex mutex;
  std::condition_variable wake;

  void Drain() {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) task(context, i);
  }

  void Run() {
    uint64_t seen = 0;
    for (;;) {
      int spins = 0;
      while (generation.load(std::memory_order_seq_cst) == seen) {
        if (++spins < kSpinsBeforeSleep) {
          CpuRelax();
          continue;
        }
        std::unique_lock<std::mutex> lock(mutex);
        sleeping.fetch_add(1, std::memory_order_seq_cst);
        wake.wait(lock, [&] { return generation.load(std::memory_order_seq_cst) != seen; });
        sleeping.fetch_sub(1, std::memory_order_relaxed);
        spins = 0;
      }
      seen = generation.load(std::memory_order_acquire);
      if (stop) return;
      Drain();
      finished.fetch_add(1, std::memory_order_release);
    }
  }

  // Publishes a call: the fields first, then the generation.
  void Start(Task t, void* c, size_t count, bool stopping) {
    task = t;
    context = c;
    n = count;
    stop = stopping;
    next.store(0, std::memory_order_relaxed);
    finished.store(0, std::memory_order_relaxed);
    generation.fetch_add(1, std::memory_order_seq_cst);
    if (sleeping.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lock(mutex); }  // a sleeper is in wait(), not between check and wait
      wake.notify_all();
    }
  }

  void WaitFinished() {
    const size_t workers = threads.size();
    for (int spins = 0; finished.load(std::memory_order_acquire) != workers;) {
      if (++spins < kSpinsBeforeYield) {
        CpuRelax();
      } else {
        std::this_thread::yield();
      }
    }
  }
};

bool ThreadPool::Available() { return RECUR_HAVE_THREADS != 0; }

Status ThreadPool::Create(size_t threads, std::unique_ptr<ThreadPool>* out) {
  out->reset();
  if (threads == 0) threads = 1;
  std::unique_ptr<ThreadPool> pool(new ThreadPool(threads));
  if (threads > 1) {
#if RECUR_HAVE_THREADS
    auto* workers = new (std::nothrow) Workers;
    if (workers == nullptr) return OutOfMemory("cannot create a pool of %zu threads", threads);
    pool->workers_ = workers;  // freed by ~ThreadPool, with the threads started so far
    try {
      workers->threads.reserve(threads - 1);
      for (size_t i = 1; i < threads; ++i) workers->threads.emplace_back([workers] { workers->Run(); });
    } catch (const std::system_error& e) {
      return OutOfMemory("cannot start %zu worker threads: %s", threads - 1, e.what());
    } catch (const std::bad_alloc&) {
      return OutOfMemory("cannot create a pool of %zu threads", threads);
    }
#else
    return Unsupported("threads = %zu, but this build has no worker threads (built with "
                       "RECUR_WITH_THREADS off); use 1", threads);
#endif
  }
  *out = std::move(pool);
  return Status::Ok();
}

ThreadPool* ThreadPool::CallerOnly() {
  // Constructed in static storage and never destroyed: no exit handler to
  // register (__cxa_atexit may allocate), so even the first call, which may
  // come from a session on an arena, allocates nothing.
  alignas(ThreadPool) static unsigned char storage[sizeof(ThreadPool)];
  static ThreadPool* const pool = new (storage) ThreadPool(1);
  return pool;
}

ThreadPool::~ThreadPool() {
  if (workers_ == nullptr) return;
  workers_->Start(nullptr, nullptr, 0, /*stopping=*/true);
  for (std::thread& t : workers_->threads) t.join();
  delete workers_;
}

void ThreadPool::ParallelFor(size_t n, Task task, void* context) {
  if (workers_ == nullptr || n <= 1) {
    for (size_t i = 0; i < n; ++i) task(context, i);
    return;
  }
  workers_->Start(task, context, n, /*stopping=*/false);
  workers_->Drain();
  workers_->WaitFinished();
}

}  // namespace recur::impl
