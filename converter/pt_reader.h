// A reader of PyTorch checkpoints as `torch.save(model.state_dict(), path)`
// writes them (PyTorch >= 1.6, the zip format): a zip archive whose entries
// share one folder prefix P and are STORED (uncompressed):
//   P/data.pkl     a pickle of the object (protocol 2)
//   P/data/<key>   the bytes of each storage, named by its persistent id
//   P/version      and, from some versions on, P/byteorder ("little")
//
// The pickle is run by a restricted machine that, like
// `torch.load(weights_only=True)`, builds only dicts (also
// collections.OrderedDict), lists, tuples, strings, ints, floats, bools, None
// and tensors rebuilt with torch._utils._rebuild_tensor_v2 (or
// _rebuild_parameter) from persistent-id storages (torch.FloatStorage,
// DoubleStorage, HalfStorage, BFloat16Storage, the integer and bool storages,
// torch.UntypedStorage as bytes). Any other global is refused by name.
// Nothing is executed; no recursion depends on the input; memory is linear in
// the file size. Tensors must be contiguous (a view with other strides is
// refused) and lie within their storage.
#ifndef RECUR_CONVERTER_PT_READER_H_
#define RECUR_CONVERTER_PT_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "converter/safetensors.h"
#include "core/result.h"
#include "core/status.h"

namespace recur::impl::converter {

// A parsed checkpoint; owns its bytes, the views point into them.
class PtFile {
 public:
  PtFile() = default;
  PtFile(PtFile&&) = default;
  PtFile& operator=(PtFile&&) = default;
  PtFile(const PtFile&) = delete;
  PtFile& operator=(const PtFile&) = delete;

  const TensorViewMap& tensors() const { return tensors_; }

 private:
  friend Result<PtFile> ParsePt(std::vector<uint8_t> bytes, const std::string& source_name,
                                const std::string& key_path);
  std::vector<uint8_t> bytes_;  // moving a vector keeps its heap buffer: views stay valid
  TensorViewMap tensors_;
};

// True when `bytes` begin as a zip archive does ("PK\3\4").
bool LooksLikeZip(const std::vector<uint8_t>& bytes);

// Parses checkpoint bytes. The pickled object must be a dict of tensors (a
// state dict); `key_path` ("model" or "model.encoder") first selects a dict
// nested inside it, a dot separating the keys of successive levels (a key
// that itself holds dots is matched whole). Every error is kInvalidArgument
// (kUnsupported for the legacy non-zip format and for compressed entries),
// its message prefixed with `source_name`:
//   model.pt: global "os.system" is not allowed in a state dict
//   model.pt: "optimizer" holds a dict, not a tensor (choose a nested state dict with --state-dict-key)
Result<PtFile> ParsePt(std::vector<uint8_t> bytes, const std::string& source_name = "checkpoint",
                       const std::string& key_path = "");

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_PT_READER_H_
