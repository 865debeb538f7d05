#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/platform.h"

// The POSIX platform (the default): mmap or read(2) for model files, with
// huge pages asked for where the OS has them (madvise), std::chrono::
// steady_clock, no log (errors reach the application through
// recur_last_error).
namespace recur::impl::platform {
namespace {

// Tags the two ownership kinds in MappedFile::handle.
char kMmapTag;
char kHeapTag;

Status MapFilePosix(const char* path, bool read_into_memory, MappedFile* out) {
  *out = MappedFile();
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open '%s': %s", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError("cannot stat '%s': %s", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError("'%s' is not a regular file", path);
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return IoError("'%s' is empty", path);
  }
  if (!read_into_memory) {
    void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (data == MAP_FAILED) return IoError("cannot map '%s': %s", path, std::strerror(err));
    // File pages read from here on may then come in huge folios, mapped whole.
    DefaultAdviseHugePages(data, size);
    *out = MappedFile{data, size, &kMmapTag};
    return Status::Ok();
  }
  void* data = StreamedAlloc(size);
  if (data == nullptr) {
    ::close(fd);
    return OutOfMemory("cannot allocate %zu bytes for '%s'", size, path);
  }
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, static_cast<char*>(data) + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      std::free(data);
      return IoError("cannot read '%s': %s", path, std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  *out = MappedFile{data, size, &kHeapTag};
  return Status::Ok();
}

}  // namespace

recur_status DefaultMapFile(void*, const char* path, int read_into_memory, const void** data,
                            size_t* size, void** handle, char* error, size_t error_size) {
  MappedFile file;
  const Status s = MapFilePosix(path, read_into_memory != 0, &file);
  if (!s.ok()) {
    std::snprintf(error, error_size, "%s", s.message().c_str());
    return static_cast<recur_status>(s.code());
  }
  *data = file.data;
  *size = file.size;
  *handle = file.handle;
  return RECUR_OK;
}

void DefaultUnmapFile(void*, const void* data, size_t size, void* handle) {
  if (handle == &kMmapTag) {
    ::munmap(const_cast<void*>(data), size);
  } else if (handle == &kHeapTag) {
    std::free(const_cast<void*>(data));
  }
}

uint64_t DefaultNowNs(void*) {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

void DefaultLog(void*, recur_status, const char*) {}

size_t DefaultLastLevelCacheBytes(void*) {
  // Linux: index0, index1, ... of CPU 0, each with its level, type and size
  // ("32768K"); the data or unified cache of the highest level.
  static const size_t bytes = [] {
    size_t best = 0;
    int best_level = 0;
    for (int index = 0; index < 16; ++index) {
      char path[96];
      const auto read = [&](const char* name, char* text, size_t n) {
        std::snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/%s", index,
                      name);
        FILE* f = std::fopen(path, "r");
        if (f == nullptr) return false;
        const bool ok = std::fgets(text, int(n), f) != nullptr;
        std::fclose(f);
        return ok;
      };
      char level[16], type[32], size[32];
      if (!read("level", level, sizeof(level))) break;
      if (!read("type", type, sizeof(type)) || !read("size", size, sizeof(size))) continue;
      if (std::strncmp(type, "Instruction", 11) == 0) continue;
      char* unit = nullptr;
      const unsigned long long n = std::strtoull(size, &unit, 10);
      const size_t scale = *unit == 'K' ? 1024 : *unit == 'M' ? size_t{1} << 20 : 1;
      const int l = std::atoi(level);
      if (l >= best_level && n > 0) {
        best_level = l;
        best = size_t(n) * scale;
      }
    }
    return best;
  }();
  return bytes;
}

void DefaultAdviseHugePages(void* data, size_t size) {
#ifdef MADV_HUGEPAGE
  // madvise takes whole pages; the range's partial pages at either end are left out.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)size;
#endif
}

}  // namespace recur::impl::platform
