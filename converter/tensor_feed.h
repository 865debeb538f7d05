// The model's tensors one at a time, as the writer takes them (writer.h):
// import.h's TensorImport reads them from a source and checks them, one
// tensor's float32 copy at a time, so that a model is converted without
// holding all its weights as float32.
#ifndef RECUR_CONVERTER_TENSOR_FEED_H_
#define RECUR_CONVERTER_TENSOR_FEED_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_TENSOR_FEED_H_
