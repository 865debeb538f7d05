// nlohmann::json exception text without its "[json.exception.x.y] " prefix.
#ifndef RECUR_CONVERTER_JSON_ERROR_H_
#define RECUR_CONVERTER_JSON_ERROR_H_

#include <exception>
#include <string>

namespace recur::converter {

inline std::string JsonWhat(const std::exception& e) {
  std::string what = e.what();
  if (!what.empty() && what[0] == '[') {
    const std::size_t close = what.find("] ");
    if (close != std::string::npos) what = what.substr(close + 2);
  }
  return what;
}

}  // namespace recur::converter

#endif  // RECUR_CONVERTER_JSON_ERROR_H_
