#include "converter/inspect.h"

#include <flatbuffers/flatbuffers.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "converter/file_util.h"
#include "converter/import.h"
#include "converter/json_util.h"
#include "converter/mixers/mixer_converter.h"
#include "converter/safetensors.h"
#include "model/model_file.h"
#include "recur/recur.h"
#include "schema/recur_generated.h"

namespace recur::impl::converter {
namespace {

// The container parsed as the loader parses it, errors prefixed with the path.
Status ParseModel(const std::string& path, const AlignedBytes& bytes, ModelFile* out) {
  const Status s = ParseModelFile(bytes.data(), bytes.size(), /*verify=*/true, out);
  return s.ok() ? s : Status(s.code(), path + ": " + s.message());
}

const char* Name(fb::NormPlacement p) {
  switch (p) {
    case fb::NormPlacement::Pre: return "pre";
    case fb::NormPlacement::Post: return "post";
  }
  return "unknown";
}
// The config's "norm.type" names (both scale norms are "scale_norm").
const char* Name(fb::NormKind k) {
  switch (k) {
    case fb::NormKind::LayerNorm:
      return "layer_norm";
    case fb::NormKind::RmsNorm:
      return "rms_norm";
    case fb::NormKind::ScaleNorm:
    case fb::NormKind::ScaleNormRms:
      return "scale_norm";
  }
  return "unknown";
}
const char* Name(fb::Residual r) {
  switch (r) {
    case fb::Residual::Standard:
      return "standard";
    case fb::Residual::Reversible:
      return "reversible";
    case fb::Residual::ReversibleConcat:
      return "reversible_concat";
  }
  return "unknown";
}
const char* Name(fb::InputKind k) {
  switch (k) {
    case fb::InputKind::Tokens: return "tokens";
    case fb::InputKind::Features: return "features";
  }
  return "unknown";
}
const char* Name(fb::Activation a) {
  switch (a) {
    case fb::Activation::Relu: return "relu";
    case fb::Activation::Gelu: return "gelu";
    case fb::Activation::ReluSquared: return "relu_squared";
    case fb::Activation::Silu: return "silu";
  }
  return "unknown";
}
const char* Name(fb::HeadActivation a) {
  switch (a) {
    case fb::HeadActivation::None: return "none";
    case fb::HeadActivation::Softmax: return "softmax";
    case fb::HeadActivation::LogSoftmax: return "log_softmax";
  }
  return "unknown";
}
std::string DTypeString(fb::DType d) {
  kernels::WeightType type;
  if (WeightTypeOf(d, &type)) return kernels::WeightTypeName(type);
  return "unknown(" + std::to_string(static_cast<int>(d)) + ")";
}

// Collects everything `inspect` reports into one JSON object; the text
// report is rendered from it.
class Collector {
 public:
  explicit Collector(const fb::Model* m) : m_(m), refs_(m) {}

  OrderedJson TensorRef(int32_t index) const { return refs_.Ref(index); }
  OrderedJson Dense(const fb::Dense* d) const { return refs_.Dense(d); }
  OrderedJson Norm(const fb::LayerNorm* n) const {
    if (!n) return nullptr;
    OrderedJson j = {{"type", Name(n->kind())}};
    if (n->kind() == fb::NormKind::ScaleNorm || n->kind() == fb::NormKind::ScaleNormRms) {
      j["scale"] = n->kind() == fb::NormKind::ScaleNorm ? "l2" : "rms";
    }
    j["weight"] = TensorRef(n->weight());
    j["bias"] = TensorRef(n->bias());
    j["eps"] = FloatForJson(n->eps());
    return j;
  }

