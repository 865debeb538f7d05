// The hf-longformer layout: a Hugging Face transformers `LongformerModel`,
// with its config.json (as `save_pretrained` writes it; recognised by
// "model_type": "longformer") and its state_dict names (docs/layouts.md,
// "Hugging Face Longformer").
//
// The model maps onto recur's post-norm blocks of non-causal sliding-window
// attention: window = attention_window (±attention_window/2), the first
// `global_tokens` positions global with Longformer's own query_global,
// key_global and value_global projections; RoBERTa embeddings: the learned
// positions start at row pad_token_id + 1, the token type 0 row is added to
// each, then the embedding LayerNorm. The output is last_hidden_state.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "converter/layouts/hf_config.h"
#include "converter/layouts/layout_converter.h"
#include "converter/mixers/mixer_converter.h"
#include "converter/mixers/sliding_window.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

struct LongformerOptions : LayoutOptions {
  uint32_t pad_token_id = 1;
  uint32_t max_position_embeddings = 512;
  uint32_t type_vocab_size = 2;
  bool global_projections = false;
};

Status ParseLongformer(const KeyReader& r, const json& root, ModelDescription* d) {
  // The keys that decide the model (the class's defaults apply to absent ones), then
  // recur's own; and the class's keys that change no output.
  RECUR_RETURN_IF_ERROR(CheckTransformersKeys(
      r, root,
      {"layout", "notes", "input_description", "output_description", "vocab_size", "hidden_size",
       "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
       "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "attention_window",
       "pad_token_id", "is_decoder", "add_cross_attention", "pruned_heads", "global_tokens"},
      {"architectures", "attention_probs_dropout_prob", "onnx_export"}, "LongformerConfig"));
  if (auto type = root.find("model_type"); type != root.end() && *type != "longformer") {
    return r.Invalid("model_type", "must be \"longformer\"");
  }
  if (auto a = root.find("architectures"); a != root.end() && !a->is_null()) {
    if (!a->is_array() || a->size() != 1 || (*a)[0] != "LongformerModel") {
      return r.Invalid("architectures",
                       "must be [\"LongformerModel\"]: recur converts the encoder and its "
                       "last_hidden_state; the task heads (masked LM, classification, question "
                       "answering) have no recur form");
    }
  }
  for (const char* key : {"is_decoder", "add_cross_attention"}) {
    bool on = false;
    RECUR_RETURN_IF_ERROR(r.Bool(root, key, "", &on, false));
    if (on) return r.Invalid(key, "must be false: Longformer is an encoder here");
  }
  if (auto p = root.find("pruned_heads"); p != root.end() && !(p->is_object() && p->empty())) {
    return r.Invalid("pruned_heads", "must be empty: pruned attention heads are not supported");
  }
  uint32_t hidden = 768, layers = 12, heads = 12, intermediate = 3072;
  auto o = std::make_shared<LongformerOptions>();
  d->input = InputDescription{};
  d->input.kind = InputKind::kTokens;
  d->input.vocab_size = 30522;
  RECUR_RETURN_IF_ERROR(r.UInt(root, "vocab_size", "", 1, &d->input.vocab_size, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "hidden_size", "", 1, &hidden, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "num_attention_heads", "", 1, &heads, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "intermediate_size", "", 1, &intermediate, false));
  RECUR_RETURN_IF_ERROR(
      r.UInt(root, "max_position_embeddings", "", 1, &o->max_position_embeddings, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "type_vocab_size", "", 1, &o->type_vocab_size, false));
  RECUR_RETURN_IF_ERROR(r.UInt(root, "pad_token_id", "", 0, &o->pad_token_id, false));
  if (root.contains("num_hidden_layers")) {
    RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "num_hidden_layers", &layers));
  }
  if (hidden % heads != 0) {
    return r.Invalid("num_attention_heads", "must divide hidden_size (" + std::to_string(hidden) +
                                                "), as transformers requires");
  }
  if (o->max_position_embeddings <= o->pad_token_id + 1) {
    return r.Invalid("max_position_embeddings",
                     "must exceed pad_token_id + 1 (" + std::to_string(o->pad_token_id + 1) +
                         "): RoBERTa positions start at row pad_token_id + 1");
  }
  d->layer_norm_eps = 1e-12f;
  if (root.contains("layer_norm_eps")) {
    RECUR_RETURN_IF_ERROR(r.PositiveFloat(root, "layer_norm_eps", "", &d->layer_norm_eps));
  }
  static const char* const kActivations[] = {"relu", "gelu"};
  std::size_t act = 1;
  RECUR_RETURN_IF_ERROR(r.Choice(root, "hidden_act", "", kActivations, &act, false));

  // attention_window: one even number for every layer, or a list of one per layer.
  std::vector<uint32_t> windows(layers, 512);
  if (auto w = root.find("attention_window"); w != root.end()) {
    if (w->is_array()) {
      if (w->size() != layers) {
        return r.Invalid("attention_window", "has " + std::to_string(w->size()) +
                                                 " entries, expected one per layer (" +
                                                 std::to_string(layers) + ")");
      }
      for (uint32_t i = 0; i < layers; ++i) {
        if (!(*w)[i].is_number_unsigned()) {
          return r.Invalid("attention_window", "entries must be positive even integers");
        }
        windows[i] = (*w)[i].get<uint32_t>();
      }
    } else {
      uint32_t all = 0;
      RECUR_RETURN_IF_ERROR(r.UInt(root, "attention_window", "", 1, &all));
      windows.assign(layers, all);
    }
  }
  for (uint32_t window : windows) {
    if (window == 0 || window % 2 != 0 || window > 65536) {
      return r.Invalid("attention_window",
                       "entries must be positive even integers up to 65536 "
                       "(the window is attention_window / 2 each side)");
    }
  }
  uint32_t global_tokens = 0;
  RECUR_RETURN_IF_ERROR(r.UInt(root, "global_tokens", "", 0, &global_tokens, false));
  o->global_projections = global_tokens > 0;

  d->d_model = hidden;
  d->norm_placement = NormPlacement::kPost;
  d->input.max_positions = o->max_position_embeddings - o->pad_token_id - 1;
  d->input.norm = true;
  d->blocks.resize(layers);
  for (uint32_t i = 0; i < layers; ++i) {
    auto mixer = std::make_unique<SlidingWindowParams>();
    mixer->heads = heads;
    mixer->dk = hidden / heads;
    mixer->dv = hidden / heads;
    mixer->window = windows[i];
    mixer->global_tokens = global_tokens;
    mixer->global_projections = o->global_projections;
    mixer->causal = false;
    d->blocks[i].mixer =
        MixerDescription(FindMixerType(fb::Mixer::SlidingWindow), std::move(mixer));
    d->blocks[i].d_ff = intermediate;
    d->blocks[i].activation = act == 0 ? Activation::kRelu : Activation::kGelu;
  }
  d->final_norm = false;
  d->has_head = false;
  d->layout_options = o;
  return ParseMetadata(r, root, &d->metadata);
}

