// Reduced-precision storage of dense weights, in the types of the list
// (runtime/kernels/dense/weight_types.inc): each type's encoding is
// described at its encoder in quantize.cc and, for recur-convert --help, by
// WeightTypeEncoding.
//
// Which tensors: `--dtype` applies to the weight matrices of the blocks
// (mixer query/key/value/out, ffn linear1/linear2) and, with
// `--quantize-head`, to head.weight. Embeddings, positions, norms, biases and
// the input projection stay f32 (the runtime reads positions, norms and
// biases in f32 only; the input projection and the head see the raw input and
// produce the output, where precision matters most and their cost is small;
// the token embedding is read a row per token, so narrowing it saves memory
// but no time, and --dtype leaves an f32 source's values as they are). A GGUF
// file converted without --dtype keeps its types (KeepsSourceType), the
// token embedding's included: the runtime takes it in any weight type.
#ifndef RECUR_CONVERTER_QUANTIZE_H_
#define RECUR_CONVERTER_QUANTIZE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "converter/model_description.h"
#include "core/result.h"
#include "core/status.h"
#include "kernels/dense/weight_types.h"

namespace recur::impl::converter {

// The storage types, their names (--dtype) and parsing: the runtime's list
// (runtime/kernels/dense/weight_types.inc).
using kernels::ParseWeightType;
using kernels::WeightType;
using kernels::WeightTypeName;

// f32 → bf16 / f16 bits, rounding to nearest even. NaN stays NaN (quiet,
// sign kept), ±Inf stays ±Inf. Finite values beyond the target's range give
// false (*out is then ±Inf); f16 values below its range round to subnormals
// or ±0.
bool F32ToBf16(float v, uint16_t* out);
bool F32ToF16(float v, uint16_t* out);
// Exact decodes (every f16/bf16 is an f32).
float Bf16ToF32(uint16_t bits);
float F16ToF32(uint16_t bits);

// How `dtype` stores a weight matrix, for recur-convert --help: "round to
// nearest even", ...
const char* WeightTypeEncoding(WeightType dtype);

// int4 group sizes recur-convert writes (--group); the default is the first.
inline constexpr int kInt4Groups[] = {32, 64, 128, 256};
// Whether `group` is one of kInt4Groups.
bool ValidInt4Group(int group);

// A tensor as stored in the model: its bytes (little-endian elements of
// `dtype`; packed types as recur.fbs says) and its scales, of the kind its
// type's line in the list says: per row, one f32 a row (dimension 0); per
// group, f16 bits (rows, in / group); the K-quants' are in their blocks.
struct StoredTensor {
  WeightType dtype = WeightType::kF32;
  std::vector<uint8_t> bytes;
  std::vector<float> scales;         // per-row scales only
  std::vector<uint16_t> scales_f16;  // per-group scales only
  int group = 0;                     // per-group scales only: inputs per scale
};

// Encodes `t` as `dtype` (int4 in groups of `group` inputs; other types
// ignore it). Errors name the tensor: a finite value beyond the range of the
// type or of its scales (with its index, or its row and group), NaN/Inf for
// a type with scales, such a type for a tensor that is not 2-D, an input
// dimension or group size the type does not take; the K-quants, which
// recur-convert takes over from GGUF files only (KQuantFromGguf). (NaN/Inf
// are otherwise stored as they are: the importer rejects them before this,
// unless validation was turned off for tests.)
Result<StoredTensor> EncodeTensor(const std::string& name, const Tensor& t, WeightType dtype,
                                  int group = kInt4Groups[0]);

// A [rows, cols] matrix of ggml Q4_0 blocks (`nbytes` bytes at `blocks`, 18
// per block of 32 inputs of a row: an f16 d, then 16 bytes holding inputs j
// and j + 16 of the block in byte j's low and high nibble q, each weight
// (q − 8)·d) as int4 in groups of 32, unchanged: each block's 16 bytes are
// the group's, its d the group's scale (negative or zero as it is), so that
// every weight is the block's, bit for bit. Errors name the tensor: not 2-D,
// cols not a multiple of 32, a byte size that is not the blocks', a d that is
// NaN or infinite.
Result<StoredTensor> Int4FromQ4_0(const std::string& name, const uint8_t* blocks,
                                  std::size_t nbytes, const std::vector<int64_t>& shape);

// A [rows, cols] matrix of ggml Q8_0 blocks (`nbytes` bytes at `blocks`, 34
// per block of 32 inputs of a row: an f16 d, then 32 int8 q, each weight q·d)
// as q8_0, unchanged: each block's d is the group's scale (of any sign, or
// zero) and its 32 bytes the group's, so that every weight is the block's, bit
// for bit. Errors name the tensor: not 2-D, cols not a multiple of 32, a byte
// size that is not the blocks', a d that is NaN or infinite.
Result<StoredTensor> Q8_0FromGguf(const std::string& name, const uint8_t* blocks,
                                  std::size_t nbytes, const std::vector<int64_t>& shape);

// A [rows, cols] matrix of ggml K-quant blocks (`nbytes` bytes at `blocks`:
// Q4_K for dtype q4_k, Q6_K for q6_k, Q5_K for q5_k; recur.fbs has their
// layouts) as that
// weight type, its bytes unchanged, so that every weight is ggml's
// dequantised value bit for bit. Errors name the tensor: not 2-D, cols not a
// multiple of 256, a byte size that is not the blocks', a block's d (or
// Q4_K's and Q5_K's dmin) that is NaN or infinite.
Result<StoredTensor> KQuantFromGguf(const std::string& name, WeightType dtype,
                                    const uint8_t* blocks, std::size_t nbytes,
                                    const std::vector<int64_t>& shape);

// The size EncodeTensor gives a tensor of `shape` holding `elements` values
// as `dtype` (in groups of `group` inputs), when it encodes it at all: the
// writer places every tensor before it encodes any.
struct EncodedSize {
  uint64_t bytes = 0;
  uint64_t scales = 0;  // per-row: f32 scales (one a row); per-group: f16 scales (one a group)
  uint32_t group = 0;   // per-group: inputs per scale, as the file records it
};
EncodedSize EncodedSizeOf(const std::vector<int64_t>& shape, uint64_t elements, WeightType dtype,
                          int group = kInt4Groups[0]);

// The dtype the converter stores recur-layout tensor `name` in for
// `--dtype dtype [--quantize-head]`: `dtype` for the blocks' weight
// matrices (and head.weight with quantize_head), f32 for everything else.
WeightType StorageDType(const std::string& name, WeightType dtype, bool quantize_head);

// Whether recur-layout tensor `name` keeps the narrow type a source file
// stores it in (a GGUF's): what StorageDType may store narrow, head
// included, the mixers' MixerConverter::SourceTypedWeights and the token
// embedding (input.embedding).
bool KeepsSourceType(const std::string& name);

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_QUANTIZE_H_
