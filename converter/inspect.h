// `recur-convert inspect` and `verify`.
#ifndef RECUR_CONVERTER_INSPECT_H_
#define RECUR_CONVERTER_INSPECT_H_

#include <string>

#include "converter/model_description.h"
#include "core/status.h"

namespace recur::impl::converter {

// A human-readable (or, with `as_json`, JSON) report of a .recur file: format
// version, metadata, d_model, input adapter, norm placement, each block's
// mixer and FFN, final norm and head, parameter count, state bytes per
// stream (from the runtime: recur_model_load_file + recur_model_get_info)
// and the tensor table. The report is written to *out whenever the file's
// FlatBuffer is readable; the status is an error when anything is wrong
// (including the runtime refusing the model).
Status InspectModelFile(const std::string& path, bool as_json, std::string* out);

// Loads the file with the runtime (Verifier + semantic validation), then
// scans every floating-point weight for NaN/Inf. *summary gets a one-line
// description on success.
Status VerifyModelFile(const std::string& path, std::string* summary);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_INSPECT_H_
