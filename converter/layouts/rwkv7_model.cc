#include "converter/layouts/rwkv7_model.h"

#include <memory>
#include <string>
#include <vector>

#include "converter/layouts/layout_converter.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {

void DescribeRwkv7(const Rwkv7Model& m, ModelDescription* d) {
  d->d_model = m.d_model;
  d->norm_placement = NormPlacement::kPre;
  d->norm = NormKind::kLayerNorm;
  d->layer_norm_eps = m.layer_norm_eps;
  d->input = InputDescription();
  d->input.kind = InputKind::kTokens;
  d->input.vocab_size = m.vocab;
  d->input.norm = m.input_norm;
  const MixerType* type = FindMixerType(fb::Mixer::Rwkv7);
  d->blocks.assign(m.layers, BlockDescription());
  for (uint32_t i = 0; i < m.layers; ++i) {
    auto params = std::make_unique<Rwkv7Params>(m.mixer);
    type->converter->Place(params.get(), i == 0);
    BlockDescription& b = d->blocks[i];
    b.mixer = MixerDescription(type, std::move(params));
    b.d_ff = m.d_ff;
    b.activation = Activation::kReluSquared;
    b.token_mix = true;
  }
  d->final_norm = true;
  d->has_head = true;
  d->head.out = m.vocab;
  d->head.activation = HeadActivation::kNone;
}

