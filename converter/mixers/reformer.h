// Reformer's converter parameters (converter/mixers/reformer.cc).
#ifndef RECUR_CONVERTER_MIXERS_REFORMER_H_
#define RECUR_CONVERTER_MIXERS_REFORMER_H_

#include <cstdint>

#include "converter/model_description.h"

namespace recur::impl::converter {

// Config type "reformer" (encoder only): LSH attention with shared queries
// and keys, n_buckets hash buckets, `rounds` hash rounds, chunks of `chunk`
// positions after sorting by bucket. `form` "paper" (the default) or
// "transformers" (Hugging Face's LSHSelfAttention; only it takes the keys
// chunks_before, chunks_after, causal_mask, pad_multiple and pad_above).
struct ReformerParams : MixerParamsOf<ReformerParams> {
  ReformerParams() { causal = false; }
  uint32_t heads = 0;
  uint32_t dk = 0;
  uint32_t dv = 0;
  uint32_t n_buckets = 0;
  uint32_t chunk = 0;
  uint32_t rounds = 0;
  bool transformers = false;
  uint32_t chunks_before = 1;
  uint32_t chunks_after = 0;
  bool causal_mask = false;
  uint32_t pad_multiple = 0;  // transformers: default chunk
  uint32_t pad_above = 0;     // transformers: default chunk
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_REFORMER_H_
