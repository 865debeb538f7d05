#include "converter/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "converter/mixers/mixer_converter.h"
#include "kernels/dense/dense_ref.h"

namespace recur::impl::converter {
namespace {

uint32_t Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

// "index 17 ([1,1])" for element i of `shape`.
std::string Where(std::size_t i, const std::vector<int64_t>& shape) {
  std::string s = "index " + std::to_string(i);
  if (shape.size() > 1) {
    std::vector<int64_t> idx(shape.size());
    std::size_t rest = i;
    for (std::size_t k = shape.size(); k-- > 0;) {
      const auto d = static_cast<std::size_t>(std::max<int64_t>(shape[k], 1));
      idx[k] = static_cast<int64_t>(rest % d);
      rest /= d;
    }
    s += " (" + ShapeString(idx) + ")";
  }
  return s;
}

// The ggml type whose blocks K-quant `dtype` holds: "Q4_K", "Q6_K", "Q5_K".
const char* GgmlName(WeightType dtype) {
  switch (dtype) {
    case WeightType::kQ4_K: return "Q4_K";
    case WeightType::kQ6_K: return "Q6_K";
    case WeightType::kQ5_K: return "Q5_K";
    default: return "?";
  }
}

std::string Shortest(float v) {
  char buf[32];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace

const char* WeightTypeEncoding(WeightType dtype) {
  switch (dtype) {
    case WeightType::kF32:
      return "as trained, the default";
    case WeightType::kF16:
      return "IEEE half, round to nearest even";
    case WeightType::kBF16:
      return "bfloat16, round to nearest even";
    case WeightType::kI8:
      return "symmetric, one scale per output row: max|row|/127";
    case WeightType::kI4:
      return "symmetric, two per byte, one f16 scale per --group inputs of a row: the smallest "
             "half >= max|group|/7; the input dimension must be a multiple of the group";
    case WeightType::kQ8_0:
      return "GGUF's Q8_0: one byte per weight, one f16 scale per 32 inputs of a row: "
             "max|group|/127, the bytes round(w*127/max) as llama.cpp makes them; the input "
             "dimension must be a multiple of 32";
    case WeightType::kQ4_K:
      return "ggml's Q4_K blocks of 256 inputs, taken over from a GGUF file's Q4_K matrices "
             "(recur-convert does not quantise to it)";
    case WeightType::kQ6_K:
      return "ggml's Q6_K blocks of 256 inputs, taken over from a GGUF file's Q6_K matrices "
             "(recur-convert does not quantise to it)";
    case WeightType::kQ5_K:
      return "ggml's Q5_K blocks of 256 inputs, taken over from a GGUF file's Q5_K matrices "
             "(recur-convert does not quantise to it)";
  }
  return "";
}

bool ValidInt4Group(int group) {
  for (int g : kInt4Groups) {
    if (g == group) return true;
  }
  return false;
}

bool F32ToBf16(float v, uint16_t* out) {
  const uint32_t u = Bits(v);
  if (std::isnan(v)) {
    *out = static_cast<uint16_t>((u >> 16) | 0x0040);  // quiet, sign and top payload kept
    return true;
  }
  // Round to nearest even on the 16 bits dropped. A carry out of the
  // mantissa bumps the exponent, which is the correct result (up to Inf).
  const uint32_t lsb = (u >> 16) & 1;
  const uint16_t h = static_cast<uint16_t>((u + 0x7FFF + lsb) >> 16);
  *out = h;
  return std::isinf(v) || (h & 0x7F80) != 0x7F80;
}

bool F32ToF16(float v, uint16_t* out) {
  const uint32_t u = Bits(v);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7FFFFFFF;
  if (a > 0x7F800000) {  // NaN: quiet, top payload bits kept
    *out = static_cast<uint16_t>(sign | 0x7E00 | ((a >> 13) & 0x3FF));
    return true;
  }
  if (a == 0x7F800000) {  // ±Inf
    *out = static_cast<uint16_t>(sign | 0x7C00);
    return true;
  }
  if (a >= 0x477FF000) {  // ≥ 65520: rounds past 65504, the largest half
    *out = static_cast<uint16_t>(sign | 0x7C00);
    return false;
  }
  if (a < 0x38800000) {  // below 2^-14: a subnormal half (or 0, or 2^-14 after rounding)
    // |v|·2^24 is exact; rint rounds half to even (the default rounding mode).
    const float m = std::rint(FromBits(a) * 16777216.0f);
    *out = static_cast<uint16_t>(sign | static_cast<uint16_t>(m));
    return true;
  }
  // Normal: rebias the exponent (127 → 15), round the 13 dropped bits to
  // nearest even; a mantissa carry bumps the exponent correctly.
  const uint32_t m = a - 0x38000000;
  const uint32_t lsb = (m >> 13) & 1;
  *out = static_cast<uint16_t>(sign | ((m + 0xFFF + lsb) >> 13));
  return true;
}

float Bf16ToF32(uint16_t bits) { return FromBits(static_cast<uint32_t>(bits) << 16); }

float F16ToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1F;
  const uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0) {  // ±0 or subnormal: mantissa·2^-24 (exact in f32)
    const float m = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return FromBits(sign | Bits(m));
  }
  if (exponent == 31) return FromBits(sign | 0x7F800000 | (mantissa << 13));  // Inf, NaN
  return FromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

namespace {

// The smallest f16 ≥ v (v ≥ 0 and finite); false beyond the f16 range.
bool F16AtLeast(float v, uint16_t* out) {
  uint16_t h = 0;
  if (!F32ToF16(v, &h)) return false;
  if (F16ToF32(h) < v) ++h;  // positive halves order as their bits
  *out = h;
  return (h & 0x7C00) != 0x7C00;
}

// int4 (recur.fbs: I4 layout): each row is cut into groups of `group`
// inputs (32, 64, 128 or 256; the input dimension must be a multiple); a
// group's scale is the smallest f16 ≥ max|group| / 7 (a group of zeros gets
// 1; a scale above the f16 range is an error) and q = round-half-even(w /
// scale), which lies in [-7, 7]: |w − scale·q| ≤ scale / 2 for every weight.
Result<StoredTensor> EncodeInt4(const std::string& name, const Tensor& t, int group) {
  const std::vector<float>& w = t.data;
  if (!ValidInt4Group(group)) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": int4 group size " + std::to_string(group) +
                      " is not supported; use 32, 64, 128 or 256");
  }
  if (t.shape.size() != 2) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": int4 needs a 2-D [out, in] weight, got shape " + ShapeString(t.shape));
  }
  const auto rows = static_cast<std::size_t>(t.shape[0]);
  const auto cols = static_cast<std::size_t>(t.shape[1]);
  if (cols % static_cast<std::size_t>(group) != 0) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": int4 groups of " + std::to_string(group) +
                      " need the input dimension to be a multiple of " + std::to_string(group) +
                      ", got shape " + ShapeString(t.shape) +
                      "; use a --group that divides it or another --dtype");
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i])) {
      return Status(StatusCode::kInvalidArgument, name + ": cannot quantize " +
                                                      (std::isnan(w[i]) ? "NaN" : "Inf") +
                                                      " at " + Where(i, t.shape));
    }
  }
  const std::size_t g = static_cast<std::size_t>(group), groups = cols / g;
  StoredTensor out;
  out.dtype = WeightType::kI4;
  out.group = group;
  out.bytes.assign(rows * cols / 2, 0);
  out.scales_f16.resize(rows * groups);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t k = 0; k < groups; ++k) {
      const float* src = w.data() + r * cols + k * g;
      float max_abs = 0.0f;
      for (std::size_t c = 0; c < g; ++c) max_abs = std::max(max_abs, std::fabs(src[c]));
      uint16_t h = 0x3C00;  // 1.0 for a group of zeros
      if (max_abs > 0.0f && !F16AtLeast(max_abs / 7.0f, &h)) {
        return Status(StatusCode::kInvalidArgument,
                      name + ": row " + std::to_string(r) + " group " + std::to_string(k) +
                          " has max |w| " + Shortest(max_abs) +
                          ", whose int4 scale (max/7) is beyond the f16 range (max 65504); "
                          "convert with --dtype int8 or f32");
      }
      out.scales_f16[r * groups + k] = h;
      const double scale = F16ToF32(h);
      uint8_t* row = out.bytes.data() + r * cols / 2;
      for (std::size_t c = 0; c < g; ++c) {
        // |w| ≤ 7·scale, so the rounded value needs no clamp.
        const int q = static_cast<int>(std::rint(static_cast<double>(src[c]) / scale));
        const std::size_t i = k * g + c;  // input index in the row
        const std::size_t byte = (i / 32) * 16 + i % 16;
        const uint8_t nibble = static_cast<uint8_t>(q + 8);
        row[byte] |= static_cast<uint8_t>(i % 32 < 16 ? nibble : nibble << 4);
      }
    }
  }
  return out;
}

