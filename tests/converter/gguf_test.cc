// The GGUF reader on hand-made buffers: SerializeGguf's well-formed files and
// raw bytes for every way a file can be wrong.
#include "converter/gguf.h"

#include <doctest/doctest.h>

#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace recur::impl::converter {
namespace {

using Bytes = std::vector<uint8_t>;

// Little-endian pieces of a GGUF file, appended in order.
struct Raw {
  Bytes b;
  Raw& Put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Raw& U8(uint8_t v) { return Put(v, 1); }
  Raw& U32(uint32_t v) { return Put(v, 4); }
  Raw& U64(uint64_t v) { return Put(v, 8); }
  Raw& Str(const std::string& s) {
    U64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& Zeros(std::size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
  // A tensor info.
  Raw& Tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
              uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) U64(d);
    return U32(type).U64(offset);
  }
};

// "GGUF", version, counts, `body` (metadata and tensor infos), then, when
// `data` is nonzero, padding to `alignment` and `data` zero bytes.
Bytes File(uint64_t n_tensors, uint64_t n_kv, const Raw& body, std::size_t data = 0,
           uint32_t version = 3, std::size_t alignment = 32) {
  Raw r;
  r.U8('G').U8('G').U8('U').U8('F').U32(version).U64(n_tensors).U64(n_kv);
  r.b.insert(r.b.end(), body.b.begin(), body.b.end());
  if (data) {
    while (r.b.size() % alignment) r.U8(0);
    r.Zeros(data);
  }
  return r.b;
}

// Expects the parse to fail with exactly `message` (after "t.gguf: ").
void ExpectError(const Bytes& bytes, const std::string& message) {
  auto r = ParseGguf(bytes, "t.gguf");
  REQUIRE_FALSE(r.ok());
  CHECK(r.message() == "t.gguf: " + message);
}

Bytes Fill(std::size_t n, uint8_t seed) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + 7 * i);
  return b;
}

// Metadata of every value type, arrays, and five tensors of common types.
std::vector<std::pair<std::string, GgufValue>> AllMetadata() {
  return {
      {"general.architecture", GgufValue(std::string("llama"))},
      {"u8", GgufValue(uint8_t{200})},
      {"i8", GgufValue(int8_t{-100})},
      {"u16", GgufValue(uint16_t{60000})},
      {"i16", GgufValue(int16_t{-30000})},
      {"u32", GgufValue(uint32_t{4000000000u})},
      {"i32", GgufValue(int32_t{-2000000000})},
      {"f32", GgufValue(1.5f)},
      {"bool", GgufValue(true)},
      {"u64", GgufValue(uint64_t{1} << 60)},
      {"i64", GgufValue(-(int64_t{1} << 60))},
      {"f64", GgufValue(-0.25)},
      {"tokens", GgufValue::Array(GgufType::kString,
                                  {std::string("<s>"), std::string("a b"), std::string("")})},
      {"scores", GgufValue::Array(GgufType::kF32, {0.5f, -1.0f})},
      {"types", GgufValue::Array(GgufType::kI32, {int32_t{1}, int32_t{-3}})},
      {"empty", GgufValue::Array(GgufType::kU64, {})},
      {"flags", GgufValue::Array(GgufType::kBool, {false, true})},
  };
}

std::vector<GgufTensorData> AllTensors() {
  return {
      {"f32", ggml_type::kF32, {3, 2}, Fill(24, 1)},
      {"f16", ggml_type::kF16, {4}, Fill(8, 2)},
      {"q8_0", ggml_type::kQ8_0, {32, 2}, Fill(68, 3)},
      {"q4_0", ggml_type::kQ4_0, {64}, Fill(36, 4)},
      {"q4_k", ggml_type::kQ4_K, {256, 2, 1}, Fill(288, 5)},
  };
}

