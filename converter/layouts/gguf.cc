// The gguf layout: llama.cpp's GGUF files (converter/gguf.h reads them) of
// architectures "rwkv7" and "mamba2", converted with no config: the
// hyperparameters are the
// metadata keys llama.cpp writes and reads (its convert_hf_to_gguf.py, and
// llama_model's loading of LLM_ARCH_RWKV7), the vocabulary is token_embd's
// rows, and the tensors have llama.cpp's names (blk.<i>.time_mix_w1.weight,
// ...; rwkv7_model.cc's table, docs/layouts.md "GGUF"). The model is the
// one BlinkDL's RWKV_x070 computes, with llama.cpp's constants: the decay's
// exp(−0.606531·sigmoid(·)) and a group norm eps of 64e-5 whatever the head
// size; the LayerNorms take the file's layer_norm_epsilon. Mamba2: the model
// mamba_ssm computes (mamba2_model.cc's names, docs/layouts.md "GGUF"), with
// the file's RMS eps on every norm, the gated one's too, and no clamp of Δ
// (llama.cpp's graph has none); the head is token_embd without output.weight.
#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "converter/config.h"
#include "converter/gguf.h"
#include "converter/layouts/layout_converter.h"
#include "converter/layouts/mamba2_model.h"
#include "converter/layouts/rwkv7_model.h"
#include "converter/vocab_file.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

// llama.cpp's constants in its RWKV-7 graph (src/models/rwkv7-base.cpp):
// ggml_norm(cur, 64e-5f) per head, ggml_scale(sigmoid(w), -0.606531).
constexpr float kGgufRwkv7GroupNormEps = 64e-5f;
constexpr float kGgufRwkv7DecayScale = 0.606531f;

class GgufLayoutConverter final : public LayoutConverter {
 public:
  Status Parse(const KeyReader& r, const json& root, ModelDescription* d) const override {
    (void)root;
    (void)d;
    return r.Error(
        "layout \"gguf\" takes its configuration from a GGUF file's metadata, not from a "
        "config: convert the .gguf file without --config");
  }

  void MapTensors(const ModelDescription& d, std::vector<ExpectedTensor>* tensors) const override {
    if (dynamic_cast<const Mamba2Options*>(d.layout_options.get()) != nullptr) {
      MapMamba2Tensors(d, Mamba2Source::kLlamaCpp, tensors);
      return;
    }
    MapRwkv7Tensors(d, Rwkv7Source::kLlamaCpp, tensors);
    // Layer 0 has no value residual (its v is v₀), but llama.cpp's loader
    // wants the three tensors there: its converter writes copies of layer 0's
    // a0, a1 and a2 under their names. Accepted, unused.
    const int64_t c = d.d_model;
    tensors->push_back(IgnoredSource("blk.0.time_mix_v0.weight", {c}));
    tensors->push_back(IgnoredSource("blk.0.time_mix_v1.weight"));
    tensors->push_back(IgnoredSource("blk.0.time_mix_v2.weight"));
  }
};

// A positive u32 metadata key, or an error naming it.
Status GgufPositive(const GgufFile& file, const std::string& key, uint32_t* out) {
  auto v = file.GetU32(key);
  if (!v.ok()) return v.status();
  if (*v == 0) return Status(StatusCode::kInvalidArgument, "metadata key \"" + key + "\" is 0");
  *out = *v;
  return Status::Ok();
}

// feed_forward_length: a u32, or (llama.cpp's writer takes a list too) an
// array of one u32 per block, which recur's single width must match.
Status GgufFeedForward(const GgufFile& file, const std::string& key, uint32_t blocks,
                       uint32_t* out) {
  const GgufValue* value = file.FindValue(key);
  if (value != nullptr && value->is_array) {
    auto widths = file.GetU32Array(key);
    if (!widths.ok()) return widths.status();
    if (widths->size() != blocks) {
      return Status(StatusCode::kInvalidArgument,
                    "metadata key \"" + key + "\" has " + std::to_string(widths->size()) +
                        " widths for " + std::to_string(blocks) + " blocks");
    }
    for (uint32_t w : *widths) {
      if (w != widths->front()) {
        return Status(StatusCode::kUnsupported,
                      "metadata key \"" + key +
                          "\" gives the blocks different widths; recur's RWKV-7 blocks share one");
      }
    }
    *out = widths->front();
    if (*out == 0) return Status(StatusCode::kInvalidArgument, "metadata key \"" + key + "\" is 0");
    return Status::Ok();
  }
  return GgufPositive(file, key, out);
}

