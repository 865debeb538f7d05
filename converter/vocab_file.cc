#include "converter/vocab_file.h"

#include <cstdint>
#include <cstdio>
#include <unordered_map>

#include "converter/file_util.h"
#include "converter/json_util.h"
#include "text/vocabulary.h"

namespace recur::impl::converter {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | cp >> 6));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | cp >> 12));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | cp >> 18));
    out->push_back(static_cast<char>(0x80 | (cp >> 12 & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

// The Python literal at line[*pos, ...) (str or bytes, as repr writes them),
// its bytes to *out; *pos ends after the closing quote. An error message
// (without the line) or "".
std::string ParseLiteral(std::string_view line, size_t* pos, std::string* out) {
  size_t i = *pos;
  bool is_bytes = false;
  if (i < line.size() && (line[i] == 'b' || line[i] == 'B')) {
    is_bytes = true;
    ++i;
  }
  if (i >= line.size() || (line[i] != '\'' && line[i] != '"')) {
    return "expected a Python str or bytes literal ('...', \"...\", b'...') after the id";
  }
  const char quote = line[i++];
  if (i + 1 < line.size() && line[i] == quote && line[i + 1] == quote) {
    return "triple-quoted literals are not read";
  }
  out->clear();
  while (true) {
    if (i >= line.size()) return "the literal has no closing quote";
    const auto c = static_cast<unsigned char>(line[i]);
    if (c == static_cast<unsigned char>(quote)) {
      ++i;
      break;
    }
    if (c != '\\') {
      if (c >= 0x80) {
        if (is_bytes) return "a bytes literal holds a non-ASCII character";
        uint32_t code_point;
        const size_t n = text::Utf8SequenceLength(reinterpret_cast<const uint8_t*>(line.data()) + i,
                                                  line.size() - i, &code_point);
        if (n == 0) return "the line is not UTF-8";
        out->append(line.substr(i, n));
        i += n;
        continue;
      }
      out->push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (++i >= line.size()) return "a backslash ends the line (line continuations are not read)";
    const char e = line[i++];
    switch (e) {
      case '\\':
        out->push_back('\\');
        continue;
      case '\'':
        out->push_back('\'');
        continue;
      case '"':
        out->push_back('"');
        continue;
      case 'a':
        out->push_back('\a');
        continue;
      case 'b':
        out->push_back('\b');
        continue;
      case 'f':
        out->push_back('\f');
        continue;
      case 'n':
        out->push_back('\n');
        continue;
      case 'r':
        out->push_back('\r');
        continue;
      case 't':
        out->push_back('\t');
        continue;
      case 'v':
        out->push_back('\v');
        continue;
      default:
        break;
    }
    if (e >= '0' && e <= '7') {
      uint32_t value = static_cast<uint32_t>(e - '0');
      for (int k = 0; k < 2 && i < line.size() && line[i] >= '0' && line[i] <= '7'; ++k) {
        value = value * 8 + static_cast<uint32_t>(line[i++] - '0');
      }
      if (is_bytes) {
        if (value > 0xff) return "an octal escape past \\377 in a bytes literal";
        out->push_back(static_cast<char>(value));
      } else {
        AppendUtf8(value, out);
      }
      continue;
    }
    int digits = 0;
    if (e == 'x') {
      digits = 2;
    } else if (!is_bytes && e == 'u') {
      digits = 4;
    } else if (!is_bytes && e == 'U') {
      digits = 8;
    } else if (!is_bytes && e == 'N') {
      return "\\N{...} escapes are not read";
    }
    if (digits == 0) {  // not an escape: Python keeps the backslash
      out->push_back('\\');
      --i;
      continue;
    }
    uint32_t value = 0;
    for (int k = 0; k < digits; ++k) {
      const int h = i < line.size() ? HexValue(line[i]) : -1;
      if (h < 0) return std::string("\\") + e + " needs " + std::to_string(digits) + " hex digits";
      value = value * 16 + static_cast<uint32_t>(h);
      ++i;
    }
    if (is_bytes) {
      out->push_back(static_cast<char>(value));
      continue;
    }
    if (value > 0x10ffff) return "an escape past U+10FFFF";
    if (value >= 0xd800 && value <= 0xdfff) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "U+%04X", static_cast<unsigned>(value));
      return std::string("a surrogate code point (") + hex + "), which UTF-8 cannot hold";
    }
    AppendUtf8(value, out);
  }
  *pos = i;
  return "";
}

// A decimal number of at most 9 digits at line[*pos, ...).
bool ParseNumber(std::string_view line, size_t* pos, uint32_t* value) {
  size_t i = *pos;
  uint32_t v = 0;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9' && i - *pos < 9) {
    v = v * 10 + static_cast<uint32_t>(line[i++] - '0');
  }
  if (i == *pos || (i < line.size() && line[i] >= '0' && line[i] <= '9')) return false;
  *pos = i;
  *value = v;
  return true;
}

}  // namespace