TEST_CASE("gguf: metadata of every type and tensors of common types parse") {
  const auto tensors = AllTensors();
  auto r = ParseGguf(SerializeGguf(AllMetadata(), tensors), "t.gguf");
  REQUIRE_MESSAGE(r.ok(), r.message());
  const GgufFile& f = *r;
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.data_offset() % 32 == 0);
  CHECK(f.metadata().size() == AllMetadata().size());
  CHECK(*f.GetString("general.architecture") == "llama");
  CHECK(*f.GetU8("u8") == 200);
  CHECK(std::get<int8_t>(f.FindValue("i8")->scalar) == -100);
  CHECK(std::get<uint16_t>(f.FindValue("u16")->scalar) == 60000);
  CHECK(std::get<int16_t>(f.FindValue("i16")->scalar) == -30000);
  CHECK(*f.GetU32("u32") == 4000000000u);
  CHECK(*f.GetI32("i32") == -2000000000);
  CHECK(*f.GetF32("f32") == 1.5f);
  CHECK(*f.GetBool("bool") == true);
  CHECK(*f.GetU64("u64") == uint64_t{1} << 60);
  CHECK(*f.GetI64("i64") == -(int64_t{1} << 60));
  CHECK(*f.GetF64("f64") == -0.25);
  CHECK(*f.GetStringArray("tokens") == std::vector<std::string>{"<s>", "a b", ""});
  CHECK(*f.GetF32Array("scores") == std::vector<float>{0.5f, -1.0f});
  CHECK(*f.GetI32Array("types") == std::vector<int32_t>{1, -3});
  CHECK(f.FindValue("empty")->type() == GgufType::kArray);
  CHECK(f.FindValue("empty")->element_type == GgufType::kU64);
  CHECK(f.FindValue("empty")->elements.empty());
  CHECK(f.FindValue("flags")->elements.size() == 2);
  CHECK(f.FindValue("missing") == nullptr);

  REQUIRE(f.tensors().size() == tensors.size());
  const std::vector<std::size_t> sizes = {24, 8, 68, 36, 288};
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensor& t = f.tensors()[i];
    INFO(t.name);
    CHECK(t.name == tensors[i].name);
    CHECK(t.type->id == tensors[i].type);
    CHECK(t.dims == tensors[i].dims);
    CHECK(t.nbytes == sizes[i]);
    CHECK(t.offset % 32 == 0);
    CHECK(std::memcmp(t.data, tensors[i].data.data(), t.nbytes) == 0);
    CHECK(f.FindTensor(t.name) == &t);
  }
  CHECK(std::string(f.FindTensor("q4_k")->type->name) == "Q4_K");
  CHECK(f.FindTensor("nope") == nullptr);
}

TEST_CASE("gguf: general.alignment sets the data section's and the offsets' alignment") {
  auto r = ParseGguf(SerializeGguf({{"a", GgufValue(uint8_t{1})}}, AllTensors(), 64));
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->alignment() == 64);
  CHECK(*r->GetU32("general.alignment") == 64);
  CHECK(r->data_offset() % 64 == 0);
  for (const GgufTensor& t : r->tensors()) CHECK(t.offset % 64 == 0);
  CHECK(r->tensors()[1].offset == 64);  // 24 bytes of f32, padded

  // A file without tensors ends at its metadata.
  auto empty = ParseGguf(SerializeGguf({}, {}));
  REQUIRE(empty.ok());
  CHECK(empty->data_offset() == 24);
  CHECK(empty->tensors().empty());
}

TEST_CASE("gguf: tensors survive moving the file") {
  Bytes bytes = SerializeGguf({}, {{"w", ggml_type::kF32, {2}, Fill(8, 9)}});
  auto r = ParseGguf(std::move(bytes));
  REQUIRE(r.ok());
  GgufFile moved = std::move(r).value();
  CHECK(std::memcmp(moved.FindTensor("w")->data, Fill(8, 9).data(), 8) == 0);
}

TEST_CASE("gguf: typed getters name the key and both types") {
  auto r = ParseGguf(SerializeGguf(AllMetadata(), {}));
  REQUIRE(r.ok());
  CHECK(r->GetU32("u8").message() == "metadata key \"u8\" is u8, expected u32");
  CHECK(r->GetString("tokens").message() ==
        "metadata key \"tokens\" is array of string, "
        "expected string");
  CHECK(r->GetStringArray("scores").message() ==
        "metadata key \"scores\" is array of f32, "
        "expected array of string");
  CHECK(r->GetF32Array("f32").message() == "metadata key \"f32\" is f32, expected array of f32");
  CHECK(r->GetBool("u8").message() == "metadata key \"u8\" is u8, expected bool");
  CHECK(r->GetF32("nope").message() == "metadata key \"nope\" is missing");
  CHECK(r->GetU32Array("types").message() ==
        "metadata key \"types\" is array of i32, "
        "expected array of u32");
}

