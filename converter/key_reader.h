// KeyReader: typed keys out of config.json objects, with messages that name
// the key by its dotted path ("mixer.heads") and the config by its file name:
//   config.json: "mixer.heads" must be a positive integer
// Used by config.cc and by each mixer's parser (converter/mixers/).
#ifndef RECUR_CONVERTER_KEY_READER_H_
#define RECUR_CONVERTER_KEY_READER_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace recur::impl::converter {

class KeyReader {
 public:
  explicit KeyReader(std::string source) : source_(std::move(source)) {}

  // "<source>: <what>", kInvalidArgument.
  Status Error(const std::string& what) const {
    return Status(StatusCode::kInvalidArgument, source_ + ": " + what);
  }
  // <source>: missing key "<path>"
  Status Missing(const std::string& path) const {
    return Error("missing key \"" + path + "\"");
  }
  // <source>: "<path>" <what>
  Status Invalid(const std::string& path, const std::string& what) const {
    return Error("\"" + path + "\" " + what);
  }

  // "prefix.key", or "key" for an empty prefix.
  static std::string Join(const std::string& prefix, const char* key) {
    return prefix.empty() ? std::string(key) : prefix + "." + key;
  }

  // Refuses a key of `obj` that is not in `known`: a typo ("casual",
  // "activaton") would otherwise leave its default in place silently. The
  // PyTorch reference refuses the same configs.
  Status OnlyKeys(const nlohmann::json& obj, const std::string& prefix,
                  std::initializer_list<const char*> known) const {
    for (const auto& item : obj.items()) {
      bool ok = false;
      for (const char* k : known) ok = ok || item.key() == k;
      if (!ok) {
        std::string list;
        for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
        return Invalid(Join(prefix, item.key().c_str()), "is not a known key (known: " + list + ")");
      }
    }
    return Status::Ok();
  }

  // A required object member.
  Status Object(const nlohmann::json& obj, const char* key, const std::string& prefix, const nlohmann::json** out) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return Missing(path);
    if (!it->is_object()) return Invalid(path, "must be a JSON object");
    *out = &*it;
    return Status::Ok();
  }

  // An integer in [min, UINT32_MAX]; `required` false: absent leaves *out.
  Status UInt(const nlohmann::json& obj, const char* key, const std::string& prefix, uint32_t min,
              uint32_t* out, bool required = true) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Missing(path) : Status::Ok();
    const char* kind = min > 0 ? "must be a positive integer" : "must be a non-negative integer";
    if (!it->is_number_integer()) return Invalid(path, kind);
    if (it->is_number_unsigned()) {
      uint64_t v = it->get<uint64_t>();
      if (v < min) return Invalid(path, kind);
      if (v > std::numeric_limits<uint32_t>::max())
        return Invalid(path, "is too large (at most 4294967295)");
      *out = static_cast<uint32_t>(v);
      return Status::Ok();
    }
    int64_t v = it->get<int64_t>();
    if (v < static_cast<int64_t>(min)) return Invalid(path, kind);
    if (v > static_cast<int64_t>(std::numeric_limits<uint32_t>::max()))
      return Invalid(path, "is too large (at most 4294967295)");
    *out = static_cast<uint32_t>(v);
    return Status::Ok();
  }

  // A finite number > 0.
  Status PositiveFloat(const nlohmann::json& obj, const char* key, const std::string& prefix, float* out,
                       bool required = true) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Missing(path) : Status::Ok();
    if (!it->is_number()) return Invalid(path, "must be a positive number");
    double v = it->get<double>();
    if (!std::isfinite(v) || v <= 0 || static_cast<float>(v) <= 0.0f ||
        !std::isfinite(static_cast<float>(v)))
      return Invalid(path, "must be a positive number");
    *out = static_cast<float>(v);
    return Status::Ok();
  }

  // A number finite as a float.
  Status FiniteFloat(const nlohmann::json& obj, const char* key, const std::string& prefix,
                     float* out, bool required = true) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Missing(path) : Status::Ok();
    if (!it->is_number()) return Invalid(path, "must be a finite number");
    const double v = it->get<double>();
    if (!std::isfinite(v) || !std::isfinite(static_cast<float>(v))) {
      return Invalid(path, "must be a finite number");
    }
    *out = static_cast<float>(v);
    return Status::Ok();
  }

  // A number in [lo, hi] (an option that changes only training, such as a
  // dropout rate: read so that a wrong type or value is still refused).
  Status NumberIn(const nlohmann::json& obj, const char* key, const std::string& prefix, double lo,
                  double hi, double* out, bool required = true) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Missing(path) : Status::Ok();
    const std::string range = "must be a number in [" + nlohmann::json(lo).dump() + ", " +
                              nlohmann::json(hi).dump() + "]";
    if (!it->is_number()) return Invalid(path, range);
    const double v = it->get<double>();
    if (!(v >= lo && v <= hi)) return Invalid(path, range);
    *out = v;
    return Status::Ok();
  }

  // Whether `key` is present and not null (null: a library's None, its default).
  static bool Given(const nlohmann::json& obj, const char* key) {
    auto it = obj.find(key);
    return it != obj.end() && !it->is_null();
  }

  // true or false; `required` false: absent leaves *out.
  Status Bool(const nlohmann::json& obj, const char* key, const std::string& prefix, bool* out,
              bool required = true) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Missing(path) : Status::Ok();
    if (!it->is_boolean()) return Invalid(path, "must be true or false");
    *out = it->get<bool>();
    return Status::Ok();
  }

  // A string out of `choices`; *index gets its position.
  template <std::size_t N>
  Status Choice(const nlohmann::json& obj, const char* key, const std::string& prefix,
                const char* const (&choices)[N], std::size_t* index, bool required = true) const {
    return Choice(obj, key, prefix, std::vector<std::string>(choices, choices + N), index,
                  required);
  }
  Status Choice(const nlohmann::json& obj, const char* key, const std::string& prefix,
                const std::vector<std::string>& choices, std::size_t* index,
                bool required = true) const {
    const std::string path = Join(prefix, key);
    auto it = obj.find(key);
    if (it == obj.end()) return required ? Missing(path) : Status::Ok();
    std::string list;
    for (std::size_t i = 0; i < choices.size(); ++i) {
      if (i) list += ", ";
      list += "\"" + choices[i] + "\"";
    }
    if (!it->is_string()) return Invalid(path, "must be one of " + list);
    const std::string value = it->get<std::string>();
    for (std::size_t i = 0; i < choices.size(); ++i) {
      if (value == choices[i]) {
        *index = i;
        return Status::Ok();
      }
    }
    return Invalid(path, "must be one of " + list + " (got \"" + value + "\")");
  }

  // An optional string (absent or null: left as is).
  Status OptionalString(const nlohmann::json& obj, const char* key, std::string* out) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Status::Ok();
    if (!it->is_string()) return Invalid(key, "must be a string");
    *out = it->get<std::string>();
    return Status::Ok();
  }

 private:
  std::string source_;
};

}  // namespace recur::impl::converter

#endif  // RECUR_CONVERTER_KEY_READER_H_
