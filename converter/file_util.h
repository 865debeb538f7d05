// Whole-file reads and atomic writes.
#ifndef RECUR_CONVERTER_FILE_UTIL_H_
#define RECUR_CONVERTER_FILE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "converter/model_description.h"
#include "core/result.h"
#include "core/status.h"

namespace recur::impl::converter {

// Reads a whole file. Messages: "PATH: cannot open: No such file or directory".
Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path);
Result<AlignedBytes> ReadFileAligned(const std::string& path);
Result<std::string> ReadFileText(const std::string& path);

// Writes `size` bytes to `path` atomically: a temporary file in the same
// folder, flushed and synced, then renamed over `path`. On failure the
// temporary is removed and `path` is left as it was.
Status WriteFileAtomic(const std::string& path, const void* data, std::size_t size);

// Refuses an output path that names the same file as one of `inputs` (the
// same device and inode, so links and other spellings count): writing it
// would destroy the input. Inputs that do not exist are ignored.
Status CheckOutputIsNotAnInput(const std::string& output, const std::vector<std::string>& inputs);

// The last path component ("dir/config.json" -> "config.json").
std::string BaseName(const std::string& path);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_FILE_UTIL_H_
