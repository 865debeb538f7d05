// The safetensors reader on hand-made buffers.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "converter/safetensors.h"
#include "converter/sha256.h"
#include "converter_test_util.h"

namespace recur::impl::converter {
namespace {

using testing::BytesOf;
using testing::MakeSafetensors;

// Expects a parse error whose message contains every piece of `parts`.
void ExpectError(const std::vector<uint8_t>& bytes, std::initializer_list<const char*> parts) {
  auto r = ParseSafetensors(bytes, "w.safetensors");
  REQUIRE_FALSE(r.ok());
  INFO("message: " << r.message());
  CHECK(r.message().rfind("w.safetensors: ", 0) == 0);
  for (const char* p : parts) CHECK(r.message().find(p) != std::string::npos);
}

TEST_CASE("safetensors: a good file parses, __metadata__ is ignored") {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<float> b = {-1.5f};
  std::vector<uint8_t> data = BytesOf(a);
  auto bb = BytesOf(b);
  data.insert(data.end(), bb.begin(), bb.end());
  const std::string header =
      R"({"__metadata__": {"format": "pt"},
          "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
          "b": {"dtype": "F32", "shape": [], "data_offsets": [24, 28]},
          "empty": {"dtype": "F32", "shape": [0, 4], "data_offsets": [28, 28]}})";
  auto r = ParseSafetensors(MakeSafetensors(header, data));
  REQUIRE_MESSAGE(r.ok(), r.message());
  const TensorViewMap& t = r->tensors();
  REQUIRE(t.size() == 3);
  CHECK(t.count("__metadata__") == 0);
  CHECK(t.at("a").shape == std::vector<int64_t>{2, 3});
  CHECK(t.at("a").dtype == DType::kF32);
  CHECK(t.at("a").nbytes == 24);
  auto av = ToFloat32("a", t.at("a"));
  REQUIRE(av.ok());
  CHECK(*av == a);
  auto bv = ToFloat32("b", t.at("b"));
  REQUIRE(bv.ok());
  CHECK(*bv == b);
  CHECK(t.at("b").shape.empty());
  CHECK(t.at("empty").nbytes == 0);
}

TEST_CASE("safetensors: views survive moving the file") {
  std::vector<float> a = {7, 8};
  auto r = ParseSafetensors(
      MakeSafetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", BytesOf(a)));
  REQUIRE(r.ok());
  SafetensorsFile moved = std::move(r).value();
  auto v = ToFloat32("a", moved.tensors().at("a"));
  REQUIRE(v.ok());
  CHECK(*v == a);
}

TEST_CASE("safetensors: SerializeSafetensors round-trips") {
  TensorMap m;
  m["x.weight"] = Tensor{{2, 2}, {1, 2, 3, 4}};
  m["x.bias"] = Tensor{{2}, {0.5f, -0.5f}};
  auto bytes = SerializeSafetensors(m, {{"note", "hi"}});
  // The data starts 8-byte aligned, as safetensors writes it.
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  CHECK((8 + n) % 8 == 0);
  auto r = ParseSafetensors(bytes);
  REQUIRE_MESSAGE(r.ok(), r.message());
  REQUIRE(r->tensors().size() == 2);
  for (const auto& [name, t] : m) {
    auto v = ToFloat32(name, r->tensors().at(name));
    REQUIRE(v.ok());
    CHECK(*v == t.data);
    CHECK(r->tensors().at(name).shape == t.shape);
  }
}

TEST_CASE("safetensors: shorter than the 8-byte length") {
  ExpectError({1, 2, 3}, {"too short"});
  ExpectError({}, {"too short"});
}

TEST_CASE("safetensors: header length past the end of the file") {
  const std::string header = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  ExpectError(MakeSafetensors(header, {0, 0, 0, 0}, 1000), {"header length 1000", "exceeds"});
  ExpectError(MakeSafetensors("", {}, UINT64_MAX - 1), {"header length", "exceeds"});
}

TEST_CASE("safetensors: truncated header") {
  const std::string header = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  auto full = MakeSafetensors(header, {0, 0, 0, 0});
  // Cut inside the JSON: the declared length now runs past the end.
  std::vector<uint8_t> cut(full.begin(), full.begin() + 8 + 20);
  ExpectError(cut, {"exceeds"});
  // Declared length shorter than the JSON: the JSON is cut.
  ExpectError(MakeSafetensors(header, {0, 0, 0, 0}, 20), {"not valid JSON"});
}

TEST_CASE("safetensors: bad JSON") {
  ExpectError(MakeSafetensors("{\"a\": [1, 2", {}), {"header is not valid JSON"});
  ExpectError(MakeSafetensors("[1, 2, 3]", {}), {"not a JSON object"});
  ExpectError(MakeSafetensors(R"({"a": 5})", {}), {"tensor \"a\"", "not a JSON object"});
  ExpectError(MakeSafetensors(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", {0, 0, 0, 0}),
              {"tensor \"a\"", "dtype"});
  ExpectError(MakeSafetensors(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
                              {0, 0, 0, 0}),
              {"tensor \"a\"", "shape"});
  ExpectError(MakeSafetensors(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})",
                              {0, 0, 0, 0}),
              {"tensor \"a\"", "data_offsets"});
  ExpectError(MakeSafetensors(R"({"__metadata__": 3})", {}), {"__metadata__"});
}

