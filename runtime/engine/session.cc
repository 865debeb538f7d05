#include "engine/session.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "backends/dense_op.h"
#include "core/platform.h"
#include "hwy/aligned_allocator.h"
#include "kernels/dense/dense.h"
#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"

namespace recur::impl {
namespace {

size_t RoundUp16(size_t n) { return (n + 15) / 16 * 16; }

// Readable floats past the end of every buffer a dense layer may read: the
// XNNPACK backend reads up to XNN_EXTRA_BYTES (16) past its input.
constexpr size_t kTailFloats = 16;

// Encode's per-call buffers: hwy::AllocateAligned, reporting failure
// instead of returning null silently.
Status AllocateFloats(size_t n, hwy::AlignedFreeUniquePtr<float[]>* out) {
  *out = hwy::AllocateAligned<float>(n + kTailFloats);
  if (!*out) return OutOfMemory("cannot allocate %zu floats for a session", n);
  return Status::Ok();
}

// Floats of the widest FFN or head row (ffn_ and Encode's buffer hold rows this
// wide): linear1's outputs, and for a GLU the gated d_ff after them.
size_t WidestFfnRow(const Model& m) {
  size_t widest = m.output_width;
  for (const BlockView& b : m.blocks) {
    widest = std::max<size_t>(widest, b.ffn.linear1.out + (b.ffn.glu ? b.ffn.linear2.in : 0));
  }
  return widest;
}

// Floats per row of the rows mixers share across blocks (Mixer::shared_row_floats).
size_t SharedRowFloats(const Model& m) {
  size_t widest = 0;
  for (const BlockView& b : m.blocks) widest = std::max(widest, b.mixer->shared_row_floats());
  return widest;
}

// A step that reads more weights than this is bound by streaming them.
constexpr uint64_t kStreamedWeightBytes = uint64_t{2} << 20;
// Past this, prefill chunks of 256 rows pay for their scratch: paper_mnist
// (25 MB) prefills 3-4% faster; speech_digits (2.2 MB) no faster, with
// 1.1 MiB more resident memory.
constexpr uint64_t kLargeChunkWeightBytes = uint64_t{8} << 20;
// Past this, packing keeps f16 and bf16 layers in panels of their own values
// (DensePlan::narrow_panels): half the bytes to read, which wins once the
// panels come from memory (recur-bench, 1 thread, Zen 4: 8 streams of a 0.4B
// F16 RWKV-7 87 → 68 ms, 4 streams of an 11 MB F16 one 650 → 500 µs, of the
// 13 MB bf16 paper-MNIST 1.1 → 0.7 ms); below it f32 panels stay in cache,
// where widening costs more than it saves (4 streams of a 1.5 MB F16 RWKV-7
// 67 → 78-90 µs).
constexpr uint64_t kNarrowPanelWeightBytes = uint64_t{8} << 20;
}  // namespace

size_t DefaultPrefillMin(uint64_t step_weight_bytes) {
  return step_weight_bytes > kStreamedWeightBytes ? 2 : 8;
}

size_t DefaultPrefillChunk(size_t batch, uint64_t step_weight_bytes) {
  constexpr size_t kPositions = 64, kStreamedRows = 256;
  if (step_weight_bytes <= kLargeChunkWeightBytes) return kPositions;
  return std::max(kPositions, (kStreamedRows + batch - 1) / batch);
}

size_t DefaultMaxContext(const Model& model) {
  return model.max_positions != 0 ? model.max_positions : 4096;
}

namespace {
// Floats of one stream's state for `mixer` when it may hold `context` positions,
// with or without the compensations of its running sums.
size_t LayerStateFloats(const Mixer& mixer, size_t context, bool compensated_sums) {
  return mixer.state_floats() - (compensated_sums ? 0 : mixer.compensation_floats()) +
         mixer.state_floats_per_position() * context;
}

// One stream's state for block `b`: its mixer's, its token shift's, then its
// FFN's token mix's.
size_t BlockStateFloats(const BlockView& b, size_t context, bool compensated_sums) {
  return LayerStateFloats(*b.mixer, context, compensated_sums) + b.token_shift.state_floats() +
         b.ffn.token_mix_floats();
}

// The positions a stream may hold: the requested max_context (checked
// against MaxContextBound by CheckOptions), or the default capped at what
// the mixers' parameters cover.
size_t ResolveMaxContext(const Model& model, size_t requested) {
  if (requested != 0) return requested;
  const size_t bound = MaxContextBound(model);
  const size_t context = DefaultMaxContext(model);
  return bound != 0 ? std::min(context, bound) : context;
}
}  // namespace

size_t MaxContextBound(const Model& model, size_t* block) {
  size_t bound = 0;
  for (size_t l = 0; l < model.blocks.size(); ++l) {
    const Mixer& mixer = *model.blocks[l].mixer;
    if (mixer.causal() && mixer.max_sequence() != 0 &&
        (bound == 0 || mixer.max_sequence() < bound)) {
      bound = mixer.max_sequence();
      if (block != nullptr) *block = l;
    }
  }
  return bound;
}

void SessionDeleter::operator()(Session* session) const {
  if (session == nullptr) return;
  if (session->in_arena_) {
    session->~Session();  // its memory is the caller's arena
  } else {
    delete session;
  }
}

Status Session::CheckOptions(const Model* model, const SessionOptions& options) {
  if (model == nullptr) return InvalidArgument("model is null");
  if (options.batch == 0 || options.batch > (1u << 16)) {
    return InvalidArgument("batch must be in [1, 65536], got %zu", options.batch);
  }
  if (options.threads == 0 || options.threads > 256) {
    return InvalidArgument("threads must be in [1, 256], got %zu", options.threads);
  }
  if (options.weight_packing > 2) {
    return InvalidArgument("weight_packing must be 0 (auto), 1 (off) or 2 (on), got %u",
                           options.weight_packing);
  }
  if (options.state_sums > 1) {
    return InvalidArgument("state_sums must be 0 (compensated) or 1 (plain), got %u",
                           options.state_sums);
  }
  if (options.int8_activations > 3) {
    return InvalidArgument(
        "int8_activations must be 0 (auto), 1 (float), 2 (quantized) or 3 (blocks), got %u",
        options.int8_activations);
  }
  if (options.max_context > (size_t{1} << 24)) {
    return InvalidArgument("max_context must be at most %zu (0 = default), got %zu",
                           size_t{1} << 24, options.max_context);
  }
  size_t block = 0;
  const size_t bound = MaxContextBound(*model, &block);
  if (bound != 0 && options.max_context > bound) {
    return InvalidArgument("max_context %zu is more than blocks.%zu holds: its parameters cover "
                           "%zu positions (max_length)", options.max_context, block, bound);
  }
  if (options.prefill_chunk > 4096) {
    return InvalidArgument("prefill_chunk must be in [1, 4096] (0 = default), got %zu",
                           options.prefill_chunk);
  }
  return Status::Ok();
}

// What an arena session cannot do: every byte it uses must be planned, so
// no worker threads (their stacks), no backend with memory of its own, no
// packed weight copies (the DenseRunner that holds them lives on the heap).
Status Session::CheckArenaOptions(const SessionOptions& options) {
  if (options.threads != 1) {
    return Unsupported("a session on an arena runs on the calling thread only: threads must be "
                       "1, got %zu (worker threads need memory of their own)", options.threads);
  }
  const char* backend = options.backend == nullptr ? "" : options.backend;
  if (std::strcmp(backend, "") != 0 && std::strcmp(backend, "auto") != 0 &&
      std::strcmp(backend, "highway") != 0) {
    return Unsupported("a session on an arena runs its dense layers on highway; backend \"%s\" "
                       "allocates memory of its own", backend);
  }
  if (options.weight_packing == 2) {
    return Unsupported("a session on an arena does not pack weights (weight_packing on): a "
                       "packed copy would come from the heap");
  }
  return Status::Ok();
}

Status Session::Create(const Model* model, const SessionOptions& options, SessionPtr* out) {
  out->reset();
  RECUR_RETURN_IF_ERROR(CheckOptions(model, options));
  SessionPtr s(new Session(model, options));
  if (options.threads > 1) {
    RECUR_RETURN_IF_ERROR(ThreadPool::Create(options.threads, &s->owned_pool_));
    s->pool_ = s->owned_pool_.get();
  }
  Arena counter;
  s->Carve(&counter);
  const size_t bytes = counter.bytes();
  void* block = bytes == std::numeric_limits<size_t>::max() ? nullptr : std::malloc(bytes);
  if (block == nullptr) {
    return OutOfMemory("cannot allocate %zu bytes for a session's state and buffers", bytes);
  }
  s->owned_block_ = {block, std::free};
  Arena arena(block, bytes);
  s->Carve(&arena);
  s->InitBuffers();
  RECUR_RETURN_IF_ERROR(s->PrepareDense());
  *out = std::move(s);
  return Status::Ok();
}

Status Session::CountArena(const Model* model, const SessionOptions& options, Arena* counter) {
  RECUR_RETURN_IF_ERROR(CheckOptions(model, options));
  RECUR_RETURN_IF_ERROR(CheckArenaOptions(options));
  counter->Allocate<Session>(1);
  Session probe(model, options);
  probe.in_arena_ = true;
  probe.Carve(counter);
  return Status::Ok();
}

Status Session::CreateInArena(const Model* model, const SessionOptions& options, Arena* arena,
                              SessionPtr* out) {
  out->reset();
  RECUR_RETURN_IF_ERROR(CheckOptions(model, options));
  RECUR_RETURN_IF_ERROR(CheckArenaOptions(options));
  Arena rest = *arena;  // try on a copy: a failed create leaves the arena as it was
  if (void* place = rest.Allocate<Session>(1)) {
    SessionPtr s(new (place) Session(model, options));
    s->in_arena_ = true;
    s->Carve(&rest);  // writes nothing: only pointers into the arena
    if (rest.fits()) {
      s->InitBuffers();
      *arena = rest;
      *out = std::move(s);
      return Status::Ok();
    }
  }
  Arena counter;
  RECUR_RETURN_IF_ERROR(CountArena(model, options, &counter));
  return OutOfMemory("the arena is too small for this session, which needs %zu bytes "
                     "(recur_session_arena_size)", counter.bytes());
}

Session::Session(const Model* model, const SessionOptions& options)
    : model_(model),
      weight_bytes_(EstimateStepCost(*model).weight_bytes),
      batch_(options.batch),
      threads_(options.threads),
      pool_(ThreadPool::CallerOnly()),
      chunk_(options.prefill_chunk == 0 ? DefaultPrefillChunk(options.batch, weight_bytes_)
                                        : options.prefill_chunk),
      prefill_min_(options.prefill_min == 0 ? DefaultPrefillMin(weight_bytes_)
                                            : options.prefill_min),
      backend_(options.backend == nullptr ? "" : options.backend),
      weight_packing_(options.weight_packing),
      int8_activations_(options.int8_activations),
      compensated_sums_(options.state_sums == 0),
      max_context_(ResolveMaxContext(*model, options.max_context)),
      grows_(model->state_floats_per_position > 0) {
  const size_t widest =
      std::max<size_t>({model->feature_width, model->d_model, WidestFfnRow(*model)});
  max_steps_ = std::numeric_limits<size_t>::max() / sizeof(float) / widest / batch_;
  for (const BlockView& b : model->blocks) causal_ = causal_ && b.mixer->causal();
}

void Session::Carve(Arena* arena) {
  const Model& m = *model_;
  const size_t rows = batch_ * chunk_;
  const size_t max_ff = WidestFfnRow(m);
  size_t max_scratch = 1, state_floats = 0;
  for (const BlockView& b : m.blocks) {
    max_scratch = std::max(max_scratch, b.mixer->scratch_floats(batch_, 1, threads_, max_context_));
    max_scratch =
        std::max(max_scratch, b.mixer->scratch_floats(batch_, chunk_, threads_, max_context_));
    state_floats += BlockStateFloats(b, max_context_, compensated_sums_);
  }
  state_stride_ = RoundUp16(state_floats);
  // Every float buffer has kTailFloats readable floats past its end.
  auto floats = [&](size_t n) { return arena->Allocate<float>(n + kTailFloats); };
  layer_offsets_ = arena->Allocate<size_t>(m.blocks.size() + 1);
  state_ = floats(batch_ * state_stride_);
  positions_ = arena->Allocate<uint64_t>(batch_);
  x_ = floats(rows * m.d_model);
  h_ = floats(rows * m.d_model);
  ffn_ = floats(rows * max_ff);
  scratch_ = floats(max_scratch);
  if (const size_t shared = SharedRowFloats(m); shared != 0) shared_ = floats(rows * shared);
  if (m.reversible) x2_ = floats(rows * m.stream_width());
  layer_states_ = arena->Allocate<float*>(batch_);
  tokens_stage_ = arena->Allocate<int32_t>(m.input_kind == fb::InputKind::Tokens ? rows : 0);
  features_stage_ = floats(rows * m.feature_width);
  if (!in_arena_) return;
  // The kernels' scratch for every dense layer at Step's and Prefill's row
  // counts (backends/dense_runner.h lists the same layers; mixers' own inner
  // products that need more take the kernels' no-scratch path).
  kernels::DenseScratch need;
  for (const DenseLayerUse& use : m.dense_layers) {
    const DenseView& d = *use.view;
    for (size_t r : {batch_, rows}) {
      const kernels::DenseScratch n = kernels::DenseScratchNeed(r, d.in, d.out, d.type);
      need.widen_floats = std::max(need.widen_floats, n.widen_floats);
      need.panel_floats = std::max(need.panel_floats, n.panel_floats);
    }
  }
  dense_scratch_ = need;
  dense_scratch_.widen = need.widen_floats == 0 ? nullptr : floats(need.widen_floats);
  dense_scratch_.panel = need.panel_floats == 0 ? nullptr : floats(need.panel_floats);
}

void Session::InitBuffers() {
  const Model& m = *model_;
  layer_offsets_[0] = 0;
  for (size_t l = 0; l < m.blocks.size(); ++l) {
    layer_offsets_[l + 1] =
        layer_offsets_[l] + BlockStateFloats(m.blocks[l], max_context_, compensated_sums_);
  }
  std::memset(state_, 0, batch_ * state_stride_ * sizeof(float));
  std::fill(positions_, positions_ + batch_, 0);
  std::fill(layer_states_, layer_states_ + batch_, nullptr);
}

Status Session::PrepareDense() {
  // Full calls: Step (batch rows) and Prefill's whole chunks (batch × chunk).
  backends::DensePlan plan;
  plan.rows = {batch_, batch_ * chunk_};
  plan.pool = pool_;
  plan.pack_weights =
      weight_packing_ == 2 || (weight_packing_ == 0 && batch_ >= backends::kPackedMinRows);
  plan.narrow_panels = weight_packing_ == 0 && weight_bytes_ > kNarrowPanelWeightBytes;
  plan.pack_for_steps = weight_packing_ != 1;
  plan.int8 = static_cast<kernels::Int8Activations>(int8_activations_);
  plan.weights_from_memory = weight_bytes_ > platform::LastLevelCacheBytes();
  return DenseRunner::Create(model_->dense_layers, backend_.c_str(), std::move(plan), &dense_);
}

Status Session::CheckInput(const int32_t* tokens, const float* features, size_t count,
                           size_t steps) const {
  const Model& m = *model_;
  // batch × steps × width must not wrap, or a wrapped product could equal
  // `count`. The bound leaves room for the rows Encode allocates.
  if (steps > max_steps_) {
    return InvalidArgument("%zu steps x %zu streams is too large an input", steps, batch_);
  }
  const size_t elements = batch_ * steps;
  if (m.input_kind == fb::InputKind::Tokens) {
    if (tokens == nullptr) return InvalidArgument("this model takes token ids; input.tokens is null");
    if (features != nullptr) return InvalidArgument("this model takes token ids, not features");
    if (count != elements) {
      return InvalidArgument("input has %zu token ids, expected %zu streams x %zu steps = %zu",
                             count, batch_, steps, elements);
    }
    for (size_t i = 0; i < elements; ++i) {
      if (tokens[i] < 0 || uint32_t(tokens[i]) >= m.vocab_size) {
        // A one-element call has no step to name: callers number their own.
        if (steps == 1) {
          return OutOfRange("stream %zu: token id %d is outside the vocabulary [0, %u)", i,
                            tokens[i], m.vocab_size);
        }
        return OutOfRange("stream %zu: token id %d at step %zu is outside the vocabulary [0, %u)",
                          i / steps, tokens[i], i % steps, m.vocab_size);
      }
    }
  } else {
    if (features == nullptr) {
      return InvalidArgument("this model takes feature frames; input.features is null");
    }
    if (tokens != nullptr) return InvalidArgument("this model takes feature frames, not tokens");
    if (count != elements * m.feature_width) {
      return InvalidArgument("input has %zu feature values, expected %zu streams x %zu steps x "
                             "%u features = %zu", count, batch_, steps, m.feature_width,
                             elements * m.feature_width);
    }
    for (size_t i = 0; i < count; ++i) {
      if (!std::isfinite(features[i])) {
        const size_t e = i / m.feature_width;
        const char* what = std::isnan(features[i]) ? "NaN" : "infinite";
        if (steps == 1) {
          return InvalidArgument("stream %zu: feature %zu is %s", e, i % m.feature_width, what);
        }
        return InvalidArgument("stream %zu: feature %zu at step %zu is %s", e / steps,
                               i % m.feature_width, e % steps, what);
      }
    }
  }
  if (grows_) {
    for (size_t b = 0; b < batch_; ++b) {
      // Overflow-safe form of positions + steps > max_context (a position is
      // never above max_context: LoadState checks blobs).
      if (steps > max_context_ - std::min<uint64_t>(positions_[b], max_context_)) {
        const bool at_bound = max_context_ == MaxContextBound(m);
        return OutOfRange("stream %zu is at position %llu; %zu more steps pass the session's "
                          "max_context of %zu positions (the KV cache is full); reset the stream%s",
                          b, static_cast<unsigned long long>(positions_[b]), steps, max_context_,
                          at_bound ? " (the model's max_length: no session holds more)"
                                   : " or create the session with a larger max_context");
      }
    }
  }
  if (m.max_positions != 0) {
    for (size_t b = 0; b < batch_; ++b) {
      if (steps > m.max_positions - std::min<uint64_t>(positions_[b], m.max_positions)) {
        return OutOfRange("stream %zu is at position %llu; %zu more steps pass the %s, which "
                          "end at %u; reset the stream", b,
                          static_cast<unsigned long long>(positions_[b]), steps,
                          m.max_positions_source.c_str(), m.max_positions);
      }
    }
  }
  return Status::Ok();
}

void Session::Embed(const Workspace& ws, const int32_t* tokens, const float* features,
                    size_t steps) {
  const Model& m = *model_;
  const size_t d = m.d_model;
  const size_t rows = batch_ * steps;
  float* x = ws.x;
  if (m.input_kind == fb::InputKind::Tokens) {
    for (size_t r = 0; r < rows; ++r) {
      kernels::DecodeWeightRows(m.embedding, size_t(tokens[r]), 1, x + r * d);
    }
  } else if (m.input_projection.weight != nullptr) {
    RunDense(m.input_projection, features, rows, x, false, pool_, dense_.get());
  } else {
    std::memcpy(x, features, rows * d * sizeof(float));
  }
  if (m.positions != nullptr) {
    for (size_t r = 0; r < rows; ++r) {
      const size_t position = ws.positions[r / steps] + r % steps;
      kernels::Add(x + r * d, m.positions + position * d, x + r * d, d);
    }
  }
  if (!m.sinusoid_freq.empty()) {
    pool_->ParallelRanges(rows, 16, [&](size_t first, size_t last) {
      for (size_t r = first; r < last; ++r) {
        AddSinusoidPositions(m, ws.positions[r / steps] + r % steps, x + r * d);
      }
    });
  }
  if (m.input_norm.gamma != nullptr) Norm(m.input_norm, x, x, rows);
}

void Session::Norm(const NormView& norm, const float* x, float* y, size_t rows) {
  NormRows(norm, x, y, rows, model_->d_model);
}

void Session::NormRows(const NormView& norm, const float* x, float* y, size_t rows, size_t d) {
  // The scale norms' ‖x‖₂·c: c = 1, or 1/√d_model (ScaleNormRms).
  const float c = norm.kind == fb::NormKind::ScaleNormRms
                      ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)))
                      : 1.0f;
  pool_->ParallelRanges(rows, 16, [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {
      const float* xr = x + r * d;
      float* yr = y + r * d;
      switch (norm.kind) {
        case fb::NormKind::RmsNorm:
          kernels::RmsNorm(xr, norm.gamma, norm.eps, yr, d);
          break;
        case fb::NormKind::ScaleNorm:
        case fb::NormKind::ScaleNormRms:  // g·x / max(c·‖x‖₂, eps)
          kernels::Scale(xr,
                         norm.gamma[0] / std::max(c * std::sqrt(kernels::Dot(xr, xr, d)), norm.eps),
                         yr, d);
          break;
        default:
          kernels::LayerNorm(xr, norm.gamma, norm.beta, norm.eps, yr, d);
      }
    }
  });
}

