// Fuzz target: recur-run's .npy reader (header dict, dtype, shape, sizes)
// and its conversions to float32 and int32.
#include <string>
#include <vector>

#include "npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  npy::Array array;
  std::string error;
  if (!npy::Parse(data, size, &array, &error)) return 0;
  std::vector<float> floats;
  std::vector<int32_t> ints;
  npy::ToFloat32(array, &floats, &error);
  npy::ToInt32(array, &ints, &error);
  return 0;
}
