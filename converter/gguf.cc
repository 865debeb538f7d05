#include "converter/gguf.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

namespace recur::impl::converter {
namespace {

// ggml's type_traits (block size, bytes per block) for every type id in use;
// ids 4, 5, 31..33 and 36..38 were types that ggml has since removed.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},
    {41, "Q1_0", 128, 18},
};

constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
constexpr const char* kAlignmentKey = "general.alignment";
// The fewest bytes a metadata entry (a one-byte key and a u8) and a tensor
// info (a one-byte name, one dimension) take: counts beyond the bytes left
// for them are refused before anything is read.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

// Bytes of a scalar of `type` in the file; 0 for strings and arrays.
std::size_t FixedSize(GgufType type) {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

bool KnownType(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::kF64); }

// A name from the file in a message: quoted, at most 80 bytes, bytes outside
// printable ASCII as \xHH.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  const std::size_t shown = std::min<std::size_t>(s.size(), 80);
  for (std::size_t i = 0; i < shown; ++i) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') {
      out += static_cast<char>(ch);
    } else {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\x%02x", ch);
      out += esc;
    }
  }
  if (shown < s.size()) out += "...";
  return out + "\"";
}

// Reads little-endian values from the bytes, never past their end.
class Cursor {
 public:
  Cursor(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::size_t pos() const { return pos_; }
  std::size_t left() const { return size_ - pos_; }

  Status Need(uint64_t n, const char* what) const {
    if (n <= left()) return Status::Ok();
    return InvalidArgument("truncated: %s needs %" PRIu64 " bytes at offset %zu, %zu remain", what,
                           n, pos_, left());
  }

  template <typename T>
  Status Int(T* out, const char* what) {
    static_assert(std::is_integral_v<T>);
    RECUR_RETURN_IF_ERROR(Need(sizeof(T), what));
    std::make_unsigned_t<T> v = 0;
    for (int i = static_cast<int>(sizeof(T)) - 1; i >= 0; --i)
      v = static_cast<std::make_unsigned_t<T>>((v << 8) | data_[pos_ + i]);
    pos_ += sizeof(T);
    std::memcpy(out, &v, sizeof(T));
    return Status::Ok();
  }

  Status String(std::string* out, const char* what) {
    uint64_t len = 0;
    RECUR_RETURN_IF_ERROR(Int(&len, what));
    if (len > left()) {
      return InvalidArgument("truncated: %s of %" PRIu64
                             " bytes at offset %zu runs past the end, "
                             "%zu bytes remain",
                             what, len, pos_, left());
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<std::size_t>(len));
    pos_ += static_cast<std::size_t>(len);
    return Status::Ok();
  }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

template <typename Float, typename Bits>
Status ReadFloat(Cursor* c, GgufScalar* out) {
  Bits bits = 0;
  RECUR_RETURN_IF_ERROR(c->Int(&bits, "the value"));
  Float f;
  std::memcpy(&f, &bits, sizeof(f));
  *out = f;
  return Status::Ok();
}

template <typename T>
Status ReadInt(Cursor* c, GgufScalar* out) {
  T v = 0;
  RECUR_RETURN_IF_ERROR(c->Int(&v, "the value"));
  *out = v;
  return Status::Ok();
}

// A scalar of a known, non-array type.
Status ReadScalar(Cursor* c, GgufType type, GgufScalar* out) {
  switch (type) {
    case GgufType::kU8:
      return ReadInt<uint8_t>(c, out);
    case GgufType::kI8:
      return ReadInt<int8_t>(c, out);
    case GgufType::kU16:
      return ReadInt<uint16_t>(c, out);
    case GgufType::kI16:
      return ReadInt<int16_t>(c, out);
    case GgufType::kU32:
      return ReadInt<uint32_t>(c, out);
    case GgufType::kI32:
      return ReadInt<int32_t>(c, out);
    case GgufType::kU64:
      return ReadInt<uint64_t>(c, out);
    case GgufType::kI64:
      return ReadInt<int64_t>(c, out);
    case GgufType::kF32:
      return ReadFloat<float, uint32_t>(c, out);
    case GgufType::kF64:
      return ReadFloat<double, uint64_t>(c, out);
    case GgufType::kBool: {
      uint8_t v = 0;
      RECUR_RETURN_IF_ERROR(c->Int(&v, "the value"));
      if (v > 1) return InvalidArgument("bool value %u is not 0 or 1", v);
      *out = v == 1;
      return Status::Ok();
    }
    case GgufType::kString: {
      std::string s;
      RECUR_RETURN_IF_ERROR(c->String(&s, "the string"));
      *out = std::move(s);
      return Status::Ok();
    }
    default:
      return InvalidArgument("value type %u cannot be read as a scalar",
                             static_cast<uint32_t>(type));
  }
}

Status ReadValue(Cursor* c, GgufValue* out) {
  uint32_t type = 0;
  RECUR_RETURN_IF_ERROR(c->Int(&type, "the value type"));
  if (!KnownType(type)) return InvalidArgument("value type %u is not known", type);
  if (static_cast<GgufType>(type) != GgufType::kArray) {
    out->is_array = false;
    return ReadScalar(c, static_cast<GgufType>(type), &out->scalar);
  }
  uint32_t element = 0;
  RECUR_RETURN_IF_ERROR(c->Int(&element, "the array's element type"));
  if (!KnownType(element)) return InvalidArgument("array element type %u is not known", element);
  const auto element_type = static_cast<GgufType>(element);
  if (element_type == GgufType::kArray)
    return InvalidArgument("arrays of arrays are not supported");
  uint64_t count = 0;
  RECUR_RETURN_IF_ERROR(c->Int(&count, "the array's length"));
  // A string takes at least its 8-byte length.
  const std::size_t least = element_type == GgufType::kString ? 8 : FixedSize(element_type);
  if (count > c->left() / least) {
    return InvalidArgument("truncated: an array of %" PRIu64
                           " %s elements at offset %zu needs at "
                           "least %zu bytes each, %zu remain",
                           count, GgufTypeName(element_type), c->pos(), least, c->left());
  }
  out->is_array = true;
  out->element_type = element_type;
  out->elements.clear();
  out->elements.reserve(static_cast<std::size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    GgufScalar v;
    Status s = ReadScalar(c, element_type, &v);
    if (!s.ok()) return s.WithContext("element " + std::to_string(i));
    out->elements.push_back(std::move(v));
  }
  return Status::Ok();
}

std::string TypeDescription(const GgufValue& v) {
  return v.is_array ? std::string("array of ") + GgufTypeName(v.element_type)
                    : GgufTypeName(v.type());
}

std::string ShapeString(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Reads one tensor info; `alignment` is the file's.
Status ReadTensorInfo(Cursor* c, uint32_t alignment, GgufTensor* t) {
  uint32_t n_dims = 0;
  RECUR_RETURN_IF_ERROR(c->Int(&n_dims, "n_dims"));
  if (n_dims < 1 || n_dims > kMaxDims)
    return InvalidArgument("n_dims %u is not in 1..%u", n_dims, kMaxDims);
  t->dims.assign(n_dims, 0);
  uint64_t elements = 1;
  bool too_many = false;
  for (uint32_t d = 0; d < n_dims; ++d) {
    RECUR_RETURN_IF_ERROR(c->Int(&t->dims[d], "a dimension"));
    if (t->dims[d] == 0) return InvalidArgument("ne[%u] is 0", d);
    if (elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / t->dims[d])
      too_many = true;
    else
      elements *= t->dims[d];
  }
  if (too_many) {
    return InvalidArgument("shape %s has more than 2^63-1 elements", ShapeString(t->dims).c_str());
  }
  uint32_t type = 0;
  RECUR_RETURN_IF_ERROR(c->Int(&type, "the ggml type"));
  t->type = FindGgmlType(type);
  if (!t->type) return InvalidArgument("ggml type %u is not known", type);
  if (t->dims[0] % t->type->block_size != 0) {
    return InvalidArgument("ne[0] = %" PRIu64 " is not a multiple of %s's block size %u",
                           t->dims[0], t->type->name, t->type->block_size);
  }
  uint64_t bytes = t->dims[0] / t->type->block_size;
  bool overflow = false;
  auto times = [&](uint64_t k) {
    if (bytes > std::numeric_limits<uint64_t>::max() / k)
      overflow = true;
    else
      bytes *= k;
  };
  times(t->type->bytes_per_block);
  for (uint32_t d = 1; d < n_dims; ++d) times(t->dims[d]);
  if (overflow || bytes > std::numeric_limits<std::size_t>::max()) {
    return InvalidArgument("shape %s of %s overflows a 64-bit byte size",
                           ShapeString(t->dims).c_str(), t->type->name);
  }
  t->nbytes = static_cast<std::size_t>(bytes);
  RECUR_RETURN_IF_ERROR(c->Int(&t->offset, "the data offset"));
  if (t->offset % alignment != 0) {
    return InvalidArgument("data offset %" PRIu64 " is not a multiple of the alignment %u",
                           t->offset, alignment);
  }
  return Status::Ok();
}

Status Parse(const FileBytes& bytes, GgufFile* file, uint32_t* version, uint32_t* alignment,
             uint64_t* data_offset, std::map<std::string, GgufValue>* metadata,
             std::vector<GgufTensor>* tensors, std::map<std::string, std::size_t>* index) {
  Cursor c(bytes.data(), bytes.size());
  RECUR_RETURN_IF_ERROR(c.Need(4, "the magic \"GGUF\""));
  if (std::memcmp(bytes.data(), "GGUF", 4) != 0) {
    std::string magic;
    for (int i = 0; i < 4; ++i) magic += static_cast<char>(bytes.data()[i]);
    return InvalidArgument("not a GGUF file: the magic is %s, expected \"GGUF\"",
                           Quote(magic).c_str());
  }
  c = Cursor(bytes.data(), bytes.size());
  uint32_t skip = 0;
  RECUR_RETURN_IF_ERROR(c.Int(&skip, "the magic"));
  RECUR_RETURN_IF_ERROR(c.Int(version, "the version"));
  if (*version != kVersion) {
    if (*version == 1 || *version == 2) {
      return Unsupported(
          "GGUF version %u is not supported: only version 3 is read (convert "
          "the model again with a current llama.cpp)",
          *version);
    }
    if (*version != 0 && (*version & 0xffffu) == 0) {
      return Unsupported(
          "GGUF version %u (0x%08x) is not supported: only little-endian "
          "version 3 is read (is this a big-endian file?)",
          *version, *version);
    }
    return Unsupported("GGUF version %u is not supported: only version 3 is read", *version);
  }
  uint64_t n_tensors = 0, n_kv = 0;
  RECUR_RETURN_IF_ERROR(c.Int(&n_tensors, "the tensor count"));
  RECUR_RETURN_IF_ERROR(c.Int(&n_kv, "the metadata count"));
  if (n_kv > c.left() / kMinKvBytes) {
    return InvalidArgument("truncated: %" PRIu64
                           " metadata entries cannot fit in the %zu bytes "
                           "after the header",
                           n_kv, c.left());
  }
  if (n_tensors > c.left() / kMinTensorInfoBytes) {
    return InvalidArgument("truncated: %" PRIu64
                           " tensor infos cannot fit in the %zu bytes "
                           "after the header",
                           n_tensors, c.left());
  }

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    Status s = c.String(&key, "the key");
    if (!s.ok()) return s.WithContext("metadata entry " + std::to_string(i));
    if (key.empty()) return InvalidArgument("metadata entry %" PRIu64 " has an empty key", i);
    if (metadata->count(key))
      return InvalidArgument("metadata key %s appears twice", Quote(key).c_str());
    GgufValue value;
    s = ReadValue(&c, &value);
    if (!s.ok()) return s.WithContext("metadata key " + Quote(key));
    metadata->emplace(std::move(key), std::move(value));
  }

  *alignment = kDefaultAlignment;
  if (metadata->count(kAlignmentKey)) {
    auto a = file->GetU32(kAlignmentKey);
    if (!a.ok()) return a.status();
    if (*a == 0 || (*a & (*a - 1)) != 0)
      return InvalidArgument("%s %u is not a nonzero power of two", kAlignmentKey, *a);
    *alignment = *a;
  }

  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    Status s = c.String(&t.name, "the name");
    if (!s.ok()) return s.WithContext("tensor " + std::to_string(i));
    if (t.name.empty()) return InvalidArgument("tensor %" PRIu64 " has an empty name", i);
    if (index->count(t.name))
      return InvalidArgument("tensor name %s appears twice", Quote(t.name).c_str());
    s = ReadTensorInfo(&c, *alignment, &t);
    if (!s.ok()) return s.WithContext("tensor " + Quote(t.name));
    index->emplace(t.name, tensors->size());
    tensors->push_back(std::move(t));
  }

  const uint64_t header_end = c.pos();
  if (tensors->empty()) {
    *data_offset = header_end;  // no data section (as ggml: no padding is needed)
    return Status::Ok();
  }
  // header_end <= the file size < 2^63 and alignment <= 2^31: no overflow.
  *data_offset = (header_end + *alignment - 1) / *alignment * *alignment;
  if (*data_offset > bytes.size()) {
    return InvalidArgument("truncated: the data section would start at offset %" PRIu64
                           " (the header ends at %" PRIu64
                           ", aligned to %u), past the end of the "
                           "%zu-byte file",
                           *data_offset, header_end, *alignment, bytes.size());
  }
  const uint64_t data_size = bytes.size() - *data_offset;
  for (GgufTensor& t : *tensors) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return InvalidArgument("tensor %s: %zu bytes of data at offset %" PRIu64
                             " lie outside the "
                             "%" PRIu64 "-byte data section (truncated?)",
                             Quote(t.name).c_str(), t.nbytes, t.offset, data_size);
    }
    t.data = bytes.data() + *data_offset + t.offset;
  }
  std::vector<const GgufTensor*> order;
  for (const GgufTensor& t : *tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const GgufTensor& a = *order[i - 1];
    const GgufTensor& b = *order[i];
    if (b.offset < a.offset + a.nbytes) {
      return InvalidArgument("tensors %s [%" PRIu64 ", %" PRIu64 ") and %s [%" PRIu64 ", %" PRIu64
                             ") overlap in the data section",
                             Quote(a.name).c_str(), a.offset, a.offset + a.nbytes,
                             Quote(b.name).c_str(), b.offset, b.offset + b.nbytes);
    }
  }
  return Status::Ok();
}