TEST_CASE("gguf: the ggml type table") {
  struct Want {
    uint32_t id;
    uint32_t block, bytes;
  };
  for (Want w : {Want{0, 1, 4},  {1, 1, 2},      {2, 32, 18},    {3, 32, 20},    {6, 32, 22},
                 {7, 32, 24},    {8, 32, 34},    {9, 32, 36},    {10, 256, 84},  {11, 256, 110},
                 {12, 256, 144}, {13, 256, 176}, {14, 256, 210}, {15, 256, 292}, {24, 1, 1},
                 {25, 1, 2},     {26, 1, 4},     {27, 1, 8},     {28, 1, 8},     {30, 1, 2}}) {
    INFO(w.id);
    const GgmlTypeInfo* t = FindGgmlType(w.id);
    REQUIRE(t != nullptr);
    CHECK(t->block_size == w.block);
    CHECK(t->bytes_per_block == w.bytes);
  }
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u, 1000u})
    CHECK(FindGgmlType(removed) == nullptr);
}

TEST_CASE("gguf: bad headers are refused by name") {
  ExpectError({'G', 'G'}, "truncated: the magic \"GGUF\" needs 4 bytes at offset 0, 2 remain");
  ExpectError({'G', 'G', 'M', 'L', 3, 0, 0, 0},
              "not a GGUF file: the magic is \"GGML\", expected \"GGUF\"");
  ExpectError({0x7f, 'E', 'L', 'F'},
              "not a GGUF file: the magic is \"\\x7fELF\", expected \"GGUF\"");
  ExpectError(File(0, 0, Raw(), 0, 1),
              "GGUF version 1 is not supported: only version 3 is read (convert the model again "
              "with a current llama.cpp)");
  ExpectError(File(0, 0, Raw(), 0, 2),
              "GGUF version 2 is not supported: only version 3 is read (convert the model again "
              "with a current llama.cpp)");
  ExpectError(File(0, 0, Raw(), 0, 4), "GGUF version 4 is not supported: only version 3 is read");
  ExpectError(File(0, 0, Raw(), 0, 0x03000000),
              "GGUF version 50331648 (0x03000000) is not supported: only little-endian version 3 "
              "is read (is this a big-endian file?)");
  CHECK(ParseGguf(File(0, 0, Raw(), 0, 2)).status().code() == StatusCode::kUnsupported);
  ExpectError(File(0, 1000, Raw().Zeros(100)),
              "truncated: 1000 metadata entries cannot fit in the 100 bytes after the header");
  ExpectError(File(~uint64_t{0}, 0, Raw().Zeros(100)),
              "truncated: 18446744073709551615 tensor infos cannot fit in the 100 bytes after the "
              "header");
  ExpectError(
      File(0, ~uint64_t{0}, Raw()),
      "truncated: 18446744073709551615 metadata entries cannot fit in the 0 bytes after the "
      "header");
}

TEST_CASE("gguf: bad metadata is refused by name") {
  ExpectError(File(0, 1, Raw().U64(1000).Zeros(20)),
              "metadata entry 0: truncated: the key of 1000 bytes at offset 32 runs past the end, "
              "20 bytes remain");
  ExpectError(
      File(0, 1, Raw().U64(~uint64_t{0}).Zeros(20)),
      "metadata entry 0: truncated: the key of 18446744073709551615 bytes at offset 32 runs "
      "past the end, 20 bytes remain");
  ExpectError(File(0, 1, Raw().Str("").U32(0).U8(1).Zeros(8)), "metadata entry 0 has an empty key");
  ExpectError(File(0, 2, Raw().Str("k").U32(0).U8(1).Str("k").U32(0).U8(2)),
              "metadata key \"k\" appears twice");
  ExpectError(File(0, 1, Raw().Str("k").U32(13).Zeros(8)),
              "metadata key \"k\": value type 13 is not known");
  ExpectError(File(0, 1, Raw().Str("k\n").U32(0xffffffffu).Zeros(8)),
              "metadata key \"k\\x0a\": value type 4294967295 is not known");
  ExpectError(File(0, 1, Raw().Str("k").U32(7).U8(2).Zeros(4)),
              "metadata key \"k\": bool value 2 is not 0 or 1");
  ExpectError(File(0, 1, Raw().Str("k").U32(9).U32(7).U64(3).U8(1).U8(0).U8(5)),
              "metadata key \"k\": element 2: bool value 5 is not 0 or 1");
  ExpectError(File(0, 1, Raw().Str("k").U32(9).U32(13).U64(0)),
              "metadata key \"k\": array element type 13 is not known");
  ExpectError(File(0, 1, Raw().Str("k").U32(9).U32(9).U64(1).U32(0).U64(0)),
              "metadata key \"k\": arrays of arrays are not supported");
  // A count that would allocate terabytes is refused before anything is read.
  ExpectError(File(0, 1, Raw().Str("k").U32(9).U32(4).U64(uint64_t{1} << 40).Zeros(12)),
              "metadata key \"k\": truncated: an array of 1099511627776 u32 elements at offset 49 "
              "needs at least 4 bytes each, 12 remain");
  ExpectError(File(0, 1, Raw().Str("k").U32(9).U32(8).U64(2).Str("ab").U64(99)),
              "metadata key \"k\": element 1: truncated: the string of 99 bytes at offset 67 runs "
              "past the end, 0 bytes remain");
  ExpectError(File(0, 1, Raw().Str("k").U32(8).U64(50).Zeros(3)),
              "metadata key \"k\": truncated: the string of 50 bytes at offset 45 runs past the "
              "end, 3 bytes remain");
  ExpectError(File(0, 1, Raw().Str("k").U32(10).Zeros(4)),
              "metadata key \"k\": truncated: the value needs 8 bytes at offset 37, 4 remain");
}

