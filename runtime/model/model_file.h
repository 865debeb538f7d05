// The container of a .recur file (docs/model-format.md): a 4-byte size S,
// the FlatBuffer (identifier "RCUR" at byte 8), padding to a multiple of
// kSegmentAlignment, the data segment. Parsed in one place for the loader
// (engine/model_loader.cc) and the converter's inspect, which also shows
// files whose data segment has the wrong length.
#ifndef RECUR_MODEL_MODEL_FILE_H_
#define RECUR_MODEL_MODEL_FILE_H_

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "kernels/dense/weight_types.h"
#include "schema/recur_generated.h"

namespace recur::impl {

// The data segment's alignment, and so of every tensor in it.
inline constexpr uint64_t kSegmentAlignment = 64;

struct ModelFile {
  const fb::Model* root = nullptr;
  uint64_t flatbuffer_bytes = 0;   // 4 + S
  uint64_t segment_start = 0;      // 4 + S rounded up to kSegmentAlignment
  const uint8_t* segment = nullptr;  // bytes + segment_start (or the end of the file)
  uint64_t segment_available = 0;    // file bytes from segment_start on
};

// Checks the size, the identifier and that S fits in the file, then (when
// `verify`) runs the FlatBuffers Verifier over [0, 4 + S). Does not check the
// data segment's length against root->data_size(): that is the caller's rule.
// Errors are kInvalidModel; the message names the failing check. `bytes` must
// outlive `out`'s pointers.
Status ParseModelFile(const uint8_t* bytes, size_t size, bool verify, ModelFile* out);

// The schema's DType values are the weight_types.inc line indices; the
// enum is part of the file format, so the list follows it, not the reverse.
#define RECUR_WEIGHT_TYPE(Tag, name, block, block_bytes, scales)                                   \
  static_assert(static_cast<int>(fb::DType::Tag) == static_cast<int>(kernels::WeightType::k##Tag), \
                "weight_types.inc: " #Tag " is not on the line of its DType value");
#include "kernels/dense/weight_types.inc"
#undef RECUR_WEIGHT_TYPE
static_assert(static_cast<size_t>(fb::DType::MAX) + 1 == kernels::kWeightTypeCount,
              "weight_types.inc needs a line for every DType of recur.fbs");

// The weight type a tensor of schema dtype `d` holds; false for a value
// this runtime does not know (a newer file).
inline bool WeightTypeOf(fb::DType d, kernels::WeightType* out) {
  if (static_cast<size_t>(d) >= kernels::kWeightTypeCount) return false;
  *out = static_cast<kernels::WeightType>(d);
  return true;
}

// The schema dtype of weight type `type`.
constexpr fb::DType SchemaDType(kernels::WeightType type) { return static_cast<fb::DType>(type); }

}  // namespace recur::impl

#endif  // RECUR_MODEL_MODEL_FILE_H_