// The inputs per scale of q8_0, GGUF's Q8_0 block.
constexpr std::size_t kQ8_0Group = kernels::Traits(WeightType::kQ8_0).block;

// q8_0 (recur.fbs: Q8_0 layout), as ggml's quantize_row_q8_0_ref (llama.cpp,
// ggml/src/ggml-quants.c) makes GGUF's Q8_0, group by group of 32 inputs of
// a row, all in f32: d = max|group| / 127, id = d ? 1/d : 0, q =
// roundf(w·id) (half away from zero), and the scale stored is f16(d) (round
// to nearest even). q comes from d, not from the stored f16(d), so |w −
// f16(d)·q| ≤ d/2 + 127·|d − f16(d)| (≤ 0.57·d for a normal f16), and a d
// below the f16 range stores 0 (where 1/d overflows, max|group| <
// 127·2^-128, the bytes are 0 too: nothing beside a scale of 0). A scale
// beyond the f16 range (max|group| > 127·65504) is an error.
Result<StoredTensor> EncodeQ8_0(const std::string& name, const Tensor& t) {
  const std::vector<float>& w = t.data;
  if (t.shape.size() != 2) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": q8_0 needs a 2-D [out, in] weight, got shape " + ShapeString(t.shape));
  }
  const auto rows = static_cast<std::size_t>(t.shape[0]);
  const auto cols = static_cast<std::size_t>(t.shape[1]);
  if (cols % kQ8_0Group != 0) {
    return Status(StatusCode::kInvalidArgument,
                  name +
                      ": q8_0 groups of 32 need the input dimension to be a multiple of 32, "
                      "got shape " +
                      ShapeString(t.shape) + "; use another --dtype");
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i])) {
      return Status(StatusCode::kInvalidArgument, name + ": cannot quantize " +
                                                      (std::isnan(w[i]) ? "NaN" : "Inf") + " at " +
                                                      Where(i, t.shape));
    }
  }
  const std::size_t groups = cols / kQ8_0Group;
  StoredTensor out;
  out.dtype = WeightType::kQ8_0;
  out.group = static_cast<int>(kQ8_0Group);
  out.bytes.resize(rows * cols);
  out.scales_f16.resize(rows * groups);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t k = 0; k < groups; ++k) {
      const std::size_t at = r * cols + k * kQ8_0Group;
      float amax = 0.0f;
      for (std::size_t c = 0; c < kQ8_0Group; ++c) amax = std::max(amax, std::fabs(w[at + c]));
      const float d = amax / 127.0f;
      float id = d != 0.0f ? 1.0f / d : 0.0f;
      if (!std::isfinite(id)) id = 0.0f;
      if (!F32ToF16(d, &out.scales_f16[r * groups + k])) {
        return Status(StatusCode::kInvalidArgument,
                      name + ": row " + std::to_string(r) + " group " + std::to_string(k) +
                          " has max |w| " + Shortest(amax) +
                          ", whose q8_0 scale (max/127) is beyond the f16 range (max 65504); "
                          "convert with --dtype int8 or f32");
      }
      for (std::size_t c = 0; c < kQ8_0Group; ++c) {
        // |w·id| ≤ 127 up to three f32 roundings: an int8 without a clamp.
        const float q = std::round(w[at + c] * id);
        out.bytes[at + c] = static_cast<uint8_t>(static_cast<int8_t>(q));
      }
    }
  }
  return out;
}

}  // namespace

