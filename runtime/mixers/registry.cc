#include "mixers/mixer.h"

namespace recur::impl {

// The factory of union tag Tag is Create<Tag> (runtime/mixers/<file>.cc).
#define RECUR_MIXER(Tag, config_name, file)                                             \
  Status Create##Tag(const void* table, const std::string& layer, uint32_t d_model,    \
                     TensorResolver* tensors, std::unique_ptr<Mixer>* out);
#include "mixers/mixers.inc"
#undef RECUR_MIXER

namespace {

// Mixers left out of this build (CMake RECUR_MIXERS) keep their slot with a
// null factory, so the loader can name them. RECUR_HAVE_MIXER_<Tag> is 0 or 1
// (runtime/CMakeLists.txt); the token paste picks the factory or nullptr
// without naming a factory whose file was not compiled.
#define RECUR_FACTORY_IF_1(Factory) Factory
#define RECUR_FACTORY_IF_0(Factory) nullptr
#define RECUR_FACTORY_IF_EXPAND(on, Factory) RECUR_FACTORY_IF_##on(Factory)
#define RECUR_FACTORY_IF(on, Factory) RECUR_FACTORY_IF_EXPAND(on, Factory)

// Indexed by union tag; slot 0 is fb::Mixer::NONE.
constexpr MixerEntry kMixers[] = {
    {fb::Mixer::NONE, "none", nullptr},
#define RECUR_MIXER(Tag, config_name, file) \
  {fb::Mixer::Tag, #Tag, RECUR_FACTORY_IF(RECUR_HAVE_MIXER_##Tag, Create##Tag)},
#include "mixers/mixers.inc"
#undef RECUR_MIXER
};

constexpr bool TagsMatchIndices() {
  for (size_t i = 0; i < sizeof(kMixers) / sizeof(kMixers[0]); ++i) {
    if (static_cast<size_t>(kMixers[i].tag) != i) return false;
  }
  return true;
}
static_assert(TagsMatchIndices(), "mixers.inc must list mixers in union tag order");
static_assert(sizeof(kMixers) / sizeof(kMixers[0]) == static_cast<size_t>(fb::Mixer::MAX) + 1,
              "every Mixer union member needs a line in mixers.inc");

}  // namespace

const MixerEntry* FindMixer(fb::Mixer tag) {
  const size_t index = static_cast<size_t>(tag);
  if (index == 0 || index >= sizeof(kMixers) / sizeof(kMixers[0])) return nullptr;
  return &kMixers[index];
}

}  // namespace recur::impl
