// Linformer's converter parameters (converter/mixers/linformer.cc).
#ifndef RECUR_CONVERTER_MIXERS_LINFORMER_H_
#define RECUR_CONVERTER_MIXERS_LINFORMER_H_

#include <cstdint>

#include "converter/model_description.h"

namespace recur::impl::converter {

// How E and F are shared: kNone: one each per head; kHeadwise: one each for
// all heads; kKeyValue: F = E; kLayerwise: F = E, the same in every block
// (stored per block).
enum class LinformerSharing { kNone, kHeadwise, kKeyValue, kLayerwise };

// Config type "linformer" (encoder only): keys and values projected from
// sequence length n = seq_len down to k = proj_dim.
struct LinformerParams : MixerParamsOf<LinformerParams> {
  LinformerParams() { causal = false; }
  uint32_t heads = 0;
  uint32_t dk = 0;
  uint32_t dv = 0;
  uint32_t seq_len = 0;
  uint32_t proj_dim = 0;
  LinformerSharing sharing = LinformerSharing::kNone;
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_LINFORMER_H_
