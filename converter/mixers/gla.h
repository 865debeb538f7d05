// Gated linear attention's parameters (config type "gla"; docs/attention-math.md §19).
#ifndef RECUR_CONVERTER_MIXERS_GLA_H_
#define RECUR_CONVERTER_MIXERS_GLA_H_

#include <cstdint>
#include <limits>

#include "converter/model_description.h"

namespace recur::impl::converter {

struct GlaParams : MixerParamsOf<GlaParams> {
  uint32_t heads = 0;     // H, the query heads
  uint32_t kv_heads = 0;  // KV: H is a multiple of it
  uint32_t head_k_dim = 0, head_v_dim = 0;
  uint32_t gate_rank = 16;  // R, the low-rank gate's inner width
  uint32_t conv_size = 0;   // 0: no short convolutions
  bool gate = true;         // the output's swish gate
  float norm_eps = 1e-5f;
  float gate_logit_normalizer = 16.0f;
  float clamp_min = -std::numeric_limits<float>::infinity();  // -inf: no clamp
  int64_t query_width() const { return int64_t{heads} * head_k_dim; }
  int64_t key_width() const { return int64_t{kv_heads} * head_k_dim; }
  int64_t value_width() const { return int64_t{kv_heads} * head_v_dim; }
  int64_t out_width() const { return int64_t{heads} * head_v_dim; }
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_GLA_H_
