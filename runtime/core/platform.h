// Platform layer (PAL): the few OS services the runtime uses. The POSIX
// implementation lives in platforms/posix/.
#ifndef RECUR_CORE_PLATFORM_H_
#define RECUR_CORE_PLATFORM_H_

#include <cstddef>

#include "core/status.h"

namespace recur::platform {

// A read-only view of a whole file. `data` is at least page-aligned.
struct MappedFile {
  const void* data = nullptr;
  size_t size = 0;
  void* handle = nullptr;  // implementation-defined; null when empty
};

// Maps `path` read-only (or, with `read_into_memory`, reads it into a
// 64-byte-aligned heap buffer). The caller releases it with UnmapFile.
Status MapFile(const char* path, bool read_into_memory, MappedFile* out);
void UnmapFile(MappedFile* file);

}  // namespace recur::platform

#endif  // RECUR_CORE_PLATFORM_H_