  OrderedJson Collect() const {
    OrderedJson j;
    j["format_version"] = m_->format_version();
    OrderedJson meta = OrderedJson::object();
    if (const fb::Metadata* md = m_->metadata()) {
      auto put = [&](const char* key, const flatbuffers::String* s) {
        if (s) meta[key] = s->str();
      };
      put("producer", md->producer());
      put("source_hash", md->source_hash());
      put("notes", md->notes());
      put("input_description", md->input_description());
      put("output_description", md->output_description());
    }
    j["metadata"] = meta;
    j["d_model"] = m_->d_model();
    j["norm_placement"] = Name(m_->norm_placement());
    j["residual"] = Name(m_->residual());

    const fb::InputAdapter* in = m_->input();
    OrderedJson input;
    input["kind"] = Name(in->kind());
    if (in->kind() == fb::InputKind::Tokens) {
      input["vocab_size"] = in->vocab_size();
      input["embedding"] = TensorRef(in->embedding());
    } else {
      input["feature_width"] = in->feature_width();
      input["projection"] = Dense(in->projection());
    }
    input["positions"] = TensorRef(in->positions());
    if (const fb::SinusoidPositions* s = in->sinusoid()) {
      input["sinusoid"] = {{"base", s->base()}, {"scale", TensorRef(s->scale())}};
      if (s->freq() >= 0) input["sinusoid"]["freq"] = TensorRef(s->freq());
    }
    if (in->norm() != nullptr) input["norm"] = Norm(in->norm());
    j["input"] = input;

    OrderedJson blocks = OrderedJson::array();
    for (const fb::Block* b : *m_->blocks()) {
      OrderedJson block;
      block["norm1"] = Norm(b->norm1());
      OrderedJson mixer;
      const MixerType* type = FindMixerType(b->mixer_type());
      if (type && b->mixer()) {
        mixer["type"] = type->config_name;
        type->converter->Describe(b->mixer(), refs_, &mixer);
      } else {
        mixer["type"] = "unknown (union tag " + std::to_string(static_cast<int>(b->mixer_type())) + ")";
      }
      block["mixer"] = mixer;
      if (const fb::TokenShift* ts = b->token_shift()) {
        // The previous position's shift-1 features per shifted input, in a
        // causal block's state (§13).
        OrderedJson segments = OrderedJson::array();
        uint64_t carried = 0;
        if (ts->segments()) {
          for (const fb::ShiftSegment* s : *ts->segments()) {
            segments.push_back({s->width(), s->shift()});
            if (s->shift() == 1) carried += s->width();
          }
        }
        const bool causal = mixer.value("causal", true);
        block["token_shift"] = {{"segments", segments},
                                {"ffn", ts->ffn()},
                                {"state_bytes", causal ? 4 * carried * (ts->ffn() ? 2 : 1) : 0}};
      }
      block["norm2"] = Norm(b->norm2());
      const fb::FeedForward* f = b->ffn();
      if (f->d_ff() == 0) {
        block["ffn"] = nullptr;  // a block without a feed-forward
      } else {
        block["ffn"] = {{"d_ff", f->d_ff()},
                        {"activation", Name(f->activation())},
                        {"glu", f->glu()},
                        {"linear1", Dense(f->linear1())},
                        {"linear2", Dense(f->linear2())}};
        if (f->token_mix() >= 0) {
          block["ffn"]["token_mix"] = refs_.Ref(f->token_mix());
          block["ffn"]["state_bytes"] = 4 * uint64_t{m_->d_model()};
        }
      }
      blocks.push_back(block);
    }
    j["blocks"] = blocks;
    j["final_norm"] = Norm(m_->final_norm());
    if (const fb::OutputHead* h = m_->head()) {
      OrderedJson head = Dense(h->dense());
      head["activation"] = Name(h->activation());
      const int32_t w = h->dense()->weight();
      if (w >= 0 && static_cast<uint32_t>(w) < m_->tensors()->size()) {
        const auto* shape = m_->tensors()->Get(static_cast<uint32_t>(w))->shape();
        if (shape->size() >= 1) head["out"] = shape->Get(0);
      }
      j["head"] = head;
    } else {
      j["head"] = nullptr;
    }
    if (const fb::Tokenizer* t = m_->tokenizer()) {
      uint64_t bytes = 0;
      const uint32_t count = t->tokens() ? t->tokens()->size() : 0;
      for (uint32_t i = 0; i < count; ++i) {
        const fb::TokenBytes* token = t->tokens()->Get(i);
        if (token && token->bytes()) bytes += token->bytes()->size();
      }
      const std::string kind = t->kind() == fb::TokenizerKind::Rwkv      ? std::string("rwkv")
                               : t->kind() == fb::TokenizerKind::Gpt2Bpe ? std::string("gpt2_bpe")
                               : "unknown (" + std::to_string(int(t->kind())) + ")";
      const auto size = [](const auto* v) { return v != nullptr ? v->size() : 0u; };
      j["tokenizer"] = {{"kind", kind},
                        {"tokens", count},
                        {"end_of_text", t->end_of_text()},
                        {"token_bytes", bytes}};
      if (t->kind() == fb::TokenizerKind::Gpt2Bpe) {
        j["tokenizer"]["merges"] = size(t->merges());
        j["tokenizer"]["added_tokens"] = size(t->added_raw()) + size(t->added_normalized());
      }
    } else {
      j["tokenizer"] = nullptr;
    }

    OrderedJson tensors = OrderedJson::array();
    uint64_t parameters = 0;
    // dtype → {"tensors": n, "bytes": b}, in file order
    OrderedJson by_dtype = OrderedJson::object();
    for (const fb::Tensor* t : *m_->tensors()) {
      OrderedJson shape = OrderedJson::array();
      uint64_t elements = 1;
      for (int64_t d : *t->shape()) {
        shape.push_back(d);
        elements *= static_cast<uint64_t>(d < 0 ? 0 : d);
      }
      parameters += elements;
      const std::string dtype = DTypeString(t->dtype());
      OrderedJson tensor = {{"name", t->name()->str()},
                     {"shape", shape},
                     {"dtype", dtype},
                     {"offset", t->offset()},
                     {"bytes", t->size()},
                     {"aligned", t->offset() % kAlignment == 0}};
      if (const fb::Quantization* q = t->quant()) {
        tensor["quant"] = {{"axis", q->axis()},
                           {"scales", q->scales() ? q->scales()->size() : 0}};
        if (q->scales_f16()) {
          tensor["quant"]["scales"] = q->scales_f16()->size();
          tensor["quant"]["scale_dtype"] = "f16";
          tensor["quant"]["group_size"] = q->group_size();
        }
      }
      tensors.push_back(tensor);
      OrderedJson& totals = by_dtype[dtype];
      if (totals.is_null()) totals = {{"tensors", 0}, {"bytes", 0}};
      totals["tensors"] = totals["tensors"].get<uint64_t>() + 1;
      totals["bytes"] = totals["bytes"].get<uint64_t>() + t->size();
    }
    j["tensor_elements"] = parameters;
    j["tensors"] = tensors;
    j["bytes_by_dtype"] = by_dtype;
    j["data_size"] = m_->data_size();
    return j;
  }

