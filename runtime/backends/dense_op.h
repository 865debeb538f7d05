// Dense layers of a model, run over the session's thread pool.
#ifndef RECUR_BACKENDS_DENSE_OP_H_
#define RECUR_BACKENDS_DENSE_OP_H_

#include <cstddef>

#include "backends/gemm_backend.h"
#include "core/threadpool.h"

namespace recur::impl {

// y = x·Wᵀ + b (+ y when accumulating) for `rows` rows; x: (rows, d.in),
// y: (rows, d.out), both dense. Output features are split into contiguous
// blocks, one per thread, so each thread streams its own slice of W (and,
// for int8 weights run as int8 says, quantises x itself).
void RunDense(const DenseView& d, const float* x, size_t rows, float* y, bool accumulate,
              ThreadPool* pool,
              kernels::Int8Activations int8 = kernels::Int8Activations::kFloat);

class DenseRunner;  // backends/dense_runner.h

// As above, through the backend `runner` chose for layer `d` (the session's
// runner); highway when runner is null or does not know the layer.
void RunDense(const DenseView& d, const float* x, size_t rows, float* y, bool accumulate,
              ThreadPool* pool, const DenseRunner* runner);

}  // namespace recur::impl

#endif  // RECUR_BACKENDS_DENSE_OP_H_
