#include "model/model_file.h"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstring>

namespace recur::impl {

Status ParseModelFile(const uint8_t* bytes, size_t size, bool verify, ModelFile* out) {
  *out = ModelFile{};
  if (size >= 4 && std::memcmp(bytes, "GGUF", 4) == 0) {
    return InvalidModel(
        "a GGUF file (llama.cpp's), not a recur model: convert it once with "
        "recur-convert FILE.gguf -o FILE.recur (recur.convert in Python); the "
        "recur tools and Python's recur.Model also take the file as it is");
  }
  if (size < 8 + sizeof(flatbuffers::uoffset_t)) {
    return InvalidModel("file too small (%zu bytes) to be a recur model", size);
  }
  if (std::memcmp(bytes + 8, fb::ModelIdentifier(), 4) != 0) {
    char id[5] = {0};
    std::memcpy(id, bytes + 8, 4);
    for (char& c : id) {
      if (c != 0 && (c < 32 || c > 126)) c = '?';
    }
    return InvalidModel("not a recur model: file identifier is not \"RCUR\" (found \"%s\")", id);
  }
  uint32_t fb_size;
  std::memcpy(&fb_size, bytes, 4);
  if (fb_size > size - 4) {
    return InvalidModel("truncated: the header announces %u bytes of metadata but the file has "
                        "%zu", fb_size, size - 4);
  }
  if (verify) {
    flatbuffers::Verifier verifier(bytes, 4 + size_t{fb_size});
    if (!fb::VerifySizePrefixedModelBuffer(verifier)) {
      return InvalidModel("metadata failed FlatBuffers verification (corrupted file)");
    }
  }
  out->root = fb::GetSizePrefixedModel(bytes);
  out->flatbuffer_bytes = uint64_t{4} + fb_size;
  out->segment_start =
      (out->flatbuffer_bytes + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
  out->segment = bytes + std::min<uint64_t>(out->segment_start, size);
  out->segment_available = size > out->segment_start ? size - out->segment_start : 0;
  return Status::Ok();
}

}  // namespace recur::impl
