#include "engine/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/dense_op.h"
#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"

namespace recur {
namespace {

size_t RoundUp16(size_t n) { return (n + 15) / 16 * 16; }

// Readable floats past the end of every buffer a dense layer may read: the
// XNNPACK backend reads up to XNN_EXTRA_BYTES (16) past its input.
constexpr size_t kTailFloats = 16;

// hwy::AllocateAligned, reporting failure instead of returning null silently.
Status AllocateFloats(size_t n, hwy::AlignedFreeUniquePtr<float[]>* out) {
  *out = hwy::AllocateAligned<float>(n + kTailFloats);
  if (!*out) return OutOfMemory("cannot allocate %zu floats for a session", n);
  return Status::Ok();
}

}  // namespace

size_t DefaultPrefillMin(uint64_t step_weight_bytes) {
  return step_weight_bytes > (uint64_t{2} << 20) ? 2 : 8;
}

size_t DefaultMaxContext(const Model& model) {
  return model.max_positions != 0 ? model.max_positions : 4096;
}

namespace {
// The positions a stream may hold: the requested max_context, or at most what
// a mixer's parameters cover (AFT-full's max_length).
size_t ResolveMaxContext(const Model& model, size_t requested) {
  size_t context = requested == 0 ? DefaultMaxContext(model) : requested;
  for (const BlockView& b : model.blocks) {
    if (b.mixer->causal() && b.mixer->max_sequence() != 0) {
      context = std::min(context, b.mixer->max_sequence());
    }
  }
  return context;
}
}  // namespace

Session::Session(const Model* model, const SessionOptions& options)
    : model_(model),
      batch_(options.batch),
      threads_(options.threads),
      chunk_(options.prefill_chunk == 0 ? kDefaultPrefillChunk : options.prefill_chunk),
      prefill_min_(options.prefill_min == 0
                       ? DefaultPrefillMin(EstimateStepCost(*model).weight_bytes)
                       : options.prefill_min),
      backend_(options.backend == nullptr ? "" : options.backend),
      weight_packing_(options.weight_packing),
      max_context_(ResolveMaxContext(*model, options.max_context)),
      grows_(model->state_floats_per_position > 0) {}


Status Session::Create(const Model* model, const SessionOptions& options,
                       std::unique_ptr<Session>* out) {
  out->reset();
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
  if (options.max_context > (size_t{1} << 24)) {
    return InvalidArgument("max_context must be at most %zu (0 = default), got %zu",
                           size_t{1} << 24, options.max_context);
  }
  if (options.prefill_chunk > 4096) {
    return InvalidArgument("prefill_chunk must be in [1, 4096] (0 = default), got %zu",
                           options.prefill_chunk);
  }
  std::unique_ptr<Session> s(new Session(model, options));
  RECUR_RETURN_IF_ERROR(ThreadPool::Create(options.threads, &s->pool_));
  RECUR_RETURN_IF_ERROR(s->Allocate());
  for (const BlockView& b : model->blocks) s->causal_ = s->causal_ && b.mixer->causal();
  RECUR_RETURN_IF_ERROR(s->PrepareDense());
  *out = std::move(s);
  return Status::Ok();
}

Status Session::Allocate() {
  const Model& m = *model_;
  const size_t rows = batch_ * chunk_;
  size_t max_ff = m.output_width, max_scratch = 1;
  layer_offsets_.assign(1, 0);
  for (const BlockView& b : m.blocks) {
    max_ff = std::max<size_t>(max_ff, b.ffn.linear1.out);
    max_scratch = std::max(max_scratch, b.mixer->scratch_floats(batch_, 1, threads_, max_context_));
    max_scratch =
        std::max(max_scratch, b.mixer->scratch_floats(batch_, chunk_, threads_, max_context_));
    layer_offsets_.push_back(layer_offsets_.back() + b.mixer->state_floats() +
                             b.mixer->state_floats_per_position() * max_context_);
  }
  state_stride_ = RoundUp16(state_floats());
  RECUR_RETURN_IF_ERROR(AllocateFloats(batch_ * state_stride_, &state_));
  RECUR_RETURN_IF_ERROR(AllocateFloats(rows * m.d_model, &x_));
  RECUR_RETURN_IF_ERROR(AllocateFloats(rows * m.d_model, &h_));
  RECUR_RETURN_IF_ERROR(AllocateFloats(rows * max_ff, &ffn_));
  RECUR_RETURN_IF_ERROR(AllocateFloats(max_scratch, &scratch_));
  RECUR_RETURN_IF_ERROR(AllocateFloats(rows * m.feature_width, &features_stage_));
  std::memset(state_.get(), 0, batch_ * state_stride_ * sizeof(float));
  positions_.assign(batch_, 0);
  layer_states_.assign(batch_, nullptr);
  tokens_stage_.assign(m.input_kind == fb::InputKind::Tokens ? rows : 0, 0);
  return Status::Ok();
}

Status Session::PrepareDense() {
  const Model& m = *model_;
  std::vector<DenseLayerUse> layers;
  if (m.input_projection.weight != nullptr) layers.push_back({&m.input_projection, false});
  std::vector<const DenseView*> mixer_layers;
  for (const BlockView& b : m.blocks) {
    mixer_layers.clear();
    b.mixer->CollectDense(&mixer_layers);
    for (const DenseView* d : mixer_layers) layers.push_back({d, false});
    layers.push_back({&b.ffn.linear1, false});
    layers.push_back({&b.ffn.linear2, true});
  }
  if (m.head.weight != nullptr) layers.push_back({&m.head, false});
  // Full calls: Step (batch rows) and Prefill's whole chunks (batch × chunk).
  const bool pack = weight_packing_ == 2 || (weight_packing_ == 0 && batch_ >= kPackMinBatch);
  return DenseRunner::Create(layers, {batch_, batch_ * chunk_}, backend_.c_str(), pack,
                             pool_.get(), &dense_);
}

Status Session::CheckInput(const int32_t* tokens, const float* features, size_t count,
                           size_t steps) const {
  const Model& m = *model_;
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
        return InvalidArgument("stream %zu: feature %zu at step %zu is %s", e / steps,
                               i % m.feature_width, e % steps,
                               std::isnan(features[i]) ? "NaN" : "infinite");
      }
    }
  }
  if (grows_) {
    for (size_t b = 0; b < batch_; ++b) {
      // Overflow-safe form of positions + steps > max_context (a position is
      // never above max_context: LoadState checks blobs).
      if (steps > max_context_ - std::min<uint64_t>(positions_[b], max_context_)) {
        return OutOfRange("stream %zu is at position %llu; %zu more steps pass the session's "
                          "max_context of %zu positions (the KV cache is full); reset the stream "
                          "or create the session with a larger max_context", b,
                          static_cast<unsigned long long>(positions_[b]), steps, max_context_);
      }
    }
  }
  if (m.max_positions != 0) {
    for (size_t b = 0; b < batch_; ++b) {
      if (steps > m.max_positions - std::min<uint64_t>(positions_[b], m.max_positions)) {
        return OutOfRange("stream %zu is at position %llu; %zu more steps pass the model's "
                          "learned positions, which end at %u; reset the stream", b,
                          static_cast<unsigned long long>(positions_[b]), steps, m.max_positions);
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
      std::memcpy(x + r * d, m.embedding + size_t(tokens[r]) * d, d * sizeof(float));
    }
  } else if (m.input_projection.weight != nullptr) {
    RunDense(m.input_projection, features, rows, x, false, pool_.get(), dense_.get());
  } else {
    std::memcpy(x, features, rows * d * sizeof(float));
  }
  if (m.positions != nullptr) {
    for (size_t r = 0; r < rows; ++r) {
      const size_t position = ws.positions[r / steps] + r % steps;
      kernels::Add(x + r * d, m.positions + position * d, x + r * d, d);
    }
  }
}

