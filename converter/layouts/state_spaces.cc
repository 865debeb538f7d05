// The state-spaces layout: mamba_ssm's MambaLMHeadModel with Mamba2 blocks
// (state-spaces/mamba2-130m ... 2.7b), its config.json as MambaConfig saves it
// (recognised by "ssm_cfg") and its state_dict names (docs/layouts.md,
// "state-spaces Mamba2"): blocks x + Mamba2(RMSNorm(x)) with no MLP, the final
// RMS norm norm_f, the head tied to the embedding or lm_head; every norm's eps
// 1e-5 (mamba_ssm's, not in the config).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/layouts/layout_converter.h"
#include "converter/layouts/mamba2_model.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

// A key that must hold `want` when given (a feature recur does not have).
Status Must(const KeyReader& r, const json& obj, const std::string& prefix, const char* key,
            bool want, const char* why) {
  bool v = want;
  RECUR_RETURN_IF_ERROR(r.Bool(obj, key, prefix, &v, false));
  if (v != want) return r.Invalid(KeyReader::Join(prefix, key), why);
  return Status::Ok();
}

class StateSpacesLayoutConverter final : public LayoutConverter {
 public:
  bool Recognizes(const json& root) const override {
    return root.contains("ssm_cfg") && root.contains("d_model") && root.contains("n_layer");
  }

  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    RECUR_RETURN_IF_ERROR(r.OnlyKeys(
        root, "",
        {"layout", "notes", "input_description", "output_description", "d_model",
         "d_intermediate", "n_layer", "vocab_size", "ssm_cfg", "attn_layer_idx", "attn_cfg",
         "rms_norm", "residual_in_fp32", "fused_add_norm", "pad_vocab_size_multiple",
         "tie_embeddings"}));
    Mamba2Model m;
    uint32_t vocab = 0, pad = 8, d_intermediate = 0, expand = 2;
    RECUR_RETURN_IF_ERROR(r.UInt(root, "d_model", "", 1, &m.d_model));
    RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "n_layer", &m.layers));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "vocab_size", "", 1, &vocab));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "pad_vocab_size_multiple", "", 1, &pad, false));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "d_intermediate", "", 0, &d_intermediate, false));
    if (d_intermediate != 0) {
      return r.Invalid("d_intermediate", "must be 0: blocks with an MLP are not supported");
    }
    if (auto a = root.find("attn_layer_idx"); a != root.end() && !(a->is_array() && a->empty())) {
      return r.Invalid("attn_layer_idx",
                       "must be empty: hybrid models with attention layers are not supported");
    }
    if (auto a = root.find("attn_cfg"); a != root.end() && !a->is_object()) {
      return r.Invalid("attn_cfg", "must be a JSON object");
    }
    RECUR_RETURN_IF_ERROR(Must(r, root, "", "rms_norm", true,
                               "must be true: LayerNorm blocks are not supported"));
    bool unused = true;
    RECUR_RETURN_IF_ERROR(r.Bool(root, "residual_in_fp32", "", &unused, false));
    RECUR_RETURN_IF_ERROR(r.Bool(root, "fused_add_norm", "", &unused, false));
    auto o = std::make_shared<Mamba2Options>();
    RECUR_RETURN_IF_ERROR(r.Bool(root, "tie_embeddings", "", &o->tied, false));
    const uint64_t padded = (uint64_t{vocab} + pad - 1) / pad * pad;
    if (padded > UINT32_MAX) return r.Invalid("vocab_size", "is too large");
    m.vocab = uint32_t(padded);

    const json* ssm = nullptr;
    RECUR_RETURN_IF_ERROR(r.Object(root, "ssm_cfg", "", &ssm));
    const std::string s = "ssm_cfg";
    RECUR_RETURN_IF_ERROR(r.OnlyKeys(
        *ssm, s,
        {"layer", "d_state", "d_conv", "conv_init", "expand", "headdim", "d_ssm", "ngroups",
         "A_init_range", "D_has_hdim", "rmsnorm", "norm_before_gate", "dt_min", "dt_max",
         "dt_init_floor", "dt_limit", "bias", "conv_bias", "chunk_size", "use_mem_eff_path"}));
    if (auto layer = ssm->find("layer"); layer == ssm->end() || *layer != "Mamba2") {
      return r.Invalid(s + ".layer", "must be \"Mamba2\" (Mamba1 blocks are not supported)");
    }
    Mamba2Params& p = m.mixer;
    p.state_size = 128;
    uint32_t head_dim = 64;
    RECUR_RETURN_IF_ERROR(r.UInt(*ssm, "d_state", s, 1, &p.state_size, false));
    RECUR_RETURN_IF_ERROR(r.UInt(*ssm, "d_conv", s, 1, &p.conv_kernel, false));
    RECUR_RETURN_IF_ERROR(r.UInt(*ssm, "expand", s, 1, &expand, false));
    RECUR_RETURN_IF_ERROR(r.UInt(*ssm, "headdim", s, 1, &head_dim, false));
    RECUR_RETURN_IF_ERROR(r.UInt(*ssm, "ngroups", s, 1, &p.groups, false));
    const uint64_t inner = uint64_t{expand} * m.d_model;
    if (inner % head_dim != 0) {
      return r.Invalid(s + ".headdim", "(" + std::to_string(head_dim) +
                                           ") must divide expand·d_model (" +
                                           std::to_string(inner) + ")");
    }
    if (auto d_ssm = ssm->find("d_ssm"); d_ssm != ssm->end() && !d_ssm->is_null() &&
                                         !(d_ssm->is_number_unsigned() && *d_ssm == inner)) {
      return r.Invalid(s + ".d_ssm",
                       "must be null or expand·d_model: the gated MLP beside the SSM is not "
                       "supported");
    }
    p.head_dim = head_dim;
    p.heads = uint32_t(inner / head_dim);
    if (p.heads % p.groups != 0) {
      return r.Invalid(s + ".ngroups", "(" + std::to_string(p.groups) +
                                           ") must divide the heads (" +
                                           std::to_string(p.heads) + ")");
    }
    if (p.conv_kernel > 256) return r.Invalid(s + ".d_conv", "must be at most 256");
    RECUR_RETURN_IF_ERROR(Must(r, *ssm, s, "D_has_hdim", false,
                               "must be false: D per channel is not supported"));
    RECUR_RETURN_IF_ERROR(Must(r, *ssm, s, "rmsnorm", true,
                               "must be true: the mixer without its gated RMS norm is not "
                               "supported"));
    RECUR_RETURN_IF_ERROR(Must(r, *ssm, s, "norm_before_gate", false,
                               "must be false: the norm before the gate is not supported"));
    RECUR_RETURN_IF_ERROR(ParseDtLimit(r, *ssm, "dt_limit", s, &p));
    RECUR_RETURN_IF_ERROR(r.Bool(*ssm, "bias", s, &p.bias, false));
    RECUR_RETURN_IF_ERROR(r.Bool(*ssm, "conv_bias", s, &o->conv_bias, false));
    // Initialisation and kernel options: read so that a wrong type is refused.
    for (const char* key : {"dt_min", "dt_max", "dt_init_floor", "conv_init"}) {
      if (KeyReader::Given(*ssm, key)) {
        double v = 0;
        RECUR_RETURN_IF_ERROR(r.NumberIn(*ssm, key, s, 0.0, 1e30, &v));
      }
    }
    uint32_t chunk = 256;
    RECUR_RETURN_IF_ERROR(r.UInt(*ssm, "chunk_size", s, 1, &chunk, false));
    RECUR_RETURN_IF_ERROR(r.Bool(*ssm, "use_mem_eff_path", s, &unused, false));
    m.norm_eps = 1e-5f;
    p.norm_eps = 1e-5f;
    DescribeMamba2(m, d);
    d->layout_options = o;
    return ParseMetadata(r, root, &d->metadata);
  }

  void MapTensors(const ModelDescription& d, std::vector<ExpectedTensor>* tensors) const override {
    MapMamba2Tensors(d, Mamba2Source::kStateSpaces, tensors);
  }
};

}  // namespace

const LayoutConverter& StateSpacesLayout() {
  static const StateSpacesLayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
