#include "golden.h"

#include <cstring>
#include <fstream>
#include <iterator>

namespace recur::impl::golden {
namespace {

size_t DTypeSize(uint32_t dtype) {
  switch (dtype) {
    case 0: return 4;
    case 1: return 8;
    case 2: return 4;
    case 3: return 1;
  }
  return 0;
}

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  bool Take(void* dst, size_t n) {
    if (n > b_.size() - pos_) return false;
    if (n > 0) std::memcpy(dst, b_.data() + pos_, n);  // dst may be null for n == 0
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  const std::vector<uint8_t>& b_;
  size_t pos_ = 0;
};

}  // namespace

int64_t Record::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<double> Record::AsDouble() const {
  std::vector<double> v(static_cast<size_t>(count()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == 0) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      v[i] = f;
    } else if (dtype == 1) {
      std::memcpy(&v[i], &bytes[i * 8], 8);
    } else if (dtype == 2) {
      int32_t x;
      std::memcpy(&x, &bytes[i * 4], 4);
      v[i] = x;
    } else {
      v[i] = bytes[i];
    }
  }
  return v;
}

std::string Record::AsString() const { return std::string(bytes.begin(), bytes.end()); }

bool Read(const std::string& path, std::map<std::string, Record>* out, std::string* error) {
  out->clear();
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *error = "cannot open golden file " + path;
    return false;
  }
  const std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Reader r(b);
  char magic[8];
  uint32_t version = 0, count = 0;
  if (!r.Take(magic, 8) || std::memcmp(magic, "RCURGOLD", 8) != 0) {
    *error = path + " is not a golden file";
    return false;
  }
  if (!r.Take(&version, 4) || !r.Take(&count, 4)) {
    *error = path + ": truncated header";
    return false;
  }
  if (version != kVersion) {
    *error = path + ": golden version " + std::to_string(version) + ", this test reads " +
             std::to_string(kVersion) +
             ": stale; regenerate with /usr/bin/python3 models/reference/make_golden.py "
             "(the command is in the file's meta record)";
    return false;
  }
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t name_len = 0, ndim = 0;
    Record rec;
    std::string name;
    if (!r.Take(&name_len, 4) || name_len > 4096) {
      *error = path + ": corrupt record " + std::to_string(i);
      return false;
    }
    name.resize(name_len);
    if (!r.Take(name.data(), name_len) || !r.Take(&rec.dtype, 4) || !r.Take(&ndim, 4) ||
        DTypeSize(rec.dtype) == 0 || ndim > 8) {
      *error = path + ": corrupt record " + std::to_string(i);
      return false;
    }
    rec.shape.resize(ndim);
    if (ndim && !r.Take(rec.shape.data(), ndim * 8)) {
      *error = path + ": corrupt record " + name;
      return false;
    }
    const int64_t n = rec.count();
    if (n < 0 || uint64_t(n) > b.size()) {
      *error = path + ": corrupt record " + name;
      return false;
    }
    rec.bytes.resize(size_t(n) * DTypeSize(rec.dtype));
    if (!r.Take(rec.bytes.data(), rec.bytes.size())) {
      *error = path + ": truncated record " + name;
      return false;
    }
    (*out)[name] = std::move(rec);
  }
  return true;
}

}  // namespace recur::impl::golden
