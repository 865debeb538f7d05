// Fuzz target: the converter's GGUF reader (header, metadata values and
// arrays, tensor infos, ggml type sizes, offsets) and the typed getters and
// tensor data of every file it accepts.
#include <cstdint>
#include <vector>

#include "converter/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace recur::impl::converter;  // NOLINT
  auto file = ParseGguf(std::vector<uint8_t>(data, data + size));
  if (!file.ok()) return 0;
  for (const auto& [key, value] : file->metadata()) {
    (void)file->GetU32(key);
    (void)file->GetString(key);
    (void)file->GetStringArray(key);
    (void)file->GetF32Array(key);
  }
  // Touch the first and last byte of every tensor: the views must lie in the file.
  static volatile unsigned sink;
  for (const GgufTensor& t : file->tensors()) sink = sink + t.data[0] + t.data[t.nbytes - 1];
  return 0;
}