// llama.cpp's token types (llama_token_type: tokenizer.ggml.token_type).
constexpr int32_t kGgufTokenNormal = 1, kGgufTokenControl = 3, kGgufTokenUserDefined = 4,
                  kGgufTokenUnused = 5;

// tokenizer.ggml.pre values whose pre-tokenizer is the GPT-2 pattern alone
// (llama.cpp's llama-vocab.cpp: LLAMA_VOCAB_PRE_TYPE_GPT2, _MPT, _OLMO,
// _JAIS, _TRILLION, _GRANITE_DOCLING, none of them with other settings).
constexpr const char* kGpt2PatternPre[] = {
    "gpt-2",     "phi-2",   "jina-es",     "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
    "a.x-4.0",   "mellum",  "modern-bert", "mpt",     "olmo",     "jais",       "trillion",
    "granite-docling"};

// The vocabulary of tokenizer model "gpt2" (byte-level BPE) as llama.cpp's
// converter writes it (get_vocab_base): normal tokens in the byte-level
// alphabet, control and user-defined ones (tokenizers' added tokens) as
// their text, unused ones ("[PAD<i>]") as no token; the merges as "left
// right". Control tokens are matched in the text first, user-defined ones
// then (recur.fbs Gpt2Bpe: added_raw, added_normalized). `without` gives
// the warning of a vocabulary recur cannot compute.
template <typename Without>
Status GgufBpeVocabulary(const GgufFile& file, const std::vector<std::string>& tokens,
                         const std::vector<int32_t>& types, size_t n, Without without,
                         ImportedConfig* out) {
  std::string pre = "(none)";
  if (file.FindValue("tokenizer.ggml.pre") != nullptr) {
    auto read = file.GetString("tokenizer.ggml.pre");
    if (!read.ok()) return read.status();
    pre = *read;
  }
  if (std::find_if(std::begin(kGpt2PatternPre), std::end(kGpt2PatternPre),
                   [&](const char* p) { return pre == p; }) == std::end(kGpt2PatternPre)) {
    return without("tokenizer.ggml.pre is \"" + pre +
                   "\": recur's byte-level BPE splits text by the GPT-2 pattern only "
                   "(tokenizer.ggml.pre \"gpt-2\", \"olmo\", \"mpt\", ...)");
  }
  VocabularyDescription vocab;
  vocab.kind = VocabularyKind::kGpt2Bpe;
  vocab.tokens.resize(n);
  std::unordered_map<std::string, uint32_t> id_of;
  for (size_t i = 0; i < n; ++i) {
    const std::string where = "tokenizer.ggml.tokens[" + std::to_string(i) + "]";
    const int32_t type = types.empty() ? kGgufTokenNormal : types[i];
    const auto id = static_cast<uint32_t>(i);
    if (type == kGgufTokenNormal) {
      Status s = ByteLevelToBytes(tokens[i], &vocab.tokens[i]);
      if (!s.ok()) return Status(s.code(), where + " (\"" + tokens[i] + "\"): " + s.message());
      id_of.emplace(tokens[i], id);
    } else if (type == kGgufTokenControl || type == kGgufTokenUserDefined) {
      if (tokens[i].empty()) return Status(StatusCode::kInvalidArgument, where + " is empty");
      vocab.tokens[i] = tokens[i];
      (type == kGgufTokenControl ? vocab.added_raw : vocab.added_normalized).push_back(id);
    } else if (type != kGgufTokenUnused) {
      return without(where + " (\"" + tokens[i] + "\") is of token type " +
                     std::to_string(type) +
                     "; recur's byte-level BPE vocabularies have normal, control, user-defined "
                     "and unused tokens");
    }
  }
  auto merges = file.GetStringArray("tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();
  for (size_t r = 0; r < merges->size(); ++r) {
    const std::string& line = (*merges)[r];
    const std::string where = "tokenizer.ggml.merges[" + std::to_string(r) + "]";
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      return Status(StatusCode::kInvalidArgument,
                    where + " (\"" + line + "\") is not two token texts with a space between");
    }
    Status s = AppendBpeMerge(std::string_view(line).substr(0, space),
                              std::string_view(line).substr(space + 1), id_of, &vocab);
    if (!s.ok()) return Status(s.code(), where + ": " + s.message());
  }
  RECUR_RETURN_IF_ERROR(CheckBpeMerges(vocab, "tokenizer.ggml.merges:"));
  if (file.FindValue("tokenizer.ggml.eos_token_id") != nullptr) {
    auto eos = file.GetU32("tokenizer.ggml.eos_token_id");
    if (!eos.ok()) return eos.status();
    if (*eos < n && !vocab.tokens[*eos].empty()) vocab.end_of_text = static_cast<int32_t>(*eos);
  }
  out->desc.vocabulary = std::move(vocab);
  return Status::Ok();
}

