// The model's tensors one at a time, as the writer takes them (writer.h):
// import.h's TensorImport reads them from a source and checks them, one
// tensor's float32 copy at a time, so that a model is converted without
// holding all its weights as float32; or, for a source that stores a tensor
// in one of recur's narrow types, as stored (SourceStorage, GetStored).
#ifndef RECUR_CONVERTER_TENSOR_FEED_H_
#define RECUR_CONVERTER_TENSOR_FEED_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "converter/quantize.h"
#include "core/status.h"

namespace recur::impl::converter {

class TensorFeed {
 public:
  virtual ~TensorFeed() = default;

  // The tensors, in file order, under recur-layout names.
  virtual std::size_t count() const = 0;
  virtual const std::string& name(std::size_t i) const = 0;
  virtual const std::vector<int64_t>& shape(std::size_t i) const = 0;
  // The number of values Get(i) gives (the product of the shape, unless the
  // feed passes tensors on unchecked).
  virtual uint64_t elements(std::size_t i) const = 0;
  // Tensor i's float32 values. The writer asks for each tensor once, in order,
  // and goes on after an error of its own, so that the feed's checks of every
  // tensor come first.
  virtual Status Get(std::size_t i, std::vector<float>* values) = 0;
  // After the last Get: the checks of the source as a whole (unused tensors).
  virtual Status Finish() { return Status::Ok(); }

  // How the source stores tensor i, when that is a type recur stores as well
  // (a GGUF file's F16 and BF16 tensors: f16, bf16; its Q4_0 matrices: int4
  // in groups of 32; its Q4_K, Q6_K and Q5_K matrices: q4_k, q6_k, q5_k):
  // what the writer keeps when it keeps the source's types
  // (BuildOptions::keep_source_types). f32 otherwise.
  struct SourceStorage {
    WeightType dtype = WeightType::kF32;
    int group = 0;  // int4
  };
  virtual SourceStorage source_storage(std::size_t i) const {
    (void)i;
    return {};
  }
  // An earlier tensor j < i whose values tensor i's are, element for element
  // and of the same shape (both copied as they are from one source tensor: a
  // head tied to the embedding), or i itself. The writer then stores the two
  // once, when it stores them alike, and refers to it from both places.
  virtual std::size_t same_as(std::size_t i) const { return i; }
  // Tensor i encoded as the source stores it, taken over unchanged (for
  // int4: the source's own scales and packed values), with every check Get
  // makes: asked for instead of Get when the writer stores tensor i as
  // source_storage(i) says and that is int4 or a K-quant, whose values Get's
  // float32 copy could not give back exactly through recur's own quantiser
  // (which has none for the K-quants).
  virtual Status GetStored(std::size_t i, StoredTensor* out) {
    (void)out;
    return Status(StatusCode::kInternal,
                  name(i) + ": the source gives no stored encoding of this tensor");
  }
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_TENSOR_FEED_H_
