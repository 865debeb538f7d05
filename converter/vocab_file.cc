#include "converter/vocab_file.h"

#include <cstdint>
#include <cstdio>
#include <unordered_map>

#include "converter/file_util.h"
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

// The length of the valid UTF-8 sequence at s[0, n), or 0.
size_t Utf8SequenceLength(const unsigned char* s, size_t n) {
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t length;
  unsigned char low = 0x80, high = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    length = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    length = 3;
    if (c == 0xe0) low = 0xa0;
    if (c == 0xed) high = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    length = 4;
    if (c == 0xf0) low = 0x90;
    if (c == 0xf4) high = 0x8f;
  } else {
    return 0;
  }
  if (n < length || s[1] < low || s[1] > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if ((s[i] & 0xc0) != 0x80) return 0;
  }
  return length;
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
        const size_t n = Utf8SequenceLength(reinterpret_cast<const unsigned char*>(line.data()) + i,
                                            line.size() - i);
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

Result<VocabularyDescription> ReadRwkvVocabularyFile(const std::string& path) {
  auto text = ReadFileText(path);
  if (!text.ok()) return text.status();
  return ParseRwkvVocabulary(*text, BaseName(path));
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

}  // namespace recur::impl::converter
