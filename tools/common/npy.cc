#include "npy.h"

#include <cstdio>
#include <cstring>
#include <limits>

#include "converter/file_util.h"

namespace npy {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

size_t ElementSize(const std::string& dtype) {
  if (dtype == "f4" || dtype == "i4") return 4;
  if (dtype == "f8" || dtype == "i8") return 8;
  return 0;
}

// The value of `key` in the header dict, up to the next top-level comma.
bool FindValue(const std::string& header, const std::string& key, std::string* value) {
  const std::string quoted[2] = {"'" + key + "'", "\"" + key + "\""};
  size_t pos = std::string::npos;
  for (const std::string& q : quoted) {
    pos = header.find(q);
    if (pos != std::string::npos) {
      pos += q.size();
      break;
    }
  }
  if (pos == std::string::npos) return false;
  pos = header.find(':', pos);
  if (pos == std::string::npos) return false;
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  size_t end = pos;
  int depth = 0;
  while (end < header.size()) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if ((c == ',' || c == '}') && depth == 0) break;
    ++end;
  }
  *value = header.substr(pos, end - pos);
  return true;
}

bool ParseShape(const std::string& text, std::vector<int64_t>* shape, std::string* error) {
  shape->clear();
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') {
    *error = "bad shape " + text;
    return false;
  }
  size_t i = 1;
  while (i < text.size() - 1) {
    while (i < text.size() - 1 && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i >= text.size() - 1) break;
    int64_t v = 0;
    size_t digits = 0;
    while (i < text.size() - 1 && text[i] >= '0' && text[i] <= '9') {
      if (v > (int64_t{1} << 40)) {
        *error = "shape dimension too large in " + text;
        return false;
      }
      v = v * 10 + (text[i] - '0');
      ++i;
      ++digits;
    }
    if (digits == 0) {
      *error = "bad shape " + text;
      return false;
    }
    if (i < text.size() - 1 && text[i] == 'L') ++i;  // Python 2 longs
    shape->push_back(v);
  }
  return true;
}

}  // namespace

int64_t Array::count() const {
  // Parse bounds the product of the nonzero dimensions by the data size; a zero
  // dimension anywhere (after huge ones) makes the array empty.
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool Parse(const uint8_t* bytes, size_t size, Array* out, std::string* error) {
  *out = Array();
  if (size < kMagicSize + 4 || std::memcmp(bytes, kMagic, kMagicSize) != 0) {
    *error = "not a .npy file (bad magic)";
    return false;
  }
  const uint8_t major = bytes[6];
  size_t header_len, header_start;
  if (major == 1) {
    header_len = bytes[8] | (size_t{bytes[9]} << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) {
      *error = "truncated .npy header";
      return false;
    }
    header_len = bytes[8] | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) |
                 (size_t{bytes[11]} << 24);
    header_start = 12;
  } else {
    *error = "unsupported .npy version " + std::to_string(major);
    return false;
  }
  if (header_len > size - header_start) {
    *error = "truncated .npy header";
    return false;
  }
  const std::string header(reinterpret_cast<const char*>(bytes + header_start), header_len);
  std::string descr, fortran, shape;
  if (!FindValue(header, "descr", &descr) || !FindValue(header, "fortran_order", &fortran) ||
      !FindValue(header, "shape", &shape)) {
    *error = "malformed .npy header: " + header;
    return false;
  }
  if (fortran.rfind("False", 0) != 0) {
    *error = "Fortran-order arrays are not supported; save with np.ascontiguousarray";
    return false;
  }
  if (descr.size() < 5 || (descr[1] != '<' && descr[1] != '|')) {
    *error = "unsupported dtype " + descr + " (need little-endian f4, f8, i4 or i8)";
    return false;
  }
  out->dtype = descr.substr(2, descr.size() - 3);
  const size_t elem = ElementSize(out->dtype);
  if (elem == 0) {
    *error = "unsupported dtype " + descr + " (need f4, f8, i4 or i8)";
    return false;
  }
  if (!ParseShape(shape, &out->shape, error)) return false;
  const size_t data_start = header_start + header_len;
  // The element count, stopping before it exceeds what the data can hold (a
  // plain product of the dimensions can overflow and wrap to a size that
  // matches: found by fuzzing, tests/fuzz/regressions/npy).
  const uint64_t capacity = (size - data_start) / elem;
  uint64_t count = 1;
  for (int64_t d : out->shape) {
    if (d == 0) {
      count = 0;
      break;
    }
    count = count > capacity / static_cast<uint64_t>(d) ? capacity + 1 : count * uint64_t(d);
  }
  if (count > capacity || count * elem != size - data_start) {
    *error = "data size " + std::to_string(size - data_start) + " bytes does not match shape " +
             shape + " of " + out->dtype;
    return false;
  }
  out->data.assign(bytes + data_start, bytes + size);
  return true;
}