// The vocabulary of tokenizer model "rwkv" as llama.cpp's converter writes it
// (_set_vocab_rwkv_world): "<s>" (control) at id 0, the end-of-text token;
// the rwkv package's tokens, escaped (UnescapeGgufRwkvToken); then
// "[PAD<i>]" (unused) up to the embedding's rows, which are dropped. Or of
// tokenizer model "gpt2" (GgufBpeVocabulary). No tokenizer.ggml.model, or
// "none": no vocabulary. Another model, or rwkv control or unused tokens
// elsewhere: no vocabulary, and a warning.
Status GgufVocabulary(const GgufFile& file, uint32_t vocab_size, ImportedConfig* out) {
  if (file.FindValue("tokenizer.ggml.model") == nullptr) return Status::Ok();
  auto model = file.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model == "none") return Status::Ok();
  auto without = [&](const std::string& why) {
    out->warnings.push_back(why + "; the model is converted without a vocabulary");
    return Status::Ok();
  };
  if (*model != "rwkv" && *model != "gpt2") {
    return without("tokenizer.ggml.model is \"" + *model +
                   "\": recur reads the vocabularies of tokenizer models \"rwkv\" and \"gpt2\"");
  }
  auto tokens = file.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  std::vector<int32_t> types;
  if (file.FindValue("tokenizer.ggml.token_type") != nullptr) {
    auto read = file.GetI32Array("tokenizer.ggml.token_type");
    if (!read.ok()) return read.status();
    types = std::move(read).value();
    if (types.size() != tokens->size()) {
      return Status(StatusCode::kInvalidArgument,
                    "tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                        " entries for " + std::to_string(tokens->size()) + " tokens");
    }
  }
  // Without types: "<s>" at id 0 is the end-of-text token, the rest normal.
  auto type_of = [&](size_t i) {
    if (!types.empty()) return types[i];
    return i == 0 && (*tokens)[0] == "<s>" ? kGgufTokenControl : kGgufTokenNormal;
  };
  size_t n = tokens->size();
  while (n > 0 && type_of(n - 1) == kGgufTokenUnused) --n;
  if (n > vocab_size) {
    return Status(StatusCode::kInvalidArgument, "tokenizer.ggml.tokens has " + std::to_string(n) +
                                                    " tokens, more than token_embd's " +
                                                    std::to_string(vocab_size) + " rows");
  }
  if (n == 0) return without("tokenizer.ggml.tokens has no tokens");
  if (*model == "gpt2") return GgufBpeVocabulary(file, *tokens, types, n, without, out);
  VocabularyDescription vocab;
  vocab.tokens.resize(n);
  std::unordered_map<std::string, size_t> id_of;
  for (size_t i = 0; i < n; ++i) {
    const std::string where = "tokenizer.ggml.tokens[" + std::to_string(i) + "]";
    const int32_t type = type_of(i);
    if (type == kGgufTokenControl && i == 0) {
      vocab.end_of_text = 0;
      continue;
    }
    if (type != kGgufTokenNormal) {
      return without(where + " (\"" + (*tokens)[i] + "\") is of token type " +
                     std::to_string(type) +
                     "; recur's rwkv vocabularies have one control "
                     "token, id 0, and unused ones only at the end");
    }
    Status s = UnescapeGgufRwkvToken((*tokens)[i], &vocab.tokens[i]);
    if (!s.ok()) return Status(s.code(), where + ": " + s.message());
    if (vocab.tokens[i].empty()) {
      return Status(StatusCode::kInvalidArgument, where + " is empty");
    }
    const auto [it, inserted] = id_of.emplace(vocab.tokens[i], i);
    if (!inserted) {
      return Status(StatusCode::kInvalidArgument, where + " (\"" + (*tokens)[i] + "\") is token " +
                                                      std::to_string(it->second) + "'s bytes too");
    }
  }
  out->desc.vocabulary = std::move(vocab);
  return Status::Ok();
}

