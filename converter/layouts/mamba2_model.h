// What the Mamba2 layouts share (state-spaces' mamba_ssm checkpoints:
// state_spaces.cc; transformers' Mamba2ForCausalLM: hf_mamba2.cc): the model
// they describe and where each keeps its tensors.
#ifndef RECUR_CONVERTER_LAYOUTS_MAMBA2_MODEL_H_
#define RECUR_CONVERTER_LAYOUTS_MAMBA2_MODEL_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/key_reader.h"
#include "converter/mixers/mamba2.h"
#include "converter/model_description.h"

namespace recur::impl::converter {

struct Mamba2Model {
  uint32_t layers = 0, d_model = 0, vocab = 0;
  float norm_eps = 1e-5f;  // the blocks' and the final RMS norms'
  Mamba2Params mixer;      // every block's
};

// Fills `d` (metadata and layout options untouched): tokens through the
// embedding; per block x + mixer(RMSNorm(x)) with no feed-forward; the final
// RMS norm and the logits head (docs/attention-math.md §17).
void DescribeMamba2(const Mamba2Model& m, ModelDescription* d);

// The clamp of Δ, `key` of `obj` (under `prefix` in messages): absent or
// null: none; else [lo, hi], numbers with 0 <= lo < hi, hi possibly Python's
// Infinity (the string QuotePythonConstants makes of it): mamba_ssm's
// dt_limit, transformers' time_step_limit.
Status ParseDtLimit(const KeyReader& r, const nlohmann::json& obj, const char* key,
                    const std::string& prefix, Mamba2Params* p);

// The layouts that hold Mamba2 models.
enum class Mamba2Source {
  kStateSpaces,   // mamba_ssm's MambaLMHeadModel: backbone.embedding.weight, ...
  kTransformers,  // transformers' Mamba2ForCausalLM: backbone.embeddings.weight, ...
  kLlamaCpp,      // llama.cpp's GGUF files (layout "gguf"): token_embd.weight, blk.<i>.ssm_in, ...
};

// Where a Mamba2 source keeps what its config varies (the layouts' options).
struct Mamba2Options : LayoutOptions {
  bool tied = false;      // the head is the embedding
  bool conv_bias = true;  // false: the convolution has no bias (zeros)
};

// Points every tensor of `tensors` (a DescribeMamba2 model's, recur names) at
// its source tensor in `source`'s names, as d.layout_options (a
// Mamba2Options; null: the defaults) says: copies; from mamba_ssm's and
// transformers' names conv1d.weight read as (W, 1, K) and A = −exp(A_log);
// from llama.cpp's, ssm_a (A itself) and ssm_d read as (H, 1) and ssm_norm as
// (G, I/G); zeros for the head's bias and for a convolution without its bias.
void MapMamba2Tensors(const ModelDescription& d, Mamba2Source source,
                      std::vector<ExpectedTensor>* tensors);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_LAYOUTS_MAMBA2_MODEL_H_
