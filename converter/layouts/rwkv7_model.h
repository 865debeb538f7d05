// What the RWKV-7 layouts share (BlinkDL's .pth: rwkv.cc; fla-hub's: fla.cc;
// llama.cpp's GGUF: gguf.cc): the model they describe, and one table of
// where each layout keeps each of its tensors.
#ifndef RECUR_CONVERTER_LAYOUTS_RWKV7_MODEL_H_
#define RECUR_CONVERTER_LAYOUTS_RWKV7_MODEL_H_

#include <cstdint>
#include <vector>

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

// The layouts that hold RWKV-7 models: the columns of the name table
// (rwkv7_model.cc, kRwkv7Names; docs/layouts.md shows it).
enum class Rwkv7Source {
  kBlinkDl,   // BlinkDL's RWKV-LM .pth (layout "rwkv"): blocks.<i>.att.w1, ...
  kFla,       // flash-linear-attention's Hugging Face models (layout "fla"): model.layers.<i>.attn...
  kLlamaCpp,  // llama.cpp's GGUF files (layout "gguf"): blk.<i>.time_mix_w1.weight, ...
};

// Points every tensor of `tensors` (a DescribeRwkv7 model's, recur names) at
// its source tensor in `source`'s names and shapes, by the table: copies,
// transposes, reshapes ((1, 1, C) vectors, (H, N) bonus tables), the token
// mix's six rows from six vectors or one fused (6, 1, 1, C) tensor, and zeros
// for the biases no layout has. What a layout does besides (a tied head,
// biases its config leaves out, tensors it ignores) it does after this.
void MapRwkv7Tensors(const ModelDescription& d, Rwkv7Source source,
                     std::vector<ExpectedTensor>* tensors);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_LAYOUTS_RWKV7_MODEL_H_
