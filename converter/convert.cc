#include "converter/convert.h"

#include <stdlib.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "converter/config.h"
#include "converter/file_util.h"
#include "converter/gguf.h"
#include "converter/import.h"
#include "converter/pt_reader.h"
#include "converter/safetensors.h"
#include "converter/sha256.h"
#include "converter/vocab_file.h"
#include "converter/writer.h"

namespace recur::impl::converter {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsCheckpointName(const std::string& path) {
  return EndsWith(path, ".pt") || EndsWith(path, ".pth") || EndsWith(path, ".bin") ||
         EndsWith(path, ".ckpt");
}

// The vocabulary the file carries: --tokenizer, the config's "tokenizer"
// (relative to the config's folder) or the GGUF file's (`gguf_name`, when
// the source is one), at most one of them; checked against the model.
Status AddVocabulary(const ConvertOptions& o, const std::string& gguf_name,
                     ModelDescription* desc, std::vector<std::string>* warnings) {
  std::string path = o.tokenizer_path;
  if (!desc->tokenizer_file.empty()) {
    if (!path.empty()) {
      return Status(StatusCode::kInvalidArgument,
                    "both --tokenizer and the config's \"tokenizer\" name a vocabulary: give one");
    }
    path = desc->tokenizer_file;
    const std::size_t slash = o.config_path.find_last_of('/');
    if (path[0] != '/' && slash != std::string::npos) {
      path = o.config_path.substr(0, slash + 1) + path;
    }
  }
  if (!path.empty() && desc->vocabulary) {
    return Status(StatusCode::kInvalidArgument,
                  "--tokenizer: " + gguf_name + " carries a vocabulary of its own");
  }
  if (!path.empty()) {
    auto vocab = ReadVocabularyFile(path, warnings);
    if (!vocab.ok()) return vocab.status();
    desc->vocabulary = std::move(vocab).value();
  }
  if (!desc->vocabulary) return Status::Ok();
  const std::string source = path.empty() ? gguf_name + "'s vocabulary" : BaseName(path);
  if (desc->input.kind != InputKind::kTokens) {
    return Status(StatusCode::kInvalidArgument,
                  source +
                      ": the model takes feature frames, not tokens, so it has no use for a "
                      "vocabulary");
  }
  if (desc->vocabulary->tokens.size() > desc->input.vocab_size) {
    return Status(StatusCode::kInvalidArgument,
                  source + " has " + std::to_string(desc->vocabulary->tokens.size()) +
                      " tokens (ids 0 to " + std::to_string(desc->vocabulary->tokens.size() - 1) +
                      "), more than the model's vocab_size (" +
                      std::to_string(desc->input.vocab_size) + ")");
  }
  return Status::Ok();
}

Status ConvertImpl(const ConvertOptions& o, ConvertReport* report) {
  if (!ValidInt4Group(o.group)) {
    return Status(StatusCode::kInvalidArgument,
                  "--group " + std::to_string(o.group) + " is not supported: use 32, 64, 128 or 256");
  }
  if (o.group != kInt4Groups[0] && o.dtype != WeightType::kI4) {
    return Status(StatusCode::kInvalidArgument,
                  std::string("--group applies to --dtype int4 only (") +
                      (o.dtype ? std::string("got --dtype ") + WeightTypeName(*o.dtype)
                               : std::string("no --dtype given")) +
                      ")");
  }
  RECUR_RETURN_IF_ERROR(
      CheckOutputIsNotAnInput(o.output_path, {o.weights_path, o.config_path, o.tokenizer_path}));
  Result<ImportedConfig> config = Status(StatusCode::kInternal, "no config read");
  if (!o.config_path.empty()) {
    config = ReadConfigFile(o.config_path, o.layout);
    if (!config.ok()) return config.status();
  }

  // Mapped, not read: the tensors are read in place, one at a time.
  auto bytes = MapFile(o.weights_path);
  if (!bytes.ok()) return bytes.status();
  const std::string hash = Sha256Hex(bytes->data(), bytes->size());
  // A GGUF file (by its magic) carries its configuration; a zip archive (or a
  // file named as a checkpoint) is read as torch.save wrote it; anything else
  // as safetensors.
  TensorViewMap views;
  SafetensorsFile safetensors;
  PtFile checkpoint;
  GgufFile gguf;
  const bool is_gguf = LooksLikeGguf(bytes->data(), bytes->size());
  if (is_gguf) {
    const std::string name = BaseName(o.weights_path);
    if (!o.config_path.empty()) {
      return Status(StatusCode::kInvalidArgument,
                    name + " is a GGUF file, which carries its configuration in its metadata: "
                           "convert it without --config");
    }
    if (o.layout != Layout::kAuto && o.layout != Layout::kGguf) {
      return Status(StatusCode::kInvalidArgument,
                    name + " is a GGUF file, of layout gguf (got --layout " +
                        LayoutName(o.layout) + ")");
    }
    if (!o.state_dict_key.empty()) {
      return Status(StatusCode::kInvalidArgument,
                    "--state-dict-key applies to PyTorch checkpoints only, and " + o.weights_path +
                        " is a GGUF file");
    }
    auto parsed = ParseGguf(std::move(bytes).value(), o.weights_path);
    if (!parsed.ok()) return parsed.status();
    gguf = std::move(parsed).value();
    auto gguf_views = GgufTensorViews(gguf, name);
    if (!gguf_views.ok()) return gguf_views.status();
    views = std::move(gguf_views).value();
    config = ConfigFromGguf(gguf, name);
    if (!config.ok()) return config.status();
  } else if (LooksLikeZip(bytes->data(), bytes->size()) || IsCheckpointName(o.weights_path)) {
    auto pt = ParsePt(std::move(bytes).value(), o.weights_path, o.state_dict_key);
    if (!pt.ok()) return pt.status();
    checkpoint = std::move(pt).value();
    views = checkpoint.tensors();
  } else {
    if (!o.state_dict_key.empty()) {
      return Status(StatusCode::kInvalidArgument,
                    "--state-dict-key applies to PyTorch checkpoints only, and " + o.weights_path +
                        " is not one");
    }
    auto st = ParseSafetensors(std::move(bytes).value(), o.weights_path);
    if (!st.ok()) return st.status();
    safetensors = std::move(st).value();
    views = safetensors.tensors();
  }

  if (o.config_path.empty() && !is_gguf) {
    config = ConfigFromTensors(views, o.layout, BaseName(o.weights_path));
    if (!config.ok()) return config.status();
  }
  ModelDescription desc = config->desc;
  report->warnings.insert(report->warnings.end(), config->warnings.begin(), config->warnings.end());
  RECUR_RETURN_IF_ERROR(
      AddVocabulary(o, is_gguf ? BaseName(o.weights_path) : "", &desc, &report->warnings));
  ImportOptions io;
  io.allow_extra = o.allow_extra;
  // Each tensor is imported (checked, made float32) as the writer comes to it.
  TensorImport tensors(desc, config->layout, views, io, &report->warnings);

  desc.metadata.producer = DefaultProducer();
  desc.metadata.source_hash = hash;
  if (!o.notes.empty()) {
    desc.metadata.notes = desc.metadata.notes.empty() ? o.notes : desc.metadata.notes + "\n" + o.notes;
  }
  BuildOptions bo;
  bo.self_check = true;
  bo.weight_dtype = o.dtype.value_or(WeightType::kF32);
  bo.quantize_head = o.quantize_head;
  bo.group = o.group;
  bo.keep_source_types = is_gguf && !o.dtype;
  auto file_bytes = WriteModelFile(o.output_path, desc, &tensors, bo);
  if (!file_bytes.ok()) return file_bytes.status();
  report->layout = config->layout;
  report->tensors = tensors.count();
  report->narrow_tensors = 0;
  report->narrow_types.clear();
  for (std::size_t i = 0; i < tensors.count(); ++i) {
    const WeightType stored = StorageOf(tensors, i, bo).dtype;
    // A tied head stored as the embedding is: the writer stores the two once.
    const std::size_t first = tensors.same_as(i);
    if (first < i && StorageOf(tensors, first, bo).dtype == stored) {
      --report->tensors;
      continue;
    }
    if (stored != WeightType::kF32) {
      ++report->narrow_tensors;
      ++report->narrow_types[stored];
    }
  }
  report->file_bytes = static_cast<std::size_t>(*file_bytes);
  report->source_hash = hash;
  return Status::Ok();
}

}  // namespace

