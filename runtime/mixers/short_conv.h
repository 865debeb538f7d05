// What the gated recurrent mixers share: the short causal convolution of a
// projection with its rolling state (Mamba2, Gated DeltaNet, GLA;
// docs/attention-math.md §17-§19), and the output's RMS norm per head with
// its swish gate (flash-linear-attention's kind: Gated DeltaNet, GLA).
#ifndef RECUR_MIXERS_SHORT_CONV_H_
#define RECUR_MIXERS_SHORT_CONV_H_

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "kernels/elementwise/elementwise.h"
#include "mixers/mixer.h"

namespace recur::impl {

// Gate values silu'd at a time on the stack (GatedRmsNormHeads).
inline constexpr size_t kSiluChunk = 64;

// The longest convolution ShortConv runs (its input rows are listed on the
// stack); longer ones are refused when a model loads.
inline constexpr size_t kMaxShortConvKernel = 256;

// A depthwise causal convolution of `channels` features over the last
// `kernel` positions, then silu:
//   y_t[c] = silu(bias[c] + Σ_j weight[c][j]·x_{t−K+1+j}[c])
// (kernels::CausalConvSilu), inputs before the stream's first position zeros.
// Its state per stream is the last K−1 inputs, oldest first: (K−1, channels).
struct ShortConv {
  const float* weight = nullptr;  // (channels, K)
  const float* bias = nullptr;    // (channels), or null for none
  size_t channels = 0, kernel = 0;

  size_t carry_floats() const { return kernel == 0 ? 0 : (kernel - 1) * channels; }

  // weight [channels, kernel] from tensor `index`, named `what` in messages.
  Status Load(int32_t index, const std::string& what, uint32_t width, uint32_t k,
              TensorResolver* tensors) {
    channels = width;
    kernel = k;
    return tensors->Get(index, what.c_str(), {int64_t(width), int64_t(k)}, false, &weight);
  }

  // x (batch, steps, channels), rows x_stride floats apart (0: channels) →
  // y (batch, steps, channels), dense, not overlapping x; states[b] + carry_at
  // is stream b's (K−1, channels) carry, read and then advanced past x.
  void Run(const float* x, size_t batch, size_t steps, float* const* states, size_t carry_at,
           const StepContext& ctx, float* y, size_t x_stride = 0) const {
    const size_t c = channels, k = kernel, rows = batch * steps;
    const size_t xs = x_stride == 0 ? c : x_stride;
    if (k == 0 || k > kMaxShortConvKernel) return;  // refused at load
    ctx.pool->ParallelRanges(rows, 4, [&](size_t first, size_t last) {
      const float* in[kMaxShortConvKernel];
      for (size_t row = first; row < last; ++row) {
        const size_t b = row / steps, t = row % steps;
        for (size_t j = 0; j < k; ++j) {
          // Input position t − (K−1) + j: a row of x, or of the carry before it.
          const ptrdiff_t at = ptrdiff_t(t + j) - ptrdiff_t(k - 1);
          in[j] = at >= 0 ? x + (b * steps + size_t(at)) * xs
                          : states[b] + carry_at + size_t(ptrdiff_t(k - 1) + at) * c;
        }
        kernels::CausalConvSilu(in, weight, bias, k, y + row * c, c);
      }
    });
    if (k <= 1) return;
    ctx.pool->ParallelRanges(batch, 1, [&](size_t first, size_t last) {
      for (size_t b = first; b < last; ++b) {
        float* carry = states[b] + carry_at;
        const size_t keep = k - 1 > steps ? k - 1 - steps : 0, fresh = k - 1 - keep;
        std::memmove(carry, carry + fresh * c, keep * c * sizeof(float));
        for (size_t j = 0; j < fresh; ++j) {
          std::memcpy(carry + (keep + j) * c, x + (b * steps + steps - fresh + j) * xs,
                      c * sizeof(float));
        }
      }
    });
  }
};

// The convolutions of a layer's q, k and v (tables with conv_size and
// query_conv, key_conv, value_conv: GatedDeltaNet, Gla). Their carries lie
// in each stream's state from `offset` on: k's, q's, v's.
struct QkvShortConvs {
  ShortConv q, k, v;

  size_t kernel() const { return q.kernel; }
  size_t carry_floats() const { return q.carry_floats() + k.carry_floats() + v.carry_floats(); }

  // With t->conv_size() > 0, the three [width, conv_size] tensors; with 0,
  // none may be given. `what` names the mixer in messages.
  template <class Table>
  Status Load(const Table* t, const std::string& layer, const char* what, uint32_t q_width,
              uint32_t k_width, uint32_t v_width, TensorResolver* tensors) {
    const uint32_t size = t->conv_size();
    if (size > 64) {
      return InvalidModel("%s: %s conv_size must be at most 64 (got %u)", layer.c_str(), what,
                          size);
    }
    if (size == 0) {
      if (t->query_conv() >= 0 || t->key_conv() >= 0 || t->value_conv() >= 0) {
        return InvalidModel("%s: %s conv_size is 0, but the file gives a convolution",
                            layer.c_str(), what);
      }
      return Status::Ok();
    }
    const std::string p = layer + ".mixer.";
    RECUR_RETURN_IF_ERROR(q.Load(t->query_conv(), p + "query_conv", q_width, size, tensors));
    RECUR_RETURN_IF_ERROR(k.Load(t->key_conv(), p + "key_conv", k_width, size, tensors));
    return v.Load(t->value_conv(), p + "value_conv", v_width, size, tensors);
  }

  // x_q, x_k, x_v (batch·steps rows each) → q, k, v; kernel() > 0.
  void Run(const float* x_q, const float* x_k, const float* x_v, size_t batch, size_t steps,
           float* const* states, size_t offset, const StepContext& ctx, float* out_q,
           float* out_k, float* out_v) const {
    k.Run(x_k, batch, steps, states, offset, ctx, out_k);
    q.Run(x_q, batch, steps, states, offset + k.carry_floats(), ctx, out_q);
    v.Run(x_v, batch, steps, states, offset + k.carry_floats() + q.carry_floats(), ctx, out_v);
  }
};

// o (rows, heads·dv) in place, per head: o_h/√(mean(o_h²) + eps) ⊙ weight
// (dv), times silu(gate_h) when `gate` (rows, heads·dv) is not null.
inline void GatedRmsNormHeads(float* o, const float* gate, size_t rows, size_t heads, size_t dv,
                              const float* weight, float eps, const StepContext& ctx) {
  ctx.pool->ParallelRanges(rows, 4, [&](size_t first, size_t last) {
    for (size_t row = first; row < last; ++row) {
      for (size_t h = 0; h < heads; ++h) {
        float* oh = o + (row * heads + h) * dv;
        kernels::RmsNorm(oh, weight, eps, oh, dv);
        if (gate == nullptr) continue;
        const float* g = gate + (row * heads + h) * dv;
        for (size_t i0 = 0; i0 < dv; i0 += kSiluChunk) {
          float s[kSiluChunk];
          const size_t n = std::min(kSiluChunk, dv - i0);
          kernels::Silu(g + i0, s, n);
          for (size_t i = 0; i < n; ++i) oh[i0 + i] *= s[i];
        }
      }
    }
  });
}

}  // namespace recur::impl

#endif  // RECUR_MIXERS_SHORT_CONV_H_
