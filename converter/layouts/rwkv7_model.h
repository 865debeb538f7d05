// What the RWKV-7 layouts share (BlinkDL's .pth: rwkv.cc; fla-hub's: fla.cc):
// the model they describe, whatever the names its tensors have.
#ifndef RECUR_CONVERTER_LAYOUTS_RWKV7_MODEL_H_
#define RECUR_CONVERTER_LAYOUTS_RWKV7_MODEL_H_

#include <cstdint>

#include "converter/mixers/rwkv7.h"
#include "converter/model_description.h"

namespace recur::impl::converter {

struct Rwkv7Model {
  uint32_t layers = 0, d_model = 0, vocab = 0, d_ff = 0;
  float layer_norm_eps = 1e-5f;
  bool input_norm = true;  // ln0 on the embedding
  Rwkv7Params mixer;       // every block's; the first block's value residual is dropped
};

// Fills `d` (metadata and layout options untouched): tokens through the
// embedding and, with input_norm, a LayerNorm; per block a pre-norm RWKV-7
// time mix and the channel mix (relu² FFN with a token mix); the final
// LayerNorm and the logits head (docs/attention-math.md §16).
void DescribeRwkv7(const Rwkv7Model& m, ModelDescription* d);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_LAYOUTS_RWKV7_MODEL_H_
