// The fla layout: flash-linear-attention's Hugging Face models (fla-hub's
// checkpoints) with their config.json (recognised by "model_type") and
// state_dict names (docs/layouts.md, "flash-linear-attention"). RWKV-7
// (`RWKV7ForCausalLM`, model_type "rwkv7" or "rwkv7_fla"): the same model as
// BlinkDL's (layouts/rwkv.cc) with fla's names, its exact decay scale
// e^{-0.5}, norm_eps on every LayerNorm and head_dim·norm_eps on the group
// norm. Gated DeltaNet (`GatedDeltaNetForCausalLM`, "gated_deltanet"):
// RMSNorm pre-norm blocks of the GatedDeltaNet layer and fla's GatedMLP
// (SwiGLU), the final RMSNorm and the logits head. GLA (`GLAForCausalLM`,
// "gla"): the same blocks around the GatedLinearAttention layer.
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/layouts/hf_config.h"
#include "converter/layouts/layout_converter.h"
#include "converter/layouts/rwkv7_model.h"
#include "converter/mixers/gated_deltanet.h"
#include "converter/mixers/gla.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

enum class FlaModel { kRwkv7, kGatedDeltaNet, kGla };

struct FlaOptions : LayoutOptions {
  FlaModel model = FlaModel::kRwkv7;
  bool norm_bias = true;  // RWKV-7: the LayerNorms have biases (else zeros)
  bool tied = false;      // lm_head is the embedding
  // GLA: the output norm's tensor (g_norm_swish_gate when fused with the
  // gate, else g_norm); none: ones (elementwise_affine false).
  std::string gla_norm = "g_norm_swish_gate";
};