void Session::Norm(const NormView& norm, const float* x, float* y, size_t rows) {
  const size_t d = model_->d_model;
  pool_->ParallelRanges(rows, 16, [&](size_t first, size_t last) {
    for (size_t r = first; r < last; ++r) {
      kernels::LayerNorm(x + r * d, norm.gamma, norm.beta, norm.eps, y + r * d, d);
    }
  });
}

// y += linear2(act(linear1(x)))
void Session::RunFeedForward(const Workspace& ws, const FeedForwardView& ffn, const float* x,
                             float* y, size_t rows) {
  float* hidden = ws.ffn;
  RunDense(ffn.linear1, x, rows, hidden, false, pool_.get(), dense_.get());
  const bool gelu = ffn.activation == fb::Activation::Gelu;
  pool_->ParallelRanges(rows * ffn.linear1.out, 4096, [&](size_t first, size_t last) {
    if (gelu) {
      kernels::Gelu(hidden + first, hidden + first, last - first);
    } else {
      kernels::Relu(hidden + first, hidden + first, last - first);
    }
  });
  RunDense(ffn.linear2, hidden, rows, y, true, pool_.get(), dense_.get());
}

void Session::RunBlock(const Workspace& ws, const BlockView& block, size_t layer, size_t steps) {
  const size_t rows = batch_ * steps;
  const size_t n = rows * model_->d_model;
  float* x = ws.x;
  float* h = ws.h;
  for (size_t b = 0; b < batch_; ++b) {
    layer_states_[b] = ws.state + b * state_stride_ + layer_offsets_[layer];
  }
  const StepContext ctx{pool_.get(), ws.scratch, dense_.get(), ws.positions, max_context_};
  if (model_->norm_placement == fb::NormPlacement::Pre) {
    // x += mixer(norm1(x)); x += ffn(norm2(x))
    Norm(block.norm1, x, h, rows);
    block.mixer->Run(h, batch_, steps, layer_states_.data(), ctx, h);
    kernels::Add(x, h, x, n);
    Norm(block.norm2, x, h, rows);
    RunFeedForward(ws, block.ffn, h, x, rows);
  } else {
    // x = norm1(x + mixer(x)); x = norm2(x + ffn(x))
    block.mixer->Run(x, batch_, steps, layer_states_.data(), ctx, h);
    kernels::Add(x, h, x, n);
    Norm(block.norm1, x, x, rows);
    std::memcpy(h, x, n * sizeof(float));
    RunFeedForward(ws, block.ffn, x, h, rows);
    Norm(block.norm2, h, x, rows);
  }
}