 private:
  const fb::Model* m_;
  TensorRefs refs_;
};

std::string RefText(const OrderedJson& ref) { return ref.is_null() ? "-" : ref.get<std::string>(); }

std::string DenseText(const OrderedJson& d) {
  if (d.is_null()) return "none";
  return RefText(d["weight"]) + (d["bias"].is_null() ? " (no bias)" : " + bias");
}

std::string NormText(const OrderedJson& n) {
  if (n.is_null()) return "none";
  return n["type"].get<std::string>() +
         (n.contains("scale") ? " scale=" + n["scale"].get<std::string>() : std::string()) +
         " eps=" + FormatFloat(n["eps"].get<float>());
}

std::string ShapeText(const OrderedJson& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i].get<int64_t>());
  }
  return s + "]";
}

std::string RenderText(const OrderedJson& j) {
  std::string o;
  auto line = [&](const std::string& s) { o += s + "\n"; };
  line("file:            " + j["file"].get<std::string>() + " (" +
       std::to_string(j["file_bytes"].get<uint64_t>()) + " bytes)");
  line("structure:       flatbuffer " + std::to_string(j["flatbuffer_bytes"].get<uint64_t>()) +
       " bytes, data segment at " + std::to_string(j["data_offset"].get<uint64_t>()) + ", " +
       std::to_string(j["data_size"].get<uint64_t>()) + " bytes; length " +
       (j["length_ok"].get<bool>() ? "ok" : "WRONG (expected data offset + data_size)"));
  line("format_version:  " + std::to_string(j["format_version"].get<uint32_t>()));
  line("metadata:");
  const OrderedJson& meta = j["metadata"];
  for (const char* key : {"producer", "source_hash", "notes", "input_description", "output_description"}) {
    std::string value = meta.contains(key) ? meta[key].get<std::string>() : "-";
    for (std::size_t nl = value.find('\n'); nl != std::string::npos; nl = value.find('\n', nl + 1))
      value.insert(nl + 1, std::string(22, ' '));  // continuation lines under the value
    std::string pad(std::max<int>(1, 19 - static_cast<int>(std::strlen(key))), ' ');
    line("  " + std::string(key) + ":" + pad + value);
  }
  line("d_model:         " + std::to_string(j["d_model"].get<uint32_t>()));
  const OrderedJson& in = j["input"];
  std::string input = in["kind"].get<std::string>();
  if (in["kind"] == "tokens") {
    input += " vocab_size=" + std::to_string(in["vocab_size"].get<uint32_t>()) + " embedding=" +
             RefText(in["embedding"]);
  } else if (in["kind"] == "features") {
    input += " feature_width=" + std::to_string(in["feature_width"].get<uint32_t>()) +
             " projection=" + DenseText(in["projection"]);
  }
  input += " positions=" + (in["positions"].is_null() ? std::string("none") : RefText(in["positions"]));
  if (in.contains("sinusoid")) {
    const OrderedJson& s = in["sinusoid"];
    const std::string freq =
        s.contains("freq") ? "freq " + RefText(s["freq"])
                           : "base " + FormatFloat(static_cast<float>(s["base"].get<double>()));
    input += " sinusoid=" + freq + " scale " +
             (s["scale"].is_null() ? std::string("none") : RefText(s["scale"]));
  }
  if (in.contains("norm")) input += " norm=" + NormText(in["norm"]);
  line("input:           " + input);
  line("norm_placement:  " + j["norm_placement"].get<std::string>());
  line("residual:        " + j["residual"].get<std::string>() +
       (j["residual"] == "reversible"          ? " (two streams, x1 + x2 after the last block)"
        : j["residual"] == "reversible_concat" ? " (two streams, [x1 | x2] after the last block)"
                                               : ""));
  if (const OrderedJson& t = j["tokenizer"]; t.is_null()) {
    line("tokenizer:       none");
  } else {
    const int32_t eot = t["end_of_text"].get<int32_t>();
    line("tokenizer:       " + t["kind"].get<std::string>() + ", " +
         std::to_string(t["tokens"].get<uint32_t>()) + " tokens of " +
         std::to_string(t["token_bytes"].get<uint64_t>()) + " bytes, end_of_text " +
         (eot < 0 ? std::string("none") : std::to_string(eot)) +
         (t["kind"] == "gpt2_bpe" ? ", " + std::to_string(t["merges"].get<uint32_t>()) +
                                        " merges, " +
                                        std::to_string(t["added_tokens"].get<uint32_t>()) +
                                        " added tokens"
                                  : std::string()));
  }
  line("blocks:          " + std::to_string(j["blocks"].size()));
  std::size_t i = 0;
  for (const OrderedJson& b : j["blocks"]) {
    line("  block " + std::to_string(i++) + ":");
    line("    norm1:  " + NormText(b["norm1"]));
    const OrderedJson& m = b["mixer"];
    std::string mixer = m["type"].get<std::string>();
    if (const MixerType* type = FindMixerTypeByConfigName(mixer)) {
      mixer += type->converter->DescribeText(m);
    }
    line("    mixer:  " + mixer);
    if (m.contains("state_bytes")) {
      if (m["state_grows_with_length"].get<bool>()) {
        line("    state:  " + std::to_string(m["state_bytes_per_position"].get<uint64_t>()) +
             " bytes per stream per position: grows with the sequence length (KV cache, bounded "
             "by the session's max_context" +
             (m.contains("max_length")
                  ? ", at most max_length=" + std::to_string(m["max_length"].get<uint32_t>())
                  : std::string()) +
             ")");
      } else {
        line("    state:  " + std::to_string(m["state_bytes"].get<uint64_t>()) +
             " bytes per stream" +
             (m.contains("state_bytes_plain_sums") && m["state_bytes"].get<uint64_t>() != 0
                  ? " (" + std::to_string(m["state_bytes_plain_sums"].get<uint64_t>()) +
                        " with plain sums)"
                  : std::string()) +
             ", fixed (does not grow with the length)");
      }
    }
    if (b.contains("token_shift")) {
      const OrderedJson& ts = b["token_shift"];
      line("    shift:  segments=" + ts["segments"].dump() + " of the mixer's input" +
           (ts["ffn"].get<bool>() ? " and the FFN's" : "") + ", " +
           std::to_string(ts["state_bytes"].get<uint64_t>()) + " bytes of state per stream");
    }
    line("    norm2:  " + NormText(b["norm2"]));
    const OrderedJson& f = b["ffn"];
    if (f.is_null()) {
      line("    ffn:    none");
    } else {
      line("    ffn:    d_ff=" + std::to_string(f["d_ff"].get<uint32_t>()) + " activation=" +
           f["activation"].get<std::string>() + (f["glu"].get<bool>() ? " glu" : "") +
           (f.contains("token_mix") ? " token_mix (" +
                                          std::to_string(f["state_bytes"].get<uint64_t>()) +
                                          " bytes of state per stream)"
                                    : ""));
    }
  }
  line("final_norm:      " + NormText(j["final_norm"]));
  const OrderedJson& head = j["head"];
  if (head.is_null()) {
    line("head:            none (output is the d_model stream)");
  } else {
    std::string h = "dense " + DenseText(head);
    if (head.contains("out")) h += " out=" + std::to_string(head["out"].get<int64_t>());
    h += " activation=" + head["activation"].get<std::string>();
    line("head:            " + h);
  }
  const OrderedJson& rt = j["runtime"];
  if (rt["ok"].get<bool>()) {
    line("parameters:      " + std::to_string(rt["parameter_count"].get<uint64_t>()));
    line("output_width:    " + std::to_string(rt["output_width"].get<uint32_t>()));
    line("state bytes:     " + std::to_string(rt["state_bytes"].get<uint64_t>()) +
         " per stream (" + std::to_string(rt["state_bytes_plain_sums"].get<uint64_t>()) +
         " with plain sums: recur_session_options.state_sums)");
  } else {
    line("parameters:      " + std::to_string(j["tensor_elements"].get<uint64_t>()) +
         " (tensor elements)");
    line("state bytes:     unavailable: the runtime rejects the model: " +
         rt["error"].get<std::string>());
  }

  // The tensor table.
  const OrderedJson& tensors = j["tensors"];
  line("tensors:         " + std::to_string(tensors.size()));
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"name", "shape", "dtype", "offset", "bytes", "aligned", "quant"});
  for (const OrderedJson& t : tensors) {
    std::string quant = "-";
    if (t.contains("quant")) {
      quant = std::to_string(t["quant"]["scales"].get<uint64_t>()) + " scales, axis " +
              std::to_string(t["quant"]["axis"].get<int>());
      if (t["quant"].contains("group_size")) {
        quant += ", f16 per " + std::to_string(t["quant"]["group_size"].get<uint32_t>()) +
                 " inputs";
      }
    }
    rows.push_back({t["name"].get<std::string>(), ShapeText(t["shape"]),
                    t["dtype"].get<std::string>(), std::to_string(t["offset"].get<uint64_t>()),
                    std::to_string(t["bytes"].get<uint64_t>()),
                    t["aligned"].get<bool>() ? "yes" : "NO", quant});
  }
  std::vector<std::size_t> width(7, 0);
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  for (const auto& r : rows) {
    std::string s = " ";
    for (std::size_t c = 0; c < r.size(); ++c) {
      const bool right = c >= 3 && c <= 4;  // numbers right-aligned
      std::string pad(width[c] - r[c].size(), ' ');
      s += "  " + (right ? pad + r[c] : r[c] + (c + 1 < r.size() ? pad : ""));
    }
    line(s);
  }
  // Totals by dtype: "weight bytes:    f32 1234 (30 tensors), bf16 5678 (8 tensors); total 6912"
  std::string totals;
  uint64_t total = 0;
  for (const auto& [dtype, t] : j["bytes_by_dtype"].items()) {
    if (!totals.empty()) totals += ", ";
    totals += dtype + " " + std::to_string(t["bytes"].get<uint64_t>()) + " (" +
              std::to_string(t["tensors"].get<uint64_t>()) + " tensors)";
    total += t["bytes"].get<uint64_t>();
  }
  line("weight bytes:    " + (totals.empty() ? std::string("none") : totals) + "; total " +
       std::to_string(total));
  return o;
}

