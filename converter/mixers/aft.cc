// The AFT variants (AftSimple, AftLocal, AftFull): config keys, tensors,
// schema tables, inspect. The runtime is runtime/mixers/aft.cc.
#include "converter/mixers/aft.h"

#include <string>

#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {


// Query, key, value and out of an AFT block, D = heads·dk wide.
void AddAftProjections(uint32_t heads, uint32_t dk, MixerTensors* out) {
  out->AddAttentionProjections(int64_t{heads} * dk, int64_t{heads} * dk);
}

class AftSimpleConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<AftSimpleParams>();
    RECUR_RETURN_IF_ERROR(c.Heads(&p->heads, &p->dk, nullptr));
    RECUR_RETURN_IF_ERROR(c.OnlyKeys({"type", "heads", "dk", "causal"}));
    RECUR_RETURN_IF_ERROR(c.Causal(&p->causal));
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const AftSimpleParams&>(params);
    AddAftProjections(p.heads, p.dk, out);
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const AftSimpleParams&>(params);
    auto q = w->Dense("query");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto o = w->Dense("out");
    return fb::CreateAftSimple(w->fbb(), p.heads, p.dk, q, k, v, o, p.causal).Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* aft = static_cast<const fb::AftSimple*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = aft->heads();
    mixer["dk"] = aft->dk();
    mixer["causal"] = aft->causal();
    mixer["query"] = refs.Dense(aft->query());
    mixer["key"] = refs.Dense(aft->key());
    mixer["value"] = refs.Dense(aft->value());
    mixer["out"] = refs.Dense(aft->out());
    // Running max, numerator and denominator, D each.
    mixer["state_bytes"] = aft->causal() ? 4 * 3 * uint64_t{aft->heads()} * aft->dk() : 0;
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "dk"}) + InspectEncoderNote(m);
  }
};

class AftLocalConverterImpl final : public MixerConverter {
 public:
  std::vector<std::string> ConfigAliases() const override { return {"aft_conv"}; }

  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<AftLocalParams>();
    p->per_head_kernel = c.type == "aft_conv";
    RECUR_RETURN_IF_ERROR(c.Heads(&p->heads, &p->dk, nullptr));
    RECUR_RETURN_IF_ERROR(c.OnlyKeys({"type", "heads", "dk", "causal", "window"}));
    RECUR_RETURN_IF_ERROR(c.UInt("window", 1, &p->window));
    if (p->window > 65536) return c.Invalid("window", "must be at most 65536");
    RECUR_RETURN_IF_ERROR(c.Causal(&p->causal));
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const AftLocalParams&>(params);
    AddAftProjections(p.heads, p.dk, out);
    // One bias per offset: 0..w−1 back, or −(w−1)..w−1 for the encoder.
    const int64_t offsets = p.causal ? int64_t{p.window} : 2 * int64_t{p.window} - 1;
    if (p.per_head_kernel) {
      out->Add("conv_kernel", {p.heads, offsets});
    } else {
      out->Add("pos_bias", {offsets});
    }
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const AftLocalParams&>(params);
    auto q = w->Dense("query");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto o = w->Dense("out");
    return fb::CreateAftLocal(w->fbb(), p.heads, p.dk, p.window, q, k, v, o, w->Ref("pos_bias"),
                              w->Ref("conv_kernel"), p.causal)
        .Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* al = static_cast<const fb::AftLocal*>(table);
    OrderedJson& mixer = *out;
    if (al->conv_kernel() >= 0) mixer["type"] = "aft_conv";
    mixer["heads"] = al->heads();
    mixer["dk"] = al->dk();
    mixer["window"] = al->window();
    mixer["causal"] = al->causal();
    mixer["query"] = refs.Dense(al->query());
    mixer["key"] = refs.Dense(al->key());
    mixer["value"] = refs.Dense(al->value());
    mixer["out"] = refs.Dense(al->out());
    // Running sums beyond the window (3·D) and the window's k and v (2·w·D).
    const uint64_t D = uint64_t{al->heads()} * al->dk();
    mixer["state_bytes"] = al->causal() ? 4 * D * (3 + 2 * uint64_t{al->window()}) : 0;
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "dk", "window"}) + InspectEncoderNote(m);
  }
};

class AftFullConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<AftFullParams>();
    RECUR_RETURN_IF_ERROR(c.Heads(&p->heads, &p->dk, nullptr));
    RECUR_RETURN_IF_ERROR(
        c.OnlyKeys({"type", "heads", "dk", "causal", "max_length", "bias_rank", "bias_form"}));
    RECUR_RETURN_IF_ERROR(c.UInt("max_length", 1, &p->max_length));
    if (p->max_length > 65536) return c.Invalid("max_length", "must be at most 65536");
    if (auto rank = c.object.find("bias_rank"); rank != c.object.end() && !rank->is_null()) {
      RECUR_RETURN_IF_ERROR(c.UInt("bias_rank", 1, &p->bias_rank));
    }
    static const char* const kForms[] = {"add", "multiply"};
    std::size_t form = 0;
    RECUR_RETURN_IF_ERROR(c.Choice("bias_form", kForms, &form, false));
    p->multiply = form == 1;
    RECUR_RETURN_IF_ERROR(c.Causal(&p->causal));
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const AftFullParams&>(params);
    AddAftProjections(p.heads, p.dk, out);
    const int64_t T = p.max_length;
    if (p.bias_rank == 0) {
      out->Add("pos_bias", {T, T});
    } else {
      out->Add("u", {T, p.bias_rank});
      out->Add("v", {T, p.bias_rank});
    }
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const AftFullParams&>(params);
    auto q = w->Dense("query");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto o = w->Dense("out");
    return fb::CreateAftFull(w->fbb(), p.heads, p.dk, p.max_length, p.multiply, q, k, v, o,
                             w->Ref("pos_bias"), w->Ref("u"), w->Ref("v"), p.causal, p.bias_rank)
        .Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* af = static_cast<const fb::AftFull*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = af->heads();
    mixer["dk"] = af->dk();
    mixer["max_length"] = af->max_length();
    mixer["bias_rank"] = af->bias_rank();
    mixer["bias_form"] = af->multiply() ? "multiply" : "add";
    mixer["causal"] = af->causal();
    mixer["query"] = refs.Dense(af->query());
    mixer["key"] = refs.Dense(af->key());
    mixer["value"] = refs.Dense(af->value());
    mixer["out"] = refs.Dense(af->out());
    // k and v of every position so far, at most max_length of them.
    mixer["state_bytes"] = 0;
    mixer["state_bytes_per_position"] =
        af->causal() ? 4 * 2 * uint64_t{af->heads()} * af->dk() : 0;
    mixer["state_grows_with_length"] = af->causal();
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "dk", "max_length", "bias_rank", "bias_form"}) +
           InspectEncoderNote(m);
  }
};

}  // namespace

const MixerConverter& AftSimpleConverter() {
  static const AftSimpleConverterImpl converter;
  return converter;
}

const MixerConverter& AftLocalConverter() {
  static const AftLocalConverterImpl converter;
  return converter;
}

const MixerConverter& AftFullConverter() {
  static const AftFullConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