Result<StoredTensor> EncodeTensor(const std::string& name, const Tensor& t, WeightType dtype,
                                  int group) {
  StoredTensor out;
  out.dtype = dtype;
  const std::vector<float>& w = t.data;
  switch (dtype) {
    case WeightType::kF32:
      out.bytes.resize(w.size() * sizeof(float));
      if (!w.empty()) std::memcpy(out.bytes.data(), w.data(), out.bytes.size());
      return out;
    case WeightType::kF16:
    case WeightType::kBF16: {
      out.bytes.resize(w.size() * 2);
      const bool half = dtype == WeightType::kF16;
      for (std::size_t i = 0; i < w.size(); ++i) {
        uint16_t h = 0;
        if (!(half ? F32ToF16(w[i], &h) : F32ToBf16(w[i], &h))) {
          return Status(StatusCode::kInvalidArgument,
                        name + ": value " + Shortest(w[i]) + " at " + Where(i, t.shape) +
                            " is beyond the " + WeightTypeName(dtype) + " range (max " +
                            (half ? "65504" : "3.3895314e+38") + "); convert with --dtype " +
                            (half ? "bf16 or f32" : "f32"));
        }
        std::memcpy(out.bytes.data() + 2 * i, &h, 2);
      }
      return out;
    }
    case WeightType::kI4:
      return EncodeInt4(name, t, group);
    case WeightType::kQ8_0:
      return EncodeQ8_0(name, t);
    case WeightType::kQ4_K:
    case WeightType::kQ6_K:
    case WeightType::kQ5_K:
      return Status(StatusCode::kUnsupported,
                    name + ": recur-convert does not quantise to " + WeightTypeName(dtype) +
                        "; it takes a GGUF file's " + GgmlName(dtype) +
                        " matrices over as they are (convert that file without --dtype), "
                        "and this tensor is not one: use another --dtype");
    case WeightType::kI8: {
      // scale = max|row| / 127 (computed in f32; a row of zeros gets 1, a
      // row so small that the scale would be below FLT_MIN gets FLT_MIN) and
      // q = round-half-even(w / scale) clamped to [-127, 127], so that
      // |w − scale·q| ≤ scale / 2.
      if (t.shape.size() != 2) {
        return Status(StatusCode::kInvalidArgument,
                      name + ": int8 needs a 2-D [out, in] weight, got shape " +
                          ShapeString(t.shape));
      }
      for (std::size_t i = 0; i < w.size(); ++i) {
        if (!std::isfinite(w[i])) {
          return Status(StatusCode::kInvalidArgument, name + ": cannot quantize " +
                                                          (std::isnan(w[i]) ? "NaN" : "Inf") +
                                                          " at " + Where(i, t.shape));
        }
      }
      const auto rows = static_cast<std::size_t>(t.shape[0]);
      const auto cols = static_cast<std::size_t>(t.shape[1]);
      out.bytes.resize(rows * cols);
      out.scales.resize(rows);
      for (std::size_t r = 0; r < rows; ++r) {
        const float* row = w.data() + r * cols;
        float max_abs = 0.0f;
        for (std::size_t c = 0; c < cols; ++c) max_abs = std::max(max_abs, std::fabs(row[c]));
        float scale = max_abs / 127.0f;
        if (max_abs == 0.0f) scale = 1.0f;
        else if (scale < FLT_MIN) scale = FLT_MIN;
        out.scales[r] = scale;
        for (std::size_t c = 0; c < cols; ++c) {
          // Half to even: rint in the default rounding mode.
          const double q = std::rint(static_cast<double>(row[c]) / scale);
          out.bytes[r * cols + c] =
              static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.0, 127.0)));
        }
      }
      return out;
    }
  }
  return Status(StatusCode::kInternal, name + ": unknown dtype");
}

