// The performer layout: `Performer` and `PerformerLM` of performer-pytorch,
// with the constructor's keyword arguments as the config and the model's
// state_dict names (docs/layouts.md, "performer-pytorch").
//
//   {"layout": "performer", "class": "PerformerLM", "num_tokens": 256, "max_seq_len": 1024,
//    "dim": 128, "depth": 4, "heads": 4, "dim_head": 32, "causal": true,
//    "generalized_attention": true}
//
// Blocks are pre-norm: x + attn(norm(x)), x + ff(norm(x)); the attention is
// FAVOR+ over ω = projection_matrixᵀ with performer-pytorch's kernels (the
// recur feature maps favor_stabilized and generalized_relu) and its
// denominators, rotary embeddings (PerformerLM's default) and token shift
// where asked; PerformerLM adds the token embedding, absolute positions, a
// final LayerNorm and the head.
#include <cmath>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/layouts/layout_converter.h"
#include "converter/mixers/linear_attention.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

enum class PerformerPositions { kNone, kLearned, kAxial };

struct PerformerOptions : LayoutOptions {
  bool lm = false;  // PerformerLM: the network under "performer.", embeddings, head
  uint32_t heads = 0, dim_head = 0, features = 0;
  bool qkv_bias = false, out_bias = false, tie_embed = false;
  bool rotary = false;        // PerformerLM's rotary_position_emb: fixed [sin | cos] positions
  bool shift_tokens = false;  // a PreShiftTokens level inside each sublayer's wrapper
  bool scale_norm = false;    // PreScaleNorm: the wrappers hold a scalar g, not a LayerNorm
  bool reversible = false;    // ReversibleSequence: net.blocks.<i>.f / .g
  PerformerPositions positions = PerformerPositions::kNone;
  uint32_t axial_rows = 0, axial_cols = 0;  // axial_position_shape
};

// A boolean option recur cannot reproduce when set: refused with the reason.
Status RefuseIfSet(const KeyReader& r, const json& root, const char* key, const char* reason) {
  bool on = false;
  RECUR_RETURN_IF_ERROR(r.Bool(root, key, "", &on, false));
  return on ? r.Invalid(key, std::string("must be false: ") + reason) : Status::Ok();
}

const char* const kPerformerClasses[] = {"Performer", "PerformerLM"};

