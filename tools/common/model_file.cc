#include "model_file.h"

#include <cstdio>
#include <utility>

#include "converter/convert.h"

namespace tools {

namespace conv = recur::impl::converter;

bool LoadModelFile(const std::string& path, uint32_t flags, recur::Model* model, std::string* error,
                   std::string* note) {
  note->clear();
  if (!conv::IsGgufFile(path)) {
    auto loaded = recur::Model::Load(path, flags);
    if (!loaded) {
      *error = loaded.error();
      return false;
    }
    *model = std::move(*loaded);
    return true;
  }
  conv::ConvertReport report;
  double seconds = 0;
  const recur::impl::Status status = conv::ConvertThroughTemporary(
      path,
      [&](const std::string& recur_path) {
        auto loaded = recur::Model::Load(recur_path, flags);
        if (!loaded) {
          return recur::impl::Status(recur::impl::StatusCode::kInvalidModel,
                                     path + " (converted): " + loaded.error());
        }
        *model = std::move(*loaded);
        return recur::impl::Status::Ok();
      },
      &report, &seconds);
  if (!status.ok()) {
    *error = status.message();
    return false;
  }
  char took[32];
  std::snprintf(took, sizeof(took), "%.1f s", seconds);
  const std::string narrow = conv::NarrowWeightsText(report);
  *note = path + ": a GGUF file, converted in " + took +
          (narrow.empty() ? "" : " (" + narrow + ")") + "; `recur-convert " + path +
          " -o FILE.recur` once saves this at every start";
  for (const std::string& warning : report.warnings) *note += "\n  warning: " + warning;
  return true;
}

void PrintNote(const std::string& note) {
  if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
}

}  // namespace tools
