// Fuzz target: the converter's config.json import (JSON, keys, types, ranges,
// mixer lists) in every layout and the automatic layout choice.
#include <string>

#include "converter/config.h"
#include "converter/layouts/layout_converter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  namespace cv = recur::impl::converter;
  (void)cv::ParseConfig(text, cv::Layout::kAuto);
  for (const cv::LayoutType& type : cv::LayoutTypes()) (void)cv::ParseConfig(text, type.id);
  return 0;
}