void PutLE(std::vector<uint8_t>* out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void PutString(std::vector<uint8_t>* out, const std::string& s) {
  PutLE(out, s.size(), 8);
  out->insert(out->end(), s.begin(), s.end());
}

void PutScalar(std::vector<uint8_t>* out, const GgufScalar& v) {
  std::visit(
      [out](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          PutString(out, x);
        } else if constexpr (std::is_same_v<T, bool>) {
          out->push_back(x ? 1 : 0);
        } else if constexpr (std::is_floating_point_v<T>) {
          std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t> bits;
          std::memcpy(&bits, &x, sizeof(bits));
          PutLE(out, bits, sizeof(bits));
        } else {
          PutLE(out, static_cast<uint64_t>(x), sizeof(T));
        }
      },
      v);
}

void PutValue(std::vector<uint8_t>* out, const GgufValue& v) {
  PutLE(out, static_cast<uint32_t>(v.type()), 4);
  if (!v.is_array) return PutScalar(out, v.scalar);
  PutLE(out, static_cast<uint32_t>(v.element_type), 4);
  PutLE(out, v.elements.size(), 8);
  for (const GgufScalar& e : v.elements) PutScalar(out, e);
}

}  // namespace

const char* GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "?";
}

GgufType GgufScalarType(const GgufScalar& value) {
  // The alternatives are in id order, without kArray (9).
  const auto i = static_cast<uint32_t>(value.index());
  return static_cast<GgufType>(i < 9 ? i : i + 1);
}

