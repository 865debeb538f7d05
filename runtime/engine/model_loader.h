// Builds a Model from the model bytes: the one place that turns a file into
// resolved views and mixers.
#ifndef RECUR_ENGINE_MODEL_LOADER_H_
#define RECUR_ENGINE_MODEL_LOADER_H_

#include <cstddef>
#include <memory>

#include "core/status.h"
#include "model/model.h"

namespace recur::impl {

struct LoadOptions {
  bool trusted = false;  // skip the FlatBuffers Verifier
};

// Validates `data` (the whole file: size prefix, FlatBuffer, data segment)
// and builds the model. `data` must stay valid for the model's lifetime and
// be 64-byte aligned. On error, the message names the failing check.
Status LoadModel(const void* data, size_t size, const LoadOptions& options,
                 std::unique_ptr<Model>* out);

}  // namespace recur::impl

#endif  // RECUR_ENGINE_MODEL_LOADER_H_
