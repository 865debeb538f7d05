#include "model_file.h"

#include <stdlib.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "converter/convert.h"
#include "converter/gguf.h"

namespace tools {
namespace {

namespace conv = recur::impl::converter;

bool IsGgufFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;  // the runtime's load names the problem
  uint8_t magic[4] = {};
  const size_t n = std::fread(magic, 1, sizeof(magic), f);
  std::fclose(f);
  return conv::LooksLikeGguf(magic, n);
}

}  // namespace

bool LoadModelFile(const std::string& path, uint32_t flags, recur::Model* model, std::string* error,
                   std::string* note) {
  note->clear();
  if (!IsGgufFile(path)) {
    auto loaded = recur::Model::Load(path, flags);
    if (!loaded) {
      *error = loaded.error();
      return false;
    }
    *model = std::move(*loaded);
    return true;
  }
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) {
    *error = "cannot convert " + path +
             ": no temporary folder to convert it in (TMPDIR, else /tmp): " + ec.message();
    return false;
  }
  std::string folder = (tmp / "recur-gguf-XXXXXX").string();
  std::vector<char> name(folder.begin(), folder.end());
  name.push_back('\0');
  if (!mkdtemp(name.data())) {
    *error = "cannot convert " + path + ": cannot create a folder in " + tmp.string() + ": " +
             std::strerror(errno);
    return false;
  }
  folder = name.data();
  conv::ConvertOptions options;
  options.weights_path = path;
  options.output_path = folder + "/model.recur";
  conv::ConvertReport report;
  const auto start = std::chrono::steady_clock::now();
  const recur::impl::Status converted = conv::ConvertFiles(options, &report);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bool ok = converted.ok();
  if (!ok) {
    *error = converted.message();
  } else {
    auto loaded = recur::Model::Load(options.output_path, flags);
    ok = loaded.ok();
    if (ok) {
      *model = std::move(*loaded);
    } else {
      *error = path + " (converted): " + loaded.error();
    }
  }
  std::filesystem::remove_all(folder, ec);
  if (!ok) return false;
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
