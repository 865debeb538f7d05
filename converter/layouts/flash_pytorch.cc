// The flash-pytorch layout: `FLASHTransformer` of FLASH-pytorch, with the
// constructor's keyword arguments as the config and the model's state_dict
// names (docs/layouts.md, "FLASH-pytorch"); or a lone `GAU` module as an
// encoder (below).
//
//   {"layout": "flash-pytorch", "class": "FLASHTransformer", "dim": 512, "num_tokens": 256,
//    "depth": 8, "group_size": 256, "query_key_dim": 128, "causal": true}
//
// Each layer is a whole block: x + FLASH(norm(x)), no feed-forward: recur's
// flash mixer after a pre-norm (ScaleNorm x/max(‖x‖/√dim, 1e-5)·g, or
// LayerNorm), with the library's token shift of the first ⌈dim/2⌉ normed
// features, its rotary embedding of the first min(32, query_key_dim)
// features of all four query/key rows, its T5 relative position bias
// (bucketed, times √query_key_dim) laid out per offset inside a group, and
// the scaled [sin | cos] absolute positions; then a LayerNorm and the head.
// The positions' and the rotary's frequencies are the stored ones
// (abs_pos_emb.inv_freq, layers.<i>.rotary_pos_emb.freqs), as the library
// computes with what load_state_dict gave it.
//
//   {"layout": "flash-pytorch", "class": "GAU", "dim": 64, "max_length": 1024}
//
// GAU: features of width dim in, one block x + GAU(norm(x)) (recur's gau
// mixer with length_scale, scale 1: relu²((Q·K + bias)/N), the causal mask
// when causal), no FFN, no final norm, no head; an encoder only. The library
// always adds its T5 bias (times √dim; its rel_pos_bias argument is unused),
// laid out for the offsets below max_length.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/layouts/layout_converter.h"
#include "converter/mixers/flash.h"
#include "converter/mixers/gau.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

// T5RelativePositionBias: 32 buckets, max_distance 128.
constexpr int64_t kT5Buckets = 32;
constexpr double kT5MaxDistance = 128.0;

struct FlashOptions : LayoutOptions {
  uint32_t group = 0, qk_dim = 0;
  bool causal = false, scale_norm = true;
  bool gau = false;         // class GAU: the module's own names, no "layers.<i>."
  double bias_scale = 0.0;  // T5RelativePositionBias(scale): √query_key_dim, GAU's √dim
  int64_t bias_length = 0;  // the offsets rel_bias covers: FLASH's group, GAU's max_length
};

static const char* const kNorms[] = {"scalenorm", "layernorm"};

// laplace_attn_fn: refused, `what` names recur's mixer.
Status RefuseLaplace(const KeyReader& r, const json& root, const char* what) {
  bool laplace = false;
  RECUR_RETURN_IF_ERROR(r.Bool(root, "laplace_attn_fn", "", &laplace, false));
  if (laplace) {
    return r.Invalid("laplace_attn_fn", std::string("must be false: recur's ") + what +
                                            " has the relu² attention function only");
  }
  return Status::Ok();
}

// T5RelativePositionBias._relative_position_bucket of n = t − p (query minus
// key), in float32 as the library computes the large offsets' bucket.
int64_t T5Bucket(int64_t n, bool causal) {
  int64_t buckets = kT5Buckets, ret = 0;
  if (!causal) {
    buckets /= 2;
    if (n < 0) ret += buckets;
    n = n < 0 ? -n : n;
  } else {
    n = std::max<int64_t>(n, 0);
  }
  const int64_t exact = buckets / 2;
  if (n < exact) return ret + n;
  const float scaled = std::log(static_cast<float>(n) / static_cast<float>(exact)) /
                       static_cast<float>(std::log(kT5MaxDistance / exact)) *
                       static_cast<float>(buckets - exact);
  return ret + std::min<int64_t>(exact + static_cast<int64_t>(scaled), buckets - 1);
}

