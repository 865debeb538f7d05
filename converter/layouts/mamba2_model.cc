#include "converter/layouts/mamba2_model.h"

#include <cfloat>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "converter/layouts/layout_converter.h"
#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {

void DescribeMamba2(const Mamba2Model& m, ModelDescription* d) {
  d->d_model = m.d_model;
  d->norm_placement = NormPlacement::kPre;
  d->norm = NormKind::kRmsNorm;
  d->layer_norm_eps = m.norm_eps;
  d->input = InputDescription();
  d->input.kind = InputKind::kTokens;
  d->input.vocab_size = m.vocab;
  const MixerType* type = FindMixerType(fb::Mixer::Mamba2);
  d->blocks.assign(m.layers, BlockDescription());
  for (BlockDescription& b : d->blocks) {
    b.mixer = MixerDescription(type, std::make_unique<Mamba2Params>(m.mixer));
    b.d_ff = 0;
  }
  d->final_norm = true;
  d->has_head = true;
  d->head.out = m.vocab;
  d->head.activation = HeadActivation::kNone;
}

Status ParseDtLimit(const KeyReader& r, const nlohmann::json& obj, const char* key,
                    const std::string& prefix, Mamba2Params* p) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return Status::Ok();
  const std::string path = prefix.empty() ? key : prefix + "." + key;
  const char* what = "must be [lo, hi] with 0 <= lo < hi (hi may be Infinity)";
  if (!it->is_array() || it->size() != 2) return r.Invalid(path, what);
  double bounds[2];
  for (int i = 0; i < 2; ++i) {
    const nlohmann::json& v = (*it)[i];
    if (v.is_number()) {
      bounds[i] = v.get<double>();
    } else if (i == 1 && v == "Infinity") {
      bounds[i] = HUGE_VAL;
    } else {
      return r.Invalid(path, what);
    }
  }
  if (!(bounds[0] >= 0 && bounds[0] < bounds[1] && bounds[0] <= FLT_MAX)) {
    return r.Invalid(path, what);
  }
  p->dt_min = float(bounds[0]);
  p->dt_max = bounds[1] > FLT_MAX ? HUGE_VALF : float(bounds[1]);
  if (!(p->dt_min < p->dt_max)) return r.Invalid(path, what);
  return Status::Ok();
}

void MapMamba2Tensors(const ModelDescription& d, Mamba2Source source,
                      std::vector<ExpectedTensor>* tensors) {
  const auto* given = dynamic_cast<const Mamba2Options*>(d.layout_options.get());
  const Mamba2Options options = given != nullptr ? *given : Mamba2Options();
  const bool tied = options.tied, conv_bias = options.conv_bias;
  const bool gguf = source == Mamba2Source::kLlamaCpp;
  const std::string embedding = gguf ? "token_embd.weight"
                                : source == Mamba2Source::kStateSpaces
                                    ? "backbone.embedding.weight"
                                    : "backbone.embeddings.weight";
  const std::string head = gguf ? "output.weight" : "lm_head.weight";
  for (ExpectedTensor& t : *tensors) {
    if (t.name == "input.embedding") {
      t.source_name = embedding;
    } else if (t.name == "final_norm.weight") {
      t.source_name = gguf ? "output_norm.weight" : "backbone.norm_f.weight";
    } else if (t.name == "head.weight") {
      t.source_name = tied ? embedding : head;
    } else if (t.name == "head.bias") {
      MakeZeros(&t);
    }
    uint32_t block = 0;
    std::string rest;
    if (!SplitBlockName(t.name, &block, &rest) || block >= d.blocks.size()) continue;
    const auto* p = d.blocks[block].mixer.As<Mamba2Params>();
    if (p == nullptr) continue;
    const int64_t h = p->heads, groups = p->groups;
    if (gguf) {
      const std::string layer = "blk." + std::to_string(block) + ".";
      if (rest == "norm1.weight") {
        t.source_name = layer + "attn_norm.weight";
      } else if (rest == "mixer.in_proj.weight") {
        t.source_name = layer + "ssm_in.weight";
      } else if (rest == "mixer.out_proj.weight") {
        t.source_name = layer + "ssm_out.weight";
      } else if (rest == "mixer.conv.weight" || rest == "mixer.conv.bias") {
        t.source_name = layer + "ssm_conv1d." + rest.substr(rest.rfind('.') + 1);
      } else if (rest == "mixer.dt_bias") {
        t.source_name = layer + "ssm_dt.bias";
      } else if (rest == "mixer.A" || rest == "mixer.D") {  // (H, 1)
        MakeConcatenation(&t, {{layer + (rest == "mixer.A" ? "ssm_a" : "ssm_d"), {h, 1}}});
      } else if (rest == "mixer.norm.weight") {  // (G, I/G)
        MakeConcatenation(&t, {{layer + "ssm_norm.weight", {groups, p->inner() / groups}}});
      }
      continue;
    }
    const std::string layer = "backbone.layers." + std::to_string(block) + ".";
    if (rest == "norm1.weight") {
      t.source_name = layer + "norm.weight";
    } else if (rest == "mixer.conv.weight") {  // nn.Conv1d's (W, 1, K)
      MakeConcatenation(&t, {{layer + "mixer.conv1d.weight", {t.shape[0], 1, t.shape[1]}}});
    } else if (rest == "mixer.conv.bias") {
      if (conv_bias) {
        t.source_name = layer + "mixer.conv1d.bias";
      } else {
        MakeZeros(&t);
      }
    } else if (rest == "mixer.A") {  // A = −exp(A_log), as mamba_ssm computes it in float32
      t.source_name.clear();
      t.transform = SourceTransform::kComputed;
      t.inputs = {{layer + "mixer.A_log", t.shape}};
      t.compute = [](const std::vector<std::vector<float>>& in) {
        std::vector<float> a(in[0].size());
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = -std::exp(in[0][i]);
        return a;
      };
    } else if (rest.rfind("mixer.", 0) == 0) {
      t.source_name = layer + rest;
    }
  }
  // A tied checkpoint may hold the head too (torch.save keeps both names).
  if (tied && !gguf) {
    tensors->push_back(IgnoredSource(head, {d.input.vocab_size, d.d_model}));
  }
}

}  // namespace recur::impl::converter