// y += linear2(act(linear1(x))); GLU: y += linear2(act(a) ⊙ b), [a | b] = linear1(x).
void Session::RunFeedForward(const Workspace& ws, const FeedForwardView& ffn, const float* x,
                             float* y, size_t rows) {
  float* hidden = ws.ffn;
  RunDense(ffn.linear1, x, rows, hidden, false, pool_, dense_.get());
  const bool gelu = ffn.activation == fb::Activation::Gelu;
  const bool silu = ffn.activation == fb::Activation::Silu;
  if (ffn.glu) {
    // (rows, 2·d_ff) → the gated (rows, d_ff) after them in ws.ffn (WidestFfnRow).
    const size_t d_ff = ffn.linear2.in;
    float* gated = hidden + rows * 2 * d_ff;
    pool_->ParallelRanges(rows, 16, [&](size_t first, size_t last) {
      for (size_t r = first; r < last; ++r) {
        const float* a = hidden + r * 2 * d_ff;
        float* g = gated + r * d_ff;
        if (gelu) {
          kernels::Gelu(a, g, d_ff);
        } else if (silu) {
          for (size_t i = 0; i < d_ff; ++i) g[i] = a[i] / (1.0f + std::exp(-a[i]));
        } else {
          kernels::Relu(a, g, d_ff);
          if (ffn.activation == fb::Activation::ReluSquared) {
            for (size_t i = 0; i < d_ff; ++i) g[i] *= g[i];
          }
        }
        for (size_t i = 0; i < d_ff; ++i) g[i] *= a[d_ff + i];
      }
    });
    RunDense(ffn.linear2, gated, rows, y, true, pool_, dense_.get());
    return;
  }
  pool_->ParallelRanges(rows * ffn.linear1.out, kElementsPerTask, [&](size_t first, size_t last) {
    if (gelu) {
      kernels::Gelu(hidden + first, hidden + first, last - first);
    } else if (silu) {
      for (size_t i = first; i < last; ++i) hidden[i] /= 1.0f + std::exp(-hidden[i]);
    } else {
      kernels::Relu(hidden + first, hidden + first, last - first);
    }
    if (ffn.activation == fb::Activation::ReluSquared) {
      for (size_t i = first; i < last; ++i) hidden[i] *= hidden[i];
    }
  });
  RunDense(ffn.linear2, hidden, rows, y, true, pool_, dense_.get());
}