// The vocabulary size: token_embd's rows (ne = [embedding_length, vocab]).
Status GgufVocabRows(const GgufFile& file, uint32_t d_model, uint32_t* vocab) {
  const GgufTensor* embd = file.FindTensor("token_embd.weight");
  if (embd == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  "tensor \"token_embd.weight\" is missing (its rows are the vocabulary)");
  }
  if (embd->dims.size() != 2 || embd->dims[0] != d_model || embd->dims[1] > UINT32_MAX) {
    std::vector<int64_t> shape;
    for (std::size_t k = embd->dims.size(); k-- > 0;) shape.push_back(int64_t(embd->dims[k]));
    return Status(StatusCode::kInvalidArgument,
                  "tensor \"token_embd.weight\" has shape " + ShapeString(shape) +
                      ", expected [vocab," + std::to_string(d_model) + "]");
  }
  *vocab = static_cast<uint32_t>(embd->dims[1]);
  return Status::Ok();
}

// A positive, finite f32 metadata key, or an error naming it.
Status GgufPositiveFloat(const GgufFile& file, const std::string& key, float* out) {
  auto v = file.GetF32(key);
  if (!v.ok()) return v.status();
  if (!(*v > 0.0f) || !std::isfinite(*v)) {
    return Status(StatusCode::kInvalidArgument, "metadata key \"" + key + "\" is " +
                                                    std::to_string(*v) +
                                                    ", not a positive number");
  }
  *out = *v;
  return Status::Ok();
}

// The block count, at most kMaxLayers.
Status GgufBlocks(const GgufFile& file, const std::string& a, uint32_t* layers) {
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "block_count", layers));
  if (*layers > kMaxLayers) {
    return Status(StatusCode::kInvalidArgument,
                  "metadata key \"" + a + "block_count\" is " + std::to_string(*layers) +
                      ", above the " + std::to_string(kMaxLayers) + " blocks recur takes");
  }
  return Status::Ok();
}

// llama.cpp's LLM_ARCH_MAMBA2 (convert_hf_to_gguf.py's Mamba2Model): the
// ssm.* keys, the RMS eps, token_embd's rows; heads = time_step_rank.
Status ConfigFromGgufMamba2(const GgufFile& file, ImportedConfig* out) {
  const std::string a = "mamba2.";
  Mamba2Model m;
  Mamba2Params& p = m.mixer;
  uint32_t inner = 0;
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "embedding_length", &m.d_model));
  RECUR_RETURN_IF_ERROR(GgufBlocks(file, a, &m.layers));
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "ssm.conv_kernel", &p.conv_kernel));
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "ssm.inner_size", &inner));
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "ssm.state_size", &p.state_size));
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "ssm.time_step_rank", &p.heads));
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "ssm.group_count", &p.groups));
  auto divides = [&](const char* part, uint32_t n, const char* whole, uint32_t w) {
    if (w % n == 0) return Status::Ok();
    return Status(StatusCode::kInvalidArgument, "metadata key \"" + a + part + "\" (" +
                                                    std::to_string(n) + ") does not divide \"" +
                                                    a + whole + "\" (" + std::to_string(w) +
                                                    ")");
  };
  RECUR_RETURN_IF_ERROR(divides("ssm.time_step_rank", p.heads, "ssm.inner_size", inner));
  RECUR_RETURN_IF_ERROR(divides("ssm.group_count", p.groups, "ssm.time_step_rank", p.heads));
  if (p.conv_kernel > 256) {
    return Status(StatusCode::kUnsupported,
                  "metadata key \"" + a + "ssm.conv_kernel\" is " +
                      std::to_string(p.conv_kernel) + ", above the 256 recur takes");
  }
  p.head_dim = inner / p.heads;
  RECUR_RETURN_IF_ERROR(
      GgufPositiveFloat(file, a + "attention.layer_norm_rms_epsilon", &m.norm_eps));
  p.norm_eps = m.norm_eps;
  RECUR_RETURN_IF_ERROR(GgufVocabRows(file, m.d_model, &m.vocab));
  auto o = std::make_shared<Mamba2Options>();
  o->tied = file.FindTensor("output.weight") == nullptr;  // the converter omits a tied head
  out->layout = Layout::kGguf;
  DescribeMamba2(m, &out->desc);
  out->desc.layout_options = o;
  return GgufVocabulary(file, m.vocab, out);
}

