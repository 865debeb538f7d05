// The converter's mixer registry: runtime/mixers/mixers.inc, expanded.
#include <string>
#include <vector>

#include "converter/mixers/mixer_converter.h"

namespace recur::impl::converter {

// Defined by converter/mixers/<file>.cc for each union tag Tag it serves.
#define RECUR_MIXER(Tag, config_name, file) const MixerConverter& Tag##Converter();
#include "mixers/mixers.inc"
#undef RECUR_MIXER

namespace {

constexpr fb::Mixer kTags[] = {
    fb::Mixer::NONE,
#define RECUR_MIXER(Tag, config_name, file) fb::Mixer::Tag,
#include "mixers/mixers.inc"
#undef RECUR_MIXER
};
constexpr std::size_t kSlots = sizeof(kTags) / sizeof(kTags[0]);

constexpr bool TagsMatchIndices() {
  for (std::size_t i = 0; i < kSlots; ++i) {
    if (static_cast<std::size_t>(kTags[i]) != i) return false;
  }
  return true;
}
static_assert(TagsMatchIndices(), "mixers.inc must list mixers in union tag order");
static_assert(kSlots == static_cast<std::size_t>(fb::Mixer::MAX) + 1,
              "every Mixer union member needs a line in mixers.inc");

// Indexed by union tag; slot 0 (NONE) has no converter.
const std::vector<MixerType>& Types() {
  static const std::vector<MixerType> types = {
      {fb::Mixer::NONE, "none", nullptr},
#define RECUR_MIXER(Tag, config_name, file) {fb::Mixer::Tag, #config_name, &Tag##Converter()},
#include "mixers/mixers.inc"
#undef RECUR_MIXER
  };
  return types;
}

// Config "type" names in list order, with the type each selects.
struct ConfigName {
  std::string name;
  const MixerType* type;
};

const std::vector<ConfigName>& ConfigNames() {
  static const std::vector<ConfigName> names = [] {
    std::vector<ConfigName> out;
    for (std::size_t i = 1; i < Types().size(); ++i) {
      const MixerType& type = Types()[i];
      out.push_back({type.config_name, &type});
      for (const std::string& alias : type.converter->ConfigAliases()) out.push_back({alias, &type});
    }
    return out;
  }();
  return names;
}

}  // namespace

const MixerType* FindMixerType(fb::Mixer tag) {
  const auto index = static_cast<std::size_t>(tag);
  if (index == 0 || index >= Types().size()) return nullptr;
  return &Types()[index];
}

const MixerType* FindMixerTypeByConfigName(const std::string& name) {
  for (const ConfigName& c : ConfigNames()) {
    if (c.name == name) return c.type;
  }
  return nullptr;
}

const std::vector<std::string>& MixerConfigNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const ConfigName& c : ConfigNames()) out.push_back(c.name);
    return out;
  }();
  return names;
}

namespace {

// The union over the mixers of `list`'s names, in list order.
std::vector<std::string> UnionOfWeights(std::vector<std::string> (MixerConverter::*list)() const) {
  std::vector<std::string> out;
  for (std::size_t i = 1; i < Types().size(); ++i) {
    for (const std::string& w : (Types()[i].converter->*list)()) {
      bool seen = false;
      for (const std::string& o : out) seen = seen || o == w;
      if (!seen) out.push_back(w);
    }
  }
  return out;
}

}  // namespace

const std::vector<std::string>& AllQuantizableMixerWeights() {
  static const std::vector<std::string> weights =
      UnionOfWeights(&MixerConverter::QuantizableWeights);
  return weights;
}

const std::vector<std::string>& AllSourceTypedMixerWeights() {
  static const std::vector<std::string> weights =
      UnionOfWeights(&MixerConverter::SourceTypedWeights);
  return weights;
}

}  // namespace recur::impl::converter
