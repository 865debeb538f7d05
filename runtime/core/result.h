// Result<T>: a T or the Status that prevented it, for fallible functions that
// produce a value. Like Status, it never throws: check ok() before touching
// the value.
//
//   Result<Bytes> ReadAll(const std::string& path);
//   auto bytes = ReadAll(path);
//   if (!bytes.ok()) return bytes.status();
//   Use(*bytes);
#ifndef RECUR_CORE_RESULT_H_
#define RECUR_CORE_RESULT_H_

#include <cassert>
#include <optional>
#include <string>
#include <utility>

#include "core/status.h"

namespace recur::impl {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  // `status` must be an error; an OK one becomes a kInternal error.
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) {
      status_ = Status(StatusCode::kInternal, "internal: Result built from an OK status");
    }
  }

  bool ok() const { return value_.has_value(); }
  // OK when ok(), else the error.
  const Status& status() const { return status_; }
  // status().message(): empty when ok().
  const std::string& message() const { return status_.message(); }

  // Only when ok().
  T& value() & { return Get(); }
  const T& value() const& { return Get(); }
  T&& value() && { return std::move(Get()); }
  T* operator->() { return &Get(); }
  const T* operator->() const { return &Get(); }
  T& operator*() & { return Get(); }
  const T& operator*() const& { return Get(); }
  T&& operator*() && { return std::move(Get()); }

 private:
  T& Get() {
    assert(ok() && "Result: value of an error");
    return *value_;
  }
  const T& Get() const {
    assert(ok() && "Result: value of an error");
    return *value_;
  }

  std::optional<T> value_;
  Status status_;
};

}  // namespace recur::impl

#endif  // RECUR_CORE_RESULT_H_
