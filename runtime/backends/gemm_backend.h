// GEMM providers behind one small vtable. A backend turns a dense layer
// (a DenseView) into a prepared op once, at session creation, for the
// row counts the session will use; the session then runs the op with no
// allocation. highway (our own kernels) is always compiled in and supports
// every weight type; xnnpack (f32 weights) and onednn (f32, bf16, int8) are
// optional.
#ifndef RECUR_BACKENDS_GEMM_BACKEND_H_
#define RECUR_BACKENDS_GEMM_BACKEND_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/threadpool.h"
#include "kernels/dense/dense.h"

namespace recur::impl {

// A dense layer: weights point into the model bytes (no copy).
using DenseView = kernels::DenseWeights;

}  // namespace recur::impl

namespace recur::impl::backends {

// From this many rows the packed GEMM beats the mat-vec row tiles
// (benchmarks/dense_bench: 4x256->1024 packed 13.8 µs vs 16.4): highway runs
// packed ops from here, and sessions pack weights automatically from this batch.
inline constexpr size_t kPackedMinRows = 4;

// How a prepared op will be used.
struct DensePlan {
  // Row counts the op will run most often (sorted, ascending, non-empty);
  // a backend may specialise for them. Any other count must still work.
  std::vector<size_t> rows;
  bool accumulate = false;     // Run is called with this accumulate value
  ThreadPool* pool = nullptr;  // the session's pool (never null); Run uses it
  // The op may keep a re-laid-out copy of the weights (highway packs only
  // when this is set; backends that always copy are skipped by the
  // automatic choice when it is not).
  bool pack_weights = false;
  // Packed f16 and bf16 layers keep their own values in the panels (half of
  // f32's bytes; where kernels::DenseNarrowPanelsPreferred) rather than f32:
  // faster steps of a few streams, which read the weights from memory, and
  // GEMMs of many rows ~5% slower (docs/performance.md "Packed weights").
  bool narrow_panels = false;
  // The op may keep copies laid out for calls of one row (a step of one
  // stream) where the CPU runs those faster: int4 layers as row panels
  // (kernels::PackDenseI4Panels: 0.5625 bytes per weight, where
  // kernels::DenseI4PanelsPreferred), q4_k layers as block-quantised tiles
  // (kernels::PackDenseBlockQ8Tiles: the layer's bytes, where
  // kernels::DenseBlockQ8TileBytes is not 0).
  bool pack_for_steps = false;
  // How highway runs int8 weights (other backends ignore it).
  kernels::Int8Activations int8 = kernels::Int8Activations::kFloat;
  // The session's weights exceed the last-level cache, so every layer comes
  // from DRAM at each step: highway runs its layers with
  // DenseWeights::from_memory (one-row calls stream small layers too).
  bool weights_from_memory = false;
};

class PreparedDense {
 public:
  virtual ~PreparedDense() = default;
  // y = x·Wᵀ + b (+ y when accumulate): x (rows, in), y (rows, out), dense.
  // x must allow XNN_EXTRA_BYTES (16) readable bytes past its last element
  // (the session pads every buffer it passes). Does not allocate.
  virtual void Run(const float* x, size_t rows, float* y, bool accumulate) = 0;
  // Bytes this op holds besides the model (packed weights, scratch).
  virtual size_t memory_bytes() const { return 0; }
};

class DenseBackend {
 public:
  virtual ~DenseBackend() = default;
  virtual const char* name() const = 0;
  virtual bool Supports(const DenseView& d) const = 0;
  // True when Run makes heap allocations (oneDNN's execute builds its
  // argument map on the heap each call). The automatic choice skips such
  // backends (docs/design.md principle 3); naming one in the session options
  // still uses it.
  virtual bool allocates_in_run() const { return false; }
  // True when Prepare always copies the weights into a layout of its own
  // (whatever DensePlan::pack_weights says).
  virtual bool always_copies_weights() const { return false; }
  virtual Status Prepare(const DenseView& d, const DensePlan& plan,
                         std::unique_ptr<PreparedDense>* out) const = 0;
};

// The compiled-in backends; highway first.
const std::vector<const DenseBackend*>& CompiledBackends();
// The backend called `name`, or null when this build does not have it.
const DenseBackend* FindBackend(const char* name);
// "highway, xnnpack, onednn": the compiled-in names, for messages.
std::string CompiledBackendNames();

// Defined by each backend file (xnnpack.cc and onednn.cc only when built).
const DenseBackend* HighwayBackend();
const DenseBackend* XnnpackBackend();
const DenseBackend* OnednnBackend();

}  // namespace recur::impl::backends

#endif  // RECUR_BACKENDS_GEMM_BACKEND_H_