Status InspectImpl(const std::string& path, bool as_json, std::string* out) {
  auto bytes = ReadFileAligned(path);
  if (!bytes.ok()) return bytes.status();
  ModelFile pm;
  Status s = ParseModel(path, *bytes, &pm);
  if (!s.ok()) return s;

  OrderedJson j;
  j["file"] = path;
  j["file_bytes"] = bytes->size();
  j["flatbuffer_bytes"] = pm.flatbuffer_bytes;
  j["data_offset"] = pm.segment_start;
  const bool length_ok = pm.segment_start + pm.root->data_size() == bytes->size();
  j["length_ok"] = length_ok;
  OrderedJson collected = Collector(pm.root).Collect();
  for (auto& [key, value] : collected.items()) j[key] = std::move(value);

  OrderedJson rt;
  recur_model* model = nullptr;
  recur_status st = recur_model_load_file(path.c_str(), nullptr, &model);
  Status result = Status::Ok();
  if (st == RECUR_OK) {
    recur_model_info info;
    std::memset(&info, 0, sizeof(info));
    info.struct_size = sizeof(info);
    st = recur_model_get_info(model, &info);
    if (st == RECUR_OK) {
      rt["ok"] = true;
      rt["parameter_count"] = info.parameter_count;
      rt["state_bytes"] = static_cast<uint64_t>(info.state_bytes);
      rt["state_bytes_plain_sums"] = static_cast<uint64_t>(info.state_bytes_plain_sums);
      rt["output_width"] = info.output_width;
      rt["num_layers"] = info.num_layers;
      rt["max_positions"] = info.max_positions;
    }
    recur_model_free(model);
  }
  if (st != RECUR_OK) {
    rt["ok"] = false;
    rt["error"] = std::string(recur_status_string(st)) + ": " + recur_last_error();
    result = Status(static_cast<StatusCode>(st),
                    path + ": the runtime rejects the model: " + recur_last_error());
  }
  j["runtime"] = rt;
  if (result.ok() && !length_ok) {
    result = Status(StatusCode::kInvalidModel,
                    path + ": file length " + std::to_string(bytes->size()) + ", expected " +
                        std::to_string(pm.segment_start + pm.root->data_size()));
  }
  *out = as_json ? j.dump(2) + "\n" : RenderText(j);
  return result;
}

