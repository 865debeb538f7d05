// Whole-file reads, read-only mappings and atomic writes.
#ifndef RECUR_CONVERTER_FILE_UTIL_H_
#define RECUR_CONVERTER_FILE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "converter/model_description.h"
#include "core/result.h"
#include "core/status.h"

namespace recur::impl::converter {

// Reads a whole file. Messages: "PATH: cannot open: No such file or directory".
Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path);
Result<AlignedBytes> ReadFileAligned(const std::string& path);
Result<std::string> ReadFileText(const std::string& path);

// A file's bytes, read-only: mapped (MapFile) or held in memory (a vector
// moved in). Moving it leaves the bytes where they are, so pointers into them
// stay valid for as long as some FileBytes owns them.
class FileBytes {
 public:
  FileBytes() = default;
  FileBytes(std::vector<uint8_t> bytes) : held_(std::move(bytes)) {}  // NOLINT: implicit
  FileBytes(FileBytes&& other) noexcept;
  FileBytes& operator=(FileBytes&& other) noexcept;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  ~FileBytes();

  const uint8_t* data() const { return map_ ? map_ : held_.data(); }
  std::size_t size() const { return map_ ? map_size_ : held_.size(); }

 private:
  friend Result<FileBytes> MapFile(const std::string& path);
  friend class AtomicFile;
  // Maps `size` bytes of `fd` (an empty file: no bytes).
  static Result<FileBytes> Map(const std::string& path, int fd, uint64_t size);
  std::vector<uint8_t> held_;
  const uint8_t* map_ = nullptr;  // null: the bytes are held_
  std::size_t map_size_ = 0;
};

// Maps a whole regular file read-only (no copy: pages are read as they are
// touched, and the kernel may drop them again). The file must not change
// while it is mapped. Messages as ReadFileBytes's.
Result<FileBytes> MapFile(const std::string& path);

// A file written in place of `path` atomically: a temporary file in the same
// folder (PATH.tmp.PID), written at any offsets, then flushed, synced and
// renamed over `path` by Commit. Until then `path` is left as it was; the
// temporary is removed when the AtomicFile is destroyed uncommitted.
class AtomicFile {
 public:
  // Creates the temporary. Messages: "PATH: cannot create: Permission denied".
  static Result<AtomicFile> Create(const std::string& path);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  // Sets the file's size; bytes never written read as zeros.
  Status Resize(uint64_t size);
  Status WriteAt(uint64_t offset, const void* data, std::size_t size);
  // What has been written so far, mapped read-only.
  Result<FileBytes> Map() const;
  // Flushes, syncs and renames the temporary over `path`.
  Status Commit();

 private:
  AtomicFile(std::string path, std::string tmp, int fd)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  std::string path_;
  std::string tmp_;  // empty once renamed into place
  int fd_ = -1;      // -1 once closed
};

// Writes `size` bytes to `path` atomically (an AtomicFile). On failure the
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