void Session::AddResidual(const float* delta, float* x, size_t n) {
  pool_->ParallelRanges(n, kElementsPerTask, [&](size_t first, size_t last) {
    kernels::Add(x + first, delta + first, x + first, last - first);
  });
}

size_t Session::CarriesAt(const BlockView& block, size_t layer) const {
  return layer_offsets_[layer] + LayerStateFloats(*block.mixer, max_context_, compensated_sums_);
}

void Session::ShiftTokens(const Workspace& ws, const BlockView& block, size_t layer, size_t steps,
                          bool ffn, float* h) {
  const TokenShiftView& shift = block.token_shift;
  const size_t d = model_->d_model;
  // The previous position's shift-1 features (§13).
  const size_t carry_at = CarriesAt(block, layer) + (ffn ? shift.carried : 0);
  pool_->ParallelRanges(batch_, 1, [&](size_t first, size_t last) {
    for (size_t b = first; b < last; ++b) {
      float* rows = h + b * steps * d;
      float* carry = shift.carried != 0 ? ws.state + b * state_stride_ + carry_at : nullptr;
      for (const TokenShiftView::Segment& s : shift.moved) {
        if (s.shift == 1 && carry != nullptr) {
          // Each row takes the carried features and leaves its own: the last
          // row's stay for the next call.
          for (size_t t = 0; t < steps; ++t) {
            std::swap_ranges(rows + t * d + s.offset, rows + t * d + s.offset + s.width, carry);
          }
          carry += s.width;
        } else if (s.shift == 1) {  // an encoder block: the whole sequence is here
          for (size_t t = steps; t-- > 1;) {
            std::memcpy(rows + t * d + s.offset, rows + (t - 1) * d + s.offset,
                        s.width * sizeof(float));
          }
          std::fill(rows + s.offset, rows + s.offset + s.width, 0.0f);
        } else {
          for (size_t t = 0; t + 1 < steps; ++t) {
            std::memcpy(rows + t * d + s.offset, rows + (t + 1) * d + s.offset,
                        s.width * sizeof(float));
          }
          float* last_row = rows + (steps - 1) * d + s.offset;
          std::fill(last_row, last_row + s.width, 0.0f);
        }
      }
    }
  });
}