bool IsRwkv7(const json& type) { return type == "rwkv7" || type == "rwkv7_fla"; }

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
    return type != root.end() &&
           (IsRwkv7(*type) || *type == "gated_deltanet" || *type == "gla");
  }

  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    const auto type = root.find("model_type");
    if (type != root.end() && *type == "gated_deltanet") return ParseGatedDeltaNet(r, root, d);
    if (type != root.end() && *type == "gla") return ParseGla(r, root, d);
    return ParseRwkv7(r, root, d);
  }

  void MapTensors(const ModelDescription& d, std::vector<ExpectedTensor>* tensors) const override {
    const auto& o = static_cast<const FlaOptions&>(*d.layout_options);
    if (o.model == FlaModel::kRwkv7) return MapRwkv7(o, d, tensors);
    MapGated(o, tensors);
  }

 private:
  static Status ParseRwkv7(const KeyReader& r, const json& root, ModelDescription* d) {
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
    if (!root.contains("model_type") || !IsRwkv7(root["model_type"])) {
      return r.Invalid("model_type",
                       "must be \"rwkv7\", \"gated_deltanet\" or \"gla\" (fla's model configs)");
    }
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

  // The keys of fla's configs of the gated models (GatedDeltaNetConfig, GLAConfig) that
  // change no output: kernels, fused losses and norms (the same math), caching.
  static constexpr std::initializer_list<const char*> kGatedIgnored = {
      "attn_mode", "max_position_embeddings", "use_cache", "pad_token_id", "fuse_norm",
      "fuse_swiglu", "fuse_cross_entropy", "fuse_linear_cross_entropy", "use_l2warp"};

  // What GatedDeltaNetConfig and GLAConfig share: architectures, attn and
  // attnres_block_size null, hidden_act "swish" (GatedMLP's SwiGLU), the
  // blocks' widths and the FFN's (intermediate_size, else GatedMLP's
  // 256·⌈⌊hidden_size·hidden_ratio·2/3⌋/256⌉), norm_eps, the tied head.
  struct GatedModel {
    uint32_t layers = 0, d_model = 2048, vocab = 32000, d_ff = 0;
    float norm_eps = 1e-6f;
  };
  static Status ParseGatedModel(const KeyReader& r, const json& root, const char* architecture,
                                uint32_t layers, GatedModel* m, FlaOptions* o) {
    if (auto a = root.find("architectures"); a != root.end() && !a->is_null()) {
      if (!a->is_array() || a->size() != 1 || (*a)[0] != architecture) {
        return r.Invalid("architectures", std::string("must be [\"") + architecture + "\"]");
      }
    }
    if (r.Given(root, "attn")) {
      return r.Invalid("attn",
                       "must be null: hybrid models with softmax attention layers are "
                       "not supported");
    }
    if (r.Given(root, "attnres_block_size")) {
      return r.Invalid("attnres_block_size",
                       "must be null: attention residuals across layers are not supported");
    }
    if (auto act = root.find("hidden_act"); act != root.end() && *act != "swish") {
      return r.Invalid("hidden_act", "must be \"swish\" (GatedMLP's SwiGLU)");
    }
    m->layers = layers;
    RECUR_RETURN_IF_ERROR(r.UInt(root, "hidden_size", "", 1, &m->d_model, false));
    if (root.contains("num_hidden_layers")) {
      RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "num_hidden_layers", &m->layers));
    }
    RECUR_RETURN_IF_ERROR(r.UInt(root, "vocab_size", "", 1, &m->vocab, false));
    RECUR_RETURN_IF_ERROR(r.PositiveFloat(root, "norm_eps", "", &m->norm_eps, false));
    bool given = false;
    RECUR_RETURN_IF_ERROR(NullableUInt(r, root, "intermediate_size", &m->d_ff, &given));
    if (!given) {
      uint32_t ratio = 4;
      RECUR_RETURN_IF_ERROR(NullableUInt(r, root, "hidden_ratio", &ratio, &given));
      const auto f = uint64_t(double(uint64_t{m->d_model} * ratio * 2) / 3.0);
      if (f > (uint64_t{1} << 31)) return r.Invalid("hidden_ratio", "makes the FFN too wide");
      m->d_ff = uint32_t((f + 255) / 256 * 256);
    }
    RECUR_RETURN_IF_ERROR(r.Bool(root, "tie_word_embeddings", "", &o->tied, false));
    return Status::Ok();
  }

  // RMSNorm pre-norm blocks of `mixer` (fb::Mixer `tag`) and a SwiGLU FFN,
  // the final RMSNorm and the logits head.
  static void DescribeGated(const GatedModel& m, fb::Mixer tag, const MixerParams& mixer,
                            ModelDescription* d) {
    d->d_model = m.d_model;
    d->norm_placement = NormPlacement::kPre;
    d->norm = NormKind::kRmsNorm;
    d->layer_norm_eps = m.norm_eps;
    d->input = InputDescription();
    d->input.kind = InputKind::kTokens;
    d->input.vocab_size = m.vocab;
    const MixerType* type = FindMixerType(tag);
    d->blocks.assign(m.layers, BlockDescription());
    for (BlockDescription& b : d->blocks) {
      b.mixer = MixerDescription(type, mixer.Clone());
      b.d_ff = m.d_ff;
      b.activation = Activation::kSilu;
      b.glu = true;
    }
    d->final_norm = true;
    d->has_head = true;
    d->head.out = m.vocab;
    d->head.activation = HeadActivation::kNone;
  }

  // A nullable number (fla's float | None): *given false for absent or null.
  static Status NullableNumber(const KeyReader& r, const json& root, const char* key, double lo,
                               double hi, double* out, bool* given) {
    *given = r.Given(root, key);
    return *given ? r.NumberIn(root, key, "", lo, hi, out) : Status::Ok();
  }

  static Status ParseGatedDeltaNet(const KeyReader& r, const json& root, ModelDescription* d) {
    RECUR_RETURN_IF_ERROR(CheckTransformersKeys(
        r, root,
        {"layout", "notes", "input_description", "output_description", "architectures",
         "hidden_size", "num_hidden_layers", "num_heads", "num_v_heads", "head_dim", "expand_v",
         "conv_size", "use_short_conv", "use_gate", "allow_neg_eigval", "norm_eps",
         "hidden_ratio", "intermediate_size", "hidden_act", "attn", "attnres_block_size",
         "vocab_size"},
        kGatedIgnored, "GatedDeltaNetConfig"));
    auto o = std::make_shared<FlaOptions>();
    o->model = FlaModel::kGatedDeltaNet;
    GatedModel m;
    RECUR_RETURN_IF_ERROR(ParseGatedModel(r, root, "GatedDeltaNetForCausalLM", 21, &m, o.get()));
    GatedDeltaNetParams p;
    p.heads = 6;
    p.head_k_dim = 256;
    RECUR_RETURN_IF_ERROR(r.UInt(root, "num_heads", "", 1, &p.heads, false));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "head_dim", "", 1, &p.head_k_dim, false));
    bool given = false;
    p.v_heads = p.heads;
    RECUR_RETURN_IF_ERROR(NullableUInt(r, root, "num_v_heads", &p.v_heads, &given));
    if (p.v_heads < p.heads || p.v_heads % p.heads != 0) {
      return r.Invalid("num_v_heads", "(" + std::to_string(p.v_heads) +
                                          ") must be a multiple of num_heads (" +
                                          std::to_string(p.heads) + ")");
    }
    double expand_v = 2.0;
    RECUR_RETURN_IF_ERROR(r.NumberIn(root, "expand_v", "", 1e-6, 1e6, &expand_v, false));
    const double dv = p.head_k_dim * expand_v;
    if (std::fabs(dv - std::round(dv)) > 1e-5 * dv || std::round(dv) < 1) {
      return r.Invalid("expand_v", "times head_dim (" + std::to_string(p.head_k_dim) +
                                       ") must be a whole number");
    }
    p.head_v_dim = uint32_t(std::round(dv));
    bool short_conv = true, neg = false;
    RECUR_RETURN_IF_ERROR(r.Bool(root, "use_short_conv", "", &short_conv, false));
    RECUR_RETURN_IF_ERROR(r.Bool(root, "use_gate", "", &p.gate, false));
    RECUR_RETURN_IF_ERROR(r.Bool(root, "allow_neg_eigval", "", &neg, false));
    p.conv_size = 4;
    RECUR_RETURN_IF_ERROR(r.UInt(root, "conv_size", "", 1, &p.conv_size, false));
    if (p.conv_size > 64) return r.Invalid("conv_size", "must be at most 64");
    if (!short_conv) p.conv_size = 0;
    p.beta_scale = neg ? 2.0f : 1.0f;
    p.norm_eps = m.norm_eps;
    DescribeGated(m, fb::Mixer::GatedDeltaNet, p, d);
    d->layout_options = o;
    return ParseMetadata(r, root, &d->metadata);
  }

  static Status ParseGla(const KeyReader& r, const json& root, ModelDescription* d) {
    RECUR_RETURN_IF_ERROR(CheckTransformersKeys(
        r, root,
        {"layout", "notes", "input_description", "output_description", "architectures",
         "hidden_size", "expand_k", "expand_v", "hidden_ratio", "intermediate_size",
         "num_hidden_layers", "num_heads", "num_kv_heads", "feature_map", "use_short_conv",
         "conv_size", "use_output_gate", "clamp_min", "hidden_act", "elementwise_affine",
         "norm_eps", "use_gk", "use_gv", "attn", "attnres_block_size", "vocab_size"},
        kGatedIgnored, "GLAConfig"));
    auto o = std::make_shared<FlaOptions>();
    o->model = FlaModel::kGla;
    GatedModel m;
    RECUR_RETURN_IF_ERROR(ParseGatedModel(r, root, "GLAForCausalLM", 24, &m, o.get()));
    if (r.Given(root, "feature_map")) {
      return r.Invalid("feature_map", "must be null: feature maps on q and k are not supported");
    }
    GlaParams p;
    p.heads = 4;
    RECUR_RETURN_IF_ERROR(r.UInt(root, "num_heads", "", 1, &p.heads, false));
    bool given = false;
    p.kv_heads = p.heads;
    RECUR_RETURN_IF_ERROR(NullableUInt(r, root, "num_kv_heads", &p.kv_heads, &given));
    if (p.heads % p.kv_heads != 0) {
      return r.Invalid("num_kv_heads", "(" + std::to_string(p.kv_heads) +
                                           ") must divide num_heads (" +
                                           std::to_string(p.heads) + ")");
    }
    // key_dim = int(hidden_size·expand_k), value_dim likewise, each split over the heads.
    const struct {
      const char* key;
      double expand;
      uint32_t* head_dim;
    } dims[] = {{"expand_k", 0.5, &p.head_k_dim}, {"expand_v", 1.0, &p.head_v_dim}};
    for (auto [key, expand, head_dim] : dims) {
      RECUR_RETURN_IF_ERROR(r.NumberIn(root, key, "", 1e-6, 1e6, &expand, false));
      const auto width = uint64_t(double(m.d_model) * expand);
      if (width == 0 || width % p.heads != 0 || width / p.heads > (uint64_t{1} << 20)) {
        return r.Invalid(key, "times hidden_size (" + std::to_string(width) +
                                  ") must be a positive multiple of num_heads (" +
                                  std::to_string(p.heads) + ")");
      }
      *head_dim = uint32_t(width / p.heads);
    }
    bool short_conv = false, affine = true;
    RECUR_RETURN_IF_ERROR(r.Bool(root, "use_short_conv", "", &short_conv, false));
    p.conv_size = 4;
    RECUR_RETURN_IF_ERROR(r.UInt(root, "conv_size", "", 1, &p.conv_size, false));
    if (p.conv_size > 64) return r.Invalid("conv_size", "must be at most 64");
    if (!short_conv) p.conv_size = 0;
    RECUR_RETURN_IF_ERROR(r.Bool(root, "use_output_gate", "", &p.gate, false));
    // elementwise_affine null is falsy in GatedLinearAttention: no weight.
    if (root.contains("elementwise_affine") && root["elementwise_affine"].is_null()) {
      affine = false;
    } else {
      RECUR_RETURN_IF_ERROR(r.Bool(root, "elementwise_affine", "", &affine, false));
    }
    double clamp = 0;
    RECUR_RETURN_IF_ERROR(NullableNumber(r, root, "clamp_min", -1e30, 0, &clamp, &given));
    if (given) p.clamp_min = float(clamp);
    // fuse_norm picks the fused norm-and-gate module (its tensor g_norm_swish_gate) when
    // the output is gated; the math is the same.
    bool fuse_norm = true;
    RECUR_RETURN_IF_ERROR(r.Bool(root, "fuse_norm", "", &fuse_norm, false));
    o->gla_norm = !affine ? "" : fuse_norm && p.gate ? "g_norm_swish_gate" : "g_norm";
    // GLAForCausalLM passes neither to its layers: GatedLinearAttention's defaults.
    p.gate_rank = 16;
    p.gate_logit_normalizer = 16.0f;
    p.norm_eps = m.norm_eps;
    DescribeGated(m, fb::Mixer::Gla, p, d);
    d->layout_options = o;
    return ParseMetadata(r, root, &d->metadata);
  }

  // fla's names (model.layers.<i>.attn.*, mlp.*) for the gated models.
  static void MapGated(const FlaOptions& o, std::vector<ExpectedTensor>* tensors) {
    for (ExpectedTensor& t : *tensors) {
      const std::string& name = t.name;
      if (name == "input.embedding" || (name == "head.weight" && o.tied)) {
        t.source_name = "model.embeddings.weight";
      } else if (name == "final_norm.weight") {
        t.source_name = "model.norm.weight";
      } else if (name == "head.weight") {
        t.source_name = "lm_head.weight";
      } else if (name == "head.bias") {
        MakeZeros(&t);
      }
      uint32_t block = 0;
      std::string rest;
      if (!SplitBlockName(name, &block, &rest)) continue;
      const std::string layer = "model.layers." + std::to_string(block) + ".";
      const std::string attn = layer + "attn.";
      if (rest == "norm1.weight") {
        t.source_name = layer + "attn_norm.weight";
      } else if (rest == "norm2.weight") {
        t.source_name = layer + "mlp_norm.weight";
      } else if (rest == "ffn.linear1.weight") {  // [gate | up]: h = silu(gate x) ⊙ up x
        const int64_t d_ff = t.shape[0] / 2, d = t.shape[1];
        MakeConcatenation(&t, {{layer + "mlp.gate_proj.weight", {d_ff, d}},
                               {layer + "mlp.up_proj.weight", {d_ff, d}}});
      } else if (rest == "ffn.linear2.weight") {
        t.source_name = layer + "mlp.down_proj.weight";
      } else if (rest == "ffn.linear1.bias" || rest == "ffn.linear2.bias") {
        MakeZeros(&t);
      } else if (rest.rfind("mixer.", 0) == 0) {
        MapGatedMixer(o, attn, rest.substr(6), &t);
      }
    }
  }

  // blocks.<i>.mixer.<rest> ← fla's <attn><name>.
  static void MapGatedMixer(const FlaOptions& o, const std::string& attn, const std::string& rest,
                            ExpectedTensor* t) {
    if (rest == "norm_weight" && o.model == FlaModel::kGla) {
      if (o.gla_norm.empty()) {  // elementwise_affine false: ones
        t->source_name.clear();
        t->transform = SourceTransform::kComputed;
        const auto n = size_t(t->shape[0]);
        t->compute = [n](const std::vector<std::vector<float>>&) {
          return std::vector<float>(n, 1.0f);
        };
      } else {
        t->source_name = attn + o.gla_norm + ".weight";
      }
      return;
    }
    static const std::pair<const char*, const char*> kNames[] = {
        {"query.weight", "q_proj.weight"},
        {"key.weight", "k_proj.weight"},
        {"value.weight", "v_proj.weight"},
        {"decay.weight", "a_proj.weight"},  // Gated DeltaNet
        {"beta.weight", "b_proj.weight"},
        {"a_log", "A_log"},
        {"dt_bias", "dt_bias"},
        {"norm_weight", "o_norm.weight"},
        {"gate_down.weight", "gk_proj.0.weight"},  // GLA
        {"gate_up.weight", "gk_proj.1.weight"},
        {"gate_up.bias", "gk_proj.1.bias"},
        {"gate.weight", "g_proj.weight"},
        {"out.weight", "o_proj.weight"}};
    for (const auto& [recur, fla] : kNames) {
      if (rest == recur) {
        t->source_name = attn + fla;
        return;
      }
    }
    // The convolutions: nn.Conv1d's [C, 1, K] read as [C, K].
    static const std::pair<const char*, const char*> kConvs[] = {
        {"query_conv", "q_conv1d.weight"}, {"key_conv", "k_conv1d.weight"},
        {"value_conv", "v_conv1d.weight"}};
    for (const auto& [recur, fla] : kConvs) {
      if (rest == recur) {
        MakeConcatenation(t, {{attn + fla, {t->shape[0], 1, t->shape[1]}}});
        return;
      }
    }
  }

  static void MapRwkv7(const FlaOptions& o, const ModelDescription& d,
                       std::vector<ExpectedTensor>* tensors) {
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
