// Sliding-window attention's converter parameters (converter/mixers/sliding_window.cc).
#ifndef RECUR_CONVERTER_MIXERS_SLIDING_WINDOW_H_
#define RECUR_CONVERTER_MIXERS_SLIDING_WINDOW_H_

#include <cstdint>
#include <vector>

#include "converter/model_description.h"

namespace recur::impl::converter {

// Config type "sliding_window" (Longformer): window w, one dilation per head
// (empty: all 1), the first global_tokens positions global.
struct SlidingWindowParams : MixerParamsOf<SlidingWindowParams> {
  uint32_t heads = 0;
  uint32_t dk = 0;
  uint32_t dv = 0;
  uint32_t window = 0;
  std::vector<uint32_t> dilation;
  uint32_t global_tokens = 0;
  // Longformer's query_global, key_global, value_global for the global
  // queries (non-causal only).
  bool global_projections = false;
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_SLIDING_WINDOW_H_