void Session::MixFfnTokens(const Workspace& ws, const BlockView& block, size_t layer,
                           size_t steps, float* h) {
  const size_t d = model_->d_model;
  // h₋₁, after the token shift's carries (recur.fbs FeedForward.token_mix).
  const size_t carry_at = CarriesAt(block, layer) + block.token_shift.state_floats();
  const float* mu = block.ffn.token_mix;
  pool_->ParallelRanges(batch_, 1, [&](size_t first, size_t last) {
    for (size_t b = first; b < last; ++b) {
      float* carry = ws.state + b * state_stride_ + carry_at;
      float* rows = h + b * steps * d;
      // Each row mixes in the carried one and leaves its own, unmixed, for
      // the next: the last row's stays for the next call.
      for (size_t t = 0; t < steps; ++t) {
        float* row = rows + t * d;
        for (size_t i = 0; i < d; ++i) {
          const float own = row[i];
          row[i] = own + (carry[i] - own) * mu[i];
          carry[i] = own;
        }
      }
    }
  });
}

void Session::RunReversibleBlock(const Workspace& ws, const BlockView& block, size_t layer,
                                 size_t steps) {
  const size_t rows = batch_ * steps;
  float* h = ws.h;
  for (size_t b = 0; b < batch_; ++b) {
    layer_states_[b] = ws.state + b * state_stride_ + layer_offsets_[layer];
  }
  const StepContext ctx{pool_,        ws.scratch,   dense_.get(),     ws.positions,
                        max_context_, compensated_sums_, ws.shared};
  // y1 = x1 + mixer(shift(norm1(x2))); y2 = x2 + ffn(shift(norm2(y1))), shift: §13 when present
  Norm(block.norm1, ws.x2, h, rows);
  if (block.token_shift.present) ShiftTokens(ws, block, layer, steps, false, h);
  block.mixer->Run(h, batch_, steps, layer_states_, ctx, h);
  AddResidual(h, ws.x, rows * model_->d_model);
  Norm(block.norm2, ws.x, h, rows);
  if (block.token_shift.ffn) ShiftTokens(ws, block, layer, steps, true, h);
  if (block.ffn.token_mix != nullptr) MixFfnTokens(ws, block, layer, steps, h);
  RunFeedForward(ws, block.ffn, h, ws.x2, rows);
}