TEST_CASE("gguf: a bad general.alignment is refused") {
  ExpectError(File(0, 1, Raw().Str("general.alignment").U32(0).U8(16)),
              "metadata key \"general.alignment\" is u8, expected u32");
  ExpectError(File(0, 1, Raw().Str("general.alignment").U32(4).U32(0)),
              "general.alignment 0 is not a nonzero power of two");
  ExpectError(File(0, 1, Raw().Str("general.alignment").U32(4).U32(13)),
              "general.alignment 13 is not a nonzero power of two");
}

TEST_CASE("gguf: bad tensor infos are refused by name") {
  ExpectError(File(1, 0, Raw().Tensor("", {4}, 0, 0), 16), "tensor 0 has an empty name");
  ExpectError(File(2, 0, Raw().Tensor("w", {4}, 0, 0).Tensor("w", {4}, 0, 32), 48),
              "tensor name \"w\" appears twice");
  ExpectError(File(1, 0, Raw().Str("w").U32(0).Zeros(40)), "tensor \"w\": n_dims 0 is not in 1..4");
  ExpectError(File(1, 0, Raw().Str("w").U32(5).Zeros(40)), "tensor \"w\": n_dims 5 is not in 1..4");
  ExpectError(File(1, 0, Raw().Tensor("w", {4, 0}, 0, 0), 16), "tensor \"w\": ne[1] is 0");
  ExpectError(File(1, 0, Raw().Tensor("w", {uint64_t{1} << 32, uint64_t{1} << 31}, 0, 0)),
              "tensor \"w\": shape [4294967296, 2147483648] has more than 2^63-1 elements");
  ExpectError(File(1, 0, Raw().Tensor("w", {uint64_t{1} << 62}, ggml_type::kF64, 0)),
              "tensor \"w\": shape [4611686018427387904] of F64 overflows a 64-bit byte size");
  ExpectError(File(1, 0, Raw().Tensor("w", {4}, 42, 0), 16),
              "tensor \"w\": ggml type 42 is not known");
  ExpectError(File(1, 0, Raw().Tensor("w", {32}, 4, 0), 16),
              "tensor \"w\": ggml type 4 is not known");
  ExpectError(File(1, 0, Raw().Tensor("w", {33, 2}, ggml_type::kQ8_0, 0), 100),
              "tensor \"w\": ne[0] = 33 is not a multiple of Q8_0's block size 32");
  ExpectError(File(1, 0, Raw().Tensor("w", {128}, ggml_type::kQ4_K, 0), 144),
              "tensor \"w\": ne[0] = 128 is not a multiple of Q4_K's block size 256");
  ExpectError(File(1, 0, Raw().Tensor("w", {4}, 0, 16), 48),
              "tensor \"w\": data offset 16 is not a multiple of the alignment 32");
  ExpectError(File(1, 0, Raw().Str("wwwwwwwwwwwwwww").U32(1).U64(4).U32(0)),
              "tensor \"wwwwwwwwwwwwwww\": truncated: the data offset needs 8 bytes at offset 63, "
              "0 remain");
}

