#include "core/threadpool.h"

#include <new>

#if RECUR_HAVE_PTHREADPOOL
#include <pthreadpool.h>
#endif

namespace recur::impl {

bool ThreadPool::Available() { return RECUR_HAVE_PTHREADPOOL != 0; }

Status ThreadPool::Create(size_t threads, std::unique_ptr<ThreadPool>* out) {
  out->reset();
  if (threads == 0) threads = 1;
  std::unique_ptr<ThreadPool> pool(new ThreadPool(threads));
  if (threads > 1) {
#if RECUR_HAVE_PTHREADPOOL
    pool->impl_ = pthreadpool_create(threads);
    if (pool->impl_ == nullptr) return OutOfMemory("cannot create a pool of %zu threads", threads);
#else
    return Unsupported("threads = %zu, but this build has no thread pool (built without "
                       "pthreadpool); use 1", threads);
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
#if RECUR_HAVE_PTHREADPOOL
  if (impl_ != nullptr) pthreadpool_destroy(static_cast<pthreadpool_t>(impl_));
#endif
}

void ThreadPool::ParallelFor(size_t n, Task task, void* context) {
#if RECUR_HAVE_PTHREADPOOL
  if (impl_ != nullptr && n > 1) {
    pthreadpool_parallelize_1d(static_cast<pthreadpool_t>(impl_),
                               task, context, n, 0);
    return;
  }
#endif
  for (size_t i = 0; i < n; ++i) task(context, i);
}

}  // namespace recur::impl