// class GAU: GAU(dim, query_key_dim, expansion_factor, add_residual, causal,
// dropout, laplace_attn_fn, rel_pos_bias, norm_klass) as an encoder; norm_klass
// is the key norm_type, and max_length (recur's) bounds the sequences.
Status ParseGau(const KeyReader& r, const json& root, ModelDescription* d) {
  RECUR_RETURN_IF_ERROR(r.OnlyKeys(
      root, "",
      {"layout", "class", "notes", "input_description", "output_description", "dim",
       "query_key_dim", "expansion_factor", "add_residual", "causal", "dropout",
       "laplace_attn_fn", "rel_pos_bias", "norm_type", "max_length"}));
  auto o = std::make_shared<FlashOptions>();
  o->gau = true;
  o->qk_dim = 128;
  uint32_t dim = 0, max_length = 0;
  RECUR_RETURN_IF_ERROR(r.UInt(root, "dim", "", 1, &dim));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "query_key_dim", "", 1, &o->qk_dim, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "max_length", "", 1, &max_length));
  if (max_length > 65536) return r.Invalid("max_length", "must be at most 65536");
  double expansion = 2.0;
  RECUR_RETURN_IF_ERROR(r.NumberIn(root, "expansion_factor", "", 0.0, 1e6, &expansion, false));
  const auto hidden = static_cast<uint32_t>(dim * expansion);  // int(expansion_factor · dim)
  if (hidden == 0) return r.Invalid("expansion_factor", "gives no hidden features");
  bool residual = true, ignored = false;
  RECUR_RETURN_IF_ERROR(r.Bool(root, "add_residual", "", &residual, false));
  if (!residual) {
    return r.Invalid("add_residual", "must be true: recur's blocks add the residual");
  }
  RECUR_RETURN_IF_ERROR(r.Bool(root, "causal", "", &o->causal, false));
  RECUR_RETURN_IF_ERROR(RefuseLaplace(r, root, "GAU"));
  // The library builds its T5 bias whatever rel_pos_bias says (0.1.9).
  RECUR_RETURN_IF_ERROR(r.Bool(root, "rel_pos_bias", "", &ignored, false));
  double dropout = 0;  // training only
  RECUR_RETURN_IF_ERROR(r.NumberIn(root, "dropout", "", 0.0, 1.0, &dropout, false));
  std::size_t norm = 1;  // nn.LayerNorm, the library's default norm_klass
  RECUR_RETURN_IF_ERROR(r.Choice(root, "norm_type", "", kNorms, &norm, false));
  o->scale_norm = norm == 0;
  o->bias_scale = std::sqrt(static_cast<double>(dim));  // T5RelativePositionBias(dim ** 0.5)
  o->bias_length = max_length;

  d->d_model = dim;
  d->norm_placement = NormPlacement::kPre;
  d->norm = o->scale_norm ? NormKind::kScaleNormRms : NormKind::kLayerNorm;
  d->layer_norm_eps = 1e-5f;  // ScaleNorm's and nn.LayerNorm's
  d->input = InputDescription{};
  d->input.kind = InputKind::kFeatures;
  d->input.feature_width = dim;
  auto mixer = std::make_unique<GauParams>();
  mixer->expansion_dim = hidden;
  mixer->qk_dim = o->qk_dim;
  mixer->max_length = max_length;
  mixer->scale = 1.0f;  // sim = q·k, then / seq_len
  mixer->mask = o->causal;
  mixer->length_scale = true;
  mixer->causal = false;  // an encoder, masked or not
  BlockDescription block;
  block.mixer = MixerDescription(FindMixerType(fb::Mixer::Gau), std::move(mixer));
  block.d_ff = 0;  // the GAU is the whole block
  d->blocks.assign(1, block);
  d->final_norm = false;
  d->has_head = false;
  d->layout_options = o;
  return ParseMetadata(r, root, &d->metadata);
}

const char* const kFlashClasses[] = {"FLASHTransformer", "GAU"};

