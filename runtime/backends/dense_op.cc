#include "backends/dense_op.h"

#include <algorithm>

namespace recur::impl {
namespace {

// Fewer output rows than this per thread costs more in synchronisation than
// it saves; 64 also keeps AVX-512's 32-row panels whole.
constexpr size_t kMinRowsPerTask = 64;

struct DenseTask {
  const DenseView* d;
  const float* x;
  size_t rows;
  float* y;
  bool accumulate;
  kernels::Int8Activations int8;
  size_t block;  // output features per task, a multiple of 16

  static void Run(void* context, size_t i) {
    const auto* t = static_cast<const DenseTask*>(context);
    const size_t begin = i * t->block;
    const size_t end = std::min<size_t>(begin + t->block, t->d->out);
    if (begin >= end) return;
    kernels::Dense(t->x, t->d->in, t->rows, t->d->Rows(begin, end), t->y + begin, t->d->out,
                   t->accumulate, t->int8);
  }
};

}  // namespace

void RunDense(const DenseView& d, const float* x, size_t rows, float* y, bool accumulate,
              ThreadPool* pool, kernels::Int8Activations int8) {
  const size_t tasks = pool == nullptr ? 1 : std::min(pool->threads(), d.out / kMinRowsPerTask);
  if (tasks <= 1) {
    kernels::Dense(x, d.in, rows, d, y, d.out, accumulate, int8);
    return;
  }
  const size_t block = (d.out + tasks - 1) / tasks;
  DenseTask task{&d, x, rows, y, accumulate, int8, (block + 15) / 16 * 16};
  pool->ParallelFor(tasks, &DenseTask::Run, &task);
}

}  // namespace recur::impl
