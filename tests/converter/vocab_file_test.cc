// Vocabularies into the model file (converter/vocab_file.h): the rwkv
// package's text format, every Python literal form repr writes and every
// malformed line refused by its number; llama.cpp's escaped GGUF token text;
// recur-convert --tokenizer and a recur config's "tokenizer", through to
// the runtime's encoding.
#include "converter/vocab_file.h"

#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
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

// A tokenizer.json of a byte-level BPE: the bytes "a", "b", " " (Ġ), "\n" (Ċ),
// merges a b → ab, Ġ ab → Ġab; `edit` changes it first.
std::string HfTokenizer(const std::function<void(nlohmann::json&)>& edit = nullptr) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": false, "lstrip": false,
                      "rstrip": false, "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                      "use_regex": true},
    "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false,
                       "use_regex": true},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
              "ignore_merges": false,
              "vocab": {"<|endoftext|>": 0, "a": 1, "b": 2, "\u0120": 3, "\u010a": 4, "ab": 5,
                        "\u0120ab": 6},
              "merges": [["a", "b"], "\u0120 ab"]}})");
  if (edit) edit(j);
  return j.dump();
}

std::string HfRefusal(const std::string& text) {
  std::vector<std::string> warnings;
  auto v = ParseHfTokenizer(text, "tokenizer.json", &warnings);
  CHECK(v.status().code() == StatusCode::kInvalidArgument);
  return v.ok() ? "" : v.message();
}

TEST_CASE("vocab file: a tokenizer.json of a byte-level BPE, read as its bytes and merges") {
  std::vector<std::string> warnings;
  auto v = ParseHfTokenizer(HfTokenizer(), "tokenizer.json", &warnings);
  REQUIRE_MESSAGE(v.ok(), v.message());
  CHECK(warnings.empty());
  CHECK(v->kind == VocabularyKind::kGpt2Bpe);
  CHECK(v->tokens == std::vector<std::string>{"<|endoftext|>", "a", "b", " ", "\n", "ab", " ab"});
  CHECK(v->end_of_text == 0);
  CHECK(v->added_raw == std::vector<uint32_t>{0});
  CHECK(v->added_normalized.empty());
  REQUIRE(v->merges.size() == 2);
  CHECK((v->merges[1].left == 3 && v->merges[1].right == 5 && v->merges[1].result == 6));
  // NFC and a post-processor that adds tokens: taken, each with a warning.
  v = ParseHfTokenizer(HfTokenizer([](nlohmann::json& j) {
                         j["normalizer"] = {{"type", "NFC"}};
                         j["post_processor"] = {{"type", "TemplateProcessing"}};
                       }),
                       "tokenizer.json", &warnings);
  REQUIRE(v.ok());
  CHECK(warnings.size() == 2);
  // The byte-level alphabet, undone.
  std::string bytes;
  REQUIRE(ByteLevelToBytes("\u0100\u0120\u0121\u0143!~\u00a1\u00ff", &bytes).ok());
  CHECK(bytes == std::string("\x00\x20\x7f\xad!~\xa1\xff", 8));
  CHECK(ByteLevelToBytes("\u0144", &bytes).message() ==
        "the token text has U+0144, which is outside the byte-level alphabet");
  CHECK(ByteLevelToBytes(" ", &bytes).message() ==
        "the token text has U+0020, which is outside the byte-level alphabet");
}

