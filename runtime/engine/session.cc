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

// hwy::AllocateAligned, reporting failure instead of returning null silently.
Status AllocateFloats(size_t n, hwy::AlignedFreeUniquePtr<float[]>* out) {
  *out = hwy::AllocateAligned<float>(std::max<size_t>(n, 1));
  if (!*out) return OutOfMemory("cannot allocate %zu floats for a session", n);
  return Status::Ok();
}

}  // namespace

Session::Session(const Model* model, const SessionOptions& options)
    : model_(model), batch_(options.batch), threads_(options.threads) {}

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
  std::unique_ptr<Session> s(new Session(model, options));
  RECUR_RETURN_IF_ERROR(ThreadPool::Create(options.threads, &s->pool_));
  RECUR_RETURN_IF_ERROR(s->Allocate());
  *out = std::move(s);
  return Status::Ok();
}

Status Session::Allocate() {
  const Model& m = *model_;
  size_t max_ff = 1, max_scratch = 1;
  for (const BlockView& b : m.blocks) {
    max_ff = std::max<size_t>(max_ff, b.ffn.linear1.out);
    max_scratch = std::max(max_scratch, b.mixer->scratch_floats(batch_));
  }
  // The input projection and the head also write through scratch buffers.
  max_ff = std::max<size_t>(max_ff, m.output_width);
  state_stride_ = RoundUp16(m.state_floats);
  RECUR_RETURN_IF_ERROR(AllocateFloats(batch_ * state_stride_, &state_));
  RECUR_RETURN_IF_ERROR(AllocateFloats(batch_ * m.d_model, &x_));
  RECUR_RETURN_IF_ERROR(AllocateFloats(batch_ * m.d_model, &h_));
  RECUR_RETURN_IF_ERROR(AllocateFloats(batch_ * max_ff, &ffn_));
  RECUR_RETURN_IF_ERROR(AllocateFloats(max_scratch, &scratch_));
  std::memset(state_.get(), 0, batch_ * state_stride_ * sizeof(float));
  positions_.assign(batch_, 0);
  layer_states_.assign(batch_, nullptr);
  return Status::Ok();
}

Status Session::CheckInput(const int32_t* tokens, const float* features, size_t count) const {
  const Model& m = *model_;
  if (m.input_kind == fb::InputKind::Tokens) {
    if (tokens == nullptr) return InvalidArgument("this model takes token ids; input.tokens is null");
    if (features != nullptr) return InvalidArgument("this model takes token ids, not features");
    if (count != batch_) {
      return InvalidArgument("input has %zu token ids, expected one per stream (%zu)", count,
                             batch_);
    }
    for (size_t b = 0; b < batch_; ++b) {
      if (tokens[b] < 0 || uint32_t(tokens[b]) >= m.vocab_size) {
        return OutOfRange("stream %zu: token id %d is outside the vocabulary [0, %u)", b,
                          tokens[b], m.vocab_size);
      }
    }
  } else {
    if (features == nullptr) {
      return InvalidArgument("this model takes feature frames; input.features is null");
    }
    if (tokens != nullptr) return InvalidArgument("this model takes feature frames, not tokens");
    if (count != batch_ * m.feature_width) {
      return InvalidArgument("input has %zu feature values, expected %zu streams x %u features = "
                             "%zu", count, batch_, m.feature_width, batch_ * m.feature_width);
    }
    for (size_t i = 0; i < batch_ * m.feature_width; ++i) {
      if (!std::isfinite(features[i])) {
        return InvalidArgument("stream %zu: feature %zu is %s", i / m.feature_width,
                               i % m.feature_width, std::isnan(features[i]) ? "NaN" : "infinite");
      }
    }
  }
  if (m.max_positions != 0) {
    for (size_t b = 0; b < batch_; ++b) {
      if (positions_[b] >= m.max_positions) {
        return OutOfRange("stream %zu is at position %llu, but the model's learned positions end "
                          "at %u; reset the stream", b,
                          static_cast<unsigned long long>(positions_[b]), m.max_positions);
      }
    }
  }
  return Status::Ok();
}

void Session::Embed(const int32_t* tokens, const float* features) {
  const Model& m = *model_;
  const size_t d = m.d_model;
  float* x = x_.get();
  if (m.input_kind == fb::InputKind::Tokens) {
    for (size_t b = 0; b < batch_; ++b) {
      std::memcpy(x + b * d, m.embedding + size_t(tokens[b]) * d, d * sizeof(float));
    }
  } else if (m.input_projection.weight != nullptr) {
    RunDense(m.input_projection, features, batch_, x, false, pool_.get());
  } else {
    std::memcpy(x, features, batch_ * d * sizeof(float));
  }
  if (m.positions != nullptr) {
    for (size_t b = 0; b < batch_; ++b) {
      kernels::Add(x + b * d, m.positions + positions_[b] * d, x + b * d, d);
    }
  }
}