Result<VocabularyDescription> ParseRwkvVocabulary(std::string_view text,
                                                  const std::string& source_name) {
  VocabularyDescription vocab;
  std::unordered_map<std::string, size_t> line_of;  // token bytes → line
  size_t line_number = 0;
  int64_t previous_id = -1;
  std::string token;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    auto error = [&](const std::string& what) {
      return Status(StatusCode::kInvalidArgument,
                    source_name + " line " + std::to_string(line_number) + ": " + what);
    };
    if (line.empty()) return error("empty line (each line is: ID LITERAL BYTE_LENGTH)");
    size_t pos = 0;
    uint32_t id = 0;
    if (!ParseNumber(line, &pos, &id)) {
      return error("expected a token id (a decimal number of at most 9 digits) at the start");
    }
    if (pos >= line.size() || line[pos] != ' ') return error("expected one space after the id");
    ++pos;
    const std::string literal_error = ParseLiteral(line, &pos, &token);
    if (!literal_error.empty()) return error(literal_error);
    uint32_t length = 0;
    if (pos >= line.size() || line[pos] != ' ') {
      return error("expected one space and the byte length after the literal");
    }
    ++pos;
    if (!ParseNumber(line, &pos, &length) || pos != line.size()) {
      return error("expected the byte length (a decimal number) to end the line");
    }
    if (length != token.size()) {
      return error("the token has " + std::to_string(token.size()) + " bytes, but the line says " +
                   std::to_string(length));
    }
    if (token.empty())
      return error("empty token (only the implicit end-of-text id 0 has no bytes)");
    if (previous_id < 0) {
      if (id > 1) {
        return error("the first id is " + std::to_string(id) +
                     "; ids start at 1 (id 0 the end-of-text token) or 0");
      }
      if (id == 1) {
        vocab.tokens.emplace_back();
        vocab.end_of_text = 0;
      }
    } else if (id != previous_id + 1) {
      return error("id " + std::to_string(id) + " follows id " + std::to_string(previous_id) +
                   "; ids count up by one");
    }
    if (id >= kMaxVocabularyTokens) {
      return error("id " + std::to_string(id) + " is past the " +
                   std::to_string(kMaxVocabularyTokens) + " tokens a vocabulary may have");
    }
    previous_id = id;
    const auto [it, inserted] = line_of.emplace(token, line_number);
    if (!inserted) {
      return error("the token \"" +
                   text::EscapeBytes(reinterpret_cast<const uint8_t*>(token.data()), token.size()) +
                   "\" is also on line " + std::to_string(it->second));
    }
    vocab.tokens.push_back(token);
  }
  if (vocab.tokens.empty()) {
    return Status(StatusCode::kInvalidArgument, source_name + ": no tokens");
  }
  return vocab;
}

