// Minimal .npy (NumPy format 1.0–3.0) reading and writing for the tools:
// little-endian f4/f8/i4/i8, C order. Errors name the problem.
#ifndef RECUR_TOOLS_COMMON_NPY_H_
#define RECUR_TOOLS_COMMON_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace npy {

struct Array {
  std::string dtype;           // "f4", "f8", "i4" or "i8"
  std::vector<int64_t> shape;  // C order
  std::vector<uint8_t> data;   // raw little-endian elements
  int64_t count() const;
};

// Parses .npy bytes. Returns false and sets *error on any malformed input.
bool Parse(const uint8_t* bytes, size_t size, Array* out, std::string* error);
bool ReadFile(const std::string& path, Array* out, std::string* error);

// Converts to f32 / i32 (integers must fit; floats must be f4 or f8).
bool ToFloat32(const Array& a, std::vector<float>* out, std::string* error);
bool ToInt32(const Array& a, std::vector<int32_t>* out, std::string* error);

bool WriteFloat32(const std::string& path, const std::vector<int64_t>& shape, const float* data,
                  std::string* error);

// False with *error set when `output` names the same file as one of
// `inputs` (converter::CheckOutputIsNotAnInput, for tools that include
// recur.hpp, whose Status cannot meet the runtime's in one unit).
bool CheckOutputIsNotAnInput(const std::string& output, const std::vector<std::string>& inputs,
                             std::string* error);

}  // namespace npy

#endif  // RECUR_TOOLS_COMMON_NPY_H_
