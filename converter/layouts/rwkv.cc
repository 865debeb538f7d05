// BlinkDL's RWKV-7 checkpoints (RWKV-LM's trainer and the `rwkv` package:
// emb.weight, blocks.<i>.{ln0,ln1,ln2,att.*,ffn.*}, ln_out, head.weight),
// shared as .pth files without a config: the configuration comes from the
// tensors' names and shapes (ConfigFromTensors), or from a config with this
// layout's keys. docs/layouts.md maps every tensor.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "converter/layouts/layout_converter.h"
#include "converter/layouts/rwkv7_model.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

// The att.* vectors stored as (1, 1, C).
const std::vector<int64_t> Vector3(int64_t c) { return {1, 1, c}; }

// The 2-D shape of `name` in `tensors`, or an error that names it.
Status Shape2(const TensorViewMap& tensors, const std::string& name, int64_t* rows, int64_t* cols) {
  const auto it = tensors.find(name);
  if (it == tensors.end()) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": missing tensor (a BlinkDL RWKV-7 checkpoint has it)");
  }
  if (it->second.shape.size() != 2 || it->second.shape[0] <= 0 || it->second.shape[1] <= 0) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": shape " + ShapeString(it->second.shape) + ", expected 2-D");
  }
  *rows = it->second.shape[0];
  *cols = it->second.shape[1];
  return Status::Ok();
}

class RwkvLayoutConverter final : public LayoutConverter {
 public:
  bool Recognizes(const json& root) const override { return root.contains("d_decay_lora"); }

  Status ConfigFromTensors(const TensorViewMap& tensors, bool* recognized,
                           json* config) const override {
    *recognized = tensors.count("emb.weight") && tensors.count("blocks.0.att.k_k") &&
                  tensors.count("blocks.0.att.r_k") && tensors.count("blocks.0.att.w1");
    if (!*recognized) return Status::Ok();
    uint32_t n_layer = 0;
    for (const auto& [name, view] : tensors) {
      (void)view;
      uint32_t block = 0;
      std::string rest;
      if (SplitBlockName(name, &block, &rest) && block < kMaxLayers) {
        n_layer = std::max(n_layer, block + 1);
      }
    }
    int64_t vocab = 0, c = 0, heads = 0, n = 0, rows = 0, rank = 0, ffn = 0;
    RECUR_RETURN_IF_ERROR(Shape2(tensors, "emb.weight", &vocab, &c));
    RECUR_RETURN_IF_ERROR(Shape2(tensors, "blocks.0.att.r_k", &heads, &n));
    RECUR_RETURN_IF_ERROR(Shape2(tensors, "blocks.0.ffn.key.weight", &ffn, &rows));
    json& cfg = *config;
    cfg = json::object();
    cfg["layout"] = "rwkv";
    cfg["n_layer"] = n_layer;
    cfg["n_embd"] = c;
    cfg["head_size"] = n;
    cfg["vocab_size"] = vocab;
    cfg["dim_ffn"] = ffn;
    // The low-rank widths from layer 0's first matrices ([C, D]); the value
    // residual's from layer 1 (layer 0 has none in use).
    for (const auto& [key, name] : {std::pair{"d_decay_lora", "blocks.0.att.w1"},
                                    {"d_aaa_lora", "blocks.0.att.a1"},
                                    {"d_gate_lora", "blocks.0.att.g1"},
                                    {"d_mv_lora", n_layer > 1 ? "blocks.1.att.v1" : ""}}) {
      if (*name == '\0') continue;
      RECUR_RETURN_IF_ERROR(Shape2(tensors, name, &rows, &rank));
      cfg[key] = rank;
    }
    return Status::Ok();
  }

  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    // BlinkDL's trainer's argument names, in lower case.
    RECUR_RETURN_IF_ERROR(r.OnlyKeys(root, "",
                                     {"layout", "notes", "input_description", "output_description",
                                      "n_layer", "n_embd", "head_size", "vocab_size", "dim_ffn",
                                      "d_decay_lora", "d_aaa_lora", "d_mv_lora", "d_gate_lora"}));
    uint32_t n_layer = 0, vocab = 0, dim_ffn = 0;
    Rwkv7Params params;
    RECUR_RETURN_IF_ERROR(ParseLayerCount(r, root, "n_layer", &n_layer));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "n_embd", "", 1, &d->d_model));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "head_size", "", 1, &params.head_size));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "vocab_size", "", 1, &vocab));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "dim_ffn", "", 1, &dim_ffn));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "d_decay_lora", "", 1, &params.decay_rank));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "d_aaa_lora", "", 1, &params.rate_rank));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "d_gate_lora", "", 1, &params.gate_rank));
    RECUR_RETURN_IF_ERROR(r.UInt(root, "d_mv_lora", "", 1, &params.value_rank, n_layer > 1));
    if (d->d_model % params.head_size != 0) {
      return r.Invalid("head_size", "(" + std::to_string(params.head_size) +
                                        ") must divide n_embd (" + std::to_string(d->d_model) +
                                        ")");
    }
    params.heads = d->d_model / params.head_size;
    Rwkv7Model m;
    m.layers = n_layer;
    m.d_model = d->d_model;
    m.vocab = vocab;
    m.d_ff = dim_ffn;
    m.layer_norm_eps = 1e-5f;  // F.layer_norm's default, as the rwkv package calls it
    m.input_norm = true;       // blocks.0.ln0
    m.mixer = params;
    DescribeRwkv7(m, d);
    return ParseMetadata(r, root, &d->metadata);
  }

  void MapTensors(const ModelDescription& d, std::vector<ExpectedTensor>* tensors) const override {
    MapRwkv7Tensors(d, Rwkv7Source::kBlinkDl, tensors);
    // Layer 0's value-residual parameters are in the files, unused (the
    // first layer's v is v₀ itself).
    const std::string att0 = "blocks.0.att.";
    tensors->push_back(IgnoredSource(att0 + "v0", Vector3(d.d_model)));
    tensors->push_back(IgnoredSource(att0 + "v1"));
    tensors->push_back(IgnoredSource(att0 + "v2"));
  }
};

}  // namespace

const LayoutConverter& RwkvLayout() {
  static const RwkvLayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
