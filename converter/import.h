// Tensor import and validation: picks the tensors a ModelDescription needs
// out of a source (a safetensors file, a checkpoint or an in-memory map, named
// for the source layout), checks them and gives them as float32 under their
// recur-layout names, one at a time (TensorImport) or all together
// (ImportTensors). Messages name the tensor as the source names it:
//   blocks.0.ffn.linear1.weight: missing tensor, expected shape [128,32]
//   layers.1.linear1.weight: shape [64,32], expected [128,32]
//   blocks.0.mixer.extra: unexpected tensor, not used by this config (allow with --allow-extra)
//   blocks.0.mixer.query.weight: NaN at index 17 ([1,1])
#ifndef RECUR_CONVERTER_IMPORT_H_
#define RECUR_CONVERTER_IMPORT_H_

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "converter/model_description.h"
#include "converter/safetensors.h"
#include "converter/tensor_feed.h"
#include "core/result.h"
#include "core/status.h"

namespace recur::impl::converter {

struct ImportOptions {
  bool allow_extra = false;  // unused source tensors: a warning instead of an error
};

// The import as a TensorFeed: the tensors of ExpectedTensors(desc, layout)
// (less the source tensors the layout ignores), each read from `source` when
// asked for, checked (present, its shape, a float dtype, finite) and made
// (copied, sliced, transposed, zeros, computed). Finish then checks for unused
// source tensors: an error, or with allow_extra a warning appended to
// `warnings`. `source` and `warnings` must outlive it.
class TensorImport : public TensorFeed {
 public:
  TensorImport(const ModelDescription& desc, Layout layout, const TensorViewMap& source,
               const ImportOptions& options = {}, std::vector<std::string>* warnings = nullptr);

  std::size_t count() const override { return tensors_.size(); }
  const std::string& name(std::size_t i) const override { return tensors_[i].name; }
  const std::vector<int64_t>& shape(std::size_t i) const override { return tensors_[i].shape; }
  uint64_t elements(std::size_t i) const override;
  Status Get(std::size_t i, std::vector<float>* values) override;
  Status Finish() override;
  // A tensor copied as it is from an F16, BF16, Q4_0 or K-quant source
  // tensor (Q4_0: a [rows, cols] matrix with cols a multiple of 32; the
  // K-quants: of 256): f16, bf16, int4 in groups of 32, q4_k, q6_k, q5_k.
  // GetStored gives the Q4_0 blocks as int4 unchanged (Int4FromQ4_0), the
  // K-quant blocks as they are (KQuantFromGguf), after Get's checks.
  SourceStorage source_storage(std::size_t i) const override;
  // The first tensor copied from the same source tensor with the same shape.
  std::size_t same_as(std::size_t i) const override;
  Status GetStored(std::size_t i, StoredTensor* out) override;

 private:
  Result<std::vector<float>> Read(const std::string& name, const std::vector<int64_t>& shape);
  Status Make(const ExpectedTensor& e, std::vector<float>* values);

  std::vector<ExpectedTensor> tensors_;
  const TensorViewMap& source_;
  ImportOptions options_;
  std::vector<std::string>* warnings_;
  std::set<std::string> used_;  // source tensors read or ignored
  bool gguf_shapes_;             // shapes compared up to leading ones (SameShapeUpToLeadingOnes)
};

// Every tensor at once (a TensorImport, gathered).
Result<TensorMap> ImportTensors(const ModelDescription& desc, Layout layout,
                                const TensorViewMap& source, const ImportOptions& options = {},
                                std::vector<std::string>* warnings = nullptr);

// An error naming `name` and the first NaN/Inf in data[0, n), if any.
Status CheckFinite(const std::string& name, const float* data, std::size_t n,
                   const std::vector<int64_t>& shape);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_IMPORT_H_
