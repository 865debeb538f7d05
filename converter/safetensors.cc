#include "converter/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>
#include <nlohmann/json.hpp>

#include "converter/file_util.h"
#include "converter/json_util.h"
#include "kernels/dense/dense_ref.h"

namespace recur::impl::converter {
namespace {

using nlohmann::json;

struct DTypeInfo {
  DType dtype;
  const char* name;
  std::size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kF64, "F64", 8},       {DType::kF32, "F32", 4},      {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},     {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kI64, "I64", 8},       {DType::kI32, "I32", 4},      {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},         {DType::kU64, "U64", 8},      {DType::kU32, "U32", 4},
    {DType::kU16, "U16", 2},       {DType::kU8, "U8", 1},        {DType::kBool, "BOOL", 1},
};

uint64_t ReadLE64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf or nan
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float BFloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

const char* DTypeName(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.name;
  switch (dtype) {
    case DType::kQ4_0: return "Q4_0";
    case DType::kQ8_0: return "Q8_0";
    case DType::kQ4_K: return "Q4_K";
    case DType::kQ6_K: return "Q6_K";
    case DType::kQ5_K: return "Q5_K";
    default: return "?";
  }
}

std::size_t DTypeSize(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.size;
  return 0;
}

bool ParseDType(const std::string& name, DType* out) {
  for (const auto& d : kDTypes) {
    if (name == d.name) {
      *out = d.dtype;
      return true;
    }
  }
  return false;
}

Result<SafetensorsFile> ParseSafetensors(FileBytes bytes, const std::string& source_name) {
  const std::string& src = source_name;
  if (bytes.size() < 8) {
    return Status(StatusCode::kInvalidArgument,
                  src + ": " + std::to_string(bytes.size()) +
                      " bytes is too short for a safetensors file (no 8-byte header length)");
  }
  const uint64_t header_len = ReadLE64(bytes.data());
  const uint64_t available = bytes.size() - 8;
  if (header_len > available) {
    return Status(StatusCode::kInvalidArgument,
                  src + ": header length " + std::to_string(header_len) + " exceeds the " +
                      std::to_string(available) +
                      " bytes after the 8-byte length (truncated or not a safetensors file)");
  }
  if (header_len < 2) {
    return Status(StatusCode::kInvalidArgument,
                  src + ": header length " + std::to_string(header_len) +
                      " is too short for a JSON object");
  }
  const uint8_t* header_begin = bytes.data() + 8;
  const uint8_t* data_begin = header_begin + header_len;
  const uint64_t data_len = available - header_len;

  json header;
  DuplicateKey duplicate;
  try {
    header = ParseJson(header_begin, data_begin, &duplicate);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, src + ": header is not valid JSON: " + JsonWhat(e));
  }
  if (!header.is_object()) {
    return Status(StatusCode::kInvalidArgument, src + ": header is not a JSON object");
  }
  if (!duplicate.key.empty()) {
    const bool tensor = duplicate.top_level && duplicate.key != "__metadata__";
    return Status(StatusCode::kInvalidArgument,
                  src + (tensor ? ": the header names tensor \"" + duplicate.key + "\" twice"
                                : ": the header repeats the key \"" + duplicate.key +
                                      "\" in one object"));
  }

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  TensorViewMap tensors;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it.value().is_object() && !it.value().is_null()) {
        return Status(StatusCode::kInvalidArgument,
                      src + ": \"__metadata__\" is not a JSON object");
      }
      continue;  // free-form; ignored
    }
    const std::string where = src + ": tensor \"" + name + "\": ";
    const json& entry = it.value();
    if (!entry.is_object())
      return Status(StatusCode::kInvalidArgument, where + "entry is not a JSON object");

    auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string())
      return Status(StatusCode::kInvalidArgument, where + "missing or non-string \"dtype\"");
    TensorView view;
    const std::string dtype_name = dtype_it->get<std::string>();
    if (!ParseDType(dtype_name, &view.dtype))
      return Status(StatusCode::kInvalidArgument, where + "unknown dtype \"" + dtype_name + "\"");

    auto shape_it = entry.find("shape");
    if (shape_it == entry.end() || !shape_it->is_array())
      return Status(StatusCode::kInvalidArgument, where + "missing or non-array \"shape\"");
    uint64_t elements = 1;
    bool overflow = false;
    for (const json& d : *shape_it) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return Status(StatusCode::kInvalidArgument,
                      where + "shape entries must be non-negative integers");
      const uint64_t dim = d.get<uint64_t>();
      view.shape.push_back(static_cast<int64_t>(dim));
      if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / dim) overflow = true;
      elements *= dim;
    }

    auto off_it = entry.find("data_offsets");
    if (off_it == entry.end() || !off_it->is_array() || off_it->size() != 2 ||
        !(*off_it)[0].is_number_integer() || !(*off_it)[1].is_number_integer() ||
        (*off_it)[0].get<int64_t>() < 0 || (*off_it)[1].get<int64_t>() < 0) {
      return Status(StatusCode::kInvalidArgument,
                    where + "\"data_offsets\" must be [begin, end] with non-negative integers");
    }
    const uint64_t begin = (*off_it)[0].get<uint64_t>();
    const uint64_t end = (*off_it)[1].get<uint64_t>();
    if (begin > end) {
      return Status(StatusCode::kInvalidArgument,
                    where + "data_offsets [" + std::to_string(begin) + ", " +
                        std::to_string(end) + "] has begin > end");
    }
    if (end > data_len) {
      return Status(StatusCode::kInvalidArgument,
                    where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                        "] lie outside the " + std::to_string(data_len) + "-byte data section");
    }
    const uint64_t elem_size = DTypeSize(view.dtype);
    if (overflow || (elem_size != 0 && elements > std::numeric_limits<uint64_t>::max() / elem_size) ||
        elements * elem_size != end - begin) {
      return Status(StatusCode::kInvalidArgument,
                    where + "shape " + ShapeString(view.shape) + " of " + dtype_name + " needs " +
                        (overflow ? "too many" : std::to_string(elements * elem_size)) +
                        " bytes, but data_offsets span " + std::to_string(end - begin));
    }
    view.data = data_begin + begin;
    view.nbytes = static_cast<std::size_t>(end - begin);
    auto [pos, inserted] = tensors.emplace(name, std::move(view));
    (void)inserted;  // json objects have unique keys
    spans.push_back({begin, end, &pos->first});
  }

  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Span* prev = nullptr;
  for (const Span& s : spans) {
    if (s.begin == s.end) continue;  // empty tensors occupy nothing
    if (prev && s.begin < prev->end) {
      return Status(StatusCode::kInvalidArgument,
                    src + ": tensors \"" + *prev->name + "\" [" + std::to_string(prev->begin) +
                        ", " + std::to_string(prev->end) + ") and \"" + *s.name + "\" [" +
                        std::to_string(s.begin) + ", " + std::to_string(s.end) + ") overlap");
    }
    prev = &s;
  }

  SafetensorsFile file;
  file.bytes_ = std::move(bytes);  // the bytes stay where they are: views stay valid
  file.tensors_ = std::move(tensors);
  return file;
}

