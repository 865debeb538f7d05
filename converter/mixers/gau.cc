// GAU: config keys, tensors, schema table, inspect.
// The runtime is runtime/mixers/gau.cc.
#include "converter/mixers/gau.h"

#include <string>

#include "converter/json_util.h"
#include "converter/mixers/gated_unit.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

class GauConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    GatedUnitShape shape;
    RECUR_RETURN_IF_ERROR(ParseGatedUnit(c, "max_length", &shape, "length_scale"));
    auto p = std::make_unique<GauParams>();
    p->expansion_dim = shape.expansion_dim;
    p->qk_dim = shape.qk_dim;
    p->max_length = shape.length;
    p->scale = shape.scale;
    p->mask = shape.causal;
    if (auto ls = c.object.find("length_scale"); ls != c.object.end()) {
      if (!ls->is_boolean()) return c.Invalid("length_scale", "must be true or false");
      p->length_scale = ls->get<bool>();
    }
    p->causal = p->mask && !p->length_scale;  // length_scale: an encoder, masked or not
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const GauParams&>(params);
    // Two rows of γ and β: queries and keys.
    AddGatedUnitTensors(p.expansion_dim, p.qk_dim, 2, p.max_length, p.mask, out);
  }

  uint32_t FormatVersion(const MixerParams& params) const override {
    return static_cast<const GauParams&>(params).length_scale ? 2 : 1;
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const GauParams&>(params);
    auto u = w->Dense("u_proj");
    auto v = w->Dense("v_proj");
    auto z = w->Dense("z_proj");
    auto o = w->Dense("out");
    return fb::CreateGau(w->fbb(), p.expansion_dim, p.qk_dim, p.max_length, p.scale, u, v, z, o,
                           w->Ref("qk_gamma"), w->Ref("qk_beta"), w->Ref("rel_bias"), p.mask,
                           p.length_scale)
        .Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* g = static_cast<const fb::Gau*>(table);
    OrderedJson& mixer = *out;
    mixer["expansion_dim"] = g->expansion_dim();
    mixer["qk_dim"] = g->qk_dim();
    mixer["max_length"] = g->max_length();
    mixer["scale"] = FloatForJson(g->scale());
    const bool step = g->causal() && !g->length_scale();
    mixer["causal"] = step;
    if (g->length_scale()) {
      mixer["length_scale"] = true;
      mixer["causal_mask"] = g->causal();
    }
    mixer["u_proj"] = refs.Dense(g->u_proj());
    mixer["v_proj"] = refs.Dense(g->v_proj());
    mixer["z_proj"] = refs.Dense(g->z_proj());
    mixer["out"] = refs.Dense(g->out());
    // K (qk_dim) and V (expansion_dim) of every position so far, at most max_length.
    mixer["state_bytes"] = 0;
    mixer["state_bytes_per_position"] =
        step ? 4 * (uint64_t{g->qk_dim()} + g->expansion_dim()) : 0;
    mixer["state_grows_with_length"] = step;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    std::string length;
    if (m.value("length_scale", false)) {
      length = m.value("causal_mask", false) ? " length_scale (scores / N) causal_mask"
                                             : " length_scale (scores / N)";
    }
    return InspectFields(m, {"expansion_dim", "qk_dim", "max_length", "scale"}) + length +
           InspectEncoderNote(m);
  }

  std::vector<std::string> QuantizableWeights() const override {
    return GatedUnitQuantizableWeights();
  }
};

}  // namespace

const MixerConverter& GauConverter() {
  static const GauConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
