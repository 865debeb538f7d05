// Fuzz target: the converter's GGUF reader (header, metadata values and
// arrays, tensor infos, ggml type sizes, offsets) and the typed getters and
// tensor data of every file it accepts; then the gguf layout's reading of an
// RWKV-7 from the file (its views, the metadata keys, the description) and the
// import of each tensor it names (decoding, shapes, Q4_0 taken over as int4,
// Q4_K, Q5_K and Q6_K as q4_k, q5_k and q6_k),
// for descriptions small enough to import.
#include <cstdint>
#include <vector>

#include "converter/config.h"
#include "converter/gguf.h"
#include "converter/import.h"

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

  auto views = GgufTensorViews(*file, "fuzz.gguf");
  if (!views.ok()) return 0;
  auto config = ConfigFromGguf(*file, "fuzz.gguf");
  if (!config.ok()) return 0;
  // The biases the import makes as zeros are as long as the metadata says:
  // only descriptions of up to 16M values in all are imported.
  uint64_t total = 0;
  for (const ExpectedTensor& e : ExpectedTensors(config->desc, config->layout)) {
    constexpr uint64_t kHuge = uint64_t{1} << 40;  // saturates: no product overflows
    uint64_t n = 1;
    for (int64_t d : e.shape) n = d > 0 && n <= kHuge / uint64_t(d) ? n * uint64_t(d) : kHuge;
    total += n;
    if (total > (uint64_t{16} << 20)) return 0;
  }
  TensorImport import(config->desc, config->layout, *views);
  for (std::size_t i = 0; i < import.count(); ++i) {
    const WeightType stored_as = import.source_storage(i).dtype;
    if (stored_as == WeightType::kI4 || recur::impl::kernels::IsKQuant(stored_as)) {
      StoredTensor stored;
      (void)import.GetStored(i, &stored);
    } else {
      std::vector<float> values;
      (void)import.Get(i, &values);
    }
  }
  (void)import.Finish();
  return 0;
}
