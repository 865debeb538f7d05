// Reader for golden files written by models/reference/recur_ref/golden.py.
//
// Format (little-endian): magic "RCURGOLD", u32 version, u32 count, then per
// record: u32 name length, name, u32 dtype (0 f32, 1 f64, 2 i32, 3 u8),
// u32 ndim, ndim × i64 dims, raw C-order data.
#ifndef RECUR_TESTS_PARITY_GOLDEN_H_
#define RECUR_TESTS_PARITY_GOLDEN_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace recur::impl::golden {

constexpr uint32_t kVersion = 1;

struct Record {
  uint32_t dtype = 0;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  int64_t count() const;
  std::vector<double> AsDouble() const;  // any numeric dtype
  std::string AsString() const;          // u8 records (meta JSON)
};

// Reads `path`. On a version mismatch the error says how to regenerate.
bool Read(const std::string& path, std::map<std::string, Record>* out, std::string* error);

}  // namespace recur::impl::golden

#endif  // RECUR_TESTS_PARITY_GOLDEN_H_
