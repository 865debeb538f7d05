// The tools' model argument: a .recur file, or a GGUF file (llama.cpp's, by
// its magic) converted on the fly, as `recur-convert FILE.gguf -o X.recur`
// would, into a temporary file that is mapped and then removed.
#ifndef RECUR_TOOLS_COMMON_MODEL_FILE_H_
#define RECUR_TOOLS_COMMON_MODEL_FILE_H_

#include <cstdint>
#include <string>

#include "recur/recur.hpp"

namespace tools {

// The tools' help for their model argument.
inline constexpr char kModelFileHelp[] =
    "Model file (.recur), or a GGUF file (llama.cpp's), converted on the fly as recur-convert "
    "converts it";

// Loads the model at `path` with `flags` (recur_load_options.flags). A GGUF
// file is converted first, into a fresh folder under the system's temporary
// folder (TMPDIR, else /tmp), which is removed again once the model is loaded
// (a mapped file stays readable until the model is freed), also when the
// conversion or the load fails. The converted file takes the space of the
// model for as long as the model is loaded. On success *note says what was
// converted and how long it took (empty for a .recur file); the tools print
// it. False with *error set: the runtime's or the converter's message, or why
// the temporary folder could not be made. Not thread-safe only in that two
// calls convert separately.
bool LoadModelFile(const std::string& path, uint32_t flags, recur::Model* model, std::string* error,
                   std::string* note);

// Prints a LoadModelFile note to stderr as "note: ...", nothing when empty.
void PrintNote(const std::string& note);

}  // namespace tools

#endif  // RECUR_TOOLS_COMMON_MODEL_FILE_H_