void Session::Head(const Workspace& ws, float* out, size_t rows) {
  const Model& m = *model_;
  const size_t d = m.d_model;
  float* x = ws.x;
  if (m.final_norm.gamma != nullptr) Norm(m.final_norm, x, x, rows);
  if (m.head.weight == nullptr) {
    std::memcpy(out, x, rows * d * sizeof(float));
    return;
  }
  RunDense(m.head, x, rows, out, false, pool_.get(), dense_.get());
  const size_t w = m.output_width;
  for (size_t r = 0; r < rows; ++r) {
    if (m.head_activation == fb::HeadActivation::Softmax) {
      kernels::Softmax(out + r * w, out + r * w, w);
    } else if (m.head_activation == fb::HeadActivation::LogSoftmax) {
      kernels::LogSoftmax(out + r * w, out + r * w, w);
    }
  }
}

void Session::Forward(const Workspace& ws, const int32_t* tokens, const float* features,
                      size_t steps, float* out) {
  Embed(ws, tokens, features, steps);
  for (size_t l = 0; l < model_->blocks.size(); ++l) {
    RunBlock(ws, model_->blocks[l], l, steps);
    if (observer_ != nullptr) observer_(observer_context_, l, ws.x, batch_, steps);
  }
  if (out != nullptr) Head(ws, out, batch_ * steps);
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
    std::memcpy(features_stage_.get(), features, count * sizeof(float));
    features = features_stage_.get();
  }
  Forward(StreamWorkspace(), tokens, features, 1, out);
  for (uint64_t& p : positions_) ++p;
  return Status::Ok();
}

Status Session::Encode(size_t steps, const int32_t* tokens, const float* features, size_t count,
                       float* out) {
  if (out == nullptr) return InvalidArgument("output buffer is null");
  if (steps == 0) return Status::Ok();
  // Checked against fresh streams: positions start at 0.
  const std::vector<uint64_t> kept = positions_;
  std::fill(positions_.begin(), positions_.end(), 0);
  Status checked = CheckInput(tokens, features, count, steps);
  positions_ = kept;
  RECUR_RETURN_IF_ERROR(checked);
  const Model& m = *model_;
  for (size_t l = 0; l < m.blocks.size(); ++l) {
    const size_t most = m.blocks[l].mixer->max_sequence();
    if (most != 0 && steps > most) {
      return OutOfRange("blocks.%zu takes sequences of at most %zu positions (its seq_len); got "
                        "%zu", l, most, steps);
    }
  }
  const size_t rows = batch_ * steps;
  size_t max_ff = m.output_width, max_scratch = 1;
  for (const BlockView& b : m.blocks) {
    max_ff = std::max<size_t>(max_ff, b.ffn.linear1.out);
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
  RECUR_RETURN_IF_ERROR(AllocateFloats(batch_ * state_stride_, &state));
  std::memset(state.get(), 0, batch_ * state_stride_ * sizeof(float));
  const std::vector<uint64_t> zero_positions(batch_, 0);
  const Workspace ws{x.get(), h.get(), ffn.get(), scratch.get(), state.get(),
                     zero_positions.data()};
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
        std::memcpy(features_stage_.get() + b * n * width, features + (b * steps + t0) * width,
                    n * width * sizeof(float));
      }
    }
    float* rows_out = out == nullptr ? nullptr : ffn_.get();
    Forward(StreamWorkspace(), tokens != nullptr ? tokens_stage_.data() : nullptr,
            tokens != nullptr ? nullptr : features_stage_.get(), n, rows_out);
    for (uint64_t& p : positions_) p += n;
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
  std::memset(state_.get() + first * state_stride_, 0,
              (last - first) * state_stride_ * sizeof(float));
  std::fill(positions_.begin() + first, positions_.begin() + last, 0);
  return Status::Ok();
}

Status Session::Fork(std::unique_ptr<Session>* out) const {
  out->reset();
  SessionOptions options{batch_, threads_, chunk_, prefill_min_, backend_.c_str(),
                         weight_packing_, max_context_};
  std::unique_ptr<Session> s(new Session(model_, options));
  RECUR_RETURN_IF_ERROR(ThreadPool::Create(threads_, &s->pool_));
  RECUR_RETURN_IF_ERROR(s->Allocate());
  RECUR_RETURN_IF_ERROR(s->PrepareDense());
  std::memcpy(s->state_.get(), state_.get(), batch_ * state_stride_ * sizeof(float));
  s->positions_ = positions_;
  s->causal_ = causal_;
  *out = std::move(s);
  return Status::Ok();
}

}  // namespace recur