// blocks.<i>.<rest> in transformers' names (`layer`: "encoder.layer.<i>.").
std::string BlockSourceName(const std::string& layer, const std::string& rest) {
  return RenamedSource(layer, rest,
                       {{"norm1.", "attention.output.LayerNorm."},
                        {"norm2.", "output.LayerNorm."},
                        {"ffn.linear1.", "intermediate.dense."},
                        {"ffn.linear2.", "output.dense."},
                        {"mixer.out.", "attention.output.dense."},
                        {"mixer.", "attention.self."}});
}

class HfLongformerLayoutConverter final : public LayoutConverter {
 public:
  bool Recognizes(const json& root) const override {
    auto type = root.find("model_type");
    return type != root.end() && *type == "longformer";
  }

  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    return ParseLongformer(r, root, d);
  }

  void MapTensors(const ModelDescription& desc,
                  std::vector<ExpectedTensor>* tensors) const override {
    const auto& o = static_cast<const LongformerOptions&>(*desc.layout_options);
    const int64_t d = desc.d_model;
    for (ExpectedTensor& t : *tensors) {
      uint32_t block = 0;
      std::string rest;
      if (SplitBlockName(t.name, &block, &rest)) {
        t.source_name = BlockSourceName("encoder.layer." + std::to_string(block) + ".", rest);
      } else if (t.name == "input.embedding") {
        t.source_name = "embeddings.word_embeddings.weight";
      } else if (t.name.compare(0, 11, "input.norm.") == 0) {
        t.source_name = "embeddings.LayerNorm." + t.name.substr(11);
      } else if (t.name == "input.positions") {
        // Row t: position_embeddings[pad + 1 + t] + token_type_embeddings[0].
        t.source_name.clear();
        t.transform = SourceTransform::kComputed;
        t.inputs = {{"embeddings.position_embeddings.weight", {o.max_position_embeddings, d}},
                    {"embeddings.token_type_embeddings.weight", {o.type_vocab_size, d}}};
        const int64_t first = o.pad_token_id + 1, rows = t.shape[0];
        t.compute = [first, rows, d](const std::vector<std::vector<float>>& in) {
          std::vector<float> out(static_cast<std::size_t>(rows * d));
          for (int64_t p = 0; p < rows; ++p) {
            for (int64_t c = 0; c < d; ++c) {
              out[p * d + c] = in[0][(first + p) * d + c] + in[1][c];
            }
          }
          return out;
        };
      }
    }
    // What LongformerModel holds and last_hidden_state never reaches.
    auto ignore = [&](const std::string& name, std::vector<int64_t> shape) {
      tensors->push_back(IgnoredSource(name, std::move(shape)));
    };
    ignore("pooler.dense.weight", {d, d});
    ignore("pooler.dense.bias", {d});
    if (!o.global_projections) {  // no global positions: the global projections go unused
      const int64_t width = d;
      for (std::size_t i = 0; i < desc.blocks.size(); ++i) {
        for (const char* p : {"query_global", "key_global", "value_global"}) {
          const std::string name = "encoder.layer." + std::to_string(i) + ".attention.self." + p;
          ignore(name + ".weight", {width, d});
          ignore(name + ".bias", {width});
        }
      }
    }
  }
};

}  // namespace

const LayoutConverter& HfLongformerLayout() {
  static const HfLongformerLayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