TEST_CASE("gguf: tensor data must lie inside the file and not overlap") {
  // Header 24 + info (8 + 1 + 4 + 8 + 4 + 8 = 33) = 57, data at 64.
  ExpectError(File(1, 0, Raw().Tensor("w", {4}, 0, 0), 15),
              "tensor \"w\": 16 bytes of data at offset 0 lie outside the 15-byte data section "
              "(truncated?)");
  ExpectError(File(1, 0, Raw().Tensor("w", {4}, 0, uint64_t{1} << 63), 16),
              "tensor \"w\": 16 bytes of data at offset 9223372036854775808 lie outside the "
              "16-byte data section (truncated?)");
  ExpectError(File(1, 0, Raw().Tensor("w", {uint64_t{1} << 40, 1024}, 0, 0), 16),
              "tensor \"w\": 4503599627370496 bytes of data at offset 0 lie outside the 16-byte "
              "data section (truncated?)");
  // Two infos: 24 + 2·33 = 90, data at 96.
  ExpectError(File(2, 0, Raw().Tensor("a", {16}, 0, 0).Tensor("b", {4}, 0, 32), 64),
              "tensors \"a\" [0, 64) and \"b\" [32, 48) overlap in the data section");
  ExpectError(File(2, 0, Raw().Tensor("a", {4}, 0, 0).Tensor("b", {4}, 0, 0), 64),
              "tensors \"a\" [0, 16) and \"b\" [0, 16) overlap in the data section");
  // The padding before the data section is missing.
  Bytes cut = File(1, 0, Raw().Tensor("w", {4}, 0, 0));
  cut.resize(60);
  ExpectError(cut,
              "truncated: the data section would start at offset 64 (the header ends at 57, "
              "aligned to 32), past the end of the 60-byte file");
}

// Written by llama.cpp's gguf package (tests/fuzz/gguf_py_seed.py); the
// offsets and sizes are those its GGUFReader reports.
TEST_CASE("gguf: a file written by llama.cpp's gguf package parses") {
  auto r = ReadGgufFile(std::string(RECUR_GGUF_SEEDS) + "/gguf_py.gguf");
  REQUIRE_MESSAGE(r.ok(), r.message());
  const GgufFile& f = *r;
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.metadata().size() == 11);
  CHECK(*f.GetString("general.architecture") == "llama");
  CHECK(*f.GetString("general.name") == "tiny");
  CHECK(*f.GetU32("llama.context_length") == 128);
  CHECK(*f.GetF32("llama.attention.layer_norm_rms_epsilon") == 1e-5f);
  CHECK(*f.GetBool("tokenizer.ggml.add_bos_token") == true);
  CHECK(*f.GetI32("i32") == -7);
  CHECK(*f.GetU64("u64") == uint64_t{1} << 40);
  CHECK(*f.GetF64("f64") == 0.125);
  CHECK(*f.GetStringArray("tokenizer.ggml.tokens") ==
        std::vector<std::string>{"<s>", "</s>", "hello"});
  CHECK(*f.GetF32Array("tokenizer.ggml.scores") == std::vector<float>{0.0f, -1.5f, 2.25f});
  CHECK(*f.GetI32Array("tokenizer.ggml.token_type") == std::vector<int32_t>{1, 3, 1});
  struct Want {
    const char* name;
    const char* type;
    std::vector<uint64_t> dims;
    uint64_t at, nbytes;
  };
  const std::vector<Want> want = {{"f32", "F32", {3, 2}, 736, 24},
                                  {"f16", "F16", {4}, 768, 8},
                                  {"q8_0", "Q8_0", {64, 2}, 800, 136},
                                  {"q4_0", "Q4_0", {64, 2}, 960, 72},
                                  {"q4_k", "Q4_K", {256, 1}, 1056, 144}};
  REQUIRE(f.tensors().size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const GgufTensor& t = f.tensors()[i];
    INFO(want[i].name);
    CHECK(t.name == want[i].name);
    CHECK(std::string(t.type->name) == want[i].type);
    CHECK(t.dims == want[i].dims);
    CHECK(f.data_offset() + t.offset == want[i].at);
    CHECK(t.nbytes == want[i].nbytes);
  }
}

TEST_CASE("gguf: a file truncated at every length is refused with a message") {
  const Bytes full = SerializeGguf(AllMetadata(), AllTensors());
  REQUIRE(ParseGguf(full).ok());
  for (std::size_t n = 0; n < full.size(); ++n) {
    auto r = ParseGguf(Bytes(full.begin(), full.begin() + n), "t.gguf");
    INFO("length " << n);
    REQUIRE_FALSE(r.ok());
    CHECK(r.message().rfind("t.gguf: ", 0) == 0);
    CHECK(r.message().size() > 10);
  }
}

}  // namespace
}  // namespace recur::impl::converter