Status ParseFlash(const KeyReader& r, const json& root, ModelDescription* d) {
  std::size_t cls = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(root, "class", "", kFlashClasses, &cls));
  if (cls == 1) return ParseGau(r, root, d);
  RECUR_RETURN_IF_ERROR(r.OnlyKeys(
      root, "",
      {"layout", "class", "notes", "input_description", "output_description", "dim", "num_tokens",
       "depth", "group_size", "query_key_dim", "expansion_factor", "causal", "attn_dropout",
       "norm_type", "shift_tokens", "laplace_attn_fn", "reduce_group_non_causal_attn"}));
  auto o = std::make_shared<FlashOptions>();
  uint32_t dim = 0, depth = 0;
  o->group = 256;
  o->qk_dim = 128;
  RECUR_RETURN_IF_ERROR(r.UInt(root, "dim", "", 1, &dim));
  RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "depth", &depth));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "group_size", "", 1, &o->group, false));
  if (o->group > 65536) return r.Invalid("group_size", "must be at most 65536");
  RECUR_RETURN_IF_ERROR(r.UInt(root, "query_key_dim", "", 1, &o->qk_dim, false));
  if (o->qk_dim % 2 != 0) {
    return r.Invalid("query_key_dim",
                     "must be even: the rotary embedding turns pairs of the "
                     "first min(32, query_key_dim) features");
  }
  double expansion = 2.0;
  RECUR_RETURN_IF_ERROR(r.NumberIn(root, "expansion_factor", "", 0.0, 1e6, &expansion, false));
  const auto hidden = static_cast<uint32_t>(dim * expansion);  // int(dim · expansion_factor)
  if (hidden == 0) return r.Invalid("expansion_factor", "gives no hidden features");
  if (dim % 2 != 0) {
    return r.Invalid("dim",
                     "must be even: the library's scaled [sin | cos] positions are "
                     "2·⌈dim/2⌉ wide and would not fit the embedding");
  }
  RECUR_RETURN_IF_ERROR(r.Bool(root, "causal", "", &o->causal, false));
  std::size_t norm = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(root, "norm_type", "", kNorms, &norm, false));
  o->scale_norm = norm == 0;
  bool shift = true, reduce = true;
  RECUR_RETURN_IF_ERROR(r.Bool(root, "shift_tokens", "", &shift, false));
  RECUR_RETURN_IF_ERROR(RefuseLaplace(r, root, "FLASH"));
  RECUR_RETURN_IF_ERROR(r.Bool(root, "reduce_group_non_causal_attn", "", &reduce, false));
  if (!reduce && !o->causal) {
    return r.Invalid("reduce_group_non_causal_attn",
                     "must be true: recur's FLASH encoder sums the linear part over all groups");
  }
  double dropout = 0;  // training only
  RECUR_RETURN_IF_ERROR(r.NumberIn(root, "attn_dropout", "", 0.0, 1.0, &dropout, false));
  o->bias_scale = std::sqrt(static_cast<double>(o->qk_dim));  // T5RelativePositionBias(s ** 0.5)
  o->bias_length = o->group;

  d->d_model = dim;
  d->norm_placement = NormPlacement::kPre;
  d->norm = o->scale_norm ? NormKind::kScaleNormRms : NormKind::kLayerNorm;
  d->layer_norm_eps = 1e-5f;  // ScaleNorm's and nn.LayerNorm's
  d->input = InputDescription{};
  d->input.kind = InputKind::kTokens;
  RECUR_RETURN_IF_ERROR(r.UInt(root, "num_tokens", "", 1, &d->input.vocab_size));
  // ScaledSinuEmbedding: [sin | cos] · scale of t·inv_freq, its stored buffer.
  d->input.sinusoid = true;
  d->input.sinusoid_scale = true;
  d->input.sinusoid_freq = true;
  auto mixer = std::make_unique<FlashParams>();
  mixer->expansion_dim = hidden;
  mixer->qk_dim = o->qk_dim;
  mixer->chunk = o->group;
  mixer->scale = 1.0f / static_cast<float>(o->group);  // the library's 1/g
  mixer->causal = o->causal;
  // RotaryEmbedding(min(32, s)): interleaved pairs turned by t·freqs, its
  // stored parameter (requires_grad False, in the state_dict).
  mixer->rotary.dims = std::min<uint32_t>(32, o->qk_dim);
  mixer->rotary.half = false;
  mixer->rotary.theta = true;
  BlockDescription block;
  block.mixer = MixerDescription(FindMixerType(fb::Mixer::Flash), std::move(mixer));
  block.d_ff = 0;  // the FLASH layer is the whole block
  if (shift) block.token_shift.segments.emplace_back((dim + 1) / 2, 1);  // torch.chunk(2)
  d->blocks.assign(depth, block);
  d->final_norm = true;
  d->final_norm_kind = NormKind::kLayerNorm;  // to_logits: LayerNorm, Linear
  d->has_head = true;
  d->head.out = d->input.vocab_size;
  d->head.activation = HeadActivation::kNone;
  d->layout_options = o;
  return ParseMetadata(r, root, &d->metadata);
}