void Session::RunBlock(const Workspace& ws, const BlockView& block, size_t layer, size_t steps) {
  const size_t rows = batch_ * steps;
  const size_t n = rows * model_->d_model;
  float* x = ws.x;
  float* h = ws.h;
  for (size_t b = 0; b < batch_; ++b) {
    layer_states_[b] = ws.state + b * state_stride_ + layer_offsets_[layer];
  }
  const StepContext ctx{pool_,        ws.scratch,   dense_.get(),     ws.positions,
                        max_context_, compensated_sums_, ws.shared};
  if (model_->norm_placement == fb::NormPlacement::Pre) {
    // x += mixer(shift(norm1(x))); x += ffn(shift(norm2(x))), shift: §13 when present
    Norm(block.norm1, x, h, rows);
    if (block.token_shift.present) ShiftTokens(ws, block, layer, steps, false, h);
    block.mixer->Run(h, batch_, steps, layer_states_, ctx, h);
    AddResidual(h, x, n);
    if (!block.ffn.present()) return;
    Norm(block.norm2, x, h, rows);
    if (block.token_shift.ffn) ShiftTokens(ws, block, layer, steps, true, h);
    if (block.ffn.token_mix != nullptr) MixFfnTokens(ws, block, layer, steps, h);
    RunFeedForward(ws, block.ffn, h, x, rows);
  } else {
    // x = norm1(x + mixer(x)); x = norm2(x + ffn(x))
    block.mixer->Run(x, batch_, steps, layer_states_, ctx, h);
    AddResidual(h, x, n);
    Norm(block.norm1, x, x, rows);
    if (!block.ffn.present()) return;
    pool_->ParallelRanges(n, kElementsPerTask, [&](size_t first, size_t last) {
      std::memcpy(h + first, x + first, (last - first) * sizeof(float));
    });
    RunFeedForward(ws, block.ffn, x, h, rows);
    Norm(block.norm2, h, x, rows);
  }
}

