// Fuzz target: the converter's config.json import (JSON, keys, types, ranges,
// mixer lists) in both layouts and the automatic layout choice.
#include <string>

#include "converter/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (auto layout : {recur::impl::converter::Layout::kAuto, recur::impl::converter::Layout::kRecur,
                      recur::impl::converter::Layout::kFastTransformers}) {
    auto config = recur::impl::converter::ParseConfig(text, layout);
    (void)config;
  }
  return 0;
}
