// The torch.save checkpoint reader on hand-made archives and pickles.
#include <doctest/doctest.h>

#include <algorithm>
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

// A zip entry as written: `data` is what the archive holds (compressed when
// `method` is not 0), `size` and `crc` describe the uncompressed bytes.
struct ZipEntry {
  std::string name;
  Bytes data;
  uint16_t method = 0;
  uint16_t flags = 0;
  uint64_t size = 0;
  uint32_t crc = 0;
};

// A zip archive, laid out as torch.save lays it out. With `zip64_offsets` the
// central directory gives each local header's offset in a zip64 extra field,
// as it does for entries past 4 GiB.
Bytes ZipOf(const std::vector<ZipEntry>& entries, bool zip64_offsets = false) {
  Bytes out, cd;
  for (const ZipEntry& e : entries) {
    const uint64_t local = out.size();
    Put(&out, 0x04034b50, 4);
    Put(&out, 20, 2), Put(&out, e.flags, 2), Put(&out, e.method, 2), Put(&out, 0, 4);
    Put(&out, e.crc, 4), Put(&out, e.data.size(), 4), Put(&out, e.size, 4);
    Put(&out, e.name.size(), 2), Put(&out, 0, 2);
    out.insert(out.end(), e.name.begin(), e.name.end());
    out.insert(out.end(), e.data.begin(), e.data.end());
    const int version = zip64_offsets ? 45 : 20;
    Put(&cd, 0x02014b50, 4);
    Put(&cd, version, 2), Put(&cd, version, 2), Put(&cd, e.flags, 2), Put(&cd, e.method, 2);
    Put(&cd, 0, 4), Put(&cd, e.crc, 4), Put(&cd, e.data.size(), 4), Put(&cd, e.size, 4);
    Put(&cd, e.name.size(), 2), Put(&cd, zip64_offsets ? 12 : 0, 2), Put(&cd, 0, 2);
    Put(&cd, 0, 2), Put(&cd, 0, 2), Put(&cd, 0, 4), Put(&cd, zip64_offsets ? 0xffffffff : local, 4);
    cd.insert(cd.end(), e.name.begin(), e.name.end());
    if (zip64_offsets) Put(&cd, 1, 2), Put(&cd, 8, 2), Put(&cd, local, 8);
  }
  const uint64_t cd_offset = out.size();
  out.insert(out.end(), cd.begin(), cd.end());
  Put(&out, 0x06054b50, 4);
  Put(&out, 0, 2), Put(&out, 0, 2), Put(&out, entries.size(), 2), Put(&out, entries.size(), 2);
  Put(&out, cd.size(), 4), Put(&out, cd_offset, 4), Put(&out, 0, 2);
  return out;
}

ZipEntry Stored(const std::string& name, const Bytes& data) {
  return {name, data, 0, 0, data.size(), Crc(data)};
}

