// Fuzz target: the converter's safetensors parser (header JSON, dtypes,
// shapes, offsets) and the conversion of every tensor it accepts to float32.
#include <vector>

#include "converter/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = recur::impl::converter::ParseSafetensors(std::vector<uint8_t>(data, data + size));
  if (!file.ok()) return 0;
  for (const auto& [name, view] : file->tensors()) {
    auto floats = recur::impl::converter::ToFloat32(name, view);
    (void)floats;
  }
  return 0;
}
