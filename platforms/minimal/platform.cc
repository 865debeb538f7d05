#include <cstdio>

#include "core/platform.h"

// The minimal platform, for bare-metal-like builds (CMake RECUR_PLATFORM=minimal):
// no file system (models come from memory: recur_model_load_buffer), no
// clock (the automatic backend choice then takes highway, the first), no log.
// It needs nothing from the OS; an application with a file system or a
// timer gives its own functions to recur_set_platform.
namespace recur::impl::platform {

recur_status DefaultMapFile(void*, const char* path, int, const void**, size_t*, void**,
                            char* error, size_t error_size) {
  std::snprintf(error, error_size,
                "cannot open '%s': this build has no file system (RECUR_PLATFORM=minimal); load "
                "the model with recur_model_load_buffer, or give map_file to recur_set_platform",
                path);
  return RECUR_IO_ERROR;
}

void DefaultUnmapFile(void*, const void*, size_t, void*) {}

uint64_t DefaultNowNs(void*) { return 0; }

void DefaultLog(void*, recur_status, const char*) {}

void DefaultAdviseHugePages(void*, size_t) {}

size_t DefaultLastLevelCacheBytes(void*) { return 0; }

}  // namespace recur::impl::platform