// Deflate (RFC 1951) in stored blocks: a valid stream that zlib inflates.
ZipEntry Deflated(const std::string& name, const Bytes& data) {
  Bytes z;
  std::size_t at = 0;
  do {
    const std::size_t n = std::min<std::size_t>(data.size() - at, 65535);
    z.push_back(at + n == data.size() ? 1 : 0);  // BFINAL, BTYPE 00
    Put(&z, n, 2), Put(&z, ~n & 0xffff, 2);
    z.insert(z.end(), data.begin() + static_cast<std::ptrdiff_t>(at),
             data.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  } while (at < data.size());
  return {name, z, 8, 0, data.size(), Crc(data)};
}

Bytes Zip(const std::vector<std::pair<std::string, Bytes>>& entries) {
  std::vector<ZipEntry> stored;
  for (const auto& [name, data] : entries) stored.push_back(Stored(name, data));
  return ZipOf(stored);
}

// Pickle pieces (protocol 2, as torch.save writes them).
std::string Str(const std::string& s) {
  std::string o = "X";
  for (int i = 0; i < 4; ++i) o.push_back(static_cast<char>(s.size() >> (8 * i)));
  return o + s;
}
std::string Int(int v) {
  if (v >= 0 && v < 256) return std::string("K") + static_cast<char>(v);
  std::string o = "J";
  for (int i = 0; i < 4; ++i) o.push_back(static_cast<char>(v >> (8 * i)));
  return o;
}
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

Bytes Checkpoint(const std::string& pickle_body, std::vector<std::pair<std::string, Bytes>> data = {},
                 ZipEntry (*entry)(const std::string&, const Bytes&) = Stored,
                 bool zip64_offsets = false) {
  std::vector<ZipEntry> entries = {entry("archive/data.pkl", B("\x80\x02" + pickle_body + "."))};
  for (auto& [k, v] : data) entries.push_back(entry("archive/data/" + k, v));
  entries.push_back(entry("archive/version", B("3\n")));
  return ZipOf(entries, zip64_offsets);
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

// `n` stored entries whose data all end where the payload of `payload` bytes
// ends, each local header inside the data of the ones before (the overlapping
// kind of zip bomb: the declared sizes grow as n squared, the file as n). Their
// CRCs are right when `crcs` is set.
Bytes NestedBomb(int n, std::size_t payload, bool crcs) {
  Bytes out, cd;
  const uint64_t header = 30 + 13, end = n * header + payload;
  for (int k = 0; k < n; ++k) {
    const std::string name = "archive/b/" + std::to_string(100 + k);
    const uint64_t size = end - (k + 1) * header;
    Put(&out, 0x04034b50, 4);
    Put(&out, 20, 2), Put(&out, 0, 2), Put(&out, 0, 2), Put(&out, 0, 4);
    Put(&out, 0, 4), Put(&out, size, 4), Put(&out, size, 4), Put(&out, 13, 2), Put(&out, 0, 2);
    out.insert(out.end(), name.begin(), name.end());
    Put(&cd, 0x02014b50, 4);
    Put(&cd, 20, 2), Put(&cd, 20, 2), Put(&cd, 0, 2), Put(&cd, 0, 2), Put(&cd, 0, 4);
    Put(&cd, 0, 4), Put(&cd, size, 4), Put(&cd, size, 4);
    Put(&cd, 13, 2), Put(&cd, 0, 2), Put(&cd, 0, 2), Put(&cd, 0, 2), Put(&cd, 0, 2);
    Put(&cd, 0, 4), Put(&cd, k * header, 4);
    cd.insert(cd.end(), name.begin(), name.end());
  }
  out.resize(end);
  // Last to first: an entry's data holds the local headers after it.
  for (int k = n - 1; crcs && k >= 0; --k) {
    const auto from = out.begin() + static_cast<std::ptrdiff_t>((k + 1) * header);
    const uint32_t crc = Crc(Bytes(from, out.end()));
    for (int i = 0; i < 4; ++i) {
      out[k * header + 14 + i] = cd[k * (46 + 13) + 16 + i] = static_cast<uint8_t>(crc >> (8 * i));
    }
  }
  out.insert(out.end(), cd.begin(), cd.end());
  Put(&out, 0x06054b50, 4);
  Put(&out, 0, 2), Put(&out, 0, 2), Put(&out, n, 2), Put(&out, n, 2);
  Put(&out, cd.size(), 4), Put(&out, end, 4), Put(&out, 0, 2);
  return out;
}

// Sets a 2-byte field of the entry named `name` in its local header (at
// `local_offset`) and its central one (at `central_offset`), so that the two
// stay consistent.
void SetField(Bytes* zip, const std::string& name, int local_offset, int central_offset,
              uint16_t v) {
  const std::string text(zip->begin(), zip->end());
  for (std::size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    int offset = -1;
    const int name_at = static_cast<int>(at);
    if (at >= 30 && text.compare(at - 30, 4, "PK\x03\x04") == 0) offset = name_at - 30 + local_offset;
    if (at >= 46 && text.compare(at - 46, 4, "PK\x01\x02") == 0) offset = name_at - 46 + central_offset;
    if (offset < 0) continue;
    (*zip)[offset] = static_cast<uint8_t>(v);
    (*zip)[offset + 1] = static_cast<uint8_t>(v >> 8);
  }
}

TEST_CASE("pt: deflated entries read as stored ones, views outlive moves") {
  const std::string body = Dict({{"w", Tensor("FloatStorage", "0", 6, 0, {2, 3}, {3, 1})}});
  std::vector<float> big(40000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  const std::string big_body = Dict({{"w", Tensor("FloatStorage", "0", 40000, 0, {40000}, {1})}});
  for (const Bytes& bytes : {Checkpoint(body, {{"0", F32(kSix)}}, Deflated),
                             Checkpoint(big_body, {{"0", F32(big)}}, Deflated)}) {
    auto r = ParsePt(bytes, "m.pt");
    REQUIRE_MESSAGE(r.ok(), r.message());
    PtFile moved = std::move(*r);
    PtFile again;
    again = std::move(moved);
    auto w = ToFloat32("w", again.tensors().at("w"));
    REQUIRE(w.ok());
    CHECK(*w == (w->size() == 6 ? kSix : big));
  }
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
  ExpectError(Bytes(good.begin(), good.end() - 30), {"unreadable zip archive"});
  // A flipped data byte fails the CRC, stored or deflated.
  for (const Bytes& base : {good, Checkpoint(Dict({{"w", Tensor("FloatStorage", "0", 6, 0, {6}, {1})}}),
                                             {{"0", F32(kSix)}}, Deflated)}) {
    Bytes flipped = base;
    const std::size_t at = std::string(base.begin(), base.end()).find("archive/data/0") + 14 + 8;
    flipped[at] ^= 1;
    ExpectError(flipped, {"zip entry \"archive/data/0\"", "CRC error"});
  }
  // A deflated entry that declares more or fewer bytes than it inflates to.
  for (const int delta : {-1, 1}) {
    ZipEntry lying = Deflated("archive/data/0", F32(kSix));
    lying.size += delta;
    Bytes z = ZipOf({Stored("archive/data.pkl", B("\x80\x02}.")), lying});
    ExpectError(z, {"zip entry \"archive/data/0\" holds",
                    delta < 0 ? "more bytes than the 23 it declares"
                              : "fewer bytes than the 25 it declares"});
  }
  // Zip bombs, refused before anything is read: a deflated entry declaring a
  // gigabyte, and entries that share their bytes.
  ZipEntry bomb = Deflated("archive/data/0", F32(kSix));
  bomb.size = 1u << 30;
  ExpectError(ZipOf({Stored("archive/data.pkl", B("\x80\x02}.")), bomb}),
              {"declare more than 82624 uncompressed bytes in all", "a zip bomb?",
               "reached at \"archive/data/0\" (1073741824 bytes)"});
  const Bytes nested = NestedBomb(300, 65536, false);
  const std::string nested_bound = "declare more than " + std::to_string(64 * nested.size() + 65536);
  ExpectError(nested, {nested_bound.c_str(), "a zip bomb?"});
  // The same, small enough to pass the bound: read, then found to hold no data.pkl.
  ExpectError(NestedBomb(3, 100, true), {"no <folder>/data.pkl"});
  // A compression method libzip cannot read (1, shrink), and encryption.
  Bytes shrunk = good;
  SetField(&shrunk, "archive/data/0", 8, 10, 1);
  ExpectError(shrunk, {"zip entry \"archive/data/0\" is compressed with method 1"});
  CHECK(ParsePt(shrunk, "m.pt").status().code() == StatusCode::kUnsupported);
  Bytes encrypted = good;
  SetField(&encrypted, "archive/data/0", 6, 8, 1);
  ExpectError(encrypted, {"zip entry \"archive/data/0\" is encrypted"});
  // An entry count beyond what the directory holds.
  Bytes many = good;
  many[many.size() - 22 + 10] = 0xfe;
  many[many.size() - 22 + 11] = 0xff;
  ExpectError(many, {"unreadable zip archive"});
  // A name twice.
  ExpectError(Zip({{"archive/data.pkl", B("\x80\x02}.")}, {"archive/data.pkl", B("\x80\x02}.")}}),
              {"an entry name twice"});
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
  ExpectError(lost, {"unreadable zip archive"});
  Bytes far = z64;
  far[end64 + 56 + 8 + 6] = 0x10;  // the zip64 end record's offset, past the file
  ExpectError(far, {"unreadable zip archive"});
  ExpectError(Zip({{"archive/other", B("x")}}), {"no <folder>/data.pkl"});
  ExpectError(Zip({{"archive/data.pkl", B("\x80\x02}.")}, {"archive/byteorder", B("big")}}),
              {"big-endian"});
  ExpectError(B("\x80\x02\x8a\x0a"), {"not a PyTorch checkpoint"});  // a cut magic number
  ExpectError(B("hello"), {"not a PyTorch checkpoint"});
}

// The legacy format: magic, protocol version, system information, the object
// (persistent ids with a sixth field, None), the storage keys, the storages.
std::string LegacyTensor(const std::string& type, const std::string& key, int numel,
                         const std::vector<int>& size, const std::vector<int>& stride,
                         const std::string& view = "N") {
  return "ctorch._utils\n_rebuild_tensor_v2\n((" + Str("storage") + "ctorch\n" + type + "\n" +
         Str(key) + Str("cpu") + Int(numel) + view + "tQ" + Int(0) + Tuple(size) + Tuple(stride) +
         "\x89" + "ccollections\nOrderedDict\n)RtR";
}
Bytes Legacy(const std::string& body, const std::vector<std::string>& keys,
             const std::vector<std::pair<uint64_t, Bytes>>& storages, bool little = true) {
  std::string b = std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);
  b += std::string("\x80\x02M\xe9\x03.", 6);
  b += "\x80\x02}(" + Str("protocol_version") + std::string("M\xe9\x03", 3) +
       Str("little_endian") + (little ? "\x88" : "\x89") + "u.";
  b += "\x80\x02" + body + ".";
  b += "\x80\x02](";
  for (const std::string& k : keys) b += Str(k);
  b += "e.";
  Bytes out = B(b);
  for (const auto& [count, bytes] : storages) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(count >> (8 * i)));
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  return out;
}

TEST_CASE("pt: stored entries and legacy storages are read in place, deflated ones copied") {
  const std::string body = Dict({{"w", Tensor("FloatStorage", "0", 6, 0, {2, 3}, {3, 1})}});
  const std::string legacy_body =
      Dict({{"w", LegacyTensor("FloatStorage", "0", 6, {2, 3}, {3, 1})}});
  struct Case {
    const char* what;
    Bytes bytes;
    bool in_place;
  };
  const Case cases[] = {
      {"stored", Checkpoint(body, {{"0", F32(kSix)}}), true},
      {"stored, zip64 offsets", Checkpoint(body, {{"0", F32(kSix)}}, Stored, true), true},
      {"deflated", Checkpoint(body, {{"0", F32(kSix)}}, Deflated), false},
      {"legacy", Legacy(legacy_body, {"0"}, {{6, F32(kSix)}}), true},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Bytes bytes = c.bytes;
    const uint8_t* begin = bytes.data();  // a vector moved in keeps its buffer
    const uint8_t* end = begin + bytes.size();
    auto r = ParsePt(FileBytes(std::move(bytes)), "m.pt");
    REQUIRE_MESSAGE(r.ok(), r.message());
    const TensorView& w = r->tensors().at("w");
    CHECK((w.data >= begin && w.data + w.nbytes <= end) == c.in_place);
    auto values = ToFloat32("w", w);
    REQUIRE(values.ok());
    CHECK(*values == kSix);
  }
}

TEST_CASE("pt: the legacy format reads as the zip format does") {
  const std::string body = Dict({{"a", LegacyTensor("FloatStorage", "140", 6, {2, 3}, {3, 1})},
                                 {"b", LegacyTensor("FloatStorage", "7", 2, {2}, {1})}});
  const Bytes good = Legacy(body, {"140", "7"}, {{6, F32(kSix)}, {2, F32({8, 9})}});
  auto r = ParsePt(good, "m.pt");
  REQUIRE_MESSAGE(r.ok(), r.message());
  REQUIRE(r->tensors().size() == 2);
  CHECK(r->tensors().at("a").shape == std::vector<int64_t>{2, 3});
  auto a = ToFloat32("a", r->tensors().at("a"));
  REQUIRE(a.ok());
  CHECK(*a == kSix);
  auto b = ToFloat32("b", r->tensors().at("b"));
  REQUIRE(b.ok());
  CHECK(*b == std::vector<float>{8, 9});

  // Every prefix of the file is refused with a message, none crashes.
  for (std::size_t n = 0; n < good.size(); ++n) {
    CAPTURE(n);
    CHECK_FALSE(ParsePt(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)), "m.pt").ok());
  }
  ExpectError(Bytes(good.begin(), good.end() - 1), {"legacy torch.save file: truncated: storage \"7\" needs 8 bytes, 7 remain"});
  ExpectError(Legacy(body, {"140", "7"}, {{6, F32(kSix)}, {3, F32({8, 9, 10})}}),
              {"storage \"7\" holds 3 elements but its persistent id declares 2"});
  ExpectError(Legacy(body, {"140"}, {{6, F32(kSix)}}),
              {"storage \"7\" is named by a tensor but not listed"});
  ExpectError(Legacy(body, {"140", "7", "9"}, {{6, F32(kSix)}, {2, F32({8, 9})}}),
              {"storage \"9\" is listed but no tensor names it"});
  ExpectError(Legacy(body, {"140", "140"}, {{6, F32(kSix)}, {6, F32(kSix)}}),
              {"storage \"140\" is listed twice"});
  ExpectError(Legacy(body, {"140", "7"}, {{6, F32(kSix)}, {2, F32({8, 9})}}, false),
              {"legacy torch.save file written on a big-endian machine"});
  ExpectError(Legacy(Dict({{"a", LegacyTensor("FloatStorage", "1", 6, {6}, {1}, Tuple({0}))}}), {"1"},
                     {{6, F32(kSix)}}),
              {"persistent id names a storage view"});
  ExpectError(Legacy("cos\nsystem\n" + Str("ls") + "\x85R", {}, {}),
              {"the object pickle at byte", "global \"os.system\" is not allowed"});
}

}  // namespace
}  // namespace recur::impl::converter
