#include <cstdio>

#include "core/platform.h"

// The minimal platform, for bare-metal-like builds (CMake RECUR_PLATFORM=minimal):
// no file system (models come from memory: recur_model_load_buffer), no
// clock (the automatic backend choice then takes highway, the first), no log.
// It needs nothing from the OS; an application with a file system or a
// timer gives its own functions to recur_set_platform.
namespace recur::platform {
namespace {

int MapFileHook(void*, const char* path, int, const void**, size_t*, void**, char* error,
                size_t error_size) {
  std::snprintf(error, error_size,
                "cannot open '%s': this build has no file system (RECUR_PLATFORM=minimal); load "
                "the model with recur_model_load_buffer, or give map_file to recur_set_platform",
                path);
  return 1;
}

void UnmapFileHook(void*, const void*, size_t, void*) {}

uint64_t NowNsHook(void*) { return 0; }

void LogHook(void*, recur_status, const char*) {}

}  // namespace

const recur_platform& DefaultPlatform() {
  static const recur_platform platform{sizeof(recur_platform), nullptr, MapFileHook,
                                       UnmapFileHook, NowNsHook, LogHook};
  return platform;
}

}  // namespace recur::platform
