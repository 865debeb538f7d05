// A reader (and a small writer, for tests and tools) of the safetensors
// format: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2,3], "data_offsets": [begin, end]},
//    ..., "__metadata__": {"k": "v"}}
// then the data; offsets are relative to the start of the data.
//
// Everything is checked: the header length lies within the file, the JSON
// parses and has the right types, every dtype is known, offsets lie within
// the data, tensors do not overlap, and product(shape)·sizeof(dtype) equals
// the byte span. `__metadata__` is ignored.
#ifndef RECUR_CONVERTER_SAFETENSORS_H_
#define RECUR_CONVERTER_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "converter/file_util.h"
#include "converter/model_description.h"
#include "core/result.h"
#include "core/status.h"
#include "kernels/dense/weight_types.h"

namespace recur::impl::converter {

// The element types of safetensors files (and of torch.save checkpoints),
// then ggml's block-quantised types that GGUF files bring (gguf.h): those are
// no safetensors dtype (ParseDType does not know them, DTypeSize is 0) and
// come only from a GGUF file's views (GgufTensorViews).
enum class DType { kF64, kF32, kF16, kBF16, kF8E4M3, kF8E5M2,
                   kI64, kI32, kI16, kI8, kU64, kU32, kU16, kU8, kBool,
                   // ggml's Q4_0: along the last dimension, blocks of 32 values stored as an
                   // f16 scale d and 16 bytes (byte j: value j in its low nibble q, value
                   // j + 16 in its high one), each value (q − 8)·d.
                   kQ4_0,
                   // ggml's Q8_0: along the last dimension, blocks of 32 values stored as an
                   // f16 scale d and 32 int8 q, each value q·d.
                   kQ8_0,
                   // ggml's K-quants: along the last dimension, blocks of 256 values stored
                   // as ggml's block_q4_K, block_q6_K and block_q5_K (runtime/schema/recur.fbs
                   // has their layouts), each value as dequantize_row_q4_K / _q6_K / _q5_K
                   // gives it.
                   kQ4_K, kQ6_K, kQ5_K };

const char* DTypeName(DType dtype);  // the safetensors spelling: "F32", "BF16", ...; "Q4_0", "Q4_K"
std::size_t DTypeSize(DType dtype);  // bytes per element; 0 for block types
bool ParseDType(const std::string& name, DType* out);  // safetensors' names only

// ggml's Q4_0 blocks: 32 values, 18 bytes.
inline constexpr std::size_t kQ4_0Block = 32, kQ4_0BlockBytes = 18;
// ggml's Q8_0 blocks: 32 values, 34 bytes.
inline constexpr std::size_t kQ8_0Block = 32, kQ8_0BlockBytes = 34;

// The recur weight type that holds blocks of K-quant `dtype` (kQ4_K, kQ6_K,
// kQ5_K) byte for byte (q4_k, q6_k, q5_k); false for other dtypes.
bool KQuantWeightType(DType dtype, kernels::WeightType* out);
// The other way: the dtype of K-quant weight type `type`; false for others.
bool KQuantDType(kernels::WeightType type, DType* out);

// A tensor inside some bytes owned elsewhere.
struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  std::size_t nbytes = 0;
};

using TensorViewMap = std::map<std::string, TensorView>;

// A parsed safetensors file; owns its bytes (in memory or mapped), the views
// point into them.
class SafetensorsFile {
 public:
  SafetensorsFile() = default;
  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const TensorViewMap& tensors() const { return tensors_; }

 private:
  friend Result<SafetensorsFile> ParseSafetensors(FileBytes bytes,
                                                  const std::string& source_name);
  FileBytes bytes_;  // moving it keeps the bytes where they are: views stay valid
  TensorViewMap tensors_;
};

// Parses safetensors bytes (a vector, or a file mapped by MapFile). `source_name`
// prefixes messages ("weights.safetensors: header length 4096 exceeds the file size 100").
Result<SafetensorsFile> ParseSafetensors(FileBytes bytes,
                                         const std::string& source_name = "safetensors");

// Maps and parses a file; messages are prefixed with the path.
Result<SafetensorsFile> ReadSafetensorsFile(const std::string& path);

// The tensor as float32: F32 is copied, F64/F16/BF16 converted, Q4_0 blocks
// decoded as ggml's dequantize_row_q4_0 does ((q − 8)·d in float32: exact),
// K-quant blocks as ggml's dequantize_row_q4_K / _q6_K / _q5_K do (the runtime's
// scalar spec, kernels::ref::DecodeKQuantBlock).
// Integer, bool and 8-bit float dtypes are refused with a message naming
// `name`.
Result<std::vector<float>> ToFloat32(const std::string& name, const TensorView& view);

// F32 views of in-memory tensors (valid while `tensors` lives).
TensorViewMap ViewsOf(const TensorMap& tensors);

// A safetensors image of `tensors` (all F32), for tests and tools.
std::vector<uint8_t> SerializeSafetensors(const TensorMap& tensors,
                                          const std::map<std::string, std::string>& metadata = {});

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_SAFETENSORS_H_