void Session::Head(float* x, float* out, size_t rows) {
  const Model& m = *model_;
  const size_t d = m.stream_width();
  if (m.final_norm.gamma != nullptr) NormRows(m.final_norm, x, x, rows, d);
  if (m.head.weight == nullptr) {
    std::memcpy(out, x, rows * d * sizeof(float));
    return;
  }
  RunDense(m.head, x, rows, out, false, pool_, dense_.get());
  const size_t w = m.output_width;
  for (size_t r = 0; r < rows; ++r) {
    if (m.head_activation == fb::HeadActivation::Softmax) {
      kernels::Softmax(out + r * w, out + r * w, w);
    } else if (m.head_activation == fb::HeadActivation::LogSoftmax) {
      kernels::LogSoftmax(out + r * w, out + r * w, w);
    }
  }
}

// x2 (rows, 2·d_model wide) ← [x1 | x2] row by row, in place: from the last
// row down, each row's destination lies past every row still to be read.
void Session::ConcatStreams(const float* x1, float* x2, size_t rows) {
  const size_t d = model_->d_model;
  for (size_t r = rows; r-- > 0;) {
    std::memmove(x2 + 2 * r * d + d, x2 + r * d, d * sizeof(float));
    std::memcpy(x2 + 2 * r * d, x1 + r * d, d * sizeof(float));
  }
}