Result<SafetensorsFile> ReadSafetensorsFile(const std::string& path) {
  auto bytes = MapFile(path);
  if (!bytes.ok()) return bytes.status();
  try {
    return ParseSafetensors(std::move(bytes).value(), path);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, path + ": " + e.what());
  }
}

namespace {

// ggml's dequantize_row_q4_0: each block's 32 values (q − 8)·d, d the f16
// scale widened to float32 (every product is exact in float32).
Result<std::vector<float>> DecodeQ4_0(const std::string& name, const TensorView& view) {
  if (view.nbytes % kQ4_0BlockBytes != 0) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": byte size " + std::to_string(view.nbytes) +
                      " is not a whole number of Q4_0 blocks (18 bytes each)");
  }
  const std::size_t blocks = view.nbytes / kQ4_0BlockBytes;
  std::vector<float> out;
  try {
    out.resize(blocks * kQ4_0Block);
  } catch (const std::exception&) {
    return Status(StatusCode::kOutOfMemory, name + ": out of memory");
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    const uint8_t* block = view.data + b * kQ4_0BlockBytes;
    uint16_t bits;
    std::memcpy(&bits, block, 2);
    const float d = HalfToFloat(bits);
    float* y = out.data() + b * kQ4_0Block;
    for (std::size_t j = 0; j < kQ4_0Block / 2; ++j) {
      const int x0 = (block[2 + j] & 0x0F) - 8, x1 = (block[2 + j] >> 4) - 8;
      y[j] = static_cast<float>(x0) * d;
      y[j + kQ4_0Block / 2] = static_cast<float>(x1) * d;
    }
  }
  return out;
}

// ggml's dequantize_row_q8_0: each block's 32 values q·d, d the f16 scale
// widened to float32 (every product is exact in float32).
Result<std::vector<float>> DecodeQ8_0(const std::string& name, const TensorView& view) {
  if (view.nbytes % kQ8_0BlockBytes != 0) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": byte size " + std::to_string(view.nbytes) +
                      " is not a whole number of Q8_0 blocks (34 bytes each)");
  }
  const std::size_t blocks = view.nbytes / kQ8_0BlockBytes;
  std::vector<float> out;
  try {
    out.resize(blocks * kQ8_0Block);
  } catch (const std::exception&) {
    return Status(StatusCode::kOutOfMemory, name + ": out of memory");
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    const uint8_t* block = view.data + b * kQ8_0BlockBytes;
    uint16_t bits;
    std::memcpy(&bits, block, 2);
    const float d = HalfToFloat(bits);
    for (std::size_t j = 0; j < kQ8_0Block; ++j) {
      out[b * kQ8_0Block + j] = static_cast<float>(static_cast<int8_t>(block[2 + j])) * d;
    }
  }
  return out;
}