void Session::Norm(const NormView& norm, const float* x, float* y) {
  const size_t d = model_->d_model;
  pool_->ParallelRanges(batch_, 16, [&](size_t first, size_t last) {
    for (size_t b = first; b < last; ++b) {
      kernels::LayerNorm(x + b * d, norm.gamma, norm.beta, norm.eps, y + b * d, d);
    }
  });
}

// y = linear2(act(linear1(x))) + (accumulated into) y.
void Session::RunFeedForward(const FeedForwardView& ffn, const float* x, float* y) {
  float* hidden = ffn_.get();
  RunDense(ffn.linear1, x, batch_, hidden, false, pool_.get());
  const bool gelu = ffn.activation == fb::Activation::Gelu;
  pool_->ParallelRanges(batch_ * ffn.linear1.out, 4096, [&](size_t first, size_t last) {
    if (gelu) {
      kernels::Gelu(hidden + first, hidden + first, last - first);
    } else {
      kernels::Relu(hidden + first, hidden + first, last - first);
    }
  });
  RunDense(ffn.linear2, hidden, batch_, y, true, pool_.get());
}

void Session::RunBlock(const BlockView& block, size_t layer) {
  const size_t n = batch_ * model_->d_model;
  float* x = x_.get();
  float* h = h_.get();
  for (size_t b = 0; b < batch_; ++b) {
    layer_states_[b] = state_.get() + b * state_stride_ + model_->state_offsets[layer];
  }
  if (model_->norm_placement == fb::NormPlacement::Pre) {
    // x += mixer(norm1(x)); x += ffn(norm2(x))
    Norm(block.norm1, x, h);
    block.mixer->Step(h, batch_, layer_states_.data(), {pool_.get(), scratch_.get()}, h);
    kernels::Add(x, h, x, n);
    Norm(block.norm2, x, h);
    RunFeedForward(block.ffn, h, x);
  } else {
    // x = norm1(x + mixer(x)); x = norm2(x + ffn(x))
    block.mixer->Step(x, batch_, layer_states_.data(), {pool_.get(), scratch_.get()}, h);
    kernels::Add(x, h, x, n);
    Norm(block.norm1, x, x);
    std::memcpy(h, x, n * sizeof(float));
    RunFeedForward(block.ffn, x, h);
    Norm(block.norm2, h, x);
  }
}

void Session::Head(float* out) {
  const Model& m = *model_;
  const size_t d = m.d_model;
  float* x = x_.get();
  if (m.final_norm.gamma != nullptr) Norm(m.final_norm, x, x);
  if (m.head.weight == nullptr) {
    std::memcpy(out, x, batch_ * d * sizeof(float));
    return;
  }
  RunDense(m.head, x, batch_, out, false, pool_.get());
  const size_t w = m.output_width;
  for (size_t b = 0; b < batch_; ++b) {
    if (m.head_activation == fb::HeadActivation::Softmax) {
      kernels::Softmax(out + b * w, out + b * w, w);
    } else if (m.head_activation == fb::HeadActivation::LogSoftmax) {
      kernels::LogSoftmax(out + b * w, out + b * w, w);
    }
  }
}

Status Session::Step(const int32_t* tokens, const float* features, size_t count, float* out) {
  if (out == nullptr) return InvalidArgument("output buffer is null");
  RECUR_RETURN_IF_ERROR(CheckInput(tokens, features, count));
  Embed(tokens, features);
  for (size_t l = 0; l < model_->blocks.size(); ++l) {
    RunBlock(model_->blocks[l], l);
    if (observer_ != nullptr) observer_(observer_context_, l, x_.get(), batch_);
  }
  Head(out);
  for (uint64_t& p : positions_) ++p;
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
  std::unique_ptr<Session> s(new Session(model_, SessionOptions{batch_, threads_}));
  RECUR_RETURN_IF_ERROR(ThreadPool::Create(threads_, &s->pool_));
  RECUR_RETURN_IF_ERROR(s->Allocate());
  std::memcpy(s->state_.get(), state_.get(), batch_ * state_stride_ * sizeof(float));
  s->positions_ = positions_;
  *out = std::move(s);
  return Status::Ok();
}

}  // namespace recur
