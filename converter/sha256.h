// SHA-256 (FIPS 180-4), for Metadata.source_hash.
#ifndef RECUR_CONVERTER_SHA256_H_
#define RECUR_CONVERTER_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace recur::impl::converter {

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, std::size_t size);
  std::array<uint8_t, 32> Finish();  // once; the object is spent afterwards

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  std::size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

// Lower-case hex digest of data[0, size).
std::string Sha256Hex(const void* data, std::size_t size);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_SHA256_H_
