// FLASH's converter parameters (converter/mixers/flash.cc).
#ifndef RECUR_CONVERTER_MIXERS_FLASH_H_
#define RECUR_CONVERTER_MIXERS_FLASH_H_

#include <cstdint>

#include "converter/model_description.h"

namespace recur::impl::converter {

// Config type "flash": mixed-chunk attention of one gated unit
// (gated_unit.h) over absolute chunks of `chunk` positions.
struct FlashParams : MixerParamsOf<FlashParams> {
  uint32_t expansion_dim = 0;  // E
  uint32_t qk_dim = 0;         // s
  uint32_t chunk = 0;          // C
  float scale = 0.0f;          // default 1/C
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_FLASH_H_
