// Which GEMM backend runs each dense layer of a session, chosen once at
// session creation (backends/gemm_backend.h). The one place where layers
// meet their prepared ops: the session and the mixers call RunDense with the
// session's runner, which looks the layer up by its DenseView address.
#ifndef RECUR_BACKENDS_DENSE_RUNNER_H_
#define RECUR_BACKENDS_DENSE_RUNNER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/gemm_backend.h"
#include "core/status.h"
#include "core/threadpool.h"

namespace recur::impl {

// A dense layer as a forward pass uses it.
struct DenseLayerUse {
  const DenseView* view;  // address stable for the model's lifetime
  bool accumulate;        // the layer runs as y += ...
};

class DenseRunner {
 public:
  // Prepares every layer for the plan every layer shares (`plan`: its rows,
  // the planned row counts, are the session's full calls: batch for Step,
  // batch × chunk for Prefill, in any order, 0 dropped; its accumulate is
  // set per layer; its pool runs every op). With `forced` null or empty,
  // each (layer shape, row count) gets the backend that runs it fastest,
  // timed here on scratch inputs (results are cached per process by shape,
  // row count, threads and plan), among the backends whose Run does not
  // allocate (so not onednn) and, without plan.pack_weights, that do not
  // always copy weights; otherwise the named backend runs every layer it
  // supports and highway the rest.
  static Status Create(const std::vector<DenseLayerUse>& layers, const char* forced,
                       backends::DensePlan plan, std::unique_ptr<DenseRunner>* out);

  // y = x·Wᵀ + b (+ y) for `rows` rows of layer `d` with its chosen op: the
  // one planned for the smallest planned count ≥ rows, else the largest.
  // Layers the runner does not know run on highway.
  void Run(const DenseView& d, const float* x, size_t rows, float* y, bool accumulate) const;

  // "rows 64: onednn x33 highway x2; rows 4096: ...; weight copies 25.8 MB;
  // weights from memory" (layers per backend, then memory_bytes() when
  // nonzero, then whether the layers were prepared as read from memory).
  std::string Summary() const;
  // Bytes the prepared ops hold besides the model (packed weights, scratch).
  size_t memory_bytes() const;

 private:
  struct Choice {
    size_t rows;
    backends::PreparedDense* op;
    const backends::DenseBackend* backend;
  };
  struct Layer {
    std::vector<Choice> choices;  // by rows, ascending
    std::vector<std::unique_ptr<backends::PreparedDense>> owned;
  };
  ThreadPool* pool_ = nullptr;
  kernels::Int8Activations int8_ = kernels::Int8Activations::kFloat;
  bool from_memory_ = false;
  std::vector<size_t> rows_;
  std::vector<const DenseView*> order_;  // layers in model order, for Summary
  std::unordered_map<const DenseView*, Layer> layers_;
  // Run's lookup: every layer's choices by view address, sorted (a binary
  // search over one small array touches fewer lines than the hash map's
  // buckets and nodes, which the weights a step streams evict).
  struct IndexEntry {
    const DenseView* view;
    const Choice* choices;
    size_t count;
  };
  std::vector<IndexEntry> index_;
};

}  // namespace recur::impl

#endif  // RECUR_BACKENDS_DENSE_RUNNER_H_
