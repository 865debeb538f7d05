// What the converters of the gated recurrent mixers of flash-linear-attention's
// kind (Gated DeltaNet, GLA; docs/attention-math.md §18, §19) share: the
// tensors, table fields and inspect entries of their q, k, v convolutions and
// their output norm's weight.
#ifndef RECUR_CONVERTER_MIXERS_SHORT_CONV_H_
#define RECUR_CONVERTER_MIXERS_SHORT_CONV_H_

#include <cstdint>

#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {

// query_conv [q, K], key_conv [k, K], value_conv [v, K] when K = conv_size > 0,
// then norm_weight [dv].
inline void AddShortConvTensors(MixerTensors* out, int64_t q, int64_t k, int64_t v,
                                uint32_t conv_size, uint32_t dv) {
  if (conv_size != 0) {
    out->Add("query_conv", {q, conv_size});
    out->Add("key_conv", {k, conv_size});
    out->Add("value_conv", {v, conv_size});
  }
  out->Add("norm_weight", {dv});
}

// The table's conv_size, its three convolutions (with conv_size > 0) and norm_weight.
template <class Builder>
void WriteShortConvFields(Builder* b, MixerTableWriter* w, uint32_t conv_size) {
  b->add_conv_size(conv_size);
  if (conv_size != 0) {
    b->add_query_conv(w->Ref("query_conv"));
    b->add_key_conv(w->Ref("key_conv"));
    b->add_value_conv(w->Ref("value_conv"));
  }
  b->add_norm_weight(w->Ref("norm_weight"));
}

// inspect: the three convolutions' and norm_weight's tensor names.
template <class Table>
void DescribeShortConvFields(const Table* t, const TensorRefs& refs, OrderedJson* mixer) {
  (*mixer)["query_conv"] = refs.Ref(t->query_conv());
  (*mixer)["key_conv"] = refs.Ref(t->key_conv());
  (*mixer)["value_conv"] = refs.Ref(t->value_conv());
  (*mixer)["norm_weight"] = refs.Ref(t->norm_weight());
}

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_MIXERS_SHORT_CONV_H_