class FlashLayoutConverter final : public LayoutConverter {
 public:
  bool Recognizes(const json& root) const override { return ClassIsOneOf(root, kFlashClasses); }

  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    return ParseFlash(r, root, d);
  }

  void MapTensors(const ModelDescription& desc,
                  std::vector<ExpectedTensor>* tensors) const override {
    const auto& o = static_cast<const FlashOptions&>(*desc.layout_options);
    for (ExpectedTensor& t : *tensors) {
      uint32_t block = 0;
      std::string rest;
      if (SplitBlockName(t.name, &block, &rest)) {
        MapBlock(o, o.gau ? std::string() : "layers." + std::to_string(block) + ".", rest, &t);
      } else if (t.name == "input.embedding") {
        t.source_name = "token_emb.weight";
      } else if (t.name == "input.position_scale") {
        t.source_name = "abs_pos_emb.scale";
      } else if (t.name == "input.position_freq") {
        t.source_name = "abs_pos_emb.inv_freq";
      } else if (t.name.compare(0, 11, "final_norm.") == 0) {
        t.source_name = "to_logits.0." + t.name.substr(11);
      } else if (t.name.compare(0, 5, "head.") == 0) {
        t.source_name = "to_logits.1." + t.name.substr(5);
      }
    }
  }

 private:
  static void MapBlock(const FlashOptions& o, const std::string& layer, const std::string& rest,
                       ExpectedTensor* t) {
    const int64_t e = t->shape.empty() ? 0 : t->shape[0];
    if (rest.compare(0, 6, "norm1.") == 0) {
      // ScaleNorm's g, or nn.LayerNorm's weight and bias.
      t->source_name = layer + "norm." + (o.scale_norm ? std::string("g") : rest.substr(6));
    } else if (rest.compare(0, 12, "mixer.v_proj") == 0 ||
               rest.compare(0, 12, "mixer.u_proj") == 0) {
      // to_hidden: rows [0, E) the values, [E, 2E) the gate (v, gate = chunk(2)).
      const bool gate = rest[6] == 'u';
      const bool weight = rest.substr(rest.size() - 6) == "weight";
      t->source_name = layer + "to_hidden.0." + (weight ? "weight" : "bias");
      t->transform = SourceTransform::kRows;
      t->source_shape = t->shape;
      t->source_shape[0] = 2 * e;
      t->row_offset = gate ? e : 0;
    } else if (rest == "mixer.rotary.theta") {
      // One RotaryEmbedding shared by the layers, saved under each.
      t->source_name = layer + "rotary_pos_emb.freqs";
    } else if (rest.compare(0, 13, "mixer.z_proj.") == 0) {
      t->source_name = layer + "to_qk.0." + rest.substr(13);
    } else if (rest.compare(0, 10, "mixer.out.") == 0) {
      // FLASH's to_out is the Linear, GAU's a Sequential(Linear, Dropout).
      t->source_name = layer + (o.gau ? "to_out.0." : "to_out.") + rest.substr(10);
    } else if (o.gau && (rest == "mixer.qk_gamma" || rest == "mixer.qk_beta")) {
      // OffsetScale(heads = 2): rows q, k, as recur's.
      t->source_name = layer + "offsetscale." + (rest == "mixer.qk_gamma" ? "gamma" : "beta");
    } else if (rest == "mixer.qk_gamma" || rest == "mixer.qk_beta") {
      // OffsetScale rows quad_q, lin_q, quad_k, lin_k; recur's Q^quad, K^quad, Q^lin, K^lin.
      const std::string name =
          layer + "qk_offset_scale." + (rest == "mixer.qk_gamma" ? "gamma" : "beta");
      const int64_t s = t->shape[1];
      t->source_name.clear();
      t->transform = SourceTransform::kComputed;
      t->inputs = {{name, {4, s}}};
      t->compute = [s](const std::vector<std::vector<float>>& in) {
        static const int kFrom[4] = {0, 2, 1, 3};
        std::vector<float> out(static_cast<std::size_t>(4 * s));
        for (int r = 0; r < 4; ++r) {
          std::copy_n(in[0].begin() + kFrom[r] * s, s, out.begin() + r * s);
        }
        return out;
      };
    } else if (rest == "mixer.rel_bias") {
      // rel_bias[j] for offsets t − p = j (causal) or j − (C − 1): scale·B[bucket], C
      // FLASH's group or GAU's max_length.
      const bool causal = o.causal;
      const int64_t c = o.bias_length, n = t->shape[0];
      const double scale = o.bias_scale;
      t->source_name.clear();
      t->transform = SourceTransform::kComputed;
      t->inputs = {{layer + "rel_pos_bias.relative_attention_bias.weight", {kT5Buckets, 1}}};
      t->compute = [causal, c, n, scale](const std::vector<std::vector<float>>& in) {
        std::vector<float> out(static_cast<std::size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
          const int64_t offset = causal ? j : j - (c - 1);
          out[j] = static_cast<float>(in[0][T5Bucket(offset, causal)] * scale);
        }
        return out;
      };
    }
  }
};

}  // namespace

const LayoutConverter& FlashPytorchLayout() {
  static const FlashLayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