namespace {

// A [rows, cols] matrix of ggml blocks of 32 inputs, each an f16 d then
// `payload` bytes (`ggml_name`: "Q4_0", "Q8_0"), as `dtype` in groups of 32:
// the d the group's scale, the payload the group's bytes, both unchanged.
Result<StoredTensor> GroupsFromGgmlBlocks(const std::string& name, const char* ggml_name,
                                          WeightType dtype, std::size_t payload,
                                          const uint8_t* blocks, std::size_t nbytes,
                                          const std::vector<int64_t>& shape) {
  constexpr std::size_t kBlock = 32;
  const std::size_t block_bytes = 2 + payload;
  if (shape.size() != 2 || shape[0] <= 0 || shape[1] <= 0) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": " + ggml_name + " as " + WeightTypeName(dtype) +
                      " needs a 2-D [out, in] weight, got shape " + ShapeString(shape));
  }
  const auto rows = static_cast<std::size_t>(shape[0]), cols = static_cast<std::size_t>(shape[1]);
  if (cols % kBlock != 0 || nbytes / block_bytes / rows != cols / kBlock ||
      nbytes != rows * (cols / kBlock) * block_bytes) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": " + std::to_string(nbytes) + " bytes of " + ggml_name +
                      " blocks do not hold shape " + ShapeString(shape) + " (" +
                      std::to_string(block_bytes) + " bytes per 32 inputs of a row)");
  }
  const std::size_t groups = rows * (cols / kBlock);
  StoredTensor out;
  out.dtype = dtype;
  out.group = static_cast<int>(kBlock);
  out.bytes.resize(groups * payload);
  out.scales_f16.resize(groups);
  for (std::size_t g = 0; g < groups; ++g) {
    const uint8_t* block = blocks + g * block_bytes;
    uint16_t d;
    std::memcpy(&d, block, 2);
    if ((d & 0x7C00) == 0x7C00) {
      return Status(StatusCode::kInvalidArgument,
                    name + ": " + ggml_name + " block " + std::to_string(g % (cols / kBlock)) +
                        " of row " + std::to_string(g / (cols / kBlock)) +
                        " has a scale d that is " + ((d & 0x3FF) ? "NaN" : "infinite"));
    }
    out.scales_f16[g] = d;
    std::memcpy(out.bytes.data() + g * payload, block + 2, payload);
  }
  return out;
}

}  // namespace

