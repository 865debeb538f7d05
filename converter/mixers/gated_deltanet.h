// Gated DeltaNet's parameters (config type "gated_deltanet"; docs/attention-math.md §18).
#ifndef RECUR_CONVERTER_MIXERS_GATED_DELTANET_H_
#define RECUR_CONVERTER_MIXERS_GATED_DELTANET_H_

#include <cstdint>

#include "converter/model_description.h"

namespace recur::impl::converter {

struct GatedDeltaNetParams : MixerParamsOf<GatedDeltaNetParams> {
  uint32_t heads = 0;    // H, the query/key heads
  uint32_t v_heads = 0;  // HV, a multiple of H
  uint32_t head_k_dim = 0, head_v_dim = 0;
  uint32_t conv_size = 4;  // 0: no short convolutions
  bool gate = true;        // the output's swish gate
  float norm_eps = 1e-5f;
  float beta_scale = 1.0f;  // 2: fla's allow_neg_eigval
  int64_t key_width() const { return int64_t{heads} * head_k_dim; }
  int64_t value_width() const { return int64_t{v_heads} * head_v_dim; }
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_GATED_DELTANET_H_
