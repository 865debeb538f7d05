// RetNet retention: config keys, tensors, schema table, inspect.
// The math is docs/attention-math.md §11; the runtime is runtime/mixers/retnet.cc.
#include <cmath>
#include <string>
#include <vector>

#include "converter/json_util.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {


// The default decays γ_h = 1 − 2^(−5−h) stay below 1 in float32 for h < 20.
constexpr uint32_t kDefaultDecayHeads = 20;

// Config type "retnet": multi-scale retention, causal only.
struct RetNetParams : MixerParamsOf<RetNetParams> {
  uint32_t heads = 0;
  uint32_t dk = 0;  // even
  uint32_t dv = 0;
  std::vector<float> decay;  // γ_h, one per head
  float eps = 1e-6f;
};

class RetNetConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<RetNetParams>();
    RECUR_RETURN_IF_ERROR(c.Heads(&p->heads, &p->dk, &p->dv));
    RECUR_RETURN_IF_ERROR(c.OnlyKeys({"type", "heads", "dk", "dv", "decay", "eps"}));
    if (p->dk % 2 != 0) return c.Invalid("dk", "must be even (the rotation turns pairs of dims)");
    if (auto d = c.object.find("decay"); d != c.object.end()) {
      if (!d->is_array() || d->size() != p->heads) {
        return c.Invalid("decay", "must be a list of one number per head (" +
                                      std::to_string(p->heads) + ")");
      }
      for (const auto& v : *d) {
        // Checked in double before narrowing (a cast out of float's range is undefined),
        // then as float32: 0.99999999 rounds to 1.
        const double value = v.is_number() ? v.get<double>() : 0.0;
        const float gamma = value > 0.0 && value < 1.0 ? static_cast<float>(value) : 0.0f;
        if (!(gamma > 0.0f && gamma < 1.0f)) {
          return c.Invalid("decay", "entries must be numbers in (0, 1) as float32");
        }
        p->decay.push_back(gamma);
      }
    } else {
      if (p->heads > kDefaultDecayHeads) {
        return c.Invalid("decay", "is required with more than " +
                                      std::to_string(kDefaultDecayHeads) +
                                      " heads (the default 1 - 2^(-5-h) rounds to 1 in float32)");
      }
      for (uint32_t h = 0; h < p->heads; ++h) {
        p->decay.push_back(static_cast<float>(1.0 - std::ldexp(1.0, -5 - int(h))));
      }
    }
    RECUR_RETURN_IF_ERROR(c.PositiveFloat("eps", &p->eps, false));
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const RetNetParams&>(params);
    const int64_t qk = int64_t{p.heads} * p.dk, vw = int64_t{p.heads} * p.dv, d = out->d_model();
    out->AddDense("query", qk, d);
    out->AddDense("key", qk, d);
    out->AddDense("value", vw, d);
    out->AddDense("gate", vw, d);
    out->AddDense("out", d, vw);
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const RetNetParams&>(params);
    auto q = w->Dense("query");
    auto k = w->Dense("key");
    auto v = w->Dense("value");
    auto g = w->Dense("gate");
    auto o = w->Dense("out");
    return fb::CreateRetNetDirect(w->fbb(), p.heads, p.dk, p.dv, &p.decay, p.eps, q, k, v, g, o)
        .Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* rn = static_cast<const fb::RetNet*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = rn->heads();
    mixer["dk"] = rn->dk();
    mixer["dv"] = rn->dv();
    OrderedJson decay = OrderedJson::array();
    if (rn->decay()) {
      for (float gamma : *rn->decay()) decay.push_back(FloatForJson(gamma));
    }
    mixer["decay"] = decay;
    mixer["eps"] = FloatForJson(rn->eps());
    mixer["causal"] = true;
    mixer["query"] = refs.Dense(rn->query());
    mixer["key"] = refs.Dense(rn->key());
    mixer["value"] = refs.Dense(rn->value());
    mixer["gate"] = refs.Dense(rn->gate());
    mixer["out"] = refs.Dense(rn->out());
    // S (heads, dk, dv); the decay bounds it, so it keeps no compensations.
    mixer["state_bytes"] = 4 * uint64_t{rn->heads()} * rn->dk() * rn->dv();
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "dk", "dv"}) + " decay=" + m["decay"].dump() +
           InspectFields(m, {"eps"});
  }

  std::vector<std::string> QuantizableWeights() const override {
    return {"query", "key", "value", "gate", "out"};
  }
};

}  // namespace

const MixerConverter& RetNetConverter() {
  static const RetNetConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
