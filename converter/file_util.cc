#include "converter/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

namespace recur::impl::converter {
namespace {

std::string ErrnoMessage(const std::string& path, const char* what, int err) {
  return path + ": " + what + ": " + std::strerror(err);
}

// Opens a regular file for reading: its descriptor and size.
Status OpenRegular(const std::string& path, int* fd, uint64_t* size) {
  *fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (*fd < 0) return Status(StatusCode::kIoError, ErrnoMessage(path, "cannot open", errno));
  struct stat st;
  if (::fstat(*fd, &st) != 0) {
    int err = errno;
    ::close(*fd);
    return Status(StatusCode::kIoError, ErrnoMessage(path, "cannot stat", err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(*fd);
    return Status(StatusCode::kIoError, path + ": not a regular file");
  }
  *size = static_cast<uint64_t>(st.st_size);
  return Status::Ok();
}

// Reads the file into a container obtained from `resize`.
template <class Bytes>
Result<Bytes> ReadInto(const std::string& path) {
  int fd = -1;
  uint64_t size = 0;
  RECUR_RETURN_IF_ERROR(OpenRegular(path, &fd, &size));
  Bytes bytes;
  try {
    bytes.resize(static_cast<std::size_t>(size));
  } catch (const std::exception&) {
    ::close(fd);
    return Status(StatusCode::kOutOfMemory,
                  path + ": out of memory reading " + std::to_string(size) + " bytes");
  }
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Status(StatusCode::kIoError, ErrnoMessage(path, "read failed", err));
    }
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (done != bytes.size())
    return Status(StatusCode::kIoError, path + ": file changed size while being read");
  return bytes;
}

}  // namespace

FileBytes::FileBytes(FileBytes&& other) noexcept
    : held_(std::move(other.held_)), map_(other.map_), map_size_(other.map_size_) {
  other.map_ = nullptr;
  other.map_size_ = 0;
}

FileBytes& FileBytes::operator=(FileBytes&& other) noexcept {
  if (this != &other) {
    if (map_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
    held_ = std::move(other.held_);
    map_ = other.map_;
    map_size_ = other.map_size_;
    other.map_ = nullptr;
    other.map_size_ = 0;
  }
  return *this;
}

FileBytes::~FileBytes() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

Result<FileBytes> FileBytes::Map(const std::string& path, int fd, uint64_t size) {
  FileBytes bytes;
  if (size == 0) return bytes;
  void* p = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    return Status(err == ENOMEM ? StatusCode::kOutOfMemory : StatusCode::kIoError,
                  ErrnoMessage(path, "cannot map", err));
  }
  bytes.map_ = static_cast<const uint8_t*>(p);
  bytes.map_size_ = static_cast<std::size_t>(size);
  return bytes;
}

Result<std::vector<uint8_t>> ReadFileBytes(const std::string& path) {
  return ReadInto<std::vector<uint8_t>>(path);
}

Result<AlignedBytes> ReadFileAligned(const std::string& path) {
  return ReadInto<AlignedBytes>(path);
}

Result<std::string> ReadFileText(const std::string& path) {
  return ReadInto<std::string>(path);
}

Result<FileBytes> MapFile(const std::string& path) {
  int fd = -1;
  uint64_t size = 0;
  RECUR_RETURN_IF_ERROR(OpenRegular(path, &fd, &size));
  auto bytes = FileBytes::Map(path, fd, size);
  ::close(fd);  // the mapping stays
  return bytes;
}

Result<AtomicFile> AtomicFile::Create(const std::string& path) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // Read and write: the self-check maps what was written.
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status(StatusCode::kIoError, ErrnoMessage(path, "cannot create", errno));
  return AtomicFile(path, std::move(tmp), fd);
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)), tmp_(std::move(other.tmp_)), fd_(other.fd_) {
  other.tmp_.clear();
  other.fd_ = -1;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

Status AtomicFile::Resize(uint64_t size) {
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    return Status(StatusCode::kIoError, ErrnoMessage(path_, "cannot set the file size", errno));
  }
  return Status::Ok();
}

Status AtomicFile::WriteAt(uint64_t offset, const void* data, std::size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::pwrite(fd_, p + done, size - done, static_cast<off_t>(offset + done));
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return Status(StatusCode::kIoError,
                    ErrnoMessage(path_, "write failed", n < 0 ? errno : EIO));
    }
    done += static_cast<std::size_t>(n);
  }
  return Status::Ok();
}

Result<FileBytes> AtomicFile::Map() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    return Status(StatusCode::kIoError, ErrnoMessage(path_, "cannot stat", errno));
  }
  return FileBytes::Map(path_, fd_, static_cast<uint64_t>(st.st_size));
}

Status AtomicFile::Commit() {
  if (::fsync(fd_) != 0) return Status(StatusCode::kIoError, ErrnoMessage(path_, "fsync failed", errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    return Status(StatusCode::kIoError, ErrnoMessage(path_, "close failed", errno));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    return Status(StatusCode::kIoError,
                  ErrnoMessage(path_, "cannot rename the temporary file into place", errno));
  }
  tmp_.clear();
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, const void* data, std::size_t size) {
  auto file = AtomicFile::Create(path);
  if (!file.ok()) return file.status();
  RECUR_RETURN_IF_ERROR(file->WriteAt(0, data, size));
  return file->Commit();
}

Status CheckOutputIsNotAnInput(const std::string& output, const std::vector<std::string>& inputs) {
  struct stat out;
  if (::stat(output.c_str(), &out) != 0) return Status::Ok();  // a new file
  for (const std::string& input : inputs) {
    struct stat in;
    if (::stat(input.c_str(), &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
      return Status(StatusCode::kInvalidArgument,
                    output + ": is the input " + input + "; refusing to overwrite it");
    }
  }
  return Status::Ok();
}

std::string BaseName(const std::string& path) {
  std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace recur::impl::converter
