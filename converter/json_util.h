// nlohmann::json helpers shared by the config and safetensors readers and
// by inspect.
#ifndef RECUR_CONVERTER_JSON_UTIL_H_
#define RECUR_CONVERTER_JSON_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace recur::impl::converter {

// nlohmann::json exception text without its "[json.exception.x.y] " prefix.
inline std::string JsonWhat(const std::exception& e) {
  std::string what = e.what();
  if (!what.empty() && what[0] == '[') {
    const std::size_t close = what.find("] ");
    if (close != std::string::npos) what = what.substr(close + 2);
  }
  return what;
}

// The first key that one JSON object holds twice.
struct DuplicateKey {
  std::string key;         // empty: none
  bool top_level = false;  // a key of the root object itself
};

// json::parse over [begin, end) (throwing what it throws) that also reports
// the first duplicate key: nlohmann keeps the last value silently, and a file
// that names a tensor or an option twice is ambiguous, so callers refuse it.
template <typename Iterator>
nlohmann::json ParseJson(Iterator begin, Iterator end, DuplicateKey* duplicate) {
  using json = nlohmann::json;
  std::vector<std::set<std::string>> open;  // the keys of each object being read
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!open.empty() && !open.back().insert(key).second && duplicate->key.empty()) {
          duplicate->key = key;
          duplicate->top_level = depth == 1;  // nlohmann: the root's keys are at depth 1
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  return json::parse(begin, end, on_event);
}

// `text` with Python's JSON extensions Infinity, -Infinity and NaN outside
// strings written as the strings "Infinity", "-Infinity" and "NaN" (JSON has
// no such numbers; Python's json module writes float("inf") so, as in
// transformers' Mamba2 configs' time_step_limit), so that the text parses and
// a reader that takes such a value reads the string.
inline std::string QuotePythonConstants(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* word : {"-Infinity", "Infinity", "NaN"}) {
      const std::string w = word;
      if (text.compare(i, w.size(), w) == 0) {
        out += '"' + w + '"';
        i += w.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

// The shortest decimal that reads back as `v` ("1e-06", not 9.99999997e-07).
inline std::string FormatFloat(float v) {
  char buf[32];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

// A float as the JSON number with the shortest decimal form.
inline double FloatForJson(float v) { return std::strtod(FormatFloat(v).c_str(), nullptr); }

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_JSON_UTIL_H_