TEST_CASE("safetensors: a key twice is refused, not resolved to the last") {
  const char* entry = R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})";
  ExpectError(MakeSafetensors(std::string("{\"a\": ") + entry + ", \"a\": " + entry + "}",
                              {0, 0, 0, 0}),
              {"names tensor \"a\" twice"});
  ExpectError(MakeSafetensors(
                  R"({"a": {"dtype": "F32", "shape": [1], "dtype": "F16", "data_offsets": [0, 4]}})",
                  {0, 0, 0, 0}),
              {"repeats the key \"dtype\" in one object"});
  ExpectError(MakeSafetensors(R"({"__metadata__": {}, "__metadata__": {}})", {}),
              {"repeats the key \"__metadata__\" in one object"});
  ExpectError(MakeSafetensors(R"([{"a": 1, "a": 2}])", {}), {"header is not a JSON object"});
  ExpectError(MakeSafetensors(R"({"__metadata__": {"x": "1", "x": "2"}})", {}),
              {"repeats the key \"x\""});
  // The same keys in different entries are not duplicates.
  auto r = ParseSafetensors(
      MakeSafetensors(std::string("{\"a\": ") + entry +
                          R"(, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                      {0, 0, 0, 0, 0, 0, 0, 0}),
      "w.safetensors");
  INFO(r.message());
  CHECK(r.ok());
}

TEST_CASE("safetensors: offsets out of range") {
  ExpectError(MakeSafetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                              {0, 0, 0, 0}),
              {"tensor \"a\"", "data_offsets [0, 8]", "outside the 4-byte data section"});
  ExpectError(MakeSafetensors(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})",
                              std::vector<uint8_t>(8)),
              {"tensor \"a\"", "begin > end"});
}

TEST_CASE("safetensors: overlapping tensors") {
  ExpectError(MakeSafetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                  "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                              std::vector<uint8_t>(12)),
              {"\"a\" [0, 8)", "\"b\" [4, 12)", "overlap"});
}

TEST_CASE("safetensors: shape times dtype size must match the byte span") {
  ExpectError(MakeSafetensors(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
                              std::vector<uint8_t>(8)),
              {"tensor \"a\"", "shape [3] of F32 needs 12 bytes", "span 8"});
  ExpectError(MakeSafetensors(R"({"a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 16]}})",
                              std::vector<uint8_t>(16)),
              {"needs 8 bytes", "span 16"});
  // A shape whose byte size overflows 64 bits.
  ExpectError(
      MakeSafetensors(
          R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})",
          std::vector<uint8_t>(8)),
      {"tensor \"a\"", "too many"});
}

TEST_CASE("safetensors: unknown dtype") {
  ExpectError(MakeSafetensors(R"({"a": {"dtype": "F31", "shape": [1], "data_offsets": [0, 4]}})",
                              std::vector<uint8_t>(4)),
              {"tensor \"a\"", "unknown dtype \"F31\""});
}