Result<StoredTensor> Int4FromQ4_0(const std::string& name, const uint8_t* blocks,
                                  std::size_t nbytes, const std::vector<int64_t>& shape) {
  return GroupsFromGgmlBlocks(name, "Q4_0", WeightType::kI4, 16, blocks, nbytes, shape);
}

Result<StoredTensor> Q8_0FromGguf(const std::string& name, const uint8_t* blocks,
                                  std::size_t nbytes, const std::vector<int64_t>& shape) {
  return GroupsFromGgmlBlocks(name, "Q8_0", WeightType::kQ8_0, 32, blocks, nbytes, shape);
}

Result<StoredTensor> KQuantFromGguf(const std::string& name, WeightType dtype,
                                    const uint8_t* blocks, std::size_t nbytes,
                                    const std::vector<int64_t>& shape) {
  const char* gguf_type = GgmlName(dtype);
  if (!kernels::IsKQuant(dtype)) {
    return Status(StatusCode::kInternal, name + ": " + WeightTypeName(dtype) + " is no K-quant");
  }
  const std::size_t block = kernels::Traits(dtype).block;
  const std::size_t block_bytes = kernels::Traits(dtype).block_bytes;
  if (shape.size() != 2 || shape[0] <= 0 || shape[1] <= 0) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": " + gguf_type + " as " + WeightTypeName(dtype) +
                      " needs a 2-D [out, in] weight, got shape " + ShapeString(shape));
  }
  const auto rows = static_cast<std::size_t>(shape[0]), cols = static_cast<std::size_t>(shape[1]);
  if (cols % block != 0) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": " + gguf_type + " rows of " + std::to_string(cols) +
                      " inputs are not whole blocks of " + std::to_string(block) + ", shape " +
                      ShapeString(shape));
  }
  const std::size_t per_row = cols / block;
  if (nbytes / block_bytes / rows != per_row || nbytes != rows * per_row * block_bytes) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": " + std::to_string(nbytes) + " bytes of " + gguf_type +
                      " blocks do not hold shape " + ShapeString(shape) + " (" +
                      std::to_string(block_bytes) + " bytes per " + std::to_string(block) +
                      " inputs of a row)");
  }
  // The halves of a block: Q4_K's and Q5_K's d and dmin (bytes 0 and 2),
  // Q6_K's d (byte 208).
  std::vector<std::pair<std::size_t, const char*>> halves;
  if (dtype == WeightType::kQ6_K) {
    halves = {{kernels::ref::kQ6KD, "d"}};
  } else {
    halves = {{0, "d"}, {2, "dmin"}};
  }
  for (std::size_t g = 0; g < rows * per_row; ++g) {
    for (const auto& [at, what] : halves) {
      uint16_t h;
      std::memcpy(&h, blocks + g * block_bytes + at, 2);
      if ((h & 0x7C00) == 0x7C00) {
        return Status(StatusCode::kInvalidArgument,
                      name + ": " + gguf_type + " block " + std::to_string(g % per_row) +
                          " of row " + std::to_string(g / per_row) + " has a scale " + what +
                          " that is " + ((h & 0x3FF) ? "NaN" : "infinite"));
      }
    }
  }
  StoredTensor out;
  out.dtype = dtype;
  out.bytes.assign(blocks, blocks + nbytes);
  return out;
}

