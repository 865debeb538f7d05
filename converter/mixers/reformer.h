// Reformer's converter parameters (converter/mixers/reformer.cc).
#ifndef RECUR_CONVERTER_MIXERS_REFORMER_H_
#define RECUR_CONVERTER_MIXERS_REFORMER_H_

#include <cstdint>

#include "converter/model_description.h"

namespace recur::impl::converter {

// Config type "reformer" (encoder only): LSH attention with shared queries
// and keys, n_buckets hash buckets, `rounds` hash rounds, chunks of `chunk`
// positions after sorting by bucket.
struct ReformerParams : MixerParamsOf<ReformerParams> {
  ReformerParams() { causal = false; }
  uint32_t heads = 0;
  uint32_t dk = 0;
  uint32_t dv = 0;
  uint32_t n_buckets = 0;
  uint32_t chunk = 0;
  uint32_t rounds = 0;
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_REFORMER_H_