Status ConvertFiles(const ConvertOptions& options, ConvertReport* report) {
  ConvertReport local;
  if (!report) report = &local;
  try {
    return ConvertImpl(options, report);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("convert: ") + e.what());
  }
}

std::string NarrowWeightsText(const ConvertReport& report) {
  const std::string count = std::to_string(report.narrow_tensors) + " weight matrices ";
  if (report.narrow_types.size() == 1) {
    return count + WeightTypeName(report.narrow_types.begin()->first);
  }
  std::string types;
  for (const auto& [type, n] : report.narrow_types) {
    types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + WeightTypeName(type);
  }
  return types.empty() ? "" : count + "(" + types + ")";
}

bool IsGgufFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  uint8_t magic[4] = {};
  const size_t n = std::fread(magic, 1, sizeof(magic), f);
  std::fclose(f);
  return LooksLikeGguf(magic, n);
}

Status ConvertThroughTemporary(const std::string& path,
                               const std::function<Status(const std::string& recur_path)>& load,
                               ConvertReport* report, double* seconds) {
  *seconds = 0;
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  if (ec) {
    return Status(StatusCode::kIoError, "cannot convert " + path +
                                            ": no temporary folder to convert it in (TMPDIR, "
                                            "else /tmp): " +
                                            ec.message());
  }
  std::string folder = (tmp / "recur-gguf-XXXXXX").string();
  if (!mkdtemp(folder.data())) {
    return Status(StatusCode::kIoError, "cannot convert " + path + ": cannot create a folder in " +
                                            tmp.string() + ": " + std::strerror(errno));
  }
  ConvertOptions options;
  options.weights_path = path;
  options.output_path = folder + "/model.recur";
  const auto start = std::chrono::steady_clock::now();
  Status status = ConvertFiles(options, report);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (status.ok()) status = load(options.output_path);
  std::filesystem::remove_all(folder, ec);
  return status;
}

}  // namespace recur::impl::converter
