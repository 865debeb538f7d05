// A reader of PyTorch checkpoints as `torch.save(model.state_dict(), path)`
// writes them. PyTorch >= 1.6, the zip format: a zip archive whose entries
// share one folder prefix P:
//   P/data.pkl     a pickle of the object (protocol 2)
//   P/data/<key>   the bytes of each storage, named by its persistent id
//   P/version      and, from some versions on, P/byteorder ("little")
// libzip reads the archive: torch.save stores its entries uncompressed, and an
// archive re-zipped with a method libzip reads (deflate) reads the same.
// Every entry's CRC-32 is checked; an entry stored uncompressed is then used
// where it lies in the file's bytes (found through the central directory, and
// taken only if libzip reads the same bytes), a compressed one is copied out.
// The entries' declared sizes together may not exceed 64 times the archive's
// size and 64 KiB (zip bombs are refused before anything is read), so memory
// stays linear in the file size. The legacy format (before 1.6, or
// _use_new_zipfile_serialization=False): pickles of the magic number, the
// protocol version, system information, the object and the storage keys, then
// each storage's int64 element count and bytes; read as the same entries
// ("data.pkl", "data/<key>"), in place.
//
// The pickle is run by a restricted machine that, like
// `torch.load(weights_only=True)`, builds only dicts (also
// collections.OrderedDict), lists, tuples, strings, ints, floats, bools, None
// and tensors rebuilt with torch._utils._rebuild_tensor_v2 (or
// _rebuild_parameter) from persistent-id storages (torch.FloatStorage,
// DoubleStorage, HalfStorage, BFloat16Storage, the integer and bool storages,
// torch.UntypedStorage as bytes). Any other global is refused by name.
// Nothing is executed; no recursion depends on the input. Tensors must be
// contiguous (a view with other strides is refused) and lie within their
// storage.
#ifndef RECUR_CONVERTER_PT_READER_H_
#define RECUR_CONVERTER_PT_READER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "converter/file_util.h"
#include "converter/safetensors.h"
#include "core/result.h"
#include "core/status.h"

namespace recur::impl::converter {

// A parsed checkpoint. It owns the file's bytes (in memory or mapped) and the
// entries copied out of them (compressed ones); the tensor views point into
// either, which moving a PtFile leaves where they are, so views stay valid
// until the PtFile is destroyed.
class PtFile {
 public:
  PtFile() = default;
  PtFile(PtFile&&) = default;
  PtFile& operator=(PtFile&&) = default;
  PtFile(const PtFile&) = delete;
  PtFile& operator=(const PtFile&) = delete;

  const TensorViewMap& tensors() const { return tensors_; }

 private:
  friend Result<PtFile> ParsePt(FileBytes bytes, const std::string& source_name,
                                const std::string& key_path);
  FileBytes bytes_;
  std::map<std::string, std::vector<uint8_t>> copies_;  // decompressed entries, by name
  TensorViewMap tensors_;
};

// True when the bytes begin as a zip archive does ("PK\3\4").
bool LooksLikeZip(const uint8_t* data, std::size_t size);

// Parses checkpoint bytes (a vector, or a file mapped by MapFile; kept). The
// pickled object must be a dict of tensors (a state dict); `key_path` ("model"
// or "model.encoder") first selects a dict nested inside it, a dot separating
// the keys of successive levels (a key that itself holds dots is matched
// whole). Every error is kInvalidArgument (kUnsupported for a big-endian legacy
// file, encrypted entries and compression methods libzip cannot read), its
// message prefixed with `source_name`:
//   model.pt: global "os.system" is not allowed in a state dict
//   model.pt: "optimizer" holds a dict, not a tensor (choose a nested state dict with --state-dict-key)
Result<PtFile> ParsePt(FileBytes bytes, const std::string& source_name = "checkpoint",
                       const std::string& key_path = "");

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_PT_READER_H_
