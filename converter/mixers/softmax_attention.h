// Softmax attention's converter parameters (converter/mixers/softmax_attention.cc).
#ifndef RECUR_CONVERTER_MIXERS_SOFTMAX_ATTENTION_H_
#define RECUR_CONVERTER_MIXERS_SOFTMAX_ATTENTION_H_

#include <cstdint>

#include "converter/model_description.h"

namespace recur::impl::converter {

// Config type "softmax_attention": softmax(q·kᵀ/√dk), a KV cache when causal.
struct SoftmaxAttentionParams : MixerParamsOf<SoftmaxAttentionParams> {
  uint32_t heads = 0;
  uint32_t dk = 0;
  uint32_t dv = 0;
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_SOFTMAX_ATTENTION_H_
