// Drawing the next token from a model's logits (recur.h "sampling"):
// greedy, temperature, top-k, top-p and min-p, with splitmix64 as the random source,
// so that a seed gives the same tokens on every platform; and the penalties
// on tokens seen before that runtimes apply to the logits first.
#ifndef RECUR_TEXT_SAMPLER_H_
#define RECUR_TEXT_SAMPLER_H_

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace recur::impl::text {

struct SamplerOptions {
  double temperature = 0;  // 0: greedy
  uint32_t top_k = 0;      // 0: all
  double top_p = 1;        // (0, 1]
  double min_p = 0;        // [0, 1]; 0: none
};

// InvalidArgument naming the option that is out of range.
Status CheckSamplerOptions(const SamplerOptions& options);

struct PenaltyOptions {
  double repeat = 1;     // > 0; 1: none
  double presence = 0;   // finite
  double frequency = 0;  // finite
  double decay = 1;      // (0, 1]
};

// InvalidArgument naming the option that is out of range.
Status CheckPenaltyOptions(const PenaltyOptions& options);

// The algorithm of recur_apply_penalties (recur.h): logits[0, n) of the
// tokens in recent[0, count), oldest first, changed in place. Keeps a
// scratch of 16 bytes per recent token on the calling thread.
Status ApplyPenalties(float* logits, size_t n, const int32_t* recent, size_t count,
                      const PenaltyOptions& options);

// splitmix64 (Steele, Lea, Flood 2014): advances *state and returns the next
// 64 random bits.
uint64_t SplitMix64(uint64_t* state);

// The algorithm of recur_sample (recur.h). Keeps a scratch of 12 bytes per
// logit on the calling thread, grown on first use.
Status Sample(const float* logits, size_t n, const SamplerOptions& options, uint64_t* rng_state,
              int32_t* token);

}  // namespace recur::impl::text

#endif  // RECUR_TEXT_SAMPLER_H_
