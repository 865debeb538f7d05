#include "core/platform.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/struct_size.h"

namespace recur::impl::platform {
namespace {

constexpr recur_platform kDefaults{sizeof(recur_platform),    nullptr,      DefaultMapFile,
                                   DefaultUnmapFile,          DefaultNowNs, DefaultLog,
                                   DefaultLastLevelCacheBytes};
recur_platform g_platform = kDefaults;

}  // namespace

Status SetPlatform(const recur_platform* p) {
  const recur_platform& defaults = kDefaults;
  if (p == nullptr) {
    g_platform = defaults;
    return Status::Ok();
  }
  constexpr FieldSpan kFields[] = {RECUR_FIELD_SPAN(recur_platform, user),
                                   RECUR_FIELD_SPAN(recur_platform, map_file),
                                   RECUR_FIELD_SPAN(recur_platform, unmap_file),
                                   RECUR_FIELD_SPAN(recur_platform, now_ns),
                                   RECUR_FIELD_SPAN(recur_platform, log),
                                   RECUR_FIELD_SPAN(recur_platform, last_level_cache_bytes)};
  static_assert(CoversStruct<recur_platform>(kFields));
  if (p->struct_size < sizeof(size_t) || p->struct_size > sizeof(recur_platform) ||
      SplitsAField(p->struct_size, kFields)) {
    return InvalidArgument("recur_platform.struct_size is %zu; set it to sizeof(recur_platform) = %zu",
                           p->struct_size, sizeof(recur_platform));
  }
  recur_platform next{};
  std::memcpy(&next, p, p->struct_size);
  if ((next.map_file == nullptr) != (next.unmap_file == nullptr)) {
    return InvalidArgument("recur_platform: map_file and unmap_file must be given together");
  }
  next.struct_size = sizeof(recur_platform);
  if (next.map_file == nullptr) {
    next.map_file = defaults.map_file;
    next.unmap_file = defaults.unmap_file;
  }
  if (next.now_ns == nullptr) next.now_ns = defaults.now_ns;
  if (next.log == nullptr) next.log = defaults.log;
  if (next.last_level_cache_bytes == nullptr) {
    next.last_level_cache_bytes = defaults.last_level_cache_bytes;
  }
  g_platform = next;
  return Status::Ok();
}

Status MapFile(const char* path, bool read_into_memory, MappedFile* out) {
  *out = MappedFile();
  const void* data = nullptr;
  size_t size = 0;
  void* handle = nullptr;
  char error[256] = "";
  const recur_status status = g_platform.map_file(g_platform.user, path, read_into_memory ? 1 : 0,
                                                  &data, &size, &handle, error, sizeof(error));
  if (status != RECUR_OK) {
    error[sizeof(error) - 1] = '\0';
    const char* message = error[0] != '\0' ? error : "cannot map file (no message)";
    // A code outside the enum (a platform's own error number) reads as an I/O error.
    const bool known = status > RECUR_OK && status <= RECUR_INTERNAL;
    return Status(known ? StatusCode(status) : StatusCode::kIoError, message);
  }
  *out = MappedFile{data, size, handle, g_platform.unmap_file, g_platform.user};
  return Status::Ok();
}

void UnmapFile(MappedFile* file) {
  if (file->unmap != nullptr) file->unmap(file->user, file->data, file->size, file->handle);
  *file = MappedFile();
}

uint64_t NowNs() { return g_platform.now_ns(g_platform.user); }

size_t LastLevelCacheBytes() {
  const size_t bytes = g_platform.last_level_cache_bytes(g_platform.user);
  return bytes == 0 ? kAssumedLastLevelCacheBytes : bytes;
}

void LogError(recur_status status, const char* message) {
  g_platform.log(g_platform.user, status, message);
}

void* StreamedAlloc(size_t bytes) {
  // No object is larger than PTRDIFF_MAX bytes; asking malloc for more
  // aborts under the sanitizers instead of returning null.
  if (bytes == 0 || bytes > static_cast<size_t>(PTRDIFF_MAX) - kHugePageBytes) return nullptr;
  const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : 64;
  // aligned_alloc takes a multiple of the alignment; the rounding is address
  // space only (its pages are never touched).
  void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (p != nullptr && align == kHugePageBytes) {
    DefaultAdviseHugePages(p, bytes / kHugePageBytes * kHugePageBytes);
  }
  return p;
}

}  // namespace recur::impl::platform