TEST_CASE("vocab file: a tokenizer.json recur does not compute is refused, naming the key") {
  using J = nlohmann::json;
  auto with = [](const std::function<void(J&)>& edit) { return HfRefusal(HfTokenizer(edit)); };
  CHECK(with([](J& j) { j["model"]["type"] = "WordPiece"; }) ==
        "tokenizer.json: model: \"WordPiece\" is not supported: recur reads BPE models");
  CHECK(with([](J& j) { j["model"]["byte_fallback"] = true; }) ==
        "tokenizer.json: model.byte_fallback: true is not supported");
  CHECK(with([](J& j) { j["model"]["ignore_merges"] = true; }) ==
        "tokenizer.json: model.ignore_merges: true is not supported");
  CHECK(with([](J& j) { j["model"]["dropout"] = 0.1; }) ==
        "tokenizer.json: model.dropout: BPE dropout is not supported");
  CHECK(with([](J& j) { j["model"]["continuing_subword_prefix"] = "##"; }) ==
        "tokenizer.json: model.continuing_subword_prefix: is not supported");
  CHECK(with([](J& j) { j["normalizer"] = {{"type", "Lowercase"}}; }) ==
        "tokenizer.json: normalizer: \"Lowercase\" is not supported (recur applies none)");
  CHECK(with([](J& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; })
            .find("tokenizer.json: pre_tokenizer: \"Metaspace\" is not supported") == 0);
  CHECK(with([](J& j) { j["pre_tokenizer"]["add_prefix_space"] = true; })
            .find("tokenizer.json: pre_tokenizer.add_prefix_space: true is not supported") == 0);
  CHECK(with([](J& j) { j["pre_tokenizer"]["use_regex"] = false; })
            .find("tokenizer.json: pre_tokenizer.use_regex: false is not supported") == 0);
  CHECK(with([](J& j) { j["decoder"] = {{"type", "WordPiece"}}; }) ==
        "tokenizer.json: decoder: \"WordPiece\" is not supported: recur decodes as ByteLevel does");
  CHECK(with([](J& j) { j["added_tokens"][0]["lstrip"] = true; })
            .find("tokenizer.json: added_tokens[0].lstrip: true is not supported") == 0);
  CHECK(with([](J& j) { j["model"]["merges"].push_back("a c"); }) ==
        "tokenizer.json: model.merges[2]: \"c\" is not a token of the vocabulary");
  CHECK(with([](J& j) { j["model"]["merges"].push_back("a b c"); }) ==
        "tokenizer.json: model.merges[2]: \"a b c\" is not two token texts with a space between");
  CHECK(with([](J& j) { j["model"]["merges"].push_back(J::array({"a", "b"})); }) ==
        "tokenizer.json: merge 2 repeats merge 0 (tokens 1 and 2)");
  CHECK(with([](J& j) { j["model"]["vocab"]["x y"] = 7; }) ==
        "tokenizer.json: model.vocab[\"x y\"]: the token text has U+0020, which is outside the "
        "byte-level alphabet");
  CHECK(with([](J& j) { j["model"]["vocab"]["c"] = 1; }) ==
        "tokenizer.json: model.vocab[\"c\"]: id 1 is taken");
  CHECK(with([](J& j) { j["added_tokens"][0]["id"] = 1; }) ==
        "tokenizer.json: added_tokens[0]: \"<|endoftext|>\" has id 1, which the model's "
        "vocabulary gives to other bytes");
  CHECK(HfRefusal("{\"model\": 1, \"model\": 2}") ==
        "tokenizer.json: the key \"model\" appears twice in an object");
  CHECK(HfRefusal("[]") == "tokenizer.json: not a Hugging Face tokenizer.json (no \"model\")");
}

TEST_CASE("vocab file: --tokenizer tokenizer.json gives a model its byte-level BPE") {
  testing::TempDir dir;
  WriteModelInputs(dir);
  testing::WriteFile(dir.File("tokenizer.json"), HfTokenizer());
  REQUIRE(ConvertIn(dir, dir.File("tokenizer.json")).ok());
  const std::vector<int32_t> ids = EncodeWith(dir, "ab ab<|endoftext|>\n\nb");
  CHECK(ids == std::vector<int32_t>{5, 6, 0, 4, 4, 2});
  // The config's key too.
  testing::TempDir config_dir;
  WriteModelInputs(config_dir, "\"tokenizer\": \"tokenizer.json\"");
  testing::WriteFile(config_dir.File("tokenizer.json"), HfTokenizer());
  REQUIRE(ConvertIn(config_dir).ok());
  CHECK(EncodeWith(config_dir, " ab") == std::vector<int32_t>{6});
  // A refusal names the file.
  testing::WriteFile(config_dir.File("tokenizer.json"),
                     HfTokenizer([](nlohmann::json& j) { j["model"]["byte_fallback"] = true; }));
  CHECK(ConvertIn(config_dir).message() == "tokenizer.json: model.byte_fallback: true is not supported");
}

}  // namespace
}  // namespace recur::impl::converter
