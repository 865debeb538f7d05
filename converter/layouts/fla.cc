// The fla layout: flash-linear-attention's Hugging Face models (fla-hub's
// checkpoints) with their config.json (recognised by "model_type") and
// state_dict names (docs/layouts.md, "flash-linear-attention"). RWKV-7
// (`RWKV7ForCausalLM`, model_type "rwkv7" or "rwkv7_fla"): the same model as
// BlinkDL's (layouts/rwkv.cc) with fla's names, its exact decay scale
// e^{-0.5}, norm_eps on every LayerNorm and head_dim·norm_eps on the group
// norm.
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/layouts/hf_config.h"
#include "converter/layouts/layout_converter.h"
#include "converter/layouts/rwkv7_model.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

struct FlaOptions : LayoutOptions {
  bool norm_bias = true;  // the LayerNorms have biases (else zeros)
  bool tied = false;      // lm_head is the embedding
};

// fla's low-rank width when the config leaves it null: max(32, round(f/32)·32).
uint32_t DefaultRank(double f) {
  return static_cast<uint32_t>(std::max<long>(32, std::lround(f / 32) * 32));
}

// An optional positive integer that may be null (then *out is unchanged).
Status NullableUInt(const KeyReader& r, const json& root, const char* key, uint32_t* out,
                    bool* given) {
  *given = false;
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return Status::Ok();
  *given = true;
  return r.UInt(root, key, "", 1, out);
}