GgufValue GgufValue::Array(GgufType element_type, std::vector<GgufScalar> elements) {
  GgufValue v;
  v.is_array = true;
  v.element_type = element_type;
  v.elements = std::move(elements);
  return v;
}

const GgmlTypeInfo* FindGgmlType(uint32_t id) {
  for (const auto& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

const GgufValue* GgufFile::FindValue(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

template <typename T>
Result<T> GgufFile::GetScalar(const std::string& key) const {
  const GgufType want = GgufScalarType(GgufScalar(std::in_place_type<T>));
  const GgufValue* v = FindValue(key);
  if (!v) return InvalidArgument("metadata key %s is missing", Quote(key).c_str());
  if (v->is_array || !std::holds_alternative<T>(v->scalar)) {
    return InvalidArgument("metadata key %s is %s, expected %s", Quote(key).c_str(),
                           TypeDescription(*v).c_str(), GgufTypeName(want));
  }
  return std::get<T>(v->scalar);
}

template <typename T>
Result<std::vector<T>> GgufFile::GetArray(const std::string& key) const {
  const GgufType want = GgufScalarType(GgufScalar(std::in_place_type<T>));
  const GgufValue* v = FindValue(key);
  if (!v) return InvalidArgument("metadata key %s is missing", Quote(key).c_str());
  if (!v->is_array || v->element_type != want) {
    return InvalidArgument("metadata key %s is %s, expected array of %s", Quote(key).c_str(),
                           TypeDescription(*v).c_str(), GgufTypeName(want));
  }
  std::vector<T> out;
  out.reserve(v->elements.size());
  for (const GgufScalar& e : v->elements) out.push_back(std::get<T>(e));
  return out;
}

Result<uint8_t> GgufFile::GetU8(const std::string& key) const { return GetScalar<uint8_t>(key); }
Result<uint32_t> GgufFile::GetU32(const std::string& key) const { return GetScalar<uint32_t>(key); }
Result<int32_t> GgufFile::GetI32(const std::string& key) const { return GetScalar<int32_t>(key); }
Result<uint64_t> GgufFile::GetU64(const std::string& key) const { return GetScalar<uint64_t>(key); }
Result<int64_t> GgufFile::GetI64(const std::string& key) const { return GetScalar<int64_t>(key); }
Result<float> GgufFile::GetF32(const std::string& key) const { return GetScalar<float>(key); }
Result<double> GgufFile::GetF64(const std::string& key) const { return GetScalar<double>(key); }
Result<bool> GgufFile::GetBool(const std::string& key) const { return GetScalar<bool>(key); }
Result<std::string> GgufFile::GetString(const std::string& key) const {
  return GetScalar<std::string>(key);
}
Result<std::vector<std::string>> GgufFile::GetStringArray(const std::string& key) const {
  return GetArray<std::string>(key);
}
Result<std::vector<float>> GgufFile::GetF32Array(const std::string& key) const {
  return GetArray<float>(key);
}
Result<std::vector<int32_t>> GgufFile::GetI32Array(const std::string& key) const {
  return GetArray<int32_t>(key);
}
Result<std::vector<uint32_t>> GgufFile::GetU32Array(const std::string& key) const {
  return GetArray<uint32_t>(key);
}

Result<GgufFile> ParseGguf(FileBytes bytes, const std::string& source_name) {
  GgufFile file;
  Status s = Parse(bytes, &file, &file.version_, &file.alignment_, &file.data_offset_,
                   &file.metadata_, &file.tensors_, &file.tensor_index_);
  if (!s.ok()) return s.WithContext(source_name);
  file.bytes_ = std::move(bytes);  // the bytes stay where they are: tensors stay valid
  return file;
}

Result<GgufFile> ReadGgufFile(const std::string& path) {
  auto bytes = MapFile(path);
  if (!bytes.ok()) return bytes.status();
  try {
    return ParseGguf(std::move(bytes).value(), path);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, path + ": " + e.what());
  }
}

bool LooksLikeGguf(const uint8_t* data, std::size_t size) {
  return size >= 4 && std::memcmp(data, "GGUF", 4) == 0;
}

Result<TensorViewMap> GgufTensorViews(const GgufFile& file, const std::string& source_name) {
  TensorViewMap views;
  for (const GgufTensor& t : file.tensors()) {
    TensorView view;
    switch (t.type->id) {
      case ggml_type::kF32: view.dtype = DType::kF32; break;
      case ggml_type::kF16: view.dtype = DType::kF16; break;
      case ggml_type::kBF16: view.dtype = DType::kBF16; break;
      case ggml_type::kQ4_0: view.dtype = DType::kQ4_0; break;
      case ggml_type::kQ4_K: view.dtype = DType::kQ4_K; break;
      case ggml_type::kQ6_K: view.dtype = DType::kQ6_K; break;
      case ggml_type::kQ5_K: view.dtype = DType::kQ5_K; break;
      case ggml_type::kQ8_0: view.dtype = DType::kQ8_0; break;
      default:
        return Status(StatusCode::kUnsupported,
                      source_name + ": tensor \"" + t.name + "\" is " + t.type->name +
                          ": recur-convert reads GGUF tensors of types F32, F16, BF16, Q4_0, "
                          "Q8_0, Q4_K, Q5_K and Q6_K only");
    }
    for (std::size_t k = t.dims.size(); k-- > 0;) {
      view.shape.push_back(static_cast<int64_t>(t.dims[k]));  // the reader bounds each by the file
    }
    view.data = t.data;
    view.nbytes = t.nbytes;
    views.emplace(t.name, std::move(view));
  }
  return views;
}

std::vector<uint8_t> SerializeGguf(const std::vector<std::pair<std::string, GgufValue>>& metadata,
                                   const std::vector<GgufTensorData>& tensors, uint32_t alignment) {
  const bool has_key = std::any_of(metadata.begin(), metadata.end(),
                                   [](const auto& kv) { return kv.first == kAlignmentKey; });
  const bool add_key = alignment != kDefaultAlignment && !has_key;
  std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
  PutLE(&out, kVersion, 4);
  PutLE(&out, tensors.size(), 8);
  PutLE(&out, metadata.size() + (add_key ? 1 : 0), 8);
  for (const auto& [key, value] : metadata) {
    PutString(&out, key);
    PutValue(&out, value);
  }
  if (add_key) {
    PutString(&out, kAlignmentKey);
    PutValue(&out, GgufValue(alignment));
  }
  auto pad = [alignment](uint64_t n) { return (n + alignment - 1) / alignment * alignment; };
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const GgufTensorData& t : tensors) {
    PutString(&out, t.name);
    PutLE(&out, t.dims.size(), 4);
    for (uint64_t d : t.dims) PutLE(&out, d, 8);
    PutLE(&out, t.type, 4);
    offset = pad(offset);
    offsets.push_back(offset);
    PutLE(&out, offset, 8);
    offset += t.data.size();
  }
  if (tensors.empty()) return out;
  const uint64_t data_start = pad(out.size());
  out.resize(data_start + offset, 0);  // no padding after the last tensor
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].data.empty())
      std::memcpy(out.data() + data_start + offsets[i], tensors[i].data.data(),
                  tensors[i].data.size());
  }
  return out;
}

}  // namespace recur::impl::converter
