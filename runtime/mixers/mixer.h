// The sequence-mixer interface. One file per mixer implements it; the
// registry (registry.cc) maps the schema's Mixer union tag to its factory.
#ifndef RECUR_MIXERS_MIXER_H_
#define RECUR_MIXERS_MIXER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/threadpool.h"
#include "model/model.h"

namespace recur::impl {

class DenseRunner;  // backends/dense_runner.h

// What a step may use besides its inputs: the session's thread pool, the
// mixer's scratch (scratch_floats(...) floats, 64-byte aligned) and the
// session's GEMM backends: run every layer of CollectDense through
// RunDense(layer, ..., ctx.pool, ctx.dense) (backends/dense_op.h).
struct StepContext {
  ThreadPool* pool = nullptr;  // never null; one thread when the session has no workers
  float* scratch = nullptr;
  const DenseRunner* dense = nullptr;  // null: highway for every layer
  // (batch) positions each stream consumed before this Run; the session has
  // checked that positions[b] + steps <= max_context for mixers whose state
  // grows with the sequence.
  const uint64_t* positions = nullptr;
  size_t max_context = 0;
  // False: the session keeps plain running sums, and each state lacks the
  // mixer's compensation_floats() (SessionOptions::state_sums).
  bool compensated_sums = true;
  // (batch·steps, widest Mixer::shared_row_floats()) rows that live through
  // one pass over the blocks: a mixer that writes_shared_rows() leaves its
  // rows here for the later blocks' mixers that read them; null when no
  // mixer shares rows.
  float* shared_rows = nullptr;
};

class Mixer {
 public:
  virtual ~Mixer() = default;

  // False for an encoder form, which mixes whole sequences and has no
  // recurrent form: Run then sees every position of the sequence at once.
  virtual bool causal() const { return true; }
  // The most positions Run may see at once (an encoder with position-bound
  // parameters, e.g. Linformer's seq_len); 0 = unbounded.
  virtual size_t max_sequence() const { return 0; }
  // The stream positions the mixer has parameters for (a rotary table's
  // rows, §12); 0 = unbounded. The model's max_positions is the least of
  // these and its learned positions' rows.
  virtual size_t max_positions() const { return 0; }

  // Floats of recurrent state per stream (zero-initialised = empty history):
  // state_floats() + state_floats_per_position() × the session's max_context
  // (a KV cache grows with the sequence; fixed-state mixers return 0 here).
  virtual size_t state_floats() const = 0;
  virtual size_t state_floats_per_position() const { return 0; }
  // The last compensation_floats() of state_floats() carry the Kahan
  // compensations of running sums; a session with plain sums leaves them
  // out (StepContext::compensated_sums).
  virtual size_t compensation_floats() const { return 0; }
  // Floats of scratch Run needs for `batch` streams × `steps` positions on
  // a pool of `threads` threads, with up to `context` positions of history
  // (the session's max_context).
  virtual size_t scratch_floats(size_t batch, size_t steps, size_t threads,
                                size_t context) const = 0;

  // Floats per row the mixer shares with the mixers of later blocks in the
  // same call (RWKV-7's value of the first layer, docs/attention-math.md
  // §16): it writes them (writes_shared_rows()) or reads what the last
  // earlier writer wrote; the loader checks that a reader has a writer of
  // the same width before it. 0: none.
  virtual size_t shared_row_floats() const { return 0; }
  virtual bool writes_shared_rows() const { return false; }

  // Appends the mixer's dense layers (addresses stable for the model's
  // lifetime), so that the session can prepare a GEMM backend for each.
  // Layers not listed run on highway.
  virtual void CollectDense(std::vector<const DenseView*>* /*out*/) const {}

  // Advances `batch` streams by `steps` positions each: steps == 1 is the
  // RNN step; more is the chunked-parallel form, which leaves the same state
  // (to floating-point tolerance).
  //   x: (batch, steps, d_model) input rows; y: (batch, steps, d_model)
  //   mixer output rows. y may alias x: a mixer reads all of x before it
  //   writes y.
  //   states[b]: stream b's state for this layer (see state_floats())
  virtual void Run(const float* x, size_t batch, size_t steps, float* const* states,
                   const StepContext& ctx, float* y) const = 0;
};

// Builds a mixer from its schema table (`table` is the union member), with
// the tensor resolver for weights. `layer` names the block in messages.
using MixerFactory = Status (*)(const void* table, const std::string& layer, uint32_t d_model,
                                TensorResolver* tensors, std::unique_ptr<Mixer>* out);

struct MixerEntry {
  fb::Mixer tag;
  const char* name;
  MixerFactory create;
};

// The entry for `tag`, or null when this runtime does not know the tag. Its
// `create` is null when the mixer was left out of this build (RECUR_MIXERS).
const MixerEntry* FindMixer(fb::Mixer tag);

}  // namespace recur::impl

#endif  // RECUR_MIXERS_MIXER_H_
