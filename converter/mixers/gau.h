// GAU's converter parameters (converter/mixers/gau.cc).
#ifndef RECUR_CONVERTER_MIXERS_GAU_H_
#define RECUR_CONVERTER_MIXERS_GAU_H_

#include <cstdint>

#include "converter/model_description.h"

namespace recur::impl::converter {

// Config type "gau": one gated attention unit (gated_unit.h), relu² over
// positions below max_length, no normaliser.
struct GauParams : MixerParamsOf<GauParams> {
  uint32_t expansion_dim = 0;  // E
  uint32_t qk_dim = 0;         // s
  uint32_t max_length = 0;     // T
  float scale = 0.0f;          // default 1/T
  bool mask = true;            // the config's "causal": p ≤ t
  bool length_scale = false;   // scores / N, encoder only (causal = mask && !length_scale)
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_GAU_H_
