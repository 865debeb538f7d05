// Status: the runtime's error type. No exceptions cross any boundary; every
// fallible function returns a Status whose message says what and where.
#ifndef RECUR_CORE_STATUS_H_
#define RECUR_CORE_STATUS_H_

#include <string>
#include <utility>

namespace recur::impl {

// Values equal recur_status (api/c_api.cc static_asserts it).
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kInvalidModel = 2,
  kUnsupported = 3,
  kIoError = 4,
  kOutOfMemory = 5,
  kOutOfRange = 6,
  kInvalidState = 7,
  kInternal = 8,
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK; never allocates
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "context: message", for adding where an error happened.
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// printf-style constructors for error statuses.
Status InvalidArgument(const char* format, ...) __attribute__((format(printf, 1, 2)));
Status InvalidModel(const char* format, ...) __attribute__((format(printf, 1, 2)));
Status Unsupported(const char* format, ...) __attribute__((format(printf, 1, 2)));
Status IoError(const char* format, ...) __attribute__((format(printf, 1, 2)));
Status OutOfMemory(const char* format, ...) __attribute__((format(printf, 1, 2)));
Status OutOfRange(const char* format, ...) __attribute__((format(printf, 1, 2)));
Status InvalidState(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace recur::impl

#define RECUR_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::recur::impl::Status recur_status_ = (expr);  \
    if (!recur_status_.ok()) return recur_status_; \
  } while (0)

#endif  // RECUR_CORE_STATUS_H_
