#include "text/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

namespace recur::impl::text {

Status CheckSamplerOptions(const SamplerOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) {
    return InvalidArgument("temperature is %g; it must be finite and >= 0 (0: greedy)",
                           o.temperature);
  }
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    return InvalidArgument("top_p is %g; it must be in (0, 1]", o.top_p);
  }
  if (!(o.min_p >= 0 && o.min_p <= 1)) {
    return InvalidArgument("min_p is %g; it must be in [0, 1] (0: none)", o.min_p);
  }
  return Status::Ok();
}

Status CheckPenaltyOptions(const PenaltyOptions& o) {
  if (!(o.repeat > 0) || !std::isfinite(o.repeat)) {
    return InvalidArgument("repeat penalty is %g; it must be finite and > 0 (1: none)", o.repeat);
  }
  if (!std::isfinite(o.presence)) {
    return InvalidArgument("presence penalty is %g; it must be finite", o.presence);
  }
  if (!std::isfinite(o.frequency)) {
    return InvalidArgument("frequency penalty is %g; it must be finite", o.frequency);
  }
  if (!(o.decay > 0 && o.decay <= 1)) {
    return InvalidArgument("penalty decay is %g; it must be in (0, 1]", o.decay);
  }
  return Status::Ok();
}

Status ApplyPenalties(float* logits, size_t n, const int32_t* recent, size_t count,
                      const PenaltyOptions& options) {
  RECUR_RETURN_IF_ERROR(CheckPenaltyOptions(options));
  if (n == 0 || n > size_t(std::numeric_limits<int32_t>::max())) {
    return InvalidArgument("n is %zu; it must be in [1, 2^31 - 1]", n);
  }
  for (size_t i = 0; i < count; ++i) {
    if (recent[i] < 0 || size_t(recent[i]) >= n) {
      return InvalidArgument("recent token %zu is %d; it must be in [0, %zu)", i, recent[i], n);
    }
  }
  // (id, decay^age) of each occurrence, newest age 0; by id, then summed
  // oldest first.
  thread_local std::vector<std::pair<int32_t, double>> seen;
  seen.resize(count);
  double weight = 1;
  for (size_t i = count; i-- > 0;) {
    seen[i] = {recent[i], weight};
    weight *= options.decay;
  }
  std::stable_sort(seen.begin(), seen.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < count;) {
    const int32_t id = seen[i].first;
    double occurrences = 0;
    for (; i < count && seen[i].first == id; ++i) occurrences += seen[i].second;
    double x = logits[id];
    if (options.repeat != 1) x = x <= 0 ? x * options.repeat : x / options.repeat;
    logits[id] = float(x - (options.frequency * occurrences + options.presence));
  }
  return Status::Ok();
}

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Status Sample(const float* logits, size_t n, const SamplerOptions& options, uint64_t* rng_state,
              int32_t* token) {
  RECUR_RETURN_IF_ERROR(CheckSamplerOptions(options));
  if (n == 0 || n > size_t(std::numeric_limits<int32_t>::max())) {
    return InvalidArgument("n is %zu; it must be in [1, 2^31 - 1]", n);
  }
  size_t best = n;
  for (size_t i = 0; i < n; ++i) {
    const float x = logits[i];
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity()) {
      return InvalidArgument("logit %zu is %s", i, std::isnan(x) ? "NaN" : "+inf");
    }
    if (x != -std::numeric_limits<float>::infinity() && (best == n || x > logits[best])) best = i;
  }
  if (best == n) return InvalidArgument("every one of the %zu logits is -inf", n);
  if (options.temperature == 0 || options.top_k == 1) {
    *token = int32_t(best);
    return Status::Ok();
  }

  // Ranked: higher logit first, the lower id on a tie.
  const auto ranks_before = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  thread_local std::vector<int32_t> ids;
  thread_local std::vector<double> weight;  // by id, set for the candidates only
  ids.resize(n);
  weight.resize(n);
  std::iota(ids.begin(), ids.end(), 0);
  const double max = logits[best], temperature = options.temperature;
  size_t kept = n;
  if (options.top_k != 0 && options.top_k < n) {
    kept = options.top_k;
    std::nth_element(ids.begin(), ids.begin() + kept, ids.end(), ranks_before);
    std::sort(ids.begin(), ids.begin() + kept);
  }
  double total = 0;  // in id order
  for (size_t i = 0; i < kept; ++i) {
    weight[ids[i]] = std::exp((double(logits[ids[i]]) - max) / temperature);
    total += weight[ids[i]];
  }
  if (options.top_p < 1) {
    // The shortest prefix of the ranking that holds top_p of the weight:
    // rank a prefix of m, doubling m until it does.
    const double goal = options.top_p * total;
    for (size_t m = std::min<size_t>(kept, 64);; m = std::min(kept, 2 * m)) {
      std::partial_sort(ids.begin(), ids.begin() + m, ids.begin() + kept, ranks_before);
      double sum = 0;
      size_t i = 0;
      while (i < m && sum < goal) sum += weight[ids[i++]];
      if (sum >= goal || m == kept) {
        kept = i;
        break;
      }
    }
    std::sort(ids.begin(), ids.begin() + kept);
    total = 0;
    for (size_t i = 0; i < kept; ++i) total += weight[ids[i]];
  }
  if (options.min_p > 0) {
    // ids[0, kept) in id order; the highest logit's weight is exp(0) = 1.
    size_t m = 0;
    total = 0;
    for (size_t i = 0; i < kept; ++i) {
      if (weight[ids[i]] >= options.min_p) {
        ids[m++] = ids[i];
        total += weight[ids[i]];
      }
    }
    kept = m;
  }
  const double u = double(SplitMix64(rng_state) >> 11) * 0x1.0p-53;
  const double target = u * total;
  double sum = 0;
  int32_t last = ids[0];
  for (size_t i = 0; i < kept; ++i) {
    const double w = weight[ids[i]];
    if (w <= 0) continue;
    sum += w;
    last = ids[i];
    if (target < sum) break;
  }
  *token = last;
  return Status::Ok();
}

}  // namespace recur::impl::text
