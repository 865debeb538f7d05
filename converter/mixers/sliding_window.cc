// Sliding-window attention: config keys, tensors, schema table, inspect.
// The runtime is runtime/mixers/sliding_window.cc.
#include "converter/mixers/sliding_window.h"

#include <algorithm>
#include <string>

#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {


class SlidingWindowConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<SlidingWindowParams>();
    RECUR_RETURN_IF_ERROR(c.Heads(&p->heads, &p->dk, &p->dv));
    RECUR_RETURN_IF_ERROR(c.OnlyKeys({"type", "heads", "dk", "causal", "dv", "window", "dilation",
                                      "global_tokens", "global_projections", "rotary"}));
    RECUR_RETURN_IF_ERROR(c.UInt("window", 1, &p->window));
    RECUR_RETURN_IF_ERROR(c.UInt("global_tokens", 0, &p->global_tokens, false));
    // "dilation": one per head, or one number for all heads.
    if (auto d = c.object.find("dilation"); d != c.object.end()) {
      if (d->is_array()) {
        if (d->size() != p->heads) {
          return c.Invalid("dilation", "has " + std::to_string(d->size()) +
                                           " entries, expected one per head (" +
                                           std::to_string(p->heads) + ")");
        }
        for (const auto& v : *d) {
          if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 65536) {
            return c.Invalid("dilation", "entries must be integers in [1, 65536]");
          }
          p->dilation.push_back(v.get<uint32_t>());
        }
      } else {
        uint32_t all = 1;
        RECUR_RETURN_IF_ERROR(c.UInt("dilation", 1, &all));
        if (all > 65536) return c.Invalid("dilation", "must be at most 65536");
        p->dilation.assign(p->heads, all);
      }
    }
    RECUR_RETURN_IF_ERROR(c.Causal(&p->causal));
    RECUR_RETURN_IF_ERROR(
        c.reader.Bool(c.object, "global_projections", c.where, &p->global_projections, false));
    if (p->global_projections && (p->causal || p->global_tokens == 0)) {
      return c.Invalid("global_projections",
                       "needs a non-causal mixer (\"causal\": false) with global_tokens > 0");
    }
    RECUR_RETURN_IF_ERROR(c.Rotary(p->dk, "dk", &p->rotary));
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const SlidingWindowParams&>(params);
    out->AddAttentionProjections(int64_t{p.heads} * p.dk, int64_t{p.heads} * p.dv);
    if (p.global_projections) {
      out->AddDense("query_global", int64_t{p.heads} * p.dk, out->d_model());
      out->AddDense("key_global", int64_t{p.heads} * p.dk, out->d_model());
      out->AddDense("value_global", int64_t{p.heads} * p.dv, out->d_model());
    }
  }

  std::vector<std::string> QuantizableWeights() const override {
    return {"query", "key", "value", "out", "query_global", "key_global", "value_global"};
  }

  uint32_t FormatVersion(const MixerParams& params) const override {
    return static_cast<const SlidingWindowParams&>(params).global_projections ? 2 : 1;
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const SlidingWindowParams&>(params);
    auto q = w->Dense("query");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto o = w->Dense("out");
    flatbuffers::Offset<fb::Dense> qg, kg, vg;
    if (p.global_projections) {
      qg = w->Dense("query_global");
      kg = w->Dense("key_global");
      vg = w->Dense("value_global");
    }
    auto rotary = w->Rotary(p.rotary);
    return fb::CreateSlidingWindowDirect(w->fbb(), p.heads, p.dk, p.dv, p.window,
                                         p.dilation.empty() ? nullptr : &p.dilation,
                                         p.global_tokens, q, k, v, o, p.causal, qg, kg, vg, rotary)
        .Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* sw = static_cast<const fb::SlidingWindow*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = sw->heads();
    mixer["dk"] = sw->dk();
    mixer["dv"] = sw->dv();
    mixer["window"] = sw->window();
    std::vector<uint32_t> dilation;
    if (sw->dilation()) dilation.assign(sw->dilation()->begin(), sw->dilation()->end());
    mixer["dilation"] = dilation;
    mixer["global_tokens"] = sw->global_tokens();
    mixer["causal"] = sw->causal();
    DescribeRotary(sw->rotary(), refs, &mixer);
    mixer["query"] = refs.Dense(sw->query());
    mixer["key"] = refs.Dense(sw->key());
    mixer["value"] = refs.Dense(sw->value());
    mixer["out"] = refs.Dense(sw->out());
    if (sw->query_global() != nullptr) {
      mixer["query_global"] = refs.Dense(sw->query_global());
      mixer["key_global"] = refs.Dense(sw->key_global());
      mixer["value_global"] = refs.Dense(sw->value_global());
    }
    // A ring of the last (w − 1)·max dilation + 1 positions' K and V, and the
    // global positions' K and V.
    uint64_t max_d = 1;
    for (uint32_t d : dilation) max_d = std::max<uint64_t>(max_d, d);
    const uint64_t ring = (uint64_t{sw->window()} - (sw->window() > 0)) * max_d + 1;
    mixer["state_bytes"] = sw->causal() ? 4 * uint64_t{sw->heads()} *
                                              (ring + sw->global_tokens()) * (sw->dk() + sw->dv())
                                        : 0;
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "dk", "dv", "window"}) +
           " dilation=" + (m["dilation"].empty() ? std::string("1") : m["dilation"].dump()) +
           InspectFields(m, {"global_tokens"}) +
           (m.contains("query_global") ? " global_projections" : "") + InspectRotary(m) +
           InspectEncoderNote(m);
  }
};

}  // namespace

const MixerConverter& SlidingWindowConverter() {
  static const SlidingWindowConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