namespace {

// How a source stores a recur tensor (of shape S).
enum class Rwkv7Form : uint8_t {
  kSame,        // as S
  kTransposed,  // a matrix stored [S[1], S[0]]
  kVector3,     // a [C] vector stored (1, 1, C)
  kHeads,       // the [C] bonus stored (H, N)
  kMixes3,      // the [6, C] token mix from six (1, 1, C) vectors, <name>x_r, <name>x_w, ...
  kFused,       // the [6, C] token mix stored as one (6, 1, 1, C) tensor, rows in the same order
  kZeros,       // no source tensor (a bias the library does not have): zeros
};

struct Rwkv7Where {
  const char* name;  // whole-model rows: the full name; block rows: under the block's prefix
  Rwkv7Form form = Rwkv7Form::kSame;
};

// A recur tensor and where each source keeps it, in Rwkv7Source order.
struct Rwkv7NameRow {
  const char* recur;
  Rwkv7Where where[3];
};

constexpr Rwkv7Where kRwkv7NoSource = {"", Rwkv7Form::kZeros};
constexpr Rwkv7Form kT = Rwkv7Form::kTransposed, kV3 = Rwkv7Form::kVector3;

// The model's tensors outside the blocks.
constexpr Rwkv7NameRow kRwkv7ModelNames[] = {
    //                    BlinkDL .pth            fla (Hugging Face)                  llama.cpp GGUF
    {"input.embedding", {{"emb.weight"}, {"model.embeddings.weight"}, {"token_embd.weight"}}},
    {"input.norm.weight",
     {{"blocks.0.ln0.weight"}, {"model.layers.0.pre_norm.weight"}, {"token_embd_norm.weight"}}},
    {"input.norm.bias",
     {{"blocks.0.ln0.bias"}, {"model.layers.0.pre_norm.bias"}, {"token_embd_norm.bias"}}},
    {"final_norm.weight", {{"ln_out.weight"}, {"model.norm.weight"}, {"output_norm.weight"}}},
    {"final_norm.bias", {{"ln_out.bias"}, {"model.norm.bias"}, {"output_norm.bias"}}},
    {"head.weight", {{"head.weight"}, {"lm_head.weight"}, {"output.weight"}}},
    {"head.bias", {kRwkv7NoSource, kRwkv7NoSource, kRwkv7NoSource}},
};

// A block's tensors, under "blocks.<i>." (recur) and each source's block
// prefix (kRwkv7BlockPrefix).
constexpr Rwkv7NameRow kRwkv7BlockNames[] = {
    {"norm1.weight", {{"ln1.weight"}, {"attn_norm.weight"}, {"attn_norm.weight"}}},
    {"norm1.bias", {{"ln1.bias"}, {"attn_norm.bias"}, {"attn_norm.bias"}}},
    {"norm2.weight", {{"ln2.weight"}, {"ffn_norm.weight"}, {"attn_norm_2.weight"}}},
    {"norm2.bias", {{"ln2.bias"}, {"ffn_norm.bias"}, {"attn_norm_2.bias"}}},
    {"ffn.linear1.weight", {{"ffn.key.weight"}, {"ffn.key.weight"}, {"channel_mix_key.weight"}}},
    {"ffn.linear1.bias", {kRwkv7NoSource, kRwkv7NoSource, kRwkv7NoSource}},
    {"ffn.linear2.weight",
     {{"ffn.value.weight"}, {"ffn.value.weight"}, {"channel_mix_value.weight"}}},
    {"ffn.linear2.bias", {kRwkv7NoSource, kRwkv7NoSource, kRwkv7NoSource}},
    {"ffn.token_mix", {{"ffn.x_k", kV3}, {"ffn.x_k"}, {"channel_mix_lerp_k.weight"}}},
    {"mixer.token_mix",
     {{"att.", Rwkv7Form::kMixes3},
      {"attn.", Rwkv7Form::kMixes3},
      {"time_mix_lerp_fused.weight", Rwkv7Form::kFused}}},
    {"mixer.receptance.weight",
     {{"att.receptance.weight"}, {"attn.r_proj.weight"}, {"time_mix_receptance.weight"}}},
    {"mixer.key.weight", {{"att.key.weight"}, {"attn.k_proj.weight"}, {"time_mix_key.weight"}}},
    {"mixer.value.weight",
     {{"att.value.weight"}, {"attn.v_proj.weight"}, {"time_mix_value.weight"}}},
    {"mixer.out.weight", {{"att.output.weight"}, {"attn.o_proj.weight"}, {"time_mix_output.weight"}}},
    {"mixer.key_norm", {{"att.k_k", kV3}, {"attn.k_k"}, {"time_mix_k_k.weight"}}},
    {"mixer.key_rate", {{"att.k_a", kV3}, {"attn.k_a"}, {"time_mix_k_a.weight"}}},
    {"mixer.bonus",
     {{"att.r_k", Rwkv7Form::kHeads}, {"attn.r_k", Rwkv7Form::kHeads}, {"time_mix_r_k.weight"}}},
    {"mixer.group_norm.weight",
     {{"att.ln_x.weight"}, {"attn.g_norm.weight"}, {"time_mix_ln.weight"}}},
    {"mixer.group_norm.bias", {{"att.ln_x.bias"}, {"attn.g_norm.bias"}, {"time_mix_ln.bias"}}},
    // The low-rank paths: BlinkDL's <l>1 [C, D] and <l>2 [D, C] are the transposes of
    // nn.Linear's [out, in], which fla and llama.cpp store.
    {"mixer.decay_down.weight",
     {{"att.w1", kT}, {"attn.w_lora.lora.0.weight"}, {"time_mix_w1.weight"}}},
    {"mixer.decay_up.weight",
     {{"att.w2", kT}, {"attn.w_lora.lora.2.weight"}, {"time_mix_w2.weight"}}},
    {"mixer.decay_up.bias", {{"att.w0", kV3}, {"attn.w_lora.lora.2.bias"}, {"time_mix_w0.weight"}}},
    {"mixer.rate_down.weight",
     {{"att.a1", kT}, {"attn.a_lora.lora.0.weight"}, {"time_mix_a1.weight"}}},
    {"mixer.rate_up.weight", {{"att.a2", kT}, {"attn.a_lora.lora.2.weight"}, {"time_mix_a2.weight"}}},
    {"mixer.rate_up.bias", {{"att.a0", kV3}, {"attn.a_lora.lora.2.bias"}, {"time_mix_a0.weight"}}},
    {"mixer.value_down.weight",
     {{"att.v1", kT}, {"attn.v_lora.lora.0.weight"}, {"time_mix_v1.weight"}}},
    {"mixer.value_up.weight",
     {{"att.v2", kT}, {"attn.v_lora.lora.2.weight"}, {"time_mix_v2.weight"}}},
    {"mixer.value_up.bias", {{"att.v0", kV3}, {"attn.v_lora.lora.2.bias"}, {"time_mix_v0.weight"}}},
    {"mixer.gate_down.weight",
     {{"att.g1", kT}, {"attn.g_lora.lora.0.weight"}, {"time_mix_g1.weight"}}},
    {"mixer.gate_up.weight", {{"att.g2", kT}, {"attn.g_lora.lora.2.weight"}, {"time_mix_g2.weight"}}},
};

// Each source's block prefix.
std::string Rwkv7BlockPrefix(Rwkv7Source source, uint32_t block) {
  const std::string i = std::to_string(block);
  switch (source) {
    case Rwkv7Source::kBlinkDl: return "blocks." + i + ".";
    case Rwkv7Source::kFla: return "model.layers." + i + ".";
    case Rwkv7Source::kLlamaCpp: return "blk." + i + ".";
  }
  return "";
}

// Points `t` at `where` (a full source name), for a model of width c.
void PointRwkv7Tensor(const Rwkv7Where& where, const std::string& name, int64_t c,
                      int64_t heads, int64_t head_size, ExpectedTensor* t) {
  switch (where.form) {
    case Rwkv7Form::kSame:
      t->source_name = name;
      break;
    case Rwkv7Form::kTransposed:
      t->source_name = name;
      t->transform = SourceTransform::kTranspose;
      t->source_shape = {t->shape[1], t->shape[0]};
      break;
    case Rwkv7Form::kVector3:
      MakeConcatenation(t, {{name, {1, 1, c}}});
      break;
    case Rwkv7Form::kHeads:
      MakeConcatenation(t, {{name, {heads, head_size}}});
      break;
    case Rwkv7Form::kMixes3: {
      std::vector<ExpectedTensor::Input> rows;
      for (const char* mix : kRwkv7MixNames) rows.push_back({name + mix, {1, 1, c}});
      MakeConcatenation(t, std::move(rows));
      break;
    }
    case Rwkv7Form::kFused:
      MakeConcatenation(t, {{name, {6, 1, 1, c}}});
      break;
    case Rwkv7Form::kZeros:
      MakeZeros(t);
      break;
  }
}

}  // namespace

void MapRwkv7Tensors(const ModelDescription& d, Rwkv7Source source,
                     std::vector<ExpectedTensor>* tensors) {
  const auto column = static_cast<std::size_t>(source);
  const int64_t c = d.d_model;
  for (ExpectedTensor& t : *tensors) {
    bool found = false;
    for (const Rwkv7NameRow& row : kRwkv7ModelNames) {
      if (t.name != row.recur) continue;
      PointRwkv7Tensor(row.where[column], row.where[column].name, c, 0, 0, &t);
      found = true;
      break;
    }
    uint32_t block = 0;
    std::string rest;
    if (found || !SplitBlockName(t.name, &block, &rest) || block >= d.blocks.size()) continue;
    const auto* p = d.blocks[block].mixer.As<Rwkv7Params>();
    if (p == nullptr) continue;
    for (const Rwkv7NameRow& row : kRwkv7BlockNames) {
      if (rest != row.recur) continue;
      const Rwkv7Where& where = row.where[column];
      PointRwkv7Tensor(where, Rwkv7BlockPrefix(source, block) + where.name, c, p->heads,
                       p->head_size, &t);
      break;
    }
  }
}

}  // namespace recur::impl::converter