Status ParsePerformer(const KeyReader& r, const json& root, ModelDescription* d) {
  std::size_t cls = 0;
  RECUR_RETURN_IF_ERROR(r.Choice(root, "class", "", kPerformerClasses, &cls));
  auto o = std::make_shared<PerformerOptions>();
  o->lm = cls == 1;
  RECUR_RETURN_IF_ERROR(r.OnlyKeys(root, "",
                                   {"layout",
                                    "class",
                                    "notes",
                                    "input_description",
                                    "output_description",
                                    "num_tokens",
                                    "max_seq_len",
                                    "dim",
                                    "depth",
                                    "heads",
                                    "dim_head",
                                    "local_attn_heads",
                                    "local_window_size",
                                    "causal",
                                    "ff_mult",
                                    "nb_features",
                                    "feature_redraw_interval",
                                    "reversible",
                                    "ff_chunks",
                                    "ff_glu",
                                    "emb_dropout",
                                    "ff_dropout",
                                    "attn_dropout",
                                    "generalized_attention",
                                    "kernel_fn",
                                    "use_scalenorm",
                                    "use_rezero",
                                    "cross_attend",
                                    "no_projection",
                                    "tie_embed",
                                    "rotary_position_emb",
                                    "axial_position_emb",
                                    "axial_position_shape",
                                    "auto_check_redraw",
                                    "qkv_bias",
                                    "attn_out_bias",
                                    "shift_tokens"}));
  if (!o->lm) {
    for (const char* key : {"num_tokens", "max_seq_len", "emb_dropout", "tie_embed",
                            "rotary_position_emb", "axial_position_emb", "axial_position_shape"}) {
      if (root.contains(key)) return r.Invalid(key, "applies only to class PerformerLM");
    }
  }
  uint32_t dim = 0, depth = 0, heads = 0, dim_head = 64, ff_mult = 4;
  RECUR_RETURN_IF_ERROR(r.UInt(root, "dim", "", 1, &dim));
  RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "depth", &depth));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "heads", "", 1, &heads));
  if (dim % heads != 0) {
    return r.Invalid("heads",
                     "must divide dim (" + std::to_string(dim) + "), as the library asserts");
  }
  if (KeyReader::Given(root, "dim_head")) {
    RECUR_RETURN_IF_ERROR(r.UInt(root, "dim_head", "", 1, &dim_head));
  }
  RECUR_RETURN_IF_ERROR(r.UInt(root, "ff_mult", "", 1, &ff_mult, false));
  if (KeyReader::Given(root, "local_attn_heads") &&
      !(root["local_attn_heads"].is_number_integer() && root["local_attn_heads"] == 0)) {
    return r.Invalid("local_attn_heads",
                     "must be 0: local heads (block-aligned windowed "
                     "softmax beside the FAVOR+ heads of a layer) have no "
                     "recur form yet");
  }
  bool causal = false, generalized = false;
  RECUR_RETURN_IF_ERROR(r.Bool(root, "causal", "", &causal, false));
  RECUR_RETURN_IF_ERROR(r.Bool(root, "generalized_attention", "", &generalized, false));
  if (auto k = root.find("kernel_fn"); k != root.end() && *k != "relu") {
    return r.Invalid("kernel_fn",
                     "must be \"relu\" (nn.ReLU, the default): another kernel of "
                     "the generalized attention has no recur feature map");
  }
  if (!generalized && causal) {
    return r.Invalid("causal",
                     "must be false with the softmax kernel (generalized_attention "
                     "false): its keys' stabiliser is a maximum over the whole "
                     "sequence, so a causal model's output at a position depends on "
                     "later keys and has no recurrent form; train with "
                     "generalized_attention true to stream");
  }
  RECUR_RETURN_IF_ERROR(RefuseIfSet(r, root, "no_projection",
                                    "the softmax of the features "
                                    "has no recur feature map yet"));
  RECUR_RETURN_IF_ERROR(RefuseIfSet(r, root, "cross_attend",
                                    "cross-attention needs an encoder "
                                    "output recur does not take"));
  RECUR_RETURN_IF_ERROR(r.Bool(root, "reversible", "", &o->reversible, false));
  RECUR_RETURN_IF_ERROR(r.Bool(root, "use_scalenorm", "", &o->scale_norm, false));
  bool glu = false, rezero = false;
  RECUR_RETURN_IF_ERROR(r.Bool(root, "ff_glu", "", &glu, false));
  RECUR_RETURN_IF_ERROR(r.Bool(root, "use_rezero", "", &rezero, false));
  // ReZero (x + g·f(x), no norm) gives way to ScaleNorm in the library; alone
  // it leaves blocks without a norm, which recur's blocks cannot express.
  if (rezero && !o->scale_norm) {
    return r.Invalid("use_rezero",
                     "must be false (unless use_scalenorm is true, which wins): "
                     "ReZero blocks have no norm, which recur's blocks cannot "
                     "express yet");
  }
  RECUR_RETURN_IF_ERROR(r.Bool(root, "shift_tokens", "", &o->shift_tokens, false));
  // Training only: the converted model is the eval() forward with the stored
  // projections.
  for (const char* key : {"emb_dropout", "ff_dropout", "attn_dropout"}) {
    double rate = 0;
    RECUR_RETURN_IF_ERROR(r.NumberIn(root, key, "", 0.0, 1.0, &rate, false));
  }
  uint32_t unused = 0;
  for (const char* key : {"ff_chunks", "local_window_size"}) {
    RECUR_RETURN_IF_ERROR(r.UInt(root, key, "", 1, &unused, false));
  }
  if (KeyReader::Given(root, "feature_redraw_interval")) {
    RECUR_RETURN_IF_ERROR(r.UInt(root, "feature_redraw_interval", "", 1, &unused));
  }
  bool ignored = false;
  RECUR_RETURN_IF_ERROR(r.Bool(root, "auto_check_redraw", "", &ignored, false));

  o->heads = heads;
  o->dim_head = dim_head;
  // nb_features None: int(dim_head · ln(dim_head)).
  o->features = static_cast<uint32_t>(dim_head * std::log(static_cast<double>(dim_head)));
  if (KeyReader::Given(root, "nb_features")) {
    RECUR_RETURN_IF_ERROR(r.UInt(root, "nb_features", "", 1, &o->features));
  }
  if (o->features == 0) {
    return r.Invalid("dim_head",
                     "gives no random features (int(dim_head·ln dim_head) = 0): set "
                     "nb_features");
  }
  // Bare Performer: biases on by default; PerformerLM: off.
  o->qkv_bias = !o->lm;
  o->out_bias = !o->lm;
  RECUR_RETURN_IF_ERROR(r.Bool(root, "qkv_bias", "", &o->qkv_bias, false));
  RECUR_RETURN_IF_ERROR(r.Bool(root, "attn_out_bias", "", &o->out_bias, false));

  d->d_model = dim;
  d->norm_placement = NormPlacement::kPre;
  // PreScaleNorm: g·x / max(‖x‖₂, 1e-5); the final norm stays nn.LayerNorm.
  d->norm = o->scale_norm ? NormKind::kScaleNorm : NormKind::kLayerNorm;
  d->final_norm_kind = NormKind::kLayerNorm;
  d->layer_norm_eps = 1e-5f;
  d->reversible = o->reversible;
  d->input = InputDescription{};
  if (o->lm) {
    d->input.kind = InputKind::kTokens;
    RECUR_RETURN_IF_ERROR(r.UInt(root, "num_tokens", "", 1, &d->input.vocab_size));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "max_seq_len", "", 1, &d->input.max_positions));
    bool axial = false;
    o->rotary = true;
    RECUR_RETURN_IF_ERROR(r.Bool(root, "rotary_position_emb", "", &o->rotary, false));
    if (o->rotary && dim % 2 != 0) {  // its [sin | cos] table is 2·⌈dim/2⌉ wide
      return r.Invalid("dim",
                       "must be even with rotary_position_emb (the library's fixed "
                       "positions would not fit the embedding)");
    }
    RECUR_RETURN_IF_ERROR(r.Bool(root, "axial_position_emb", "", &axial, false));
    // rotary_position_emb: the library's pos_emb is its fixed [sin | cos] table,
    // stored, so recur's learned positions take it as it is; it wins over
    // axial_position_emb, as in the library.
    axial = axial && !o->rotary;
    o->positions = axial ? PerformerPositions::kAxial : PerformerPositions::kLearned;
    if (axial) {
      // axial_position_shape None: (ceil(max_seq_len / 64), 64).
      o->axial_rows = (d->input.max_positions + 63) / 64;
      o->axial_cols = 64;
      if (KeyReader::Given(root, "axial_position_shape")) {
        const json& shape = root["axial_position_shape"];
        if (!shape.is_array() || shape.size() != 2 || !shape[0].is_number_unsigned() ||
            !shape[1].is_number_unsigned() || shape[0] == 0 || shape[1] == 0) {
          return r.Invalid("axial_position_shape", "must be two positive integers");
        }
        o->axial_rows = shape[0].get<uint32_t>();
        o->axial_cols = shape[1].get<uint32_t>();
      }
      if (uint64_t{o->axial_rows} * o->axial_cols < d->input.max_positions) {
        return r.Invalid("axial_position_shape", "must cover max_seq_len positions");
      }
    } else if (root.contains("axial_position_shape") && !o->rotary) {
      return r.Invalid("axial_position_shape", "applies only with axial_position_emb true");
    }
    RECUR_RETURN_IF_ERROR(r.Bool(root, "tie_embed", "", &o->tie_embed, false));
    d->has_head = true;
    d->head.out = d->input.vocab_size;
    d->head.activation = HeadActivation::kNone;
    d->final_norm = true;
  } else {
    d->input.kind = InputKind::kFeatures;
    d->input.feature_width = dim;
    d->has_head = false;
    d->final_norm = false;
  }
  LinearAttentionParams la;
  la.heads = heads;
  la.dk = dim_head;
  la.dv = dim_head;
  la.feature_map = generalized ? FeatureMap::kGeneralizedRelu : FeatureMap::kFavorStabilized;
  la.favor_features = o->features;
  la.softmax_temp = 1.0f / std::sqrt(static_cast<float>(dim_head));  // dim_head^(-1/4), squared
  la.feature_eps = generalized ? 1e-3f : 1e-4f;
  // Causal: φ(q)·(z + 1e-6); non-causal: φ(q)·z alone.
  la.eps = causal ? 1e-6f : 0.0f;
  la.eps_per_feature = causal;
  la.causal = causal;
  if (o->rotary) {
    // Every head's q and k, pairs (2i, 2i + 1), turned by the sines and
    // cosines of layer_pos_emb.emb, the stored [sin | cos] table of
    // max_seq_len rows (rounded separately: no θ reproduces them).
    if (dim_head % 2 != 0) {
      return r.Invalid("dim_head", "must be even with rotary_position_emb (rotary pairs)");
    }
    la.rotary.dims = dim_head;
    la.rotary.half = false;
    la.rotary.table_rows = d->input.max_positions;
  }
  BlockDescription block;
  block.mixer = MixerDescription(FindMixerType(fb::Mixer::LinearAttention),
                                 std::make_unique<LinearAttentionParams>(la));
  block.d_ff = dim * ff_mult;
  block.activation = Activation::kGelu;
  block.glu = glu;  // w1 [2·d_ff, dim]: gelu(first half) ⊙ second half
  if (o->shift_tokens) {
    // PreShiftTokens after each norm: ⌊dim/k⌋ features per shift of (0, 1)
    // (causal) or (−1, 0, 1), the remainder passed; the attention's and the
    // FFN's inputs alike.
    const std::vector<int32_t> shifts =
        causal ? std::vector<int32_t>{0, 1} : std::vector<int32_t>{-1, 0, 1};
    const uint32_t width = dim / static_cast<uint32_t>(shifts.size());
    if (width == 0) return r.Invalid("shift_tokens", "needs dim >= the number of shifts");
    for (int32_t s : shifts) block.token_shift.segments.emplace_back(width, s);
    block.token_shift.ffn = true;
  }
  d->blocks.assign(depth, block);
  d->layout_options = o;
  return ParseMetadata(r, root, &d->metadata);
}