bool ReadFile(const std::string& path, Array* out, std::string* error) {
  // Regular files only (a directory or /dev/zero is refused, not read
  // without end), errors as messages.
  auto bytes = recur::impl::converter::ReadFileBytes(path);
  if (!bytes.ok()) {
    *error = bytes.message();
    return false;
  }
  if (!Parse(bytes->data(), bytes->size(), out, error)) {
    *error = path + ": " + *error;
    return false;
  }
  return true;
}

bool ToFloat32(const Array& a, std::vector<float>* out, std::string* error) {
  const size_t n = static_cast<size_t>(a.count());
  out->resize(n);
  if (a.dtype == "f4") {
    if (n > 0) std::memcpy(out->data(), a.data.data(), n * 4);  // data() may be null for n == 0
  } else if (a.dtype == "f8") {
    for (size_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, a.data.data() + i * 8, 8);
      (*out)[i] = static_cast<float>(v);
    }
  } else {
    *error = "expected float32 or float64 frames, got " + a.dtype;
    return false;
  }
  return true;
}

bool ToInt32(const Array& a, std::vector<int32_t>* out, std::string* error) {
  const size_t n = static_cast<size_t>(a.count());
  out->resize(n);
  if (a.dtype == "i4") {
    if (n > 0) std::memcpy(out->data(), a.data.data(), n * 4);  // data() may be null for n == 0
  } else if (a.dtype == "i8") {
    for (size_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, a.data.data() + i * 8, 8);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        *error = "token id " + std::to_string(v) + " at index " + std::to_string(i) +
                 " does not fit in int32";
        return false;
      }
      (*out)[i] = static_cast<int32_t>(v);
    }
  } else {
    *error = "expected int32 or int64 token ids, got " + a.dtype;
    return false;
  }
  return true;
}

bool WriteFloat32(const std::string& path, const std::vector<int64_t>& shape, const float* data,
                  std::string* error) {
  // "(3,)" for one dimension, "(3, 4)" for more.
  std::string dims;
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dims += (i ? ", " : "") + std::to_string(shape[i]);
    count *= shape[i];
  }
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t unpadded = kMagicSize + 4 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  const uint16_t len = static_cast<uint16_t>(header.size());
  std::string bytes(kMagic, kMagicSize);
  bytes += {'\x01', '\x00', static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(data), static_cast<size_t>(count) * 4);
  // Atomic: a failed write leaves an existing file as it was.
  const recur::impl::Status written =
      recur::impl::converter::WriteFileAtomic(path, bytes.data(), bytes.size());
  if (!written.ok()) {
    *error = written.message();
    return false;
  }
  return true;
}

bool CheckOutputIsNotAnInput(const std::string& output, const std::vector<std::string>& inputs,
                             std::string* error) {
  const recur::impl::Status s = recur::impl::converter::CheckOutputIsNotAnInput(output, inputs);
  if (!s.ok()) *error = s.message();
  return s.ok();
}

}  // namespace npy