Status VerifyImpl(const std::string& path, std::string* summary) {
  recur_model* model = nullptr;
  recur_status st = recur_model_load_file(path.c_str(), nullptr, &model);
  if (st != RECUR_OK) {
    return Status(static_cast<StatusCode>(st),
                  path + ": " + recur_last_error() + " (" + recur_status_string(st) + ")");
  }
  recur_model_info info;
  std::memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  st = recur_model_get_info(model, &info);
  recur_model_free(model);
  if (st != RECUR_OK) return Status(static_cast<StatusCode>(st), path + ": " + recur_last_error());

  auto bytes = ReadFileAligned(path);
  if (!bytes.ok()) return bytes.status();
  ModelFile pm;
  Status s = ParseModel(path, *bytes, &pm);
  if (!s.ok()) return s;
  std::size_t scanned = 0;
  for (const fb::Tensor* t : *pm.root->tensors()) {
    const std::string name = t->name()->str();
    if (t->offset() > pm.segment_available || t->size() > pm.segment_available - t->offset()) {
      return Status(StatusCode::kInvalidModel,
                    path + ": " + name + ": bytes [" + std::to_string(t->offset()) + ", +" +
                        std::to_string(t->size()) + ") lie outside the data segment");
    }
    std::vector<int64_t> shape(t->shape()->begin(), t->shape()->end());
    TensorView view;
    view.shape = shape;
    view.data = pm.segment + t->offset();
    view.nbytes = static_cast<std::size_t>(t->size());
    kernels::WeightType type;
    if (!WeightTypeOf(t->dtype(), &type)) continue;  // the runtime accepted it; nothing to scan
    switch (kernels::Traits(type).scales) {
      case kernels::WeightScales::kNone:
        // The schema spells its float types as safetensors does (F32, F16, BF16).
        if (!ParseDType(fb::EnumNameDType(t->dtype()), &view.dtype)) continue;
        break;
      case kernels::WeightScales::kPerRow:
        // The integers are finite by construction; their scales are not.
        if (const fb::Quantization* q = t->quant()) {
          if (q->scales()) {
            std::vector<float> scales(q->scales()->begin(), q->scales()->end());
            Status f = CheckFinite(name + " (quantization scales)", scales.data(), scales.size(), {});
            if (!f.ok()) return Status(StatusCode::kInvalidModel, path + ": " + f.message());
          }
        }
        ++scanned;
        continue;
      case kernels::WeightScales::kPerGroup:
        // Every integer is a finite value; the loader checked the group scales.
        ++scanned;
        continue;
      case kernels::WeightScales::kInBlock:
        // The blocks' own scales may be NaN or Inf: decoded, as the import does.
        if (!KQuantDType(type, &view.dtype)) continue;
        break;
    }
    auto values = ToFloat32(name, view);
    if (!values.ok()) return Status(StatusCode::kInvalidModel, path + ": " + values.message());
    Status f = CheckFinite(name, values->data(), values->size(), shape);
    if (!f.ok()) return Status(StatusCode::kInvalidModel, path + ": " + f.message());
    ++scanned;
  }
  *summary = "OK: " + path + " (format " + std::to_string(pm.root->format_version()) + ", " +
             std::to_string(info.num_layers) + " blocks, " + std::to_string(scanned) +
             " tensors finite, " + std::to_string(info.parameter_count) + " parameters, " +
             std::to_string(info.state_bytes) + " state bytes per stream)";
  return Status::Ok();
}

}  // namespace

Status InspectModelFile(const std::string& path, bool as_json, std::string* out) {
  try {
    return InspectImpl(path, as_json, out);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, path + ": " + e.what());
  }
}

Status VerifyModelFile(const std::string& path, std::string* summary) {
  try {
    return VerifyImpl(path, summary);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, path + ": " + e.what());
  }
}

}  // namespace recur::impl::converter
