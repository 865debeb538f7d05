// Mamba2's SSD mixer: config keys, tensors, schema table, inspect.
// The math is docs/attention-math.md §17; the runtime is runtime/mixers/mamba2.cc.
#include "converter/mixers/mamba2.h"

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "converter/json_util.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {
namespace {

class Mamba2ConverterImpl final : public MixerConverter {
 public:
  Status Parse(const MixerConfig& c, std::unique_ptr<MixerParams>* out) const override {
    auto p = std::make_unique<Mamba2Params>();
    RECUR_RETURN_IF_ERROR(c.OnlyKeys({"type", "heads", "head_dim", "state_size", "groups",
                                      "conv_kernel", "norm_eps", "dt_min", "dt_max", "bias"}));
    RECUR_RETURN_IF_ERROR(c.UInt("heads", 1, &p->heads));
    RECUR_RETURN_IF_ERROR(c.UInt("head_dim", 1, &p->head_dim));
    RECUR_RETURN_IF_ERROR(c.UInt("state_size", 1, &p->state_size));
    RECUR_RETURN_IF_ERROR(c.UInt("groups", 1, &p->groups, false));
    RECUR_RETURN_IF_ERROR(c.UInt("conv_kernel", 1, &p->conv_kernel, false));
    if (p->heads % p->groups != 0) {
      return c.Invalid("groups", "(" + std::to_string(p->groups) + ") must divide heads (" +
                                     std::to_string(p->heads) + ")");
    }
    if (p->conv_kernel > 256) return c.Invalid("conv_kernel", "must be at most 256");
    RECUR_RETURN_IF_ERROR(c.PositiveFloat("norm_eps", &p->norm_eps, false));
    double lo = 0.0, hi = FLT_MAX;
    RECUR_RETURN_IF_ERROR(c.reader.NumberIn(c.object, "dt_min", c.where, 0.0, FLT_MAX, &lo, false));
    RECUR_RETURN_IF_ERROR(c.reader.NumberIn(c.object, "dt_max", c.where, 0.0, FLT_MAX, &hi, false));
    p->dt_min = float(lo);
    if (c.object.contains("dt_max")) p->dt_max = float(hi);
    if (!(p->dt_min < p->dt_max)) return c.Invalid("dt_min", "must be below dt_max");
    RECUR_RETURN_IF_ERROR(c.reader.Bool(c.object, "bias", c.where, &p->bias, false));
    *out = std::move(p);
    return Status::Ok();
  }

  void AddTensors(const MixerParams& params, MixerTensors* out) const override {
    const auto& p = static_cast<const Mamba2Params&>(params);
    const int64_t d = out->d_model(), h = p.heads, w = p.conv_width();
    out->Add("in_proj.weight", {p.in_proj_rows(), d});
    if (p.bias) out->Add("in_proj.bias", {p.in_proj_rows()});
    out->Add("conv.weight", {w, int64_t{p.conv_kernel}});
    out->Add("conv.bias", {w});
    out->Add("dt_bias", {h});
    out->Add("A", {h});
    out->Add("D", {h});
    out->Add("norm.weight", {p.inner()});
    out->Add("out_proj.weight", {d, p.inner()});
    if (p.bias) out->Add("out_proj.bias", {d});
  }

  flatbuffers::Offset<void> WriteTable(const MixerParams& params,
                                       MixerTableWriter* w) const override {
    const auto& p = static_cast<const Mamba2Params&>(params);
    auto in_proj = w->Dense("in_proj");
    auto out_proj = w->Dense("out_proj");
    fb::Mamba2Builder b(w->fbb());
    b.add_heads(p.heads);
    b.add_head_dim(p.head_dim);
    b.add_state_size(p.state_size);
    b.add_groups(p.groups);
    b.add_conv_kernel(p.conv_kernel);
    b.add_in_proj(in_proj);
    b.add_conv_weight(w->Ref("conv.weight"));
    b.add_conv_bias(w->Ref("conv.bias"));
    b.add_dt_bias(w->Ref("dt_bias"));
    b.add_a(w->Ref("A"));
    b.add_d(w->Ref("D"));
    b.add_norm_weight(w->Ref("norm.weight"));
    b.add_out_proj(out_proj);
    b.add_norm_eps(p.norm_eps);
    b.add_dt_min(p.dt_min);
    b.add_dt_max(p.dt_max);
    return b.Finish().Union();
  }

  void Describe(const void* table, const TensorRefs& refs, OrderedJson* out) const override {
    const auto* t = static_cast<const fb::Mamba2*>(table);
    OrderedJson& mixer = *out;
    mixer["heads"] = t->heads();
    mixer["head_dim"] = t->head_dim();
    mixer["state_size"] = t->state_size();
    mixer["groups"] = t->groups();
    mixer["conv_kernel"] = t->conv_kernel();
    mixer["norm_eps"] = FloatForJson(t->norm_eps());
    mixer["dt_min"] = FloatForJson(t->dt_min());
    // null: no upper clamp (infinite)
    mixer["dt_max"] = std::isinf(t->dt_max()) ? OrderedJson() : OrderedJson(FloatForJson(t->dt_max()));
    mixer["causal"] = true;
    mixer["in_proj"] = refs.Dense(t->in_proj());
    mixer["conv_weight"] = refs.Ref(t->conv_weight());
    mixer["conv_bias"] = refs.Ref(t->conv_bias());
    mixer["dt_bias"] = refs.Ref(t->dt_bias());
    mixer["A"] = refs.Ref(t->a());
    mixer["D"] = refs.Ref(t->d());
    mixer["norm_weight"] = refs.Ref(t->norm_weight());
    mixer["out_proj"] = refs.Dense(t->out_proj());
    // S (H, P, N) and the convolution's last K − 1 inputs (K − 1, W).
    const uint64_t inner = uint64_t{t->heads()} * t->head_dim();
    const uint64_t width = inner + 2 * uint64_t{t->groups()} * t->state_size();
    const uint64_t kept = t->conv_kernel() == 0 ? 0 : t->conv_kernel() - 1;
    mixer["state_bytes"] = 4 * (kept * width + inner * t->state_size());
    mixer["state_grows_with_length"] = false;
  }

  std::string DescribeText(const OrderedJson& m) const override {
    return InspectFields(m, {"heads", "head_dim", "state_size", "groups", "conv_kernel"});
  }

  uint32_t FormatVersion(const MixerParams&) const override { return 5; }

  std::vector<std::string> QuantizableWeights() const override { return {"in_proj", "out_proj"}; }
};

}  // namespace

const MixerConverter& Mamba2Converter() {
  static const Mamba2ConverterImpl converter;
  return converter;
}

}  // namespace recur::impl::converter