Status UnescapeGgufRwkvToken(std::string_view escaped, std::string* out) {
  out->clear();
  for (size_t i = 0; i < escaped.size(); ++i) {
    const char c = escaped[i];
    if (c != '\\') {
      out->push_back(c);
      continue;
    }
    if (++i >= escaped.size()) {
      return Status(StatusCode::kInvalidArgument, "a backslash ends the token text");
    }
    switch (escaped[i]) {
      case 't':
        out->push_back('\t');
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 'x': {
        const int hi = i + 1 < escaped.size() ? HexValue(escaped[i + 1]) : -1;
        const int lo = i + 2 < escaped.size() ? HexValue(escaped[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
          return Status(StatusCode::kInvalidArgument, "\\x needs two hex digits");
        }
        out->push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        break;
      }
      default:
        out->push_back(escaped[i]);
        break;
    }
  }
  return Status::Ok();
}

Status ByteLevelToBytes(std::string_view text, std::string* out) {
  out->clear();
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = text::Utf8SequenceLength(s + i, text.size() - i, &cp);
    if (n == 0) return Status(StatusCode::kInvalidArgument, "the token text is not UTF-8");
    i += n;
    if ((cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) || (cp >= 0xae && cp <= 0xff)) {
      out->push_back(static_cast<char>(cp));
      continue;
    }
    // U+0100 + k: the k-th byte of 0x00–0x20, 0x7f–0xa0 and 0xad.
    if (cp < 0x100 || cp > 0x143) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "U+%04X", static_cast<unsigned>(cp));
      return Status(StatusCode::kInvalidArgument,
                    std::string("the token text has ") + hex +
                        ", which is outside the byte-level alphabet");
    }
    const uint32_t k = cp - 0x100;
    out->push_back(static_cast<char>(k <= 0x20 ? k : k <= 0x42 ? k - 0x21 + 0x7f : 0xad));
  }
  return Status::Ok();
}

Status AppendBpeMerge(std::string_view left, std::string_view right,
                      const std::unordered_map<std::string, uint32_t>& id_of,
                      VocabularyDescription* vocab) {
  std::string joined(left);
  joined += right;
  const std::string_view texts[3] = {left, right, joined};
  uint32_t ids[3];
  for (int k = 0; k < 3; ++k) {
    const auto it = id_of.find(std::string(texts[k]));
    if (it == id_of.end()) {
      return Status(StatusCode::kInvalidArgument,
                    "\"" + std::string(texts[k]) + "\" is not a token of the vocabulary");
    }
    ids[k] = it->second;
  }
  vocab->merges.push_back({ids[0], ids[1], ids[2]});
  return Status::Ok();
}

Status CheckBpeMerges(const VocabularyDescription& vocab, const std::string& source) {
  std::unordered_map<uint64_t, size_t> rank_of;
  for (size_t r = 0; r < vocab.merges.size(); ++r) {
    const TokenMergeDescription& m = vocab.merges[r];
    const auto [it, inserted] = rank_of.emplace(uint64_t{m.left} << 32 | m.right, r);
    if (!inserted) {
      return Status(StatusCode::kInvalidArgument,
                    source + " merge " + std::to_string(r) + " repeats merge " +
                        std::to_string(it->second) + " (tokens " + std::to_string(m.left) +
                        " and " + std::to_string(m.right) + ")");
    }
  }
  return Status::Ok();
}

namespace {

using nlohmann::json;

// The pre-tokenizer pattern recur computes (recur.fbs Gpt2Bpe step 2).
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// tokenizer.json's reader: `where` names the key in messages.
class HfTokenizerReader {
 public:
  HfTokenizerReader(const std::string& source, std::vector<std::string>* warnings)
      : source_(source), warnings_(warnings) {}

  Status Error(const std::string& where, const std::string& what) const {
    return Status(StatusCode::kInvalidArgument, source_ + ": " + where + ": " + what);
  }
  void Warn(const std::string& what) const { warnings_->push_back(source_ + ": " + what); }

  // j[key] is absent, null, or `value`.
  static bool IsOr(const json& j, const char* key, const json& value) {
    return !j.contains(key) || j[key].is_null() || j[key] == value;
  }

  static std::string TypeOf(const json& j) {
    return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                        : j.dump();
  }

  // A ByteLevel pre-tokenizer: its regex (`with_regex`) or none.
  Status ByteLevel(const json& j, const std::string& where, bool with_regex) const {
    if (!IsOr(j, "add_prefix_space", false)) {
      return Error(where + ".add_prefix_space",
                   "true is not supported (recur encodes the text as it is, without a space "
                   "before it)");
    }
    if (!IsOr(j, "use_regex", with_regex)) {
      return Error(where + ".use_regex",
                   with_regex ? "false is not supported (recur splits the text by the GPT-2 pattern)"
                              : "true after a Split is not supported");
    }
    return Status::Ok();
  }

