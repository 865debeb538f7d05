// Vocabularies into the model file (converter/vocab_file.h): the rwkv
// package's text format, every Python literal form repr writes and every
// malformed line refused by its number; llama.cpp's escaped GGUF token text;
// recur-convert --tokenizer and a recur config's "tokenizer", through to
// the runtime's encoding.
#include "converter/vocab_file.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "converter/convert.h"
#include "converter/safetensors.h"
#include "converter_test_util.h"
#include "engine/model_loader.h"
#include "model/model.h"

namespace recur::impl::converter {
namespace {

using testing::kTokensConfig;

VocabularyDescription Parse(const std::string& text) {
  auto v = ParseRwkvVocabulary(text, "vocab.txt");
  REQUIRE_MESSAGE(v.ok(), v.message());
  return std::move(v).value();
}

std::string Refusal(const std::string& text) {
  auto v = ParseRwkvVocabulary(text, "vocab.txt");
  CHECK_FALSE(v.ok());
  CHECK(v.status().code() == StatusCode::kInvalidArgument);
  return v.ok() ? "" : v.message();
}

TEST_CASE("vocab file: the literals repr writes, as the rwkv package reads them") {
  // Lines as rwkv_vocab_v20230424.txt has them (ids from 1: id 0 is the
  // end-of-text token), and the other escapes Python reads.
  const VocabularyDescription v = Parse(
      "1 '\\x00' 1\n"
      "2 '\\n' 1\n"
      "3 \"'\" 1\n"
      "4 ' \\'' 2\n"
      "5 b'\\x80' 1\n"
      "6 b'\\xe4\\xb8' 2\n"
      "7 '\\u2002' 3\n"
      "8 '中国' 6\n"
      "9 '\\\\' 1\n"
      "10 '\\xa0' 2\n"
      "11 '\\U0001f600' 4\n"
      "12 '\\t\\r\\a\\b\\f\\v' 6\n"
      "13 '\\101\\0' 2\n"
      "14 b'\\q\\u' 4\n"
      "15 '\\q' 2\n"
      "16 \"a\\\"b\" 3\n"
      "17 '   ' 3\r\n"
      "18 b\"'x\" 2");
  REQUIRE(v.tokens.size() == 19);
  CHECK(v.end_of_text == 0);
  const std::vector<std::string> expected = {"",
                                             std::string(1, '\0'),
                                             "\n",
                                             "'",
                                             " '",
                                             "\x80",
                                             "\xe4\xb8",
                                             "\xe2\x80\x82",
                                             "\xe4\xb8\xad\xe5\x9b\xbd",
                                             "\\",
                                             "\xc2\xa0",
                                             "\xf0\x9f\x98\x80",
                                             "\t\r\a\b\f\v",
                                             std::string("A\0", 2),
                                             "\\q\\u",
                                             "\\q",
                                             "a\"b",
                                             "   ",
                                             "'x"};
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK_MESSAGE(v.tokens[i] == expected[i], "token " << i);
  }
  // Ids from 0: no end-of-text token.
  const VocabularyDescription zero = Parse("0 'a' 1\n1 'b' 1\n");
  CHECK(zero.tokens == std::vector<std::string>{"a", "b"});
  CHECK(zero.end_of_text == -1);
}

TEST_CASE("vocab file: malformed lines are refused with their number") {
  CHECK(Refusal("1 'a' 1\n2 'b' 2\n") ==
        "vocab.txt line 2: the token has 1 bytes, but the line says 2");
  CHECK(Refusal("1 'a' 1\n\n2 'b' 1\n") ==
        "vocab.txt line 2: empty line (each line is: ID LITERAL BYTE_LENGTH)");
  CHECK(Refusal("1 'a' 1\n3 'b' 1\n") ==
        "vocab.txt line 2: id 3 follows id 1; ids count up by one");
  CHECK(Refusal("2 'a' 1\n") ==
        "vocab.txt line 1: the first id is 2; ids start at 1 (id 0 the end-of-text token) or 0");
  CHECK(Refusal("1 'a' 1\n2 'a' 1\n") == "vocab.txt line 2: the token \"a\" is also on line 1");
  CHECK(Refusal("1 'a' 1\n2 b'a' 1\n") == "vocab.txt line 2: the token \"a\" is also on line 1");
  CHECK(Refusal("1 '' 0\n") ==
        "vocab.txt line 1: empty token (only the implicit end-of-text id 0 has no bytes)");
  CHECK(
      Refusal("x 'a' 1\n") ==
      "vocab.txt line 1: expected a token id (a decimal number of at most 9 digits) at the start");
  CHECK(Refusal("1  'a' 1\n") ==
        "vocab.txt line 1: expected a Python str or bytes literal ('...', \"...\", b'...') after "
        "the id");
  CHECK(Refusal("1 r'a' 1\n").find("expected a Python str or bytes literal") != std::string::npos);
  CHECK(Refusal("1 'a 1\n") == "vocab.txt line 1: the literal has no closing quote");
  CHECK(Refusal("1 'a'1\n") ==
        "vocab.txt line 1: expected one space and the byte length after the literal");
  CHECK(Refusal("1 'a' 1 \n") ==
        "vocab.txt line 1: expected the byte length (a decimal number) to end the line");
  CHECK(Refusal("1 'a' \n") ==
        "vocab.txt line 1: expected the byte length (a decimal number) to end the line");
  CHECK(Refusal("1 '\\x4' 1\n") == "vocab.txt line 1: \\x needs 2 hex digits");
  CHECK(Refusal("1 '\\u20' 1\n") == "vocab.txt line 1: \\u needs 4 hex digits");
  CHECK(Refusal("1 '\\ud800' 3\n") ==
        "vocab.txt line 1: a surrogate code point (U+D800), which UTF-8 cannot hold");
  CHECK(Refusal("1 '\\U00110000' 4\n") == "vocab.txt line 1: an escape past U+10FFFF");
  CHECK(Refusal("1 '\\N{BULLET}' 3\n") == "vocab.txt line 1: \\N{...} escapes are not read");
  CHECK(Refusal("1 b'\\777' 1\n") ==
        "vocab.txt line 1: an octal escape past \\377 in a bytes literal");
  CHECK(Refusal("1 b'\xc3\xa9' 2\n") ==
        "vocab.txt line 1: a bytes literal holds a non-ASCII character");
  CHECK(Refusal("1 '\xc3' 1\n") == "vocab.txt line 1: the line is not UTF-8");
  CHECK(Refusal("1 '\xed\xa0\x80' 3\n") == "vocab.txt line 1: the line is not UTF-8");
  CHECK(Refusal("1 'a\\") ==
        "vocab.txt line 1: a backslash ends the line (line continuations are not read)");
  CHECK(Refusal("1 '''a''' 1\n") == "vocab.txt line 1: triple-quoted literals are not read");
  CHECK(Refusal("1048576 'a' 1\n").find("the first id is 1048576") != std::string::npos);
  CHECK(Refusal("1234567890 'a' 1\n").find("expected a token id") != std::string::npos);
  CHECK(Refusal("") == "vocab.txt: no tokens");
}

TEST_CASE("vocab file: llama.cpp's escaped GGUF token text") {
  std::string out;
  REQUIRE(UnescapeGgufRwkvToken("a\\\\b\\'c\\\"\\t\\n\\r\\x00\\xfF\\q", &out).ok());
  CHECK(out == std::string("a\\b'c\"\t\n\r\0\xff"
                           "q",
                           12));
  REQUIRE(UnescapeGgufRwkvToken("<s>", &out).ok());
  CHECK(out == "<s>");
  CHECK(UnescapeGgufRwkvToken("a\\", &out).message() == "a backslash ends the token text");
  CHECK(UnescapeGgufRwkvToken("\\x4", &out).message() == "\\x needs two hex digits");
  CHECK(UnescapeGgufRwkvToken("\\xg0", &out).message() == "\\x needs two hex digits");
}

// kTokensConfig (vocab_size 11) and its weights in `dir`; `extra` keys are
// added to the config.
void WriteModelInputs(const testing::TempDir& dir, const std::string& extra = "") {
  std::string config = kTokensConfig;
  if (!extra.empty()) config.insert(config.rfind('}'), ", " + extra);
  const auto st = SerializeSafetensors(testing::RandomTensors(kTokensConfig, 1));
  testing::WriteFile(dir.File("w.safetensors"), st.data(), st.size());
  testing::WriteFile(dir.File("config.json"), config);
}

Status ConvertIn(const testing::TempDir& dir, const std::string& tokenizer = "") {
  ConvertOptions o;
  o.weights_path = dir.File("w.safetensors");
  o.config_path = dir.File("config.json");
  o.output_path = dir.File("m.recur");
  o.tokenizer_path = tokenizer;
  return ConvertFiles(o, nullptr);
}

// The converted model's encoding of `text`.
std::vector<int32_t> EncodeWith(const testing::TempDir& dir, const std::string& text) {
  const std::string bytes = testing::ReadText(dir.File("m.recur"));
  AlignedBytes aligned(bytes.begin(), bytes.end());
  std::unique_ptr<Model> model;
  REQUIRE(LoadModel(aligned.data(), aligned.size(), LoadOptions{}, &model).ok());
  std::vector<int32_t> ids;
  const Status s =
      model->vocabulary.Encode(reinterpret_cast<const uint8_t*>(text.data()), text.size(), &ids);
  REQUIRE_MESSAGE(s.ok(), s.message());
  return ids;
}

const char* kSmallVocab = "1 'a' 1\n2 'b' 1\n3 'ab' 2\n4 ' ' 1\n5 b'\\xe4\\xb8' 2\n";

TEST_CASE("vocab file: --tokenizer and a config's \"tokenizer\" put it in the model") {
  testing::TempDir dir;
  WriteModelInputs(dir);
  testing::WriteFile(dir.File("vocab.txt"), kSmallVocab);
  REQUIRE(ConvertIn(dir, dir.File("vocab.txt")).ok());
  CHECK(EncodeWith(dir, "ab ba\xe4\xb8") == std::vector<int32_t>{3, 4, 2, 1, 5});

  // The config's key, relative to the config's folder, whatever the working directory.
  testing::TempDir config_dir;
  WriteModelInputs(config_dir, "\"tokenizer\": \"vocab.txt\"");
  testing::WriteFile(config_dir.File("vocab.txt"), kSmallVocab);
  REQUIRE(ConvertIn(config_dir).ok());
  CHECK(EncodeWith(config_dir, "aab") == std::vector<int32_t>{1, 3});
  // Not both.
  Status s = ConvertIn(config_dir, config_dir.File("vocab.txt"));
  CHECK(s.message() ==
        "both --tokenizer and the config's \"tokenizer\" name a vocabulary: give one");
}

TEST_CASE("vocab file: conversions refuse a vocabulary that does not fit the model") {
  testing::TempDir dir;
  WriteModelInputs(dir);
  std::string big;
  for (int i = 1; i <= 11; ++i) big += std::to_string(i) + " '" + char('a' + i) + "' 1\n";
  testing::WriteFile(dir.File("big.txt"), big);
  CHECK(ConvertIn(dir, dir.File("big.txt")).message() ==
        "big.txt has 12 tokens (ids 0 to 11), more than the model's vocab_size (11)");
  testing::WriteFile(dir.File("bad.txt"), "1 'a' 1\n2 'b\n");
  CHECK(ConvertIn(dir, dir.File("bad.txt")).message() ==
        "bad.txt line 2: the literal has no closing quote");
  CHECK(ConvertIn(dir, dir.File("missing.txt")).code() == StatusCode::kIoError);

  testing::TempDir features;
  const auto st = SerializeSafetensors(testing::RandomTensors(testing::kFeaturesConfig, 1));
  testing::WriteFile(features.File("w.safetensors"), st.data(), st.size());
  testing::WriteFile(features.File("config.json"), testing::kFeaturesConfig);
  testing::WriteFile(features.File("vocab.txt"), kSmallVocab);
  CHECK(ConvertIn(features, features.File("vocab.txt")).message() ==
        "vocab.txt: the model takes feature frames, not tokens, so it has no use for a "
        "vocabulary");

  testing::TempDir empty_key;
  WriteModelInputs(empty_key, "\"tokenizer\": \"\"");
  CHECK(ConvertIn(empty_key).message().find("\"tokenizer\" must name a vocabulary file") !=
        std::string::npos);
}

}  // namespace
}  // namespace recur::impl::converter
