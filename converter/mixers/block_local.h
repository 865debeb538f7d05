// Block-local attention's converter parameters (converter/mixers/block_local.cc).
#ifndef RECUR_CONVERTER_MIXERS_BLOCK_LOCAL_H_
#define RECUR_CONVERTER_MIXERS_BLOCK_LOCAL_H_

#include <cstdint>

#include "converter/model_description.h"

namespace recur::impl::converter {

// Config type "block_local" (Hugging Face Reformer's LocalSelfAttention,
// docs/attention-math.md §14). MixerParams::causal is whether the mixer has
// the step form (mask && chunks_after == 0 && chunks_before <= 1); `mask` is
// the config's "causal", the mask j > i.
struct BlockLocalParams : MixerParamsOf<BlockLocalParams> {
  uint32_t heads = 0;
  uint32_t dk = 0;
  uint32_t dv = 0;
  uint32_t chunk = 0;
  uint32_t chunks_before = 1;
  uint32_t chunks_after = 0;
  bool mask = true;
  uint32_t pad_multiple = 0;  // default: chunk
  uint32_t pad_above = 0;     // default: chunk
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_BLOCK_LOCAL_H_
