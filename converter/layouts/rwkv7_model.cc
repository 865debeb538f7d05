#include "converter/layouts/rwkv7_model.h"

#include <memory>

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

}  // namespace recur::impl::converter