// blocks.<i>.<rest> under block i's wrappers `s`. With shift_tokens,
// PreShiftTokens wraps each sublayer: one more ".fn".
void MapBlockTensor(const PerformerOptions& o, const Sublayers& s, const std::string& rest,
                    ExpectedTensor* t) {
  const std::string& attn = s.attn;
  const std::string& ff = s.ff;
  const std::string fn = o.shift_tokens ? "fn.fn." : "fn.";
  if (rest.compare(0, 6, "norm1.") == 0) {  // PreScaleNorm keeps its g on the wrapper
    t->source_name = attn + (o.scale_norm ? std::string("g") : "norm." + rest.substr(6));
  } else if (rest.compare(0, 6, "norm2.") == 0) {
    t->source_name = ff + (o.scale_norm ? std::string("g") : "norm." + rest.substr(6));
  } else if (rest.compare(0, 12, "ffn.linear1.") == 0) {
    t->source_name = ff + fn + "fn.w1." + rest.substr(12);  // ...fn: Chunk, fn.fn: FeedForward
  } else if (rest.compare(0, 12, "ffn.linear2.") == 0) {
    t->source_name = ff + fn + "fn.w2." + rest.substr(12);
  } else if (rest == "mixer.rotary.table") {  // FixedPositionalEmbedding(dim_head), shared
    t->source_name = "layer_pos_emb.emb";
  } else if (rest == "mixer.feature_map.omega") {  // projection_matrix [m, dk]
    t->source_name = attn + fn + "fast_attention.projection_matrix";
    t->transform = SourceTransform::kTranspose;
    t->source_shape = {t->shape[1], t->shape[0]};
  } else {
    for (const char* p : {"query", "key", "value", "out"}) {
      const std::string recur = std::string("mixer.") + p + ".";
      if (rest.compare(0, recur.size(), recur) != 0) continue;
      const bool bias = rest.substr(recur.size()) == "bias";
      const bool out = std::string(p) == "out";
      if (bias && !(out ? o.out_bias : o.qkv_bias)) return MakeZeros(t);
      static const char* const kNames[] = {"to_q", "to_k", "to_v", "to_out"};
      const int i = p[0] == 'q' ? 0 : p[0] == 'k' ? 1 : p[0] == 'v' ? 2 : 3;
      t->source_name = attn + fn + kNames[i] + "." + rest.substr(recur.size());
    }
  }
}