  Status PreTokenizer(const json& j) const {
    const std::string type = TypeOf(j);
    if (type == "ByteLevel") return ByteLevel(j, "pre_tokenizer", true);
    if (type == "Sequence" && j.contains("pretokenizers") && j["pretokenizers"].is_array() &&
        j["pretokenizers"].size() == 2) {
      const json& split = j["pretokenizers"][0];
      if (TypeOf(split) == "Split" && split.contains("pattern") &&
          split["pattern"].is_object() && split["pattern"].value("Regex", "") == kGpt2Pattern &&
          split.value("behavior", "") == "Isolated" && IsOr(split, "invert", false) &&
          TypeOf(j["pretokenizers"][1]) == "ByteLevel") {
        return ByteLevel(j["pretokenizers"][1], "pre_tokenizer.pretokenizers[1]", false);
      }
    }
    return Error("pre_tokenizer",
                 "\"" + type +
                     "\" is not supported: recur reads ByteLevel with the GPT-2 pattern (or a "
                     "Sequence of that pattern's Split, Isolated, and ByteLevel)");
  }

  Status Normalizer(const json& j) const {
    if (j.is_null()) return Status::Ok();
    const std::string type = TypeOf(j);
    if (type == "NFC") {
      Warn("normalizer NFC is not applied: recur encodes the text as it is (text already in NFC, "
           "most text, gets the same ids)");
      return Status::Ok();
    }
    if (type == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array() &&
        j["normalizers"].empty()) {
      return Status::Ok();
    }
    return Error("normalizer", "\"" + type + "\" is not supported (recur applies none)");
  }

  Status Model(const json& m, VocabularyDescription* v,
               std::unordered_map<std::string, uint32_t>* id_of) const {
    if (!m.is_object() || TypeOf(m) != "BPE") {
      return Error("model", "\"" + TypeOf(m) + "\" is not supported: recur reads BPE models");
    }
    if (!IsOr(m, "dropout", json()) && !(m["dropout"].is_number() && m["dropout"] == 0)) {
      return Error("model.dropout", "BPE dropout is not supported");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (!IsOr(m, key, "")) return Error(std::string("model.") + key, "is not supported");
    }
    for (const char* key : {"byte_fallback", "ignore_merges"}) {
      if (!IsOr(m, key, false)) return Error(std::string("model.") + key, "true is not supported");
    }
    if (!m.contains("vocab") || !m["vocab"].is_object()) {
      return Error("model.vocab", "missing, or not an object of token texts and ids");
    }
    for (const auto& [text, id_json] : m["vocab"].items()) {
      const std::string where = "model.vocab[\"" + text + "\"]";
      if (!id_json.is_number_unsigned() || id_json.get<uint64_t>() >= kMaxVocabularyTokens) {
        return Error(where, "the id is not a number from 0 to " +
                                std::to_string(kMaxVocabularyTokens - 1));
      }
      const auto id = id_json.get<uint32_t>();
      std::string bytes;
      Status s = ByteLevelToBytes(text, &bytes);
      if (!s.ok()) return Error(where, s.message());
      if (bytes.empty()) return Error(where, "the token is empty");
      if (id >= v->tokens.size()) v->tokens.resize(id + 1);
      if (!v->tokens[id].empty()) return Error(where, "id " + std::to_string(id) + " is taken");
      v->tokens[id] = std::move(bytes);
      (*id_of)[text] = id;
    }
    if (!m.contains("merges") || !m["merges"].is_array()) {
      return Error("model.merges", "missing, or not an array");
    }
    const json& merges = m["merges"];
    for (size_t r = 0; r < merges.size(); ++r) {
      const json& e = merges[r];
      std::string left, right;
      if (e.is_string()) {  // "left right"
        const std::string& line = e.get_ref<const std::string&>();
        const size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
          return Error("model.merges[" + std::to_string(r) + "]",
                       "\"" + line + "\" is not two token texts with a space between");
        }
        left = line.substr(0, space);
        right = line.substr(space + 1);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        left = e[0].get<std::string>();
        right = e[1].get<std::string>();
      } else {
        return Error("model.merges[" + std::to_string(r) + "]",
                     "not a pair of token texts (\"a b\" or [\"a\", \"b\"])");
      }
      Status s = AppendBpeMerge(left, right, *id_of, v);
      if (!s.ok()) return Error("model.merges[" + std::to_string(r) + "]", s.message());
    }
    return Status::Ok();
  }

