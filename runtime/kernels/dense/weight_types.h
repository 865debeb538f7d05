// The storage types of dense weights, expanded from weight_types.inc: the
// enum, each type's name, block layout and scales, and the byte sizes and
// name lookups built on them. Sums are f32 whatever the type.
#ifndef RECUR_KERNELS_DENSE_WEIGHT_TYPES_H_
#define RECUR_KERNELS_DENSE_WEIGHT_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

namespace recur::impl::kernels {

// What turns a stored value into the weight (weight_types.inc, `scales`).
enum class WeightScales : uint8_t {
  kNone,      // the stored value is the weight (f32, f16: IEEE half, bf16: the top half of an f32)
  kPerRow,    // symmetric: real = scales[o] · q, one f32 scale per output row
  kPerGroup,  // symmetric: real = scale[o, i / group] · q, an f16 scale per group of inputs
  kInBlock,   // each packed block holds its own scales (the K-quants: q4_k, q6_k, q5_k)
};

// Storage type of dense weights, one member k<Tag> per line of
// weight_types.inc, in the schema's DType order.
enum class WeightType : uint8_t {
#define RECUR_WEIGHT_TYPE(Tag, name, block, block_bytes, scales) k##Tag,
#include "kernels/dense/weight_types.inc"
#undef RECUR_WEIGHT_TYPE
};

// One line of weight_types.inc.
struct WeightTypeTraits {
  const char* name;    // "f32", "int8", ...: the line's `name`
  size_t block;        // elements per packed block (1: stored one by one)
  size_t block_bytes;  // bytes per block
  WeightScales scales;
};

// Indexed by WeightType.
inline constexpr WeightTypeTraits kWeightTypeTraits[] = {
#define RECUR_WEIGHT_TYPE(Tag, name, block, block_bytes, scales) \
  {#name, block, block_bytes, WeightScales::scales},
#include "kernels/dense/weight_types.inc"
#undef RECUR_WEIGHT_TYPE
};

// Every weight type, in list order.
inline constexpr WeightType kWeightTypes[] = {
#define RECUR_WEIGHT_TYPE(Tag, name, block, block_bytes, scales) WeightType::k##Tag,
#include "kernels/dense/weight_types.inc"
#undef RECUR_WEIGHT_TYPE
};
inline constexpr size_t kWeightTypeCount = std::size(kWeightTypes);
static_assert(kWeightTypes[0] == WeightType::kF32, "f32 is the first line, DType 0");

constexpr const WeightTypeTraits& Traits(WeightType type) {
  return kWeightTypeTraits[static_cast<size_t>(type)];
}

// The names recur-convert --dtype takes: "f32", "f16", "int8", ...
constexpr const char* WeightTypeName(WeightType type) { return Traits(type).name; }

// The type called `name` (WeightTypeName); false if none is.
constexpr bool ParseWeightType(std::string_view name, WeightType* out) {
  for (WeightType type : kWeightTypes) {
    if (name == WeightTypeName(type)) {
      *out = type;
      return true;
    }
  }
  return false;
}

// The names for messages, in list order, the last two joined by "or"
// ("f32, f16, bf16, ... or <the last>"); without_f32: all but "f32".
inline std::string WeightTypeNames(bool without_f32 = false) {
  std::string names;
  for (size_t i = without_f32 ? 1 : 0; i < kWeightTypeCount; ++i) {
    if (!names.empty()) names += i + 1 == kWeightTypeCount ? " or " : ", ";
    names += kWeightTypeTraits[i].name;
  }
  return names;
}

// Whether `type` is one of the K-quants, whose blocks hold their scales
// (ggml's Q4_K, Q6_K and Q5_K blocks, stored byte for byte).
constexpr bool IsKQuant(WeightType type) { return Traits(type).scales == WeightScales::kInBlock; }

// Bytes of `count` elements of `type`, `count` a multiple of its block (a
// weight row: count = in).
constexpr size_t WeightBytes(WeightType type, size_t count) {
  return count / Traits(type).block * Traits(type).block_bytes;
}
constexpr size_t WeightRowBytes(WeightType type, size_t in) { return WeightBytes(type, in); }

}  // namespace recur::impl::kernels

#endif  // RECUR_KERNELS_DENSE_WEIGHT_TYPES_H_