class FlaLayoutConverter final : public LayoutConverter {
 public:
  bool Recognizes(const json& root) const override {
    const auto type = root.find("model_type");
    return type != root.end() && (*type == "rwkv7" || *type == "rwkv7_fla");
  }

  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    RECUR_RETURN_IF_ERROR(CheckTransformersKeys(
        r, root,
        {"layout",
         "notes",
         "input_description",
         "output_description",
         "architectures",
         "hidden_size",
         "hidden_ratio",
         "intermediate_size",
         "num_hidden_layers",
         "head_dim",
         "num_heads",
         "decay_low_rank_dim",
         "gate_low_rank_dim",
         "a_low_rank_dim",
         "v_low_rank_dim",
         "hidden_act",
         "norm_first",
         "norm_bias",
         "norm_eps",
         "attn",
         "value_dim",
         "vocab_size"},
        {"attn_mode", "max_position_embeddings", "use_cache", "pad_token_id", "fuse_norm",
         "fuse_cross_entropy", "fuse_linear_cross_entropy", "use_l2warp"},
        "RWKV7Config"));
    if (!Recognizes(root)) return r.Invalid("model_type", "must be \"rwkv7\" (RWKV7Config)");
    if (auto a = root.find("architectures"); a != root.end() && !a->is_null()) {
      if (!a->is_array() || a->size() != 1 || (*a)[0] != "RWKV7ForCausalLM") {
        return r.Invalid("architectures", "must be [\"RWKV7ForCausalLM\"]");
      }
    }
    if (auto attn = root.find("attn"); attn != root.end() && !attn->is_null()) {
      return r.Invalid("attn",
                       "must be null: hybrid models with softmax attention layers are "
                       "not supported");
    }
    if (auto act = root.find("hidden_act"); act != root.end() && *act != "sqrelu") {
      return r.Invalid("hidden_act", "must be \"sqrelu\" (RWKV's channel mix)");
    }
    uint32_t c = 2048, layers = 24, vocab = 32000, head_dim = 64;
    RECUR_RETURN_IF_ERROR(r.UInt(root, "hidden_size", "", 1, &c, false));
    if (root.contains("num_hidden_layers")) {
      RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "num_hidden_layers", &layers));
    }
    RECUR_RETURN_IF_ERROR(r.UInt(root, "vocab_size", "", 1, &vocab, false));
    // head_dim (absent: 64); null: hidden_size / num_heads.
    bool given = false;
    RECUR_RETURN_IF_ERROR(NullableUInt(r, root, "head_dim", &head_dim, &given));
    if (!given && root.contains("head_dim")) {
      uint32_t heads = 0;
      RECUR_RETURN_IF_ERROR(NullableUInt(r, root, "num_heads", &heads, &given));
      if (!given) return r.Invalid("head_dim", "and num_heads are both null");
      if (c % heads != 0) {
        return r.Invalid("num_heads", "(" + std::to_string(heads) + ") must divide hidden_size (" +
                                          std::to_string(c) + ")");
      }
      head_dim = c / heads;
    }
    if (c % head_dim != 0) {
      return r.Invalid("head_dim", "(" + std::to_string(head_dim) + ") must divide hidden_size (" +
                                       std::to_string(c) + ")");
    }
    if (auto v = root.find("value_dim"); v != root.end() && !v->is_null()) {
      const bool all_c =
          v->is_array() ? std::all_of(v->begin(), v->end(), [&](const json& e) { return e == c; })
                        : *v == c;
      if (!all_c) return r.Invalid("value_dim", "must equal hidden_size (or be null)");
    }
    Rwkv7Params params;
    params.heads = c / head_dim;
    params.head_size = head_dim;
    // An absent width takes RWKV7Config's default, a null one RWKV7Attention's formula
    // (scaled for head_dim > 64 but the gate's).
    const double root_c = std::sqrt(double(c)), factor = head_dim / 64.0;
    const struct {
      const char* key;
      uint32_t* field;
      uint32_t absent;
      double null_formula;
    } widths[] = {{"decay_low_rank_dim", &params.decay_rank, 64, 2.5 * root_c * factor},
                  {"a_low_rank_dim", &params.rate_rank, 64, 2.5 * root_c * factor},
                  {"v_low_rank_dim", &params.value_rank, 16, 1.7 * root_c * factor},
                  {"gate_low_rank_dim", &params.gate_rank, 128, 5 * root_c}};
    for (const auto& w : widths) {
      auto it = root.find(w.key);
      *w.field = it == root.end() ? w.absent : DefaultRank(w.null_formula);
      RECUR_RETURN_IF_ERROR(NullableUInt(r, root, w.key, w.field, &given));
    }
    float norm_eps = 1e-5f;
    RECUR_RETURN_IF_ERROR(r.PositiveFloat(root, "norm_eps", "", &norm_eps, false));
    params.group_norm_eps = float(double(head_dim) * double(norm_eps));
    params.decay_scale = float(std::exp(-0.5));
    // The FFN: intermediate_size, else hidden_size·hidden_ratio rounded up to 32.
    uint32_t d_ff = 0, ratio = 4;
    RECUR_RETURN_IF_ERROR(NullableUInt(r, root, "intermediate_size", &d_ff, &given));
    if (!given) {
      RECUR_RETURN_IF_ERROR(NullableUInt(r, root, "hidden_ratio", &ratio, &given));
      d_ff = (c * ratio + 31) / 32 * 32;
    }
    auto o = std::make_shared<FlaOptions>();
    bool norm_first = true;
    RECUR_RETURN_IF_ERROR(r.Bool(root, "norm_first", "", &norm_first, false));
    RECUR_RETURN_IF_ERROR(r.Bool(root, "norm_bias", "", &o->norm_bias, false));
    RECUR_RETURN_IF_ERROR(r.Bool(root, "tie_word_embeddings", "", &o->tied, false));
    Rwkv7Model m;
    m.layers = layers;
    m.d_model = c;
    m.vocab = vocab;
    m.d_ff = d_ff;
    m.layer_norm_eps = norm_eps;
    m.input_norm = norm_first;  // layers.0.pre_norm
    m.mixer = params;
    DescribeRwkv7(m, d);
    d->layout_options = o;
    return ParseMetadata(r, root, &d->metadata);
  }

  void MapTensors(const ModelDescription& d, std::vector<ExpectedTensor>* tensors) const override {
    const auto& o = static_cast<const FlaOptions&>(*d.layout_options);
    MapRwkv7Tensors(d, Rwkv7Source::kFla, tensors);
    for (ExpectedTensor& t : *tensors) {
      const std::string& name = t.name;
      if (name == "head.weight" && o.tied) t.source_name = "model.embeddings.weight";
      // A LayerNorm without a bias (norm_bias false): zeros.
      const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
      const bool norm = name.rfind("input.norm.", 0) == 0 || name.rfind("final_norm.", 0) == 0 ||
                        name.find(".norm1.") != std::string::npos ||
                        name.find(".norm2.") != std::string::npos;
      if (norm && bias && !o.norm_bias) MakeZeros(&t);
    }
  }
};

}  // namespace

const LayoutConverter& FlaLayout() {
  static const FlaLayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
