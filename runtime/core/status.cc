#include "core/status.h"

#include <cstdarg>
#include <cstdio>

namespace recur::impl {
namespace {

Status Make(StatusCode code, const char* format, va_list args) {
  char buffer[1024];
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  return Status(code, buffer);
}

}  // namespace

#define RECUR_DEFINE_STATUS_MAKER(Name, Code)   \
  Status Name(const char* format, ...) {        \
    va_list args;                               \
    va_start(args, format);                     \
    Status s = Make(StatusCode::Code, format, args); \
    va_end(args);                               \
    return s;                                   \
  }

RECUR_DEFINE_STATUS_MAKER(InvalidArgument, kInvalidArgument)
RECUR_DEFINE_STATUS_MAKER(InvalidModel, kInvalidModel)
RECUR_DEFINE_STATUS_MAKER(Unsupported, kUnsupported)
RECUR_DEFINE_STATUS_MAKER(IoError, kIoError)
RECUR_DEFINE_STATUS_MAKER(OutOfMemory, kOutOfMemory)
RECUR_DEFINE_STATUS_MAKER(OutOfRange, kOutOfRange)
RECUR_DEFINE_STATUS_MAKER(InvalidState, kInvalidState)

#undef RECUR_DEFINE_STATUS_MAKER

}  // namespace recur::impl
