// Tensor import and validation: picks the tensors a ModelDescription needs
// out of a source (a safetensors file or an in-memory map, named for the
// source layout), checks them and returns them as float32 under their
// recur-layout names. Messages name the tensor as the source names it:
//   blocks.0.ffn.linear1.weight: missing tensor, expected shape [128,32]
//   layers.1.linear1.weight: shape [64,32], expected [128,32]
//   blocks.0.mixer.extra: unexpected tensor, not used by this config (allow with --allow-extra)
//   blocks.0.mixer.query.weight: NaN at index 17 ([1,1])
#ifndef RECUR_CONVERTER_IMPORT_H_
#define RECUR_CONVERTER_IMPORT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "converter/model_description.h"
#include "converter/safetensors.h"
#include "core/result.h"
#include "core/status.h"

namespace recur::impl::converter {

struct ImportOptions {
  bool allow_extra = false;  // unused source tensors: a warning instead of an error
};

Result<TensorMap> ImportTensors(const ModelDescription& desc, Layout layout,
                                const TensorViewMap& source, const ImportOptions& options = {},
                                std::vector<std::string>* warnings = nullptr);

// An error naming `name` and the first NaN/Inf in data[0, n), if any.
Status CheckFinite(const std::string& name, const float* data, std::size_t n,
                   const std::vector<int64_t>& shape);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_IMPORT_H_
