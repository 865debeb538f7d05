// Fuzz target: the converter's torch.save checkpoint reader (the archive
// through libzip, restricted unpickler, tensor checks) and the conversion of
// every tensor it accepts to float32. Byte 0 picks what the rest is: even, a
// whole file: a zip archive (its CRCs rarely survive a mutation, so the pickle
// is seldom reached) or a legacy torch.save stream (pickles and storages,
// without checksums); odd, the data.pkl of an archive built here around it, with
// storages "0".."7" of 256 bytes each (small, for speed: each is read
// through for its CRC), and a --state-dict-key of "model" when bit 1 is set.
#include <cstdint>
#include <string>
#include <vector>

#include "converter/pt_reader.h"

namespace {

using Bytes = std::vector<uint8_t>;

void Put(Bytes* b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t Crc(const uint8_t* p, std::size_t n) {
  uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xffffffffu;
}

void AddEntry(const std::string& name, const uint8_t* data, std::size_t size, Bytes* out, Bytes* cd) {
  const uint64_t local = out->size();
  const uint32_t crc = Crc(data, size);
  Put(out, 0x04034b50, 4);
  Put(out, 20, 2), Put(out, 0, 2), Put(out, 0, 2), Put(out, 0, 4);
  Put(out, crc, 4), Put(out, size, 4), Put(out, size, 4), Put(out, name.size(), 2), Put(out, 0, 2);
  out->insert(out->end(), name.begin(), name.end());
  out->insert(out->end(), data, data + size);
  Put(cd, 0x02014b50, 4);
  Put(cd, 20, 2), Put(cd, 20, 2), Put(cd, 0, 2), Put(cd, 0, 2), Put(cd, 0, 4);
  Put(cd, crc, 4), Put(cd, size, 4), Put(cd, size, 4);
  Put(cd, name.size(), 2), Put(cd, 0, 2), Put(cd, 0, 2), Put(cd, 0, 2), Put(cd, 0, 2);
  Put(cd, 0, 4), Put(cd, local, 4);
  cd->insert(cd->end(), name.begin(), name.end());
}

Bytes Archive(const uint8_t* pkl, std::size_t size) {
  static const Bytes storage = [] {
    Bytes s(256);
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(i * 37 + 11);
    return s;
  }();
  Bytes out, cd;
  AddEntry("archive/data.pkl", pkl, size, &out, &cd);
  for (int k = 0; k < 8; ++k)
    AddEntry("archive/data/" + std::to_string(k), storage.data(), storage.size(), &out, &cd);
  const uint64_t cd_offset = out.size();
  out.insert(out.end(), cd.begin(), cd.end());
  Put(&out, 0x06054b50, 4);
  Put(&out, 0, 4), Put(&out, 9, 2), Put(&out, 9, 2);
  Put(&out, cd.size(), 4), Put(&out, cd_offset, 4), Put(&out, 0, 2);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  Bytes bytes = (mode & 1) ? Archive(data + 1, size - 1) : Bytes(data + 1, data + size);
  auto file = recur::impl::converter::ParsePt(std::move(bytes), "fuzz.pt",
                                              (mode & 2) ? "model" : "");
  if (!file.ok()) return 0;
  for (const auto& [name, view] : file->tensors()) {
    auto floats = recur::impl::converter::ToFloat32(name, view);
    (void)floats;
  }
  return 0;
}
