// The hf-mamba2 layout: a Hugging Face transformers `Mamba2ForCausalLM`, with
// its config.json (as `save_pretrained` writes it; recognised by "model_type":
// "mamba2") and its state_dict names (docs/layouts.md, "Hugging Face Mamba2").
// The model is mamba_ssm's (layouts/state_spaces.cc) with transformers' names
// and layer_norm_epsilon on every RMS norm, the gated one's too; recur computes
// mamba_ssm's math where transformers' CPU path differs (docs/layouts.md).
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/layouts/hf_config.h"
#include "converter/layouts/layout_converter.h"
#include "converter/layouts/mamba2_model.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

class HfMamba2LayoutConverter final : public LayoutConverter {
 public:
  bool Recognizes(const json& root) const override {
    const auto type = root.find("model_type");
    return type != root.end() && *type == "mamba2";
  }

  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    RECUR_RETURN_IF_ERROR(CheckTransformersKeys(
        r, root,
        {"layout", "notes", "input_description", "output_description", "architectures",
         "num_heads", "head_dim", "vocab_size", "hidden_size", "state_size", "num_hidden_layers",
         "layer_norm_epsilon", "expand", "conv_kernel", "n_groups", "use_bias", "use_conv_bias",
         "hidden_act", "time_step_limit", "rms_norm"},
        {"pad_token_id", "residual_in_fp32", "time_step_rank", "time_step_min", "time_step_max",
         "time_step_floor", "rescale_prenorm_residual", "use_cache", "chunk_size"},
        "Mamba2Config"));
    if (!Recognizes(root)) return r.Invalid("model_type", "must be \"mamba2\" (Mamba2Config)");
    if (auto a = root.find("architectures"); a != root.end() && !a->is_null()) {
      if (!a->is_array() || a->size() != 1 || (*a)[0] != "Mamba2ForCausalLM") {
        return r.Invalid("architectures", "must be [\"Mamba2ForCausalLM\"]");
      }
    }
    if (auto act = root.find("hidden_act"); act != root.end() && *act != "silu") {
      return r.Invalid("hidden_act", "must be \"silu\" (Mamba2's convolution activation)");
    }
    bool rms = true;
    RECUR_RETURN_IF_ERROR(r.Bool(root, "rms_norm", "", &rms, false));
    if (!rms) return r.Invalid("rms_norm", "must be true: the mixer's gated RMS norm");
    Mamba2Model m;
    m.d_model = 4096;
    m.layers = 64;
    m.vocab = 32768;
    uint32_t expand = 2;
    Mamba2Params& p = m.mixer;
    p.heads = 128;
    p.head_dim = 64;
    p.state_size = 128;
    p.groups = 8;
    RECUR_RETURN_IF_ERROR(r.UInt(root, "hidden_size", "", 1, &m.d_model, false));
    if (root.contains("num_hidden_layers")) {
      RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "num_hidden_layers", &m.layers));
    }
    RECUR_RETURN_IF_ERROR(r.UInt(root, "vocab_size", "", 1, &m.vocab, false));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "num_heads", "", 1, &p.heads, false));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "head_dim", "", 1, &p.head_dim, false));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "state_size", "", 1, &p.state_size, false));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "n_groups", "", 1, &p.groups, false));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "conv_kernel", "", 1, &p.conv_kernel, false));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "expand", "", 1, &expand, false));
    if (uint64_t{p.heads} * p.head_dim != uint64_t{expand} * m.d_model) {
      return r.Invalid("num_heads", "· head_dim (" + std::to_string(p.heads) + " · " +
                                        std::to_string(p.head_dim) +
                                        ") must equal expand · hidden_size (" +
                                        std::to_string(uint64_t{expand} * m.d_model) + ")");
    }
    if (p.heads % p.groups != 0) {
      return r.Invalid("n_groups", "(" + std::to_string(p.groups) + ") must divide num_heads (" +
                                       std::to_string(p.heads) + ")");
    }
    if (p.conv_kernel > 256) return r.Invalid("conv_kernel", "must be at most 256");
    RECUR_RETURN_IF_ERROR(r.PositiveFloat(root, "layer_norm_epsilon", "", &m.norm_eps, false));
    p.norm_eps = m.norm_eps;
    RECUR_RETURN_IF_ERROR(ParseDtLimit(r, root, "time_step_limit", "", &p));
    RECUR_RETURN_IF_ERROR(r.Bool(root, "use_bias", "", &p.bias, false));
    auto o = std::make_shared<Mamba2Options>();
    RECUR_RETURN_IF_ERROR(r.Bool(root, "use_conv_bias", "", &o->conv_bias, false));
    RECUR_RETURN_IF_ERROR(r.Bool(root, "tie_word_embeddings", "", &o->tied, false));
    DescribeMamba2(m, d);
    d->layout_options = o;
    return ParseMetadata(r, root, &d->metadata);
  }

  void MapTensors(const ModelDescription& d, std::vector<ExpectedTensor>* tensors) const override {
    MapMamba2Tensors(d, Mamba2Source::kTransformers, tensors);
  }
};

}  // namespace

const LayoutConverter& HfMamba2Layout() {
  static const HfMamba2LayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