  Status AddedTokens(const json& added, VocabularyDescription* v) const {
    if (added.is_null()) return Status::Ok();
    if (!added.is_array()) return Error("added_tokens", "not an array");
    for (size_t i = 0; i < added.size(); ++i) {
      const json& a = added[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() ||
          a["id"].get<uint64_t>() >= kMaxVocabularyTokens || !a.contains("content") ||
          !a["content"].is_string()) {
        return Error(where, "not an object with an id (below " +
                                std::to_string(kMaxVocabularyTokens) + ") and a content string");
      }
      for (const char* key : {"single_word", "lstrip", "rstrip"}) {
        if (!IsOr(a, key, false)) {
          return Error(where + "." + key, "true is not supported (recur matches added tokens "
                                          "exactly where they are)");
        }
      }
      const auto id = a["id"].get<uint32_t>();
      const std::string& content = a["content"].get_ref<const std::string&>();
      if (content.empty()) return Error(where, "the content is empty");
      if (id >= v->tokens.size()) v->tokens.resize(id + 1);
      if (!v->tokens[id].empty() && v->tokens[id] != content) {
        return Error(where, "\"" + content + "\" has id " + std::to_string(id) +
                                ", which the model's vocabulary gives to other bytes");
      }
      v->tokens[id] = content;
      // tokenizers' default: special tokens are not normalized, others are.
      const bool special = a.value("special", false);
      const bool normalized = a.contains("normalized") && a["normalized"].is_boolean()
                                  ? a["normalized"].get<bool>()
                                  : !special;
      (normalized ? v->added_normalized : v->added_raw).push_back(id);
      if (special && content == "<|endoftext|>") v->end_of_text = static_cast<int32_t>(id);
    }
    return Status::Ok();
  }

  Status PostProcessor(const json& j) const {
    if (j.is_null() || TypeOf(j) == "ByteLevel") return Status::Ok();
    Warn("post_processor \"" + TypeOf(j) +
         "\" is not applied: recur encodes the text alone, adding no tokens");
    return Status::Ok();
  }

 private:
  const std::string& source_;
  std::vector<std::string>* warnings_;
};

}  // namespace

Result<VocabularyDescription> ParseHfTokenizer(std::string_view json_text,
                                               const std::string& source_name,
                                               std::vector<std::string>* warnings) {
  json root;
  DuplicateKey duplicate;
  try {
    root = ParseJson(json_text.begin(), json_text.end(), &duplicate);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, source_name + ": not JSON: " + JsonWhat(e));
  }
  if (!duplicate.key.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  source_name + ": the key \"" + duplicate.key + "\" appears twice in an object");
  }
  if (!root.is_object() || !root.contains("model")) {
    return Status(StatusCode::kInvalidArgument,
                  source_name + ": not a Hugging Face tokenizer.json (no \"model\")");
  }
  const HfTokenizerReader r(source_name, warnings);
  VocabularyDescription v;
  v.kind = VocabularyKind::kGpt2Bpe;
  std::unordered_map<std::string, uint32_t> id_of;
  RECUR_RETURN_IF_ERROR(r.Model(root["model"], &v, &id_of));
  RECUR_RETURN_IF_ERROR(r.PreTokenizer(root.value("pre_tokenizer", json())));
  RECUR_RETURN_IF_ERROR(r.Normalizer(root.value("normalizer", json())));
  const json decoder = root.value("decoder", json());
  if (!decoder.is_null() && HfTokenizerReader::TypeOf(decoder) != "ByteLevel") {
    return r.Error("decoder", "\"" + HfTokenizerReader::TypeOf(decoder) +
                                  "\" is not supported: recur decodes as ByteLevel does");
  }
  RECUR_RETURN_IF_ERROR(r.AddedTokens(root.value("added_tokens", json()), &v));
  RECUR_RETURN_IF_ERROR(r.PostProcessor(root.value("post_processor", json())));
  RECUR_RETURN_IF_ERROR(CheckBpeMerges(v, source_name + ":"));
  if (v.tokens.empty()) return Status(StatusCode::kInvalidArgument, source_name + ": no tokens");
  return v;
}

Result<VocabularyDescription> ReadVocabularyFile(const std::string& path,
                                                 std::vector<std::string>* warnings) {
  auto text = ReadFileText(path);
  if (!text.ok()) return text.status();
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    return ParseHfTokenizer(*text, BaseName(path), warnings);
  }
  return ParseRwkvVocabulary(*text, BaseName(path));
}

}  // namespace recur::impl::converter
