// The Attention Free Transformer's converter parameters, one struct per
// variant (converter/mixers/aft.cc). Query, key and value are all
// D = heads·dk wide: AFT mixes element-wise.
#ifndef RECUR_CONVERTER_MIXERS_AFT_H_
#define RECUR_CONVERTER_MIXERS_AFT_H_

#include <cstdint>

#include "converter/model_description.h"

namespace recur::impl::converter {

// Config type "aft_simple": no position bias.
struct AftSimpleParams : MixerParamsOf<AftSimpleParams> {
  uint32_t heads = 0;
  uint32_t dk = 0;
};

// Config type "aft_local" (a window bias shared by channels, pos_bias) or
// "aft_conv" (a window bias per head, conv_kernel); both write an AftLocal
// table.
struct AftLocalParams : MixerParamsOf<AftLocalParams> {
  uint32_t heads = 0;
  uint32_t dk = 0;
  uint32_t window = 0;
  bool per_head_kernel = false;  // "aft_conv"
};

// Config type "aft_full": a pairwise bias up to max_length T, full [T, T]
// (bias_rank 0) or factorised u vᵀ of rank bias_rank; logits k + w, or k·w
// (multiply, fast-transformers' AFTFullAttention).
struct AftFullParams : MixerParamsOf<AftFullParams> {
  uint32_t heads = 0;
  uint32_t dk = 0;
  uint32_t max_length = 0;
  uint32_t bias_rank = 0;
  bool multiply = false;
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_AFT_H_