void Session::Forward(const Workspace& ws, const int32_t* tokens, const float* features,
                      size_t steps, float* out) {
  const kernels::ScopedDenseScratch bind(in_arena_ ? &dense_scratch_ : nullptr);
  Embed(ws, tokens, features, steps);
  const size_t n = batch_ * steps * model_->d_model;
  if (model_->reversible) {  // x1 = x2 = the input
    pool_->ParallelRanges(n, kElementsPerTask, [&](size_t first, size_t last) {
      std::memcpy(ws.x2 + first, ws.x + first, (last - first) * sizeof(float));
    });
  }
  for (size_t l = 0; l < model_->blocks.size(); ++l) {
    if (!model_->reversible) {
      RunBlock(ws, model_->blocks[l], l, steps);
      if (observer_ != nullptr) observer_(observer_context_, l, ws.x, batch_, steps);
      continue;
    }
    RunReversibleBlock(ws, model_->blocks[l], l, steps);
    if (observer_ != nullptr) {  // x1 + x2, in h (free between blocks)
      pool_->ParallelRanges(n, kElementsPerTask, [&](size_t first, size_t last) {
        kernels::Add(ws.x + first, ws.x2 + first, ws.h + first, last - first);
      });
      observer_(observer_context_, l, ws.h, batch_, steps);
    }
  }
  float* stream = ws.x;
  if (model_->concat_streams) {
    ConcatStreams(ws.x, ws.x2, batch_ * steps);
    stream = ws.x2;
  } else if (model_->reversible) {
    AddResidual(ws.x2, ws.x, n);  // the output stream x1 + x2
  }
  if (out != nullptr) Head(stream, out, batch_ * steps);
}

Status Session::CheckCausal(const char* call) const {
  if (causal_) return Status::Ok();
  for (size_t l = 0; l < model_->blocks.size(); ++l) {
    if (!model_->blocks[l].mixer->causal()) {
      return Unsupported("%s: blocks.%zu is non-causal (an encoder): it has no recurrent form; "
                         "run whole sequences with recur_session_encode", call, l);
    }
  }
  return Status::Ok();
}

Status Session::Step(const int32_t* tokens, const float* features, size_t count, float* out) {
  if (out == nullptr) return InvalidArgument("output buffer is null");
  RECUR_RETURN_IF_ERROR(CheckCausal("step"));
  RECUR_RETURN_IF_ERROR(CheckInput(tokens, features, count, 1));
  if (features != nullptr) {
    // Into the session's padded buffer: backends may read past the end.
    std::memcpy(features_stage_, features, count * sizeof(float));
    features = features_stage_;
  }
  Forward(StreamWorkspace(), tokens, features, 1, out);
  for (size_t b = 0; b < batch_; ++b) ++positions_[b];
  return Status::Ok();
}

