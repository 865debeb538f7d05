// The .recur writer (runtime/schema/recur.fbs, FILE LAYOUT):
//   [0, 4)        uint32 S, the size of the FlatBuffer
//   [4, 4 + S)    size-prefixed FlatBuffer, identifier "RCUR"
//   [4 + S, P)    zeros, P = round_up(4 + S, 64)
//   [P, P + D)    data segment: each tensor at a 64-aligned offset (zeros between),
//                 D = Model.data_size = the end of the last tensor
// Tensors are stored under their recur-layout names, in the order of
// ExpectedTensors(), float32 unless BuildOptions::weight_dtype says
// otherwise for the blocks' weight matrices (quantize.h). A tensor with the
// values of an earlier one stored alike (TensorFeed::same_as: a head tied to
// the embedding) is not stored again: both references name the first.
//
// Every tensor's place is known from its shape before any is encoded, and the
// FlatBuffer's size does not depend on the values of int8/int4 scales, so the
// writer takes the tensors one at a time (a TensorFeed, tensor_feed.h) and
// writes each where it goes as soon as it is encoded: in memory (BuildModel)
// or straight into the output file (WriteModelFile), holding one tensor's
// float32 values and encoding at a time.
#ifndef RECUR_CONVERTER_WRITER_H_
#define RECUR_CONVERTER_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "converter/model_description.h"
#include "converter/quantize.h"
#include "converter/tensor_feed.h"
#include "core/result.h"
#include "core/status.h"

namespace recur::impl::converter {

// "0.1.0", the runtime version this converter is built with.
const char* ConverterVersion();
// "recur-convert 0.1.0"
std::string DefaultProducer();

struct BuildOptions {
  // Check the tensors against the description first (missing, extra,
  // shape, NaN/Inf). Off: tensors present under an expected name are stored
  // whatever their shape and values, missing ones become -1 references, and
  // the rest is ignored; for building deliberately broken models in tests
  // (with self_check off too).
  bool validate = true;
  bool allow_extra = false;  // with validate: unused tensors are ignored
  // Load the bytes with recur_model_load_buffer before returning them: the
  // runtime has the last word on whether a model is valid.
  bool self_check = true;
  // Storage of the blocks' weight matrices (mixer query/key/value/out, ffn
  // linear1/linear2) and, with quantize_head, of head.weight; every other
  // tensor is f32 (see quantize.h).
  WeightType weight_dtype = WeightType::kF32;
  bool quantize_head = false;
  // int4: inputs per scale (kInt4Groups; anything else is an error).
  int group = kInt4Groups[0];
  // Instead of weight_dtype, quantize_head and group: each tensor that may
  // be stored narrow (the blocks' weight matrices, head.weight and
  // input.embedding: KeepsSourceType) keeps the type its source stores it in
  // (TensorFeed::source_storage: f16, bf16, int4 in the source's groups,
  // q8_0 and the K-quants, taken over unchanged), everything else is f32.
  // A GGUF file converted without --dtype.
  bool keep_source_types = false;
  // Per-tensor dtypes (recur-layout names) that override the rule above:
  // for building models the runtime refuses, in tests (with self_check off).
  std::map<std::string, WeightType> dtype_overrides;
};


// How the writer stores tensor i of `feed` under `options` (before
// dtype_overrides): its type and, for int4, its group size.
struct TensorStorage {
  WeightType dtype = WeightType::kF32;
  int group = 0;  // int4
};
TensorStorage StorageOf(const TensorFeed& feed, std::size_t i, const BuildOptions& options);

// The model as .recur bytes in 64-byte aligned memory, ready for
// recur_model_load_buffer or a file. An empty metadata.producer becomes
// DefaultProducer(). `tensors` is keyed by recur-layout names.
Result<AlignedBytes> BuildModel(const ModelDescription& desc, const TensorMap& tensors,
                                const BuildOptions& options = {});

// Writes the model of `desc` with the tensors `tensors` gives (checked by the
// feed, e.g. a TensorImport: `options.validate` and `allow_extra` are not
// used here) to `path` atomically: a temporary file in the same folder,
// written tensor by tensor, loaded by the runtime (mapped) when
// `options.self_check`, synced and renamed over `path`. On failure `path` is
// left as it was. Errors come as BuildModel's would; the file's size on
// success.
Result<uint64_t> WriteModelFile(const std::string& path, const ModelDescription& desc,
                                TensorFeed* tensors, const BuildOptions& options = {});

// Parses `config_json` (either layout; kAuto: as ParseConfig decides),
// imports `tensors` named for that layout and builds the model. The
// shortest path from a config and a few hand-made tensors to model bytes.
Result<AlignedBytes> BuildModelFromConfig(const std::string& config_json, const TensorMap& tensors,
                                          Layout layout = Layout::kAuto,
                                          const BuildOptions& options = {});

// The format_version the writer stamps on `desc`'s file: the oldest that
// reads it as written (runtime/schema/recur.fbs). A runtime ignores fields
// newer than it, so a file that uses one must be refused by those runtimes:
// 3 or 2 when the model uses a field marked "format_version 3" or
// "format_version 2" there (each mixer says so through
// MixerConverter::FormatVersion), else 1 (what every older file is).
uint32_t FormatVersionFor(const ModelDescription& desc);

// Loads model bytes (64-byte aligned) with the runtime; an error carries the
// runtime's message.
Status SelfCheck(const void* data, std::size_t size);
Status SelfCheck(const AlignedBytes& bytes);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_WRITER_H_