// llama.cpp's LLM_ARCH_RWKV7: the rwkv7.* keys, token_embd's rows, the
// vocabulary.
Status ConfigFromGgufRwkv7(const GgufFile& file, ImportedConfig* out) {
  const std::string a = "rwkv7.";
  Rwkv7Model m;
  Rwkv7Params& p = m.mixer;
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "embedding_length", &m.d_model));
  RECUR_RETURN_IF_ERROR(GgufBlocks(file, a, &m.layers));
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "wkv.head_size", &p.head_size));
  if (m.d_model % p.head_size != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "metadata key \"" + a + "wkv.head_size\" (" + std::to_string(p.head_size) +
                      ") does not divide \"" + a + "embedding_length\" (" +
                      std::to_string(m.d_model) + ")");
  }
  p.heads = m.d_model / p.head_size;
  RECUR_RETURN_IF_ERROR(GgufFeedForward(file, a + "feed_forward_length", m.layers, &m.d_ff));
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "attention.decay_lora_rank", &p.decay_rank));
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "attention.iclr_lora_rank", &p.rate_rank));
  RECUR_RETURN_IF_ERROR(
      GgufPositive(file, a + "attention.value_residual_mix_lora_rank", &p.value_rank));
  RECUR_RETURN_IF_ERROR(GgufPositive(file, a + "attention.gate_lora_rank", &p.gate_rank));
  RECUR_RETURN_IF_ERROR(
      GgufPositiveFloat(file, a + "attention.layer_norm_epsilon", &m.layer_norm_eps));
  // llama.cpp's RWKV-7 graph shifts two vectors per block (the time mix's and
  // the channel mix's): the key is optional there, 2 when present.
  if (file.FindValue(a + "token_shift_count") != nullptr) {
    auto shifts = file.GetU32(a + "token_shift_count");
    if (!shifts.ok()) return shifts.status();
    if (*shifts != 2) {
      return Status(StatusCode::kUnsupported,
                    "metadata key \"" + a + "token_shift_count\" is " + std::to_string(*shifts) +
                        "; an RWKV-7 model shifts 2 (llama.cpp's rwkv7 graph takes no other)");
    }
  }
  RECUR_RETURN_IF_ERROR(GgufVocabRows(file, m.d_model, &m.vocab));
  m.input_norm = true;  // token_embd_norm: llama.cpp's graph always applies it
  p.group_norm_eps = kGgufRwkv7GroupNormEps;
  p.decay_scale = kGgufRwkv7DecayScale;
  out->layout = Layout::kGguf;
  DescribeRwkv7(m, &out->desc);
  return GgufVocabulary(file, m.vocab, out);
}

Status ConfigFromGgufImpl(const GgufFile& file, ImportedConfig* out) {
  auto arch = file.GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  if (*arch == "mamba2") {
    RECUR_RETURN_IF_ERROR(ConfigFromGgufMamba2(file, out));
  } else if (*arch != "rwkv7") {
    return Status(StatusCode::kUnsupported,
                  "general.architecture is \"" + *arch +
                      "\": recur-convert reads GGUF files of llama.cpp's architectures \"rwkv7\" "
                      "(RWKV-7) and \"mamba2\" (Mamba2) only");
  } else {
    RECUR_RETURN_IF_ERROR(ConfigFromGgufRwkv7(file, out));
  }
  if (auto name = file.GetString("general.name"); name.ok() && !name->empty()) {
    out->desc.metadata.notes = "GGUF general.name: " + *name;
  }
  return Status::Ok();
}

}  // namespace

Result<ImportedConfig> ConfigFromGguf(const GgufFile& file, const std::string& source_name) {
  ImportedConfig out;
  try {
    Status s = ConfigFromGgufImpl(file, &out);
    if (!s.ok()) return Status(s.code(), source_name + ": " + s.message());
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, source_name + ": " + e.what());
  }
  return out;
}

const LayoutConverter& GgufLayout() {
  static const GgufLayoutConverter layout;
  return layout;
}

}  // namespace recur::impl::converter
