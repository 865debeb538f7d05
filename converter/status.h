// Status and Result<T> for the converter library.
//
// The converter's functions never let an exception escape: nlohmann::json and
// the allocator may throw internally, and the public entry points catch and
// turn that into a Status with a message. A message names the problem and,
// where there is one, the thing it is about ("blocks.1.ffn.linear1.weight:
// shape [64,32], expected [128,32]").
#ifndef RECUR_CONVERTER_STATUS_H_
#define RECUR_CONVERTER_STATUS_H_

#include <optional>
#include <string>
#include <utility>

namespace recur::converter {

struct Status {
  bool ok = true;
  std::string message;

  static Status Ok() { return {}; }
  static Status Error(std::string msg) { return {false, std::move(msg)}; }
  explicit operator bool() const { return ok; }
};

// A value or an error. Access value() only when ok().
template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}            // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {     // NOLINT: implicit by design
    if (status_.ok) status_ = Status::Error("internal: Result built from an OK status");
  }

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Status& status() const { return status_; }
  const std::string& message() const { return status_.message; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace recur::converter

#endif  // RECUR_CONVERTER_STATUS_H_