EncodedSize EncodedSizeOf(const std::vector<int64_t>& shape, uint64_t elements, WeightType dtype,
                          int group) {
  // Types with scales encode a [rows, cols] matrix (and refuse anything else).
  const bool matrix = shape.size() == 2;
  const uint64_t rows = matrix ? static_cast<uint64_t>(shape[0]) : 0;
  const uint64_t cols = matrix ? static_cast<uint64_t>(shape[1]) : 0;
  switch (dtype) {
    case WeightType::kF32:
      return {elements * sizeof(float), 0};
    case WeightType::kF16:
    case WeightType::kBF16:
      return {elements * 2, 0};
    case WeightType::kI8:
      return {rows * cols, rows};
    case WeightType::kI4: {
      const bool grouped = ValidInt4Group(group) && cols % static_cast<uint64_t>(group) == 0;
      return {rows * cols / 2, grouped ? rows * (cols / static_cast<uint64_t>(group)) : 0,
              grouped ? static_cast<uint32_t>(group) : 0};
    }
    case WeightType::kQ8_0: {
      const bool grouped = cols % kQ8_0Group == 0;
      return {rows * cols, grouped ? rows * (cols / kQ8_0Group) : 0,
              grouped ? static_cast<uint32_t>(kQ8_0Group) : 0};
    }
    case WeightType::kQ4_K:
    case WeightType::kQ6_K:
    case WeightType::kQ5_K:
      return {rows * kernels::WeightRowBytes(dtype, cols), 0};
  }
  return {};
}

namespace {

// What follows "blocks.<i>" in `name` (".mixer.key.weight"), or "" for a
// name outside the blocks.
std::string InBlock(const std::string& name) {
  static const char kPrefix[] = "blocks.";
  if (name.compare(0, sizeof(kPrefix) - 1, kPrefix) != 0) return "";
  std::size_t i = sizeof(kPrefix) - 1;
  const std::size_t digits = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  return i == digits ? "" : name.substr(i);
}

bool IsMixerWeightOf(const std::string& rest, const std::vector<std::string>& weights) {
  for (const std::string& weight : weights) {
    if (rest == ".mixer." + weight + ".weight") return true;
  }
  return false;
}

}  // namespace

WeightType StorageDType(const std::string& name, WeightType dtype, bool quantize_head) {
  if (name == "head.weight") return quantize_head ? dtype : WeightType::kF32;
  // blocks.<i>.ffn.linear{1,2}.weight and the mixers' dense weights
  // (MixerConverter::QuantizableWeights, e.g. blocks.<i>.mixer.query.weight):
  // the matrices every step streams. Position tables (biases, E/F, u/v)
  // stay f32: they are read a row at a time.
  const std::string rest = InBlock(name);
  if (rest == ".ffn.linear1.weight" || rest == ".ffn.linear2.weight") return dtype;
  return IsMixerWeightOf(rest, AllQuantizableMixerWeights()) ? dtype : WeightType::kF32;
}

bool KeepsSourceType(const std::string& name) {
  // The embedding too: the runtime decodes a token's row on lookup, so a
  // GGUF's table stays as narrow as llama.cpp keeps it (and one tensor with
  // a head tied to it).
  return name == "input.embedding" || StorageDType(name, WeightType::kI8, true) == WeightType::kI8 ||
         IsMixerWeightOf(InBlock(name), AllSourceTypedMixerWeights());
}

}  // namespace recur::impl::converter
