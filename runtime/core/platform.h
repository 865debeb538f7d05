// Platform layer (PAL): the few OS services the runtime uses, behind the
// public recur_platform table (recur.h). The build's defaults live in
// platforms/<name>/ (Default*); the application may replace them
// (SetPlatform, from recur_set_platform).
#ifndef RECUR_CORE_PLATFORM_H_
#define RECUR_CORE_PLATFORM_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "core/status.h"
#include "recur/recur.h"

namespace recur::impl::platform {

// A read-only view of a whole file, released through the platform that
// made it (even if the platform was replaced since).
struct MappedFile {
  const void* data = nullptr;
  size_t size = 0;
  void* handle = nullptr;  // the platform's; meaningful only with `unmap`
  void (*unmap)(void* user, const void* data, size_t size, void* handle) = nullptr;
  void* user = nullptr;
};

// The build's platform functions, defined by platforms/posix or
// platforms/minimal (CMake RECUR_PLATFORM); see recur_platform in recur.h.
recur_status DefaultMapFile(void* user, const char* path, int read_into_memory,
                            const void** data, size_t* size, void** handle, char* error,
                            size_t error_size);
void DefaultUnmapFile(void* user, const void* data, size_t size, void* handle);
uint64_t DefaultNowNs(void* user);
void DefaultLog(void* user, recur_status status, const char* message);
// Asks the OS to back [data, data + size) with huge pages where it allows
// them (posix: madvise(MADV_HUGEPAGE), Linux transparent huge pages in their
// "madvise" or "always" mode; minimal: nothing). A hint: it never fails and
// changes no contents. Weights a step streams whole then take a TLB miss per
// 2 MiB instead of per 4 KiB.
void DefaultAdviseHugePages(void* data, size_t size);
size_t DefaultLastLevelCacheBytes(void* user);

// Installs `p` (null members: the defaults; null: all defaults).
Status SetPlatform(const recur_platform* p);

// Maps `path` read-only (or, with `read_into_memory`, reads it into a
// 64-byte-aligned heap buffer) through the current platform.
Status MapFile(const char* path, bool read_into_memory, MappedFile* out);
void UnmapFile(MappedFile* file);

// The current platform's clock, in nanoseconds.
uint64_t NowNs();

// What LastLevelCacheBytes assumes where the platform does not know.
inline constexpr size_t kAssumedLastLevelCacheBytes = size_t{8} << 20;
// The current platform's last-level cache size in bytes, or
// kAssumedLastLevelCacheBytes where it returns 0.
size_t LastLevelCacheBytes();

// Hands an error to the current platform's log.
void LogError(recur_status status, const char* message);

// The huge page size StreamedAlloc aligns to.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Heap memory for a buffer a step reads whole (a session's weight copies, a
// model read into memory): 64-byte aligned; from kHugePageBytes up, aligned
// to kHugePageBytes with huge pages asked for (DefaultAdviseHugePages) over
// its whole huge pages only, so the tail stays in small pages and the
// resident size is the bytes used. Null for 0 bytes, for more than
// PTRDIFF_MAX − kHugePageBytes, or when out of memory.
// Release with std::free. Thread-safe.
void* StreamedAlloc(size_t bytes);

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
template <typename T>
using StreamedArray = std::unique_ptr<T[], FreeDeleter>;
// `count` Ts of StreamedAlloc (uninitialised; T trivial), or null.
template <typename T>
StreamedArray<T> AllocateStreamed(size_t count) {
  if (count > SIZE_MAX / sizeof(T)) return nullptr;
  return StreamedArray<T>(static_cast<T*>(StreamedAlloc(count * sizeof(T))));
}

}  // namespace recur::impl::platform

#endif  // RECUR_CORE_PLATFORM_H_
