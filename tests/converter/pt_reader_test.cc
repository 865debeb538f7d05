// The torch.save checkpoint reader on hand-made archives and pickles.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "converter/pt_reader.h"

namespace recur::impl::converter {
namespace {

using Bytes = std::vector<uint8_t>;

void Put(Bytes* b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t Crc(const Bytes& d) {
  uint32_t c = 0xffffffffu;
  for (uint8_t x : d) {
    c ^= x;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xffffffffu;
}

// A zip archive of stored entries, laid out as torch.save lays it out.
Bytes Zip(const std::vector<std::pair<std::string, Bytes>>& entries) {
  Bytes out, cd;
  for (const auto& [name, data] : entries) {
    const uint64_t local = out.size();
    Put(&out, 0x04034b50, 4);
    Put(&out, 20, 2), Put(&out, 0, 2), Put(&out, 0, 2), Put(&out, 0, 4);
    Put(&out, Crc(data), 4), Put(&out, data.size(), 4), Put(&out, data.size(), 4);
    Put(&out, name.size(), 2), Put(&out, 0, 2);
    out.insert(out.end(), name.begin(), name.end());
    out.insert(out.end(), data.begin(), data.end());
    Put(&cd, 0x02014b50, 4);
    Put(&cd, 20, 2), Put(&cd, 20, 2), Put(&cd, 0, 2), Put(&cd, 0, 2), Put(&cd, 0, 4);
    Put(&cd, Crc(data), 4), Put(&cd, data.size(), 4), Put(&cd, data.size(), 4);
    Put(&cd, name.size(), 2), Put(&cd, 0, 2), Put(&cd, 0, 2), Put(&cd, 0, 2), Put(&cd, 0, 2);
    Put(&cd, 0, 4), Put(&cd, local, 4);
    cd.insert(cd.end(), name.begin(), name.end());
  }
  const uint64_t cd_offset = out.size();
  out.insert(out.end(), cd.begin(), cd.end());
  Put(&out, 0x06054b50, 4);
  Put(&out, 0, 2), Put(&out, 0, 2), Put(&out, entries.size(), 2), Put(&out, entries.size(), 2);
  Put(&out, cd.size(), 4), Put(&out, cd_offset, 4), Put(&out, 0, 2);
  return out;
}

// Pickle pieces (protocol 2, as torch.save writes them).
std::string Str(const std::string& s) {
  std::string o = "X";
  for (int i = 0; i < 4; ++i) o.push_back(static_cast<char>(s.size() >> (8 * i)));
  return o + s;
}
std::string Int(int v) { return std::string("K") + static_cast<char>(v); }
std::string Tuple(const std::vector<int>& v) {
  std::string o = "(";
  for (int x : v) o += Int(x);
  return o + "t";
}
// _rebuild_tensor_v2(storage `key` of `type` with `numel` elements, offset, size, stride, False, OrderedDict())
std::string Tensor(const std::string& type, const std::string& key, int numel, int offset,
                   const std::vector<int>& size, const std::vector<int>& stride) {
  return "ctorch._utils\n_rebuild_tensor_v2\n((" + Str("storage") + "ctorch\n" + type + "\n" +
         Str(key) + Str("cpu") + Int(numel) + "tQ" + Int(offset) + Tuple(size) + Tuple(stride) +
         "\x89" + "ccollections\nOrderedDict\n)RtR";
}
std::string Dict(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string o = "ccollections\nOrderedDict\n)R(";
  for (const auto& [k, v] : items) o += Str(k) + v;
  return o + "u";
}
Bytes B(const std::string& s) { return Bytes(s.begin(), s.end()); }
Bytes F32(const std::vector<float>& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Bytes Checkpoint(const std::string& pickle_body, std::vector<std::pair<std::string, Bytes>> data = {}) {
  std::vector<std::pair<std::string, Bytes>> entries = {
      {"archive/data.pkl", B("\x80\x02" + pickle_body + ".")}};
  for (auto& [k, v] : data) entries.emplace_back("archive/data/" + k, std::move(v));
  entries.emplace_back("archive/version", B("3\n"));
  return Zip(entries);
}

void ExpectError(const Bytes& bytes, std::initializer_list<const char*> parts,
                 const std::string& key = "") {
  auto r = ParsePt(bytes, "m.pt", key);
  REQUIRE_FALSE(r.ok());
  INFO("message: " << r.message());
  CHECK(r.message().rfind("m.pt: ", 0) == 0);
  for (const char* p : parts) CHECK(r.message().find(p) != std::string::npos);
}

const std::vector<float> kSix = {1, 2, 3, 4, 5, 6};

uint64_t CdOffset(const Bytes& zip) {
  uint64_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | zip[zip.size() - 22 + 16 + i];
  return v;
}

TEST_CASE("pt: a state dict of tensors parses, views share and offset into storages") {
  Bytes half = {0x00, 0x3c, 0x00, 0xc0};  // f16 1, -2
  Bytes bf = {0x80, 0x3f};                // bf16 1
  const std::string body = Dict({{"a", Tensor("FloatStorage", "0", 6, 0, {2, 3}, {3, 1})},
                                 {"b", Tensor("FloatStorage", "0", 6, 4, {2}, {1})},
                                 {"h", Tensor("HalfStorage", "1", 2, 0, {2, 1}, {1, 7})},
                                 {"z", Tensor("BFloat16Storage", "2", 1, 0, {}, {})}});
  auto r = ParsePt(Checkpoint(body, {{"0", F32(kSix)}, {"1", half}, {"2", bf}}), "m.pt");
  REQUIRE_MESSAGE(r.ok(), r.message());
  const TensorViewMap& t = r->tensors();
  REQUIRE(t.size() == 4);
  CHECK(t.at("a").shape == std::vector<int64_t>{2, 3});
  CHECK(t.at("a").dtype == DType::kF32);
  auto a = ToFloat32("a", t.at("a"));
  REQUIRE(a.ok());
  CHECK(*a == kSix);
  auto b = ToFloat32("b", t.at("b"));
  REQUIRE(b.ok());
  CHECK(*b == std::vector<float>{5, 6});
  auto h = ToFloat32("h", t.at("h"));
  REQUIRE(h.ok());
  CHECK(*h == std::vector<float>{1, -2});
  CHECK(t.at("z").shape.empty());
  auto z = ToFloat32("z", t.at("z"));
  REQUIRE(z.ok());
  CHECK(*z == std::vector<float>{1});
}

TEST_CASE("pt: --state-dict-key selects a nested dict, a nested dict without it is named") {
  const std::string sd = Dict({{"w", Tensor("FloatStorage", "0", 6, 0, {6}, {1})}});
  const std::string body = "}(" + Str("model") + "}(" + Str("encoder") + sd + Str("epoch") +
                           Int(3) + "u" + Str("step") + Int(7) + "u";
  const Bytes bytes = Checkpoint(body, {{"0", F32(kSix)}});
  auto r = ParsePt(bytes, "m.pt", "model.encoder");
  REQUIRE_MESSAGE(r.ok(), r.message());
  CHECK(r->tensors().count("w") == 1);
  ExpectError(bytes, {"\"model\" holds a dict, not a tensor", "--state-dict-key model"});
  ExpectError(bytes, {"\"model.epoch\" is an int, not a dict"}, "model.epoch.x");
  ExpectError(bytes, {"has no key \"decoder\"", "\"encoder\""}, "model.decoder");
  ExpectError(bytes, {"\"model.epoch\" is an int, not a state dict"}, "model.epoch");
  // A repeated key: the last value counts, as in Python.
  const Bytes repeated = Checkpoint("}(" + Str("w") + Int(1) + Str("w") +
                                        Tensor("FloatStorage", "0", 6, 0, {6}, {1}) + "u",
                                    {{"0", F32(kSix)}});
  auto rep = ParsePt(repeated, "m.pt");
  REQUIRE_MESSAGE(rep.ok(), rep.message());
  CHECK(rep->tensors().at("w").shape == std::vector<int64_t>{6});
  // A key that holds a dot is matched whole.
  const Bytes dotted = Checkpoint("}(" + Str("a.b") + sd + "u", {{"0", F32(kSix)}});
  CHECK(ParsePt(dotted, "m.pt", "a.b").ok());
}

TEST_CASE("pt: globals outside the allowed set are refused by name") {
  ExpectError(Checkpoint("cos\nsystem\n(" + Str("echo") + "tR"),
              {"global \"os.system\" is not allowed"});
  ExpectError(Checkpoint("cbuiltins\neval\n"), {"global \"builtins.eval\" is not allowed"});
  ExpectError(Checkpoint(Str("torch") + Str("load") + "\x93"),
              {"global \"torch.load\" is not allowed"});
  ExpectError(Checkpoint("ctorch\nFloatStorage\n)R"), {"storages come only by persistent id"});
  ExpectError(Checkpoint("ccollections\nOrderedDict\n(K\x01tR"), {"OrderedDict called with arguments"});
  ExpectError(Checkpoint("c__builtin__\nset\n"), {"\"__builtin__.set\""});
  // Opcodes that would call or build arbitrary objects.
  ExpectError(Checkpoint("(ios\nsystem\n"), {"opcode 0x69 is not allowed"});
  ExpectError(Checkpoint("\x81"), {"opcode 0x81 is not allowed"});
}

TEST_CASE("pt: tensors must be contiguous and lie within their storage") {
  const Bytes six = F32(kSix);
  ExpectError(Checkpoint(Dict({{"t", Tensor("FloatStorage", "0", 6, 0, {2, 3}, {1, 2})}}),
                         {{"0", six}}),
              {"strides [1,2]", "not contiguous", "contiguous()"});
  ExpectError(Checkpoint(Dict({{"t", Tensor("FloatStorage", "0", 6, 1, {2, 3}, {3, 1})}}),
                         {{"0", six}}),
              {"at offset 1 needs 1 + 6 elements", "holds 6"});
  ExpectError(Checkpoint(Dict({{"t", Tensor("FloatStorage", "0", 6, 0, {2, 4}, {4, 1})}}),
                         {{"0", six}}),
              {"needs 0 + 8 elements"});
  // The storage's declared length against its entry.
  ExpectError(Checkpoint(Dict({{"t", Tensor("FloatStorage", "0", 7, 0, {7}, {1})}}), {{"0", six}}),
              {"declares 7 elements of F32 but its entry holds 24 bytes"});
  ExpectError(Checkpoint(Dict({{"t", Tensor("FloatStorage", "9", 6, 0, {6}, {1})}}), {{"0", six}}),
              {"storage \"9\" is missing"});
  // Sizes whose product overflows.
  ExpectError(Checkpoint(Dict({{"t", "ctorch._utils\n_rebuild_tensor_v2\n((" + Str("storage") +
                                         "ctorch\nFloatStorage\n" + Str("0") + Str("cpu") + Int(6) +
                                         "tQ" + Int(0) + "(\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x3f"
                                         "\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x3ft" + Tuple({1, 1}) +
                                         "\x89" + "ccollections\nOrderedDict\n)RtR"}}),
                         {{"0", six}}),
              {"too many elements"});
  ExpectError(Checkpoint(Dict({{"t", Int(3)}})), {"\"t\" holds an int, not a tensor"});
}

TEST_CASE("pt: malformed pickles are refused, not crashed on") {
  ExpectError(Checkpoint("h\x05"), {"memo index 5 was never stored"});
  ExpectError(Checkpoint("j\xff\xff\xff\x7f"), {"memo index 2147483647 was never stored"});
  ExpectError(Checkpoint("X\xff\xff\xff\x7f"), {"runs past the pickle's end"});
  ExpectError(Checkpoint("\x8a\x09"), {"integer of 9 bytes"});
  ExpectError(Checkpoint("s"), {"stack underflow"});
  ExpectError(Checkpoint("t"), {"no MARK"});
  ExpectError(Checkpoint(Int(1) + Int(2)), {"STOP with 2 values"});
  ExpectError(Checkpoint(std::string(2000, '(')), {"MARKs nest deeper than 1000"});
  ExpectError(Checkpoint("]" + Str("k") + Int(1) + "s"), {"SETITEM(S) on something not a dict"});
  // A list holding itself is harmless (no recursion walks it).
  ExpectError(Checkpoint(std::string("]q\0h\0a", 6)), {"the checkpoint is a list, not a state dict"});
  // Deep nesting of containers costs no stack.
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "]";
  for (int i = 0; i < 99999; ++i) deep += "a";
  ExpectError(Checkpoint(deep), {"is a list, not a state dict"});
  // The pickle without STOP.
  auto z = Zip({{"archive/data.pkl", B("\x80\x02}")}});
  ExpectError(z, {"ends without STOP"});
}

TEST_CASE("pt: broken archives are refused") {
  const Bytes good = Checkpoint(Dict({{"w", Tensor("FloatStorage", "0", 6, 0, {6}, {1})}}),
                                {{"0", F32(kSix)}});
  REQUIRE(ParsePt(good, "m.pt").ok());
  // Truncated anywhere: refused with a message.
  for (std::size_t n = 0; n < good.size(); n += 7) {
    auto r = ParsePt(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)), "m.pt");
    CHECK_FALSE(r.ok());
    CHECK(r.message().rfind("m.pt: ", 0) == 0);
  }
  ExpectError(Bytes(good.begin(), good.end() - 30), {"no zip end-of-central-directory record"});
  // A flipped data byte fails the CRC.
  Bytes flipped = good;
  const std::size_t at = std::string(good.begin(), good.end()).find("archive/data/0") + 14;
  flipped[at] ^= 1;
  ExpectError(flipped, {"\"archive/data/0\" fails its CRC-32 check"});
  // A declared size far beyond the file (a would-be bomb): the central record's sizes.
  Bytes bomb = good;
  const std::size_t cd = std::string(bomb.begin(), bomb.end()).rfind("PK\x01\x02");
  for (int i = 0; i < 4; ++i) bomb[cd + 20 + i] = bomb[cd + 24 + i] = 0x7f;
  ExpectError(bomb, {"declares 2139062143 bytes", "beyond the"});
  // Entries that share bytes (how non-recursive zip bombs multiply their size).
  Bytes overlap = good;
  for (int i = 0; i < 4; ++i) overlap[cd + 42 + i] = 0;
  ExpectError(overlap, {"overlap"});
  // A compressed entry.
  Bytes deflated = good;
  deflated[cd + 10] = 8;
  ExpectError(deflated, {"is compressed (method 8)"});
  // An entry count beyond what the directory can hold.
  Bytes many = good;
  many[many.size() - 22 + 10] = 0xfe;
  many[many.size() - 22 + 11] = 0xff;
  ExpectError(many, {"declares 65534 entries"});
  // The same archive with its directory found through zip64 records, as
  // torch.save writes them for large files.
  Bytes z64(good.begin(), good.end() - 22);
  const uint64_t end64 = z64.size();
  const uint64_t entries = good[good.size() - 22 + 10], cd_size = good.size() - 22 - CdOffset(good);
  Put(&z64, 0x06064b50, 4), Put(&z64, 44, 8), Put(&z64, 45, 2), Put(&z64, 45, 2);
  Put(&z64, 0, 4), Put(&z64, 0, 4), Put(&z64, entries, 8), Put(&z64, entries, 8);
  Put(&z64, cd_size, 8), Put(&z64, CdOffset(good), 8);
  Put(&z64, 0x07064b50, 4), Put(&z64, 0, 4), Put(&z64, end64, 8), Put(&z64, 1, 4);
  Put(&z64, 0x06054b50, 4), Put(&z64, 0, 4), Put(&z64, 0xffff, 2), Put(&z64, 0xffff, 2);
  Put(&z64, 0xffffffff, 4), Put(&z64, 0xffffffff, 4), Put(&z64, 0, 2);
  auto r64 = ParsePt(z64, "m.pt");
  REQUIRE_MESSAGE(r64.ok(), r64.message());
  CHECK(r64->tensors().count("w") == 1);
  Bytes lost = z64;
  lost[end64 + 56] ^= 1;  // the locator's signature
  ExpectError(lost, {"zip64 archive without a zip64 end locator"});
  Bytes far = z64;
  far[end64 + 56 + 8 + 6] = 0x10;  // the zip64 end record's offset, past the file
  ExpectError(far, {"zip64 end record lies outside the file"});
  ExpectError(Zip({{"archive/other", B("x")}}), {"no <folder>/data.pkl"});
  ExpectError(Zip({{"archive/data.pkl", B("\x80\x02}.")}, {"archive/byteorder", B("big")}}),
              {"big-endian"});
  ExpectError(B("\x80\x02\x8a\x0a"), {"legacy (pre-zip) torch.save file"});
  ExpectError(B("hello"), {"not a PyTorch checkpoint"});
}

}  // namespace
}  // namespace recur::impl::converter
