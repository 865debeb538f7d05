// A reader (and a small writer, for tests and tools) of GGUF version 3, the
// little-endian file format of llama.cpp/ggml:
//   "GGUF", u32 version (3), u64 tensor_count, u64 metadata_kv_count,
//   metadata_kv_count × (string key, u32 value type, value),
//   tensor_count × (string name, u32 n_dims, n_dims × u64 ne, u32 ggml type,
//                   u64 offset),
//   padding to `general.alignment` (a u32 key, default 32), then the data:
//   each tensor at its offset (relative to the data section, aligned).
// A string is a u64 byte count and the bytes (no NUL). A value is a scalar of
// the value type or an array: u32 element type, u64 count, the elements.
// ne[0] varies fastest; a tensor holds ne[0]/block·bytes_per_block·ne[1]·ne[2]·ne[3]
// bytes of its ggml type (block: 1 for plain types, 32 or 256 for quantized).
//
// Everything is checked against the bytes before it is used: lengths and
// counts against the bytes left, keys and tensor names unique, value and ggml
// types known, booleans 0 or 1, n_dims 1..4, dims nonzero, sizes without
// overflow, ne[0] a multiple of the block, offsets aligned, tensor data inside
// the file and not overlapping. Arrays of arrays (allowed by the format, used
// by no model) are refused, as ggml's own reader does.
//
// Only the file is read here, and its tensors offered as the converter's
// views (GgufTensorViews); mapping a model's tensors to recur's is the gguf
// layout's (converter/layouts/gguf.cc).
#ifndef RECUR_CONVERTER_GGUF_H_
#define RECUR_CONVERTER_GGUF_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "converter/file_util.h"
#include "converter/safetensors.h"
#include "core/result.h"
#include "core/status.h"

namespace recur::impl::converter {

// Metadata value types, with the file's ids.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* GgufTypeName(GgufType type);  // "u8", "string", "array", ...

// A scalar metadata value; the alternative is the GgufType (see GgufScalarType).
using GgufScalar = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                                std::string, uint64_t, int64_t, double>;
GgufType GgufScalarType(const GgufScalar& value);

// A metadata value: a scalar, or an array of scalars of one element type.
struct GgufValue {
  GgufValue() = default;
  GgufValue(GgufScalar value) : scalar(std::move(value)) {}  // NOLINT: implicit
  static GgufValue Array(GgufType element_type, std::vector<GgufScalar> elements);

  GgufType type() const { return is_array ? GgufType::kArray : GgufScalarType(scalar); }
  bool is_array = false;
  GgufScalar scalar;                      // when !is_array
  GgufType element_type = GgufType::kU8;  // when is_array
  std::vector<GgufScalar> elements;       // when is_array, each of element_type
};

// ggml's tensor types that the reader knows: their id, name and storage.
struct GgmlTypeInfo {
  uint32_t id;
  const char* name;     // "F32", "Q4_K", ...
  uint32_t block_size;  // elements per block
  uint32_t bytes_per_block;
};
// Null for an id that is not a known ggml type.
const GgmlTypeInfo* FindGgmlType(uint32_t id);

// The type ids of the common types (ggml_type).
namespace ggml_type {
constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
                   kQ8_1 = 9, kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14,
                   kQ8_K = 15, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kBF16 = 30;
}  // namespace ggml_type

// A tensor of a GGUF file; its data points into the file's bytes.
struct GgufTensor {
  std::string name;
  const GgmlTypeInfo* type = nullptr;
  std::vector<uint64_t> dims;  // ne[0] (fastest varying) first; 1 to 4 of them
  uint64_t offset = 0;         // within the data section
  const uint8_t* data = nullptr;
  std::size_t nbytes = 0;
};

// A parsed GGUF file; owns its bytes (in memory or mapped), the tensors point
// into them.
class GgufFile {
 public:
  GgufFile() = default;
  GgufFile(GgufFile&&) = default;
  GgufFile& operator=(GgufFile&&) = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // where the data section starts
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order
  const GgufValue* FindValue(const std::string& key) const;            // null if absent
  const GgufTensor* FindTensor(const std::string& name) const;         // null if absent

  // Typed metadata. Errors name the key and the types: `metadata key
  // "general.alignment" is u8, expected u32`, `metadata key "x" is missing`.
  // No conversions: the value's type must be the one asked for.
  Result<uint8_t> GetU8(const std::string& key) const;
  Result<uint32_t> GetU32(const std::string& key) const;
  Result<int32_t> GetI32(const std::string& key) const;
  Result<uint64_t> GetU64(const std::string& key) const;
  Result<int64_t> GetI64(const std::string& key) const;
  Result<float> GetF32(const std::string& key) const;
  Result<double> GetF64(const std::string& key) const;
  Result<bool> GetBool(const std::string& key) const;
  Result<std::string> GetString(const std::string& key) const;
  Result<std::vector<std::string>> GetStringArray(const std::string& key) const;
  Result<std::vector<float>> GetF32Array(const std::string& key) const;
  Result<std::vector<int32_t>> GetI32Array(const std::string& key) const;
  Result<std::vector<uint32_t>> GetU32Array(const std::string& key) const;

 private:
  friend Result<GgufFile> ParseGguf(FileBytes bytes, const std::string& source_name);
  template <typename T>
  Result<T> GetScalar(const std::string& key) const;
  template <typename T>
  Result<std::vector<T>> GetArray(const std::string& key) const;

  FileBytes bytes_;  // moving it keeps the bytes where they are: tensors stay valid
  uint32_t version_ = 0;
  uint32_t alignment_ = 0;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, std::size_t> tensor_index_;
};

// Parses GGUF bytes (a vector, or a file mapped by MapFile). `source_name`
// prefixes messages ("model.gguf: tensor \"x\": ggml type 42 is not known").
Result<GgufFile> ParseGguf(FileBytes bytes, const std::string& source_name = "gguf");

// Maps and parses a file; messages are prefixed with the path.
Result<GgufFile> ReadGgufFile(const std::string& path);

// Whether `data` starts with GGUF's magic, "GGUF".
bool LooksLikeGguf(const uint8_t* data, std::size_t size);

// The tensors of `file` as the converter's views (safetensors.h), under their
// GGUF names, their dimensions in row-major order (ne reversed: a matrix of
// ne = [in, out] is [out, in], nn.Linear's layout). F32, F16 and BF16 tensors
// are those dtypes, Q4_0, Q8_0, Q4_K, Q5_K and Q6_K ones DType::kQ4_0,
// kQ8_0, kQ4_K, kQ5_K and kQ6_K. Any other ggml type is refused, naming the
// first such tensor and its type ("model.gguf: tensor \"output.weight\" is
// Q3_K: ..."). `source_name` prefixes the messages.
Result<TensorViewMap> GgufTensorViews(const GgufFile& file, const std::string& source_name);

// A tensor for SerializeGguf: `data` must hold the type's bytes for `dims`.
struct GgufTensorData {
  std::string name;
  uint32_t type = ggml_type::kF32;
  std::vector<uint64_t> dims;
  std::vector<uint8_t> data;
};

// A GGUF v3 image of `metadata` (in order) and `tensors`, for tests and tools.
// `alignment` other than 32 is written as the u32 key "general.alignment"
// unless `metadata` has that key already.
std::vector<uint8_t> SerializeGguf(const std::vector<std::pair<std::string, GgufValue>>& metadata,
                                   const std::vector<GgufTensorData>& tensors,
                                   uint32_t alignment = 32);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_GGUF_H_
