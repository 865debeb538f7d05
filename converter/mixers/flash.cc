// FLASH: config keys, tensors, schema table, inspect.
// The runtime is runtime/mixers/flash.cc.
#include "converter/mixers/flash.h"

#include <string>

#include "converter/json_util.h"
#include "converter/mixers/gated_unit.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {


class FlashConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    GatedUnitShape shape;
    RECUR_RETURN_IF_ERROR(ParseGatedUnit(c, "chunk", &shape, "rotary"));
    auto p = std::make_unique<FlashParams>();
    p->expansion_dim = shape.expansion_dim;
    p->qk_dim = shape.qk_dim;
    p->chunk = shape.length;
    p->scale = shape.scale;
    p->causal = shape.causal;
    RECUR_RETURN_IF_ERROR(c.Rotary(p->qk_dim, "qk_dim", &p->rotary));
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const FlashParams&>(params);
    // Four rows of γ and β: quadratic and linear queries and keys.
    AddGatedUnitTensors(p.expansion_dim, p.qk_dim, 4, p.chunk, p.causal, out);
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const FlashParams&>(params);
    auto u = w->Dense("u_proj");
    auto v = w->Dense("v_proj");
    auto z = w->Dense("z_proj");
    auto o = w->Dense("out");
    auto rotary = w->Rotary(p.rotary);
    return fb::CreateFlash(w->fbb(), p.expansion_dim, p.qk_dim, p.chunk, p.scale, u, v, z, o,
                           w->Ref("qk_gamma"), w->Ref("qk_beta"), w->Ref("rel_bias"), p.causal,
                           rotary)
        .Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* fl = static_cast<const fb::Flash*>(table);
    OrderedJson& mixer = *out;
    mixer["expansion_dim"] = fl->expansion_dim();
    mixer["qk_dim"] = fl->qk_dim();
    mixer["chunk"] = fl->chunk();
    mixer["scale"] = FloatForJson(fl->scale());
    mixer["causal"] = fl->causal();
    DescribeRotary(fl->rotary(), refs, &mixer);
    mixer["u_proj"] = refs.Dense(fl->u_proj());
    mixer["v_proj"] = refs.Dense(fl->v_proj());
    mixer["z_proj"] = refs.Dense(fl->z_proj());
    mixer["out"] = refs.Dense(fl->out());
    // The linear part's sums (s × E) and, per position of the current chunk,
    // 2·s + E values.
    const uint64_t e = fl->expansion_dim(), qs = fl->qk_dim(), c = fl->chunk();
    mixer["state_bytes"] = fl->causal() ? 4 * (qs * e + c * (2 * qs + e)) : 0;
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"expansion_dim", "qk_dim", "chunk", "scale"}) + InspectRotary(m) +
           InspectEncoderNote(m);
  }

  std::vector<std::string> QuantizableWeights() const override {
    return GatedUnitQuantizableWeights();
  }
};

}  // namespace

const MixerConverter& FlashConverter() {
  static const FlashConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