Status Session::Encode(size_t steps, const int32_t* tokens, const float* features, size_t count,
                       float* out) {
  if (out == nullptr) return InvalidArgument("output buffer is null");
  if (in_arena_) {
    return Unsupported("encode: a session on an arena has no memory for whole sequences (encode "
                       "allocates batch x steps rows per call); use a session without an arena");
  }
  if (steps == 0) return Status::Ok();
  // Keeps every per-call size product (batch ≤ 2^16 streams × steps rows ×
  // mixer widths) far from size_t overflow.
  constexpr size_t kMaxEncodeSteps = size_t{1} << 24;
  if (steps > kMaxEncodeSteps) {
    return OutOfRange("encode takes at most %zu positions per call, got %zu", kMaxEncodeSteps,
                      steps);
  }
  // Checked against fresh streams: positions start at 0.
  const std::vector<uint64_t> kept(positions_, positions_ + batch_);
  std::fill(positions_, positions_ + batch_, 0);
  Status checked = CheckInput(tokens, features, count, steps);
  std::copy(kept.begin(), kept.end(), positions_);
  RECUR_RETURN_IF_ERROR(checked);
  const Model& m = *model_;
  for (size_t l = 0; l < m.blocks.size(); ++l) {
    const size_t most = m.blocks[l].mixer->max_sequence();
    if (most != 0 && steps > most) {
      return OutOfRange("blocks.%zu takes sequences of at most %zu positions (its mixer's "
                        "seq_len or max_length); got %zu",
                        l, most, steps);
    }
  }
  const size_t rows = batch_ * steps;
  const size_t max_ff = WidestFfnRow(m);
  size_t max_scratch = 1;
  for (const BlockView& b : m.blocks) {
    max_scratch = std::max(max_scratch, b.mixer->scratch_floats(batch_, steps, threads_, max_context_));
  }
  hwy::AlignedFreeUniquePtr<float[]> x, h, ffn, scratch, state, padded_features;
  if (features != nullptr) {
    // A padded copy: backends may read past the end of their input.
    RECUR_RETURN_IF_ERROR(AllocateFloats(count, &padded_features));
    std::memcpy(padded_features.get(), features, count * sizeof(float));
    features = padded_features.get();
  }
  RECUR_RETURN_IF_ERROR(AllocateFloats(rows * m.d_model, &x));
  RECUR_RETURN_IF_ERROR(AllocateFloats(rows * m.d_model, &h));
  RECUR_RETURN_IF_ERROR(AllocateFloats(rows * max_ff, &ffn));
  RECUR_RETURN_IF_ERROR(AllocateFloats(max_scratch, &scratch));
  hwy::AlignedFreeUniquePtr<float[]> shared;
  if (const size_t width = SharedRowFloats(m); width != 0) {
    RECUR_RETURN_IF_ERROR(AllocateFloats(rows * width, &shared));
  }
  RECUR_RETURN_IF_ERROR(AllocateFloats(batch_ * state_stride_, &state));
  std::memset(state.get(), 0, batch_ * state_stride_ * sizeof(float));
  const std::vector<uint64_t> zero_positions(batch_, 0);
  hwy::AlignedFreeUniquePtr<float[]> x2;
  if (m.reversible) RECUR_RETURN_IF_ERROR(AllocateFloats(rows * m.stream_width(), &x2));
  const Workspace ws{x.get(),     h.get(), ffn.get(), scratch.get(), state.get(),
                     zero_positions.data(), x2.get(), shared.get()};
  Forward(ws, tokens, features, steps, out);
  return Status::Ok();
}

Status Session::Prefill(size_t steps, const int32_t* tokens, const float* features, size_t count,
                        float* out) {
  if (steps == 0) return Status::Ok();  // an empty prompt
  RECUR_RETURN_IF_ERROR(CheckCausal("prefill"));
  RECUR_RETURN_IF_ERROR(CheckInput(tokens, features, count, steps));
  const Model& m = *model_;
  const size_t width = m.feature_width, out_width = m.output_width;
  // Short inputs: the step path is faster than a chunk of a few rows.
  const size_t chunk = steps < prefill_min_ ? 1 : chunk_;
  for (size_t t0 = 0; t0 < steps; t0 += chunk) {
    const size_t n = std::min(chunk, steps - t0);
    // Gather positions [t0, t0 + n) of every stream into (batch, n) rows.
    for (size_t b = 0; b < batch_; ++b) {
      if (tokens != nullptr) {
        std::memcpy(&tokens_stage_[b * n], tokens + b * steps + t0, n * sizeof(int32_t));
      } else {
        std::memcpy(features_stage_ + b * n * width, features + (b * steps + t0) * width,
                    n * width * sizeof(float));
      }
    }
    float* rows_out = out == nullptr ? nullptr : ffn_;
    Forward(StreamWorkspace(), tokens != nullptr ? tokens_stage_ : nullptr,
            tokens != nullptr ? nullptr : features_stage_, n, rows_out);
    for (size_t b = 0; b < batch_; ++b) positions_[b] += n;
    if (out != nullptr) {
      for (size_t b = 0; b < batch_; ++b) {
        std::memcpy(out + (b * steps + t0) * out_width, rows_out + b * n * out_width,
                    n * out_width * sizeof(float));
      }
    }
  }
  return Status::Ok();
}

Status Session::Reset(int stream) {
  if (stream < -1 || stream >= static_cast<int>(batch_)) {
    return OutOfRange("stream %d is out of range: the session has %zu streams (-1 = all)", stream,
                      batch_);
  }
  const size_t first = stream < 0 ? 0 : size_t(stream);
  const size_t last = stream < 0 ? batch_ : first + 1;
  std::memset(state_ + first * state_stride_, 0, (last - first) * state_stride_ * sizeof(float));
  std::fill(positions_ + first, positions_ + last, 0);
  return Status::Ok();
}

Status Session::Fork(SessionPtr* out) const {
  out->reset();
  if (in_arena_) {
    return Unsupported("fork: a session on an arena cannot allocate its copy; create a session "
                       "on another arena and load a saved state into it (state_save/state_load)");
  }
  SessionOptions options{batch_,         threads_,     chunk_,
                         prefill_min_,   backend_.c_str(), weight_packing_,
                         max_context_,   compensated_sums_ ? 0u : 1u, int8_activations_};
  SessionPtr s;
  RECUR_RETURN_IF_ERROR(Create(model_, options, &s));
  std::memcpy(s->state_, state_, batch_ * state_stride_ * sizeof(float));
  std::copy(positions_, positions_ + batch_, s->positions_);
  *out = std::move(s);
  return Status::Ok();
}

}  // namespace recur::impl