// A K-quant tensor's values, block by block, as the runtime's scalar spec
// (ggml's dequantize_row_q4_K / _q6_K / _q5_K) gives them.
Result<std::vector<float>> DecodeKQuant(const std::string& name, const TensorView& view,
                                        kernels::WeightType type) {
  const std::size_t block_bytes = kernels::Traits(type).block_bytes;
  if (view.nbytes % block_bytes != 0) {
    return Status(StatusCode::kInvalidArgument,
                  name + ": byte size " + std::to_string(view.nbytes) +
                      " is not a whole number of " + DTypeName(view.dtype) + " blocks (" +
                      std::to_string(block_bytes) + " bytes each)");
  }
  const std::size_t blocks = view.nbytes / block_bytes;
  std::vector<float> out;
  try {
    out.resize(blocks * kernels::kKQuantBlock);
  } catch (const std::exception&) {
    return Status(StatusCode::kOutOfMemory, name + ": out of memory");
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    kernels::ref::DecodeKQuantBlock(type, view.data + b * block_bytes,
                                    out.data() + b * kernels::kKQuantBlock);
  }
  return out;
}

}  // namespace

namespace {
// The K-quants: ggml's block type and the recur type that stores it.
constexpr std::pair<DType, kernels::WeightType> kKQuants[] = {
    {DType::kQ4_K, kernels::WeightType::kQ4_K},
    {DType::kQ6_K, kernels::WeightType::kQ6_K},
    {DType::kQ5_K, kernels::WeightType::kQ5_K},
};
}  // namespace

bool KQuantWeightType(DType dtype, kernels::WeightType* out) {
  for (const auto& [d, type] : kKQuants) {
    if (d == dtype) {
      *out = type;
      return true;
    }
  }
  return false;
}

bool KQuantDType(kernels::WeightType type, DType* out) {
  for (const auto& [d, t] : kKQuants) {
    if (t == type) {
      *out = d;
      return true;
    }
  }
  return false;
}

Result<std::vector<float>> ToFloat32(const std::string& name, const TensorView& view) {
  if (view.dtype == DType::kQ4_0) return DecodeQ4_0(name, view);
  if (view.dtype == DType::kQ8_0) return DecodeQ8_0(name, view);
  if (kernels::WeightType type; KQuantWeightType(view.dtype, &type)) {
    return DecodeKQuant(name, view, type);
  }
  const std::size_t esize = DTypeSize(view.dtype);
  if (esize == 0 || view.nbytes % esize != 0)
    return Status(StatusCode::kInvalidArgument,
                  name + ": byte size " + std::to_string(view.nbytes) + " does not fit dtype " +
                      DTypeName(view.dtype));
  const std::size_t n = view.nbytes / esize;
  std::vector<float> out;
  try {
    out.resize(n);
  } catch (const std::exception&) {
    return Status(StatusCode::kOutOfMemory, name + ": out of memory");
  }
  const uint8_t* p = view.data;
  switch (view.dtype) {
    case DType::kF32:
      if (n) std::memcpy(out.data(), p, n * 4);
      break;
    case DType::kF64:
      for (std::size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = static_cast<float>(d);
        if (std::isinf(out[i]) && std::isfinite(d)) {
          // Not the NaN/Inf check's "+Inf": the source value is finite.
          char value[32];
          std::snprintf(value, sizeof(value), "%.17g", d);
          return Status(StatusCode::kInvalidArgument,
                        name + ": F64 value " + value + " at index " + std::to_string(i) +
                            " is outside float32's range (|x| <= 3.4028235e38)");
        }
      }
      break;
    case DType::kF16:
      for (std::size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = HalfToFloat(h);
      }
      break;
    case DType::kBF16:
      for (std::size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = BFloat16ToFloat(h);
      }
      break;
    default:
      return Status(StatusCode::kUnsupported,
                    name + ": dtype " + DTypeName(view.dtype) +
                        " is not supported for weights (expected F32, F64, F16 or BF16)");
  }
  return out;
}

TensorViewMap ViewsOf(const TensorMap& tensors) {
  TensorViewMap views;
  for (const auto& [name, t] : tensors) {
    TensorView v;
    v.dtype = DType::kF32;
    v.shape = t.shape;
    v.data = reinterpret_cast<const uint8_t*>(t.data.data());
    v.nbytes = t.data.size() * sizeof(float);
    views.emplace(name, std::move(v));
  }
  return views;
}

std::vector<uint8_t> SerializeSafetensors(const TensorMap& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t nbytes = t.data.size() * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // align the data, as safetensors does
  std::vector<uint8_t> out(8 + text.size() + offset);
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(len >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  uint8_t* data = out.data() + 8 + text.size();
  for (const auto& [name, t] : tensors) {
    if (!t.data.empty()) std::memcpy(data, t.data.data(), t.data.size() * sizeof(float));
    data += t.data.size() * sizeof(float);
  }
  return out;
}

}  // namespace recur::impl::converter