class PerformerLayoutConverter final : public LayoutConverter {
 public:
  bool Recognizes(const json& root) const override {
    return ClassIsOneOf(root, kPerformerClasses);
  }

  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    return ParsePerformer(r, root, d);
  }

  void MapTensors(const ModelDescription& desc,
                  std::vector<ExpectedTensor>* tensors) const override {
    const auto& o = static_cast<const PerformerOptions&>(*desc.layout_options);
    const std::string top = o.lm ? "performer." : "";  // the Performer module
    const std::string net = top + "net.";
    const int64_t d = desc.d_model;
    for (ExpectedTensor& t : *tensors) {
      uint32_t block = 0;
      std::string rest;
      if (SplitBlockName(t.name, &block, &rest)) {
        MapBlockTensor(o, LucidrainsSublayers(net, block, o.reversible), rest, &t);
      } else if (t.name == "input.embedding") {
        t.source_name = "token_emb.weight";
      } else if (t.name == "input.positions" && o.positions == PerformerPositions::kLearned) {
        t.source_name = o.rotary ? "pos_emb.emb" : "pos_emb.emb.weight";
      } else if (t.name == "input.positions") {
        // axial: row t = weights_0[t / cols] + weights_1[t % cols] (summed, one per axis).
        t.source_name.clear();
        t.transform = SourceTransform::kComputed;
        const int64_t rows = o.axial_rows, cols = o.axial_cols, n = t.shape[0];
        t.inputs = {{"pos_emb.weights_0", {1, rows, 1, d}}, {"pos_emb.weights_1", {1, 1, cols, d}}};
        t.compute = [cols, n, d](const std::vector<std::vector<float>>& in) {
          std::vector<float> out(static_cast<std::size_t>(n * d));
          for (int64_t p = 0; p < n; ++p) {
            for (int64_t c = 0; c < d; ++c) {
              out[p * d + c] = in[0][(p / cols) * d + c] + in[1][(p % cols) * d + c];
            }
          }
          return out;
        };
      } else if (t.name.compare(0, 11, "final_norm.") == 0) {
        t.source_name = "norm." + t.name.substr(11);
      } else if (t.name == "head.weight") {
        t.source_name = o.tie_embed ? "token_emb.weight" : "to_out.weight";
      } else if (t.name == "head.bias") {
        if (o.tie_embed) {  // x @ token_emb.weightᵀ, no bias
          MakeZeros(&t);
        } else {
          t.source_name = "to_out.bias";
        }
      }
    }
    // performer-pytorch's ProjectionUpdater holds the network a second time
    // (performer.proj_updater.instance.*, the same tensors) and a call counter.
    std::vector<ExpectedTensor> twins;
    for (const ExpectedTensor& t : *tensors) {
      if (t.transform == SourceTransform::kZeros || t.transform == SourceTransform::kComputed ||
          t.source_name.compare(0, net.size(), net) != 0) {
        continue;
      }
      twins.push_back(IgnoredSource(
          top + "proj_updater.instance." + t.source_name.substr(net.size()), t.SourceShape()));
    }
    twins.push_back(IgnoredSource(top + "proj_updater.calls_since_last_redraw"));
    for (ExpectedTensor& t : twins) tensors->push_back(std::move(t));
  }
};

}  // namespace

const LayoutConverter& PerformerLayout() {
  static const PerformerLayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
