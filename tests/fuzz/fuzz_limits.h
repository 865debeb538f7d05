// What the fuzz harnesses allow a fuzzed model to ask for. A model file may
// legitimately declare shapes whose session needs gigabytes (a 2^31-position
// KV cache is a few bytes of schema); the runtime then reports
// RECUR_OUT_OF_MEMORY if the allocation fails, which a fuzzer cannot tell
// from a leak under its 2 GB limit. The harnesses therefore create sessions
// only for models whose declared sizes stay small, and cap the context.
#ifndef RECUR_TESTS_FUZZ_FUZZ_LIMITS_H_
#define RECUR_TESTS_FUZZ_FUZZ_LIMITS_H_

#include <cstdint>

#include "recur/recur.h"

namespace recur::impl::fuzz {

constexpr uint32_t kMaxContext = 16;
constexpr uint32_t kPrefillChunk = 4;

// Sessions of `info`'s model at batch 2 stay within tens of megabytes.
inline bool SmallEnough(const recur_model_info& info) {
  const uint64_t width = uint64_t(info.d_model) + info.output_width + info.feature_width;
  return info.d_model <= 1024 && width <= 4096 && info.state_bytes <= (64u << 20) &&
         info.state_bytes_per_position <= (1u << 20) && info.parameter_count <= (64u << 20);
}

}  // namespace recur::impl::fuzz

#endif  // RECUR_TESTS_FUZZ_FUZZ_LIMITS_H_
