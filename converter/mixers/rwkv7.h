// RWKV-7's time-mix parameters (config type "rwkv7"; docs/attention-math.md §16).
#ifndef RECUR_CONVERTER_MIXERS_RWKV7_H_
#define RECUR_CONVERTER_MIXERS_RWKV7_H_

#include <cstdint>

#include "converter/model_description.h"

namespace recur::impl::converter {

// The libraries' names of RWKV-7's six token-mix vectors (BlinkDL's and fla's),
// in the order of recur.fbs Rwkv7.token_mix's rows.
inline constexpr const char* kRwkv7MixNames[] = {"x_r", "x_w", "x_k", "x_v", "x_a", "x_g"};

struct Rwkv7Params : MixerParamsOf<Rwkv7Params> {
  uint32_t heads = 0;
  uint32_t head_size = 0;  // N
  // The low-rank paths' inner widths (decay w, in-context rate a, value
  // residual v, gate g); value_rank 0: the block has no value residual (the
  // model's first RWKV-7 block, whose v is the later blocks' v₀).
  uint32_t decay_rank = 0, rate_rank = 0, value_rank = 0, gate_rank = 0;
  float group_norm_eps = 64e-5f;
  float decay_scale = 0.606531f;  // BlinkDL's e^{-0.5}
  int64_t width() const { return int64_t{heads} * head_size; }
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_RWKV7_H_