TEST_CASE("safetensors: F64, F16 and BF16 convert to F32") {
  std::vector<double> d = {1.5, -2.25, 1e-3};
  std::vector<uint16_t> h = {0x3c00, 0xc000, 0x3555, 0x0001, 0x7c00, 0x8000};  // 1, -2, ~1/3, min subnormal, inf, -0
  std::vector<uint16_t> bf = {0x3f80, 0xc040, 0x3eaa};                       // 1, -3, ~0.332
  std::vector<uint8_t> data = BytesOf(d);
  auto hb = BytesOf(h);
  auto bb = BytesOf(bf);
  data.insert(data.end(), hb.begin(), hb.end());
  data.insert(data.end(), bb.begin(), bb.end());
  auto r = ParseSafetensors(MakeSafetensors(
      R"({"d": {"dtype": "F64", "shape": [3], "data_offsets": [0, 24]},
          "h": {"dtype": "F16", "shape": [6], "data_offsets": [24, 36]},
          "b": {"dtype": "BF16", "shape": [3], "data_offsets": [36, 42]}})",
      data));
  REQUIRE_MESSAGE(r.ok(), r.message());
  auto dv = ToFloat32("d", r->tensors().at("d"));
  REQUIRE(dv.ok());
  CHECK((*dv)[0] == 1.5f);
  CHECK((*dv)[1] == -2.25f);
  CHECK((*dv)[2] == static_cast<float>(1e-3));  // one f64 → f32 conversion, as the converter's
  auto hv = ToFloat32("h", r->tensors().at("h"));
  REQUIRE(hv.ok());
  CHECK((*hv)[0] == 1.0f);
  CHECK((*hv)[1] == -2.0f);
  CHECK((*hv)[2] == std::ldexp(1365.0f, -12));  // 0x3555, exact: every f16 is an f32
  CHECK((*hv)[3] == std::ldexp(1.0f, -24));
  CHECK(std::isinf((*hv)[4]));
  CHECK((*hv)[5] == 0.0f);
  CHECK(std::signbit((*hv)[5]));
  auto bv = ToFloat32("b", r->tensors().at("b"));
  REQUIRE(bv.ok());
  CHECK((*bv)[0] == 1.0f);
  CHECK((*bv)[1] == -3.0f);
  CHECK((*bv)[2] == 0.33203125f);  // 0x3EAA = 85·2⁻⁸, exact: the top half of an f32
}

TEST_CASE("safetensors: an F64 value past float32's range is refused as such, not as +Inf") {
  // One F64 tensor "d" holding `values`, converted.
  auto convert = [](const std::vector<double>& values) {
    const std::string n = std::to_string(values.size());
    auto r = ParseSafetensors(MakeSafetensors(R"({"d": {"dtype": "F64", "shape": [)" + n +
                                                  R"(], "data_offsets": [0, )" +
                                                  std::to_string(8 * values.size()) + "]}}",
                                              BytesOf(values)));
    REQUIRE_MESSAGE(r.ok(), r.message());
    return ToFloat32("d", r->tensors().at("d"));
  };
  auto v = convert({1.0, -1e300, 3.4028235e38});
  REQUIRE_FALSE(v.ok());
  CHECK(v.message() ==
        "d: F64 value -1.0000000000000001e+300 at index 1 is outside float32's range "
        "(|x| <= 3.4028235e38)");
  // FLT_MAX itself and a true infinity (left to the NaN/Inf check) convert.
  v = convert({3.4028235e38, std::numeric_limits<double>::infinity()});
  REQUIRE_MESSAGE(v.ok(), v.message());
  CHECK((*v)[0] == std::numeric_limits<float>::max());
  CHECK(std::isinf((*v)[1]));
}

TEST_CASE("safetensors: integer dtypes parse but are refused as weights") {
  std::vector<int64_t> ids = {1, 2, 3};
  auto r = ParseSafetensors(MakeSafetensors(
      R"({"position_ids": {"dtype": "I64", "shape": [3], "data_offsets": [0, 24]}})", BytesOf(ids)));
  REQUIRE_MESSAGE(r.ok(), r.message());
  auto v = ToFloat32("position_ids", r->tensors().at("position_ids"));
  REQUIRE_FALSE(v.ok());
  CHECK(v.message() ==
        "position_ids: dtype I64 is not supported for weights (expected F32, F64, F16 or BF16)");
}

TEST_CASE("safetensors: reading a missing file names it") {
  auto r = ReadSafetensorsFile("/nonexistent/dir/w.safetensors");
  REQUIRE_FALSE(r.ok());
  CHECK(r.message().find("/nonexistent/dir/w.safetensors: cannot open") == 0);
}

TEST_CASE("sha256: known digests") {
  CHECK(Sha256Hex("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256Hex("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(Sha256Hex(two_blocks.data(), two_blocks.size()) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // Incremental updates across block boundaries equal one update.
  std::string million(1000000, 'a');
  Sha256 sha;
  for (std::size_t i = 0; i < million.size(); i += 997)
    sha.Update(million.data() + i, std::min<std::size_t>(997, million.size() - i));
  auto digest = sha.Finish();
  CHECK(digest[0] == 0xcd);
  CHECK(digest[31] == 0xd0);
  CHECK(Sha256Hex(million.data(), million.size()) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

}  // namespace
}  // namespace recur::impl::converter
