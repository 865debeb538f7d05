// recur_sample (recur.h "sampling"): the greedy cases, reproducibility by
// seed, the distribution against the softmax (chi-square with a fixed seed;
// top_k, top_p and min_p),
// every error, and generation that resumes exactly from a saved state.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "recur/recur.h"
#include "test_models.h"

namespace {

recur_sampler_options Options(float temperature, uint32_t top_k = 0, float top_p = 0) {
  recur_sampler_options o = recur_sampler_options_default();
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  return o;
}

// Temperature 1 and min_p.
recur_sampler_options MinP(float min_p) {
  recur_sampler_options o = Options(1.0f);
  o.min_p = min_p;
  return o;
}

int32_t Draw(const std::vector<float>& logits, const recur_sampler_options& o, uint64_t* rng) {
  int32_t token = -1;
  const recur_status s = recur_sample(logits.data(), logits.size(), &o, rng, &token);
  REQUIRE_MESSAGE(s == RECUR_OK, recur_last_error());
  return token;
}

std::vector<int32_t> Draws(const std::vector<float>& logits, const recur_sampler_options& o,
                           uint64_t seed, int count) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < count; ++i) tokens.push_back(Draw(logits, o, &seed));
  return tokens;
}

// Pearson's chi-square of `counts` against probabilities p (over the tokens
// with p > 0; a count where p is 0 makes it infinite).
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p, int draws) {
  double chi2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      if (counts[i] != 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double expected = p[i] * draws;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += p[i] = std::exp(logits[i] / temperature);
  for (double& x : p) x /= sum;
  return p;
}

const std::vector<float> kLogits = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 2.0f, 0.2f, -2.0f};

}  // namespace

TEST_CASE("sampler: greedy is the argmax, the lower id on a tie, and draws nothing") {
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  for (const recur_sampler_options& o : {Options(0), Options(1.0f, 1), Options(5.0f, 1, 0.5f)}) {
    uint64_t rng = 1234;
    CHECK(Draw(logits, o, &rng) == 1);
    CHECK(rng == 1234);
  }
  uint64_t rng = 7;
  int32_t token = -1;
  REQUIRE(recur_sample(logits.data(), logits.size(), nullptr, &rng, &token) == RECUR_OK);
  CHECK(token == 1);
  // -inf logits are tokens never drawn, also by greedy.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> masked = {-inf, -inf, -5.0f};
  CHECK(Draw(masked, Options(0), &rng) == 2);
  for (int i = 0; i < 50; ++i) CHECK(Draw(masked, Options(1.0f), &rng) == 2);
}

TEST_CASE("sampler: a tiny top_p keeps only the most likely token") {
  uint64_t rng = 99;
  const uint64_t before = rng;
  for (int i = 0; i < 200; ++i) CHECK(Draw(kLogits, Options(1.5f, 0, 1e-6f), &rng) == 5);
  CHECK(rng != before);  // it drew (and so advanced the generator), yet always the top token
}

TEST_CASE("sampler: the same seed gives the same tokens, other seeds others") {
  const std::vector<float> flat(100, 0.0f);
  const recur_sampler_options o = Options(1.0f);
  const std::vector<int32_t> a = Draws(flat, o, 42, 64);
  CHECK(a == Draws(flat, o, 42, 64));
  CHECK(a != Draws(flat, o, 43, 64));
  CHECK(Draws(flat, o, 1, 64) != Draws(flat, o, 2, 64));
  // splitmix64's first output for seed 0 is 0xE220A8397B1DCDAF: u = 0.883..., so
  // of four equal tokens the draw is the fourth.
  uint64_t rng = 0;
  CHECK(Draw({0.0f, 0.0f, 0.0f, 0.0f}, o, &rng) == 3);
  CHECK(rng == 0x9E3779B97F4A7C15ull);
}

TEST_CASE("sampler: the draws follow the softmax (chi-square, fixed seed)") {
  // 7 degrees of freedom: P(chi2 > 30) < 1e-4 for a right sampler, and a
  // wrong one (the temperature ignored, an off-by-one) is far beyond.
  const int n = 200000;
  const double temperature = 0.7;
  std::vector<int> counts(kLogits.size(), 0);
  uint64_t rng = 2024;
  for (int i = 0; i < n; ++i) ++counts[Draw(kLogits, Options(float(temperature)), &rng)];
  const double chi2 = ChiSquare(counts, Softmax(kLogits, temperature), n);
  CHECK(chi2 < 30);
  CHECK(ChiSquare(counts, Softmax(kLogits, 1.0), n) > 1000);

  // top_k 4 then top_p 0.75: the ranking is 5 (2.0), 0 (1.0), 1 (0.5), 6 (0.2);
  // at temperature 1 their weights are 1, e^-1, e^-1.5, e^-1.8, 56.9% of
  // them in the first, 77.9% in the first two: top_p keeps 5 and 0.
  std::vector<int> kept(kLogits.size(), 0);
  for (int i = 0; i < n; ++i) ++kept[Draw(kLogits, Options(1.0f, 4, 0.75f), &rng)];
  std::vector<double> p(kLogits.size(), 0.0);
  p[5] = 1.0 / (1.0 + std::exp(-1.0));
  p[0] = 1.0 - p[5];
  CHECK(ChiSquare(kept, p, n) < 11);  // 1 degree of freedom: P(> 11) < 1e-3

  // top_k alone: the three highest, renormalised.
  std::vector<int> top3(kLogits.size(), 0);
  for (int i = 0; i < n; ++i) ++top3[Draw(kLogits, Options(1.0f, 3), &rng)];
  std::vector<double> p3(kLogits.size(), 0.0);
  const double w5 = std::exp(2.0), w0 = std::exp(1.0), w1 = std::exp(0.5);
  p3[5] = w5 / (w5 + w0 + w1);
  p3[0] = w0 / (w5 + w0 + w1);
  p3[1] = w1 / (w5 + w0 + w1);
  CHECK(ChiSquare(top3, p3, n) < 20);  // 2 degrees of freedom: P(> 20) < 1e-4
}

TEST_CASE(
    "sampler: min_p keeps the tokens at least min_p times the most likely, after temperature") {
  const int n = 100000;
  uint64_t rng = 77;
  // Temperature 1, min_p 0.2: the weights after 5 (1) are e^-1 (0), e^-1.5 = 0.22 (1),
  // e^-1.8 = 0.17 (6): 5, 0 and 1 stay, renormalised.
  recur_sampler_options o = Options(1.0f);
  o.min_p = 0.2f;
  std::vector<int> counts(kLogits.size(), 0);
  for (int i = 0; i < n; ++i) ++counts[Draw(kLogits, o, &rng)];
  std::vector<double> p(kLogits.size(), 0.0);
  const double w5 = 1.0, w0 = std::exp(-1.0), w1 = std::exp(-1.5);
  p[5] = w5 / (w5 + w0 + w1);
  p[0] = w0 / (w5 + w0 + w1);
  p[1] = w1 / (w5 + w0 + w1);
  CHECK(ChiSquare(counts, p, n) < 20);  // 2 degrees of freedom: P(> 20) < 1e-4
  // Temperature 2: every weight but 7's (e^-2 = 0.14) is at least 0.2 (4's: e^-1.5).
  o.temperature = 2.0f;
  std::vector<int> warm(kLogits.size(), 0);
  for (int i = 0; i < n; ++i) ++warm[Draw(kLogits, o, &rng)];
  std::vector<double> p2 = Softmax(kLogits, 2.0);
  const double rest = 1.0 - p2[7];
  p2[7] = 0;
  for (double& x : p2) x /= rest;
  CHECK(ChiSquare(warm, p2, n) < 30);  // 6 degrees of freedom: P(> 30) < 1e-4
  // With top_k 3 (5, 0, 1), min_p 0.5 keeps only 5; min_p 1 keeps the ties with the highest.
  o = Options(1.0f, 3);
  o.min_p = 0.5f;
  for (int i = 0; i < 100; ++i) CHECK(Draw(kLogits, o, &rng) == 5);
  o = Options(5.0f);
  o.min_p = 1.0f;
  const std::vector<float> tied = {0.0f, 3.0f, 3.0f, 2.999f};
  std::vector<int> ties(tied.size(), 0);
  for (int i = 0; i < 1000; ++i) ++ties[Draw(tied, o, &rng)];
  CHECK(ties[0] + ties[3] == 0);
  CHECK(ties[1] > 400);
  CHECK(ties[2] > 400);
  // min_p 0 is the default: the same draws as without it.
  uint64_t a = 5, b = 5;
  o = Options(1.5f, 0, 0.9f);
  recur_sampler_options zero = o;
  zero.min_p = 0.0f;
  CHECK(Draws(kLogits, o, a, 200) == Draws(kLogits, zero, b, 200));
}

TEST_CASE("sampler: a large vocabulary with top_p ranks past the first prefix") {
  // 1000 tokens of nearly equal logits: top_p 0.5 keeps some 500 of them, more
  // than the first prefix the ranking tries, and only the 500 highest.
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 1e-4f * float((i * 7919) % 1000);
  uint64_t rng = 5;
  int highest = 0;
  for (int i = 0; i < 2000; ++i) {
    const int32_t t = Draw(logits, Options(1.0f, 0, 0.5f), &rng);
    REQUIRE(logits[t] >= 1e-4f * 499.5f);
    highest += logits[t] >= 1e-4f * 749.5f;
  }
  CHECK(highest > 800);  // about half of the draws in the top quarter
  CHECK(highest < 1200);
}

TEST_CASE("sampler: bad options and logits are errors that name them") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::vector<float> logits;
    recur_sampler_options options;
    const char* message;
  };
  const std::vector<Case> cases = {
      {kLogits, Options(-0.5f), "temperature is -0.5; it must be finite and >= 0"},
      {kLogits, Options(nan), "temperature is nan"},
      {kLogits, Options(inf), "temperature is inf"},
      {kLogits, Options(1.0f, 0, 1.5f), "top_p is 1.5; it must be in (0, 1]"},
      {kLogits, Options(1.0f, 0, -0.1f), "top_p is -0.1"},
      {kLogits, Options(1.0f, 0, nan), "top_p is nan"},
      {kLogits, MinP(1.5f), "min_p is 1.5; it must be in [0, 1]"},
      {kLogits, MinP(-0.1f), "min_p is -0.1"},
      {kLogits, MinP(nan), "min_p is nan"},
      {{1.0f, nan, 0.0f}, Options(1.0f), "logit 1 is NaN"},
      {{1.0f, 0.0f, inf}, Options(0), "logit 2 is +inf"},
      {{-inf, -inf}, Options(1.0f), "every one of the 2 logits is -inf"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    uint64_t rng = 1;
    int32_t token = -7;
    CHECK(recur_sample(c.logits.data(), c.logits.size(), &c.options, &rng, &token) ==
          RECUR_INVALID_ARGUMENT);
    CHECK(std::string(recur_last_error()).find(c.message) != std::string::npos);
    CHECK(token == -7);
    CHECK(rng == 1);
  }
  uint64_t rng = 1;
  int32_t token = 0;
  const recur_sampler_options o = Options(1.0f);
  CHECK(recur_sample(kLogits.data(), 0, &o, &rng, &token) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("n is 0") != std::string::npos);
  CHECK(recur_sample(nullptr, 3, &o, &rng, &token) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_sample(kLogits.data(), 3, &o, nullptr, &token) == RECUR_INVALID_ARGUMENT);
  CHECK(recur_sample(kLogits.data(), 3, &o, &rng, nullptr) == RECUR_INVALID_ARGUMENT);
  recur_sampler_options bad = o;
  bad.struct_size = 3;
  CHECK(recur_sample(kLogits.data(), 3, &bad, &rng, &token) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("recur_sampler_options.struct_size is 3") !=
        std::string::npos);
  // An older caller's struct that ends after temperature: the rest default.
  bad.struct_size = offsetof(recur_sampler_options, top_k);
  bad.temperature = 0;
  CHECK(recur_sample(kLogits.data(), kLogits.size(), &bad, &rng, &token) == RECUR_OK);
  CHECK(token == 5);
  // One from before min_p: min_p reads as 0 (a min_p of 1 in the caller's memory past it
  // would keep only token 5).
  recur_sampler_options older = MinP(1.0f);
  older.struct_size = offsetof(recur_sampler_options, min_p);
  uint64_t a = 11, b = 11;
  CHECK(Draws(kLogits, older, a, 100) == Draws(kLogits, Options(1.0f), b, 100));
}

namespace {

recur_penalty_options Penalties(float repeat, float presence, float frequency, float decay) {
  recur_penalty_options o = recur_penalty_options_default();
  o.repeat = repeat;
  o.presence = presence;
  o.frequency = frequency;
  o.decay = decay;
  return o;
}

std::vector<float> Penalized(std::vector<float> logits, const std::vector<int32_t>& recent,
                             const recur_penalty_options& o) {
  const recur_status s =
      recur_apply_penalties(logits.data(), logits.size(), recent.data(), recent.size(), &o);
  REQUIRE_MESSAGE(s == RECUR_OK, recur_last_error());
  return logits;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

const std::vector<float> kPenaltyLogits = {
    2.0f, -1.5f, 0.0f, 3.25f, -std::numeric_limits<float>::infinity(), 0.5f, 1.0f, -0.25f};
const std::vector<int32_t> kRecent = {3, 1, 3, 2, 4, 3, 1};  // oldest first

}  // namespace

TEST_CASE("penalties: each seen token's logit as recur.h says, the others bit for bit") {
  const float repeat = 1.5f, presence = 0.4f, frequency = 0.3f, decay = 0.8f;
  const std::vector<float> got =
      Penalized(kPenaltyLogits, kRecent, Penalties(repeat, presence, frequency, decay));
  for (size_t t = 0; t < kPenaltyLogits.size(); ++t) {
    CAPTURE(t);
    double c = 0;
    bool seen = false;
    for (size_t i = 0; i < kRecent.size(); ++i) {
      if (size_t(kRecent[i]) != t) continue;
      seen = true;
      c += std::pow(double(decay), double(kRecent.size() - 1 - i));
    }
    const double x = kPenaltyLogits[t];
    if (!seen) {
      CHECK(SameBits(got[t], kPenaltyLogits[t]));
    } else if (std::isinf(x)) {
      CHECK(got[t] == -std::numeric_limits<float>::infinity());
    } else {
      const double scaled = x > 0 ? x / repeat : x * repeat;
      CHECK(got[t] == doctest::Approx(scaled - (frequency * c + presence)).epsilon(1e-6));
    }
  }
  // Token 3 (2.0 → 3.25 / 1.5) seen three times: ages 6, 4 and 1.
  CHECK(got[3] ==
        doctest::Approx(3.25 / 1.5 - 0.4 -
                        0.3 * (0.8 * 0.8 * 0.8 * 0.8 * 0.8 * 0.8 + 0.8 * 0.8 * 0.8 * 0.8 + 0.8))
            .epsilon(1e-6));
  // Token 2's logit 0 is multiplied (llama.cpp's side for x <= 0): 0 - 0.4 - 0.3·0.8^3.
  CHECK(got[2] == doctest::Approx(-0.4 - 0.3 * 0.512).epsilon(1e-6));
}

TEST_CASE("penalties: llama.cpp's (counts, no decay) and the rwkv package's (decayed counts)") {
  // llama.cpp's llama_sampler_penalties: logit /= repeat (or *=), then
  // -= count·freq + present, over its window of last tokens.
  const std::vector<float> llama =
      Penalized(kPenaltyLogits, kRecent, Penalties(1.1f, 0.5f, 0.2f, 0));
  CHECK(llama[3] == doctest::Approx(3.25 / 1.1 - (3 * 0.2 + 0.5)).epsilon(1e-6));
  CHECK(llama[1] == doctest::Approx(-1.5 * 1.1 - (2 * 0.2 + 0.5)).epsilon(1e-6));
  CHECK(llama[2] == doctest::Approx(0.0 * 1.1 - (1 * 0.2 + 0.5)).epsilon(1e-6));

  // The rwkv package's PIPELINE.generate: before each draw every logit of a
  // token in `occurrence` loses alpha_presence + occurrence·alpha_frequency;
  // after it every occurrence decays by alpha_decay and the drawn one gains 1.
  const float presence = 0.2f, frequency = 0.2f, decay = 0.996f;
  std::vector<int32_t> drawn;
  std::vector<double> occurrence(kPenaltyLogits.size(), 0);
  std::vector<bool> in_occurrence(kPenaltyLogits.size(), false);
  uint64_t x = 12345;
  for (int step = 0; step < 300; ++step) {
    const int32_t token = int32_t((x = x * 6364136223846793005ull + 1) >> 61);  // 0..7
    for (double& o : occurrence) o *= decay;
    occurrence[token] += 1;
    in_occurrence[token] = true;
    drawn.push_back(token);
  }
  std::vector<float> finite = kPenaltyLogits;
  finite[4] = -3.0f;
  const std::vector<float> got = Penalized(finite, drawn, Penalties(0, presence, frequency, decay));
  for (size_t t = 0; t < finite.size(); ++t) {
    CAPTURE(t);
    const double want =
        in_occurrence[t] ? finite[t] - (presence + occurrence[t] * frequency) : finite[t];
    CHECK(got[t] == doctest::Approx(want).epsilon(1e-6));
  }
}

TEST_CASE("penalties: no options, zero options or no recent tokens change nothing") {
  std::vector<float> logits = kPenaltyLogits;
  CHECK(recur_apply_penalties(logits.data(), logits.size(), kRecent.data(), kRecent.size(),
                              nullptr) == RECUR_OK);
  const recur_penalty_options zero = recur_penalty_options_default();
  CHECK(recur_apply_penalties(logits.data(), logits.size(), kRecent.data(), kRecent.size(),
                              &zero) == RECUR_OK);
  const recur_penalty_options strong = Penalties(2, 1, 1, 0.5f);
  CHECK(recur_apply_penalties(logits.data(), logits.size(), nullptr, 0, &strong) == RECUR_OK);
  for (size_t t = 0; t < logits.size(); ++t) CHECK(SameBits(logits[t], kPenaltyLogits[t]));
}

TEST_CASE("penalties: bad arguments are errors that name them, the logits left as they were") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::vector<int32_t> recent;
    recur_penalty_options options;
    const char* message;
  };
  const std::vector<Case> cases = {
      {kRecent, Penalties(-1, 0, 0, 0), "repeat penalty is -1; it must be finite and > 0"},
      {kRecent, Penalties(nan, 0, 0, 0), "repeat penalty is nan"},
      {kRecent, Penalties(inf, 0, 0, 0), "repeat penalty is inf"},
      {kRecent, Penalties(0, nan, 0, 0), "presence penalty is nan; it must be finite"},
      {kRecent, Penalties(0, 0, -inf, 0), "frequency penalty is -inf; it must be finite"},
      {kRecent, Penalties(0, 0, 0, 1.5f), "penalty decay is 1.5; it must be in (0, 1]"},
      {kRecent, Penalties(0, 0, 0, -0.5f), "penalty decay is -0.5"},
      {kRecent, Penalties(0, 0, 0, nan), "penalty decay is nan"},
      {{1, -1}, Penalties(0, 1, 0, 0), "recent token 1 is -1; it must be in [0, 8)"},
      {{8, 1}, Penalties(0, 1, 0, 0), "recent token 0 is 8; it must be in [0, 8)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    std::vector<float> logits = kPenaltyLogits;
    CHECK(recur_apply_penalties(logits.data(), logits.size(), c.recent.data(), c.recent.size(),
                                &c.options) == RECUR_INVALID_ARGUMENT);
    CHECK(std::string(recur_last_error()).find(c.message) != std::string::npos);
    for (size_t t = 0; t < logits.size(); ++t) CHECK(SameBits(logits[t], kPenaltyLogits[t]));
  }
  std::vector<float> logits = kPenaltyLogits;
  const recur_penalty_options o = Penalties(0, 1, 0, 0);
  CHECK(recur_apply_penalties(nullptr, 8, kRecent.data(), kRecent.size(), &o) ==
        RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("logits must not be null") != std::string::npos);
  CHECK(recur_apply_penalties(logits.data(), 8, nullptr, 2, &o) == RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("nor recent when count is 2") != std::string::npos);
  CHECK(recur_apply_penalties(logits.data(), 0, kRecent.data(), kRecent.size(), &o) ==
        RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("n is 0") != std::string::npos);
  recur_penalty_options bad = o;
  bad.struct_size = 3;
  CHECK(recur_apply_penalties(logits.data(), 8, kRecent.data(), kRecent.size(), &bad) ==
        RECUR_INVALID_ARGUMENT);
  CHECK(std::string(recur_last_error()).find("recur_penalty_options.struct_size is 3") !=
        std::string::npos);
  for (size_t t = 0; t < logits.size(); ++t) CHECK(SameBits(logits[t], kPenaltyLogits[t]));
  // An older caller's struct that ends after presence: frequency and decay default.
  bad = Penalties(0, 1, 5, 1.5f);
  bad.struct_size = offsetof(recur_penalty_options, frequency);
  CHECK(recur_apply_penalties(logits.data(), 8, kRecent.data(), kRecent.size(), &bad) == RECUR_OK);
  CHECK(logits[3] == doctest::Approx(3.25 - 1).epsilon(1e-6));
  CHECK(SameBits(logits[0], kPenaltyLogits[0]));
}

TEST_CASE("sampler: generation resumes from a saved state exactly") {
  // 20 sampled tokens in one run, against 10, a saved state (and the
  // generator's state), a new session that loads it, and 10 more: the same
  // logits bit for bit, so the same tokens.
  const auto bytes =
      recur::impl::testing::BuildTestModel(recur::impl::testing::kTinyRwkv7Config, 11);
  REQUIRE(!bytes.empty());
  recur_model* model = nullptr;
  REQUIRE(recur_model_load_buffer(bytes.data(), bytes.size(), nullptr, &model) == RECUR_OK);
  recur_model_info info;
  info.struct_size = sizeof info;
  REQUIRE(recur_model_get_info(model, &info) == RECUR_OK);
  const size_t width = info.output_width;
  const recur_sampler_options o = Options(1.0f, 0, 0.9f);

  // Prefill the prompt, then draw and step `n` tokens from `logits`.
  const auto run = [&](recur_session* s, std::vector<float>* logits, uint64_t* rng, int n,
                       std::vector<int32_t>* tokens, std::vector<float>* all_logits) {
    for (int i = 0; i < n; ++i) {
      int32_t t = -1;
      REQUIRE(recur_sample(logits->data(), width, &o, rng, &t) == RECUR_OK);
      tokens->push_back(t);
      recur_input in = {&t, nullptr, 1};
      REQUIRE(recur_session_step(s, &in, logits->data()) == RECUR_OK);
      all_logits->insert(all_logits->end(), logits->begin(), logits->end());
    }
  };
  const std::vector<int32_t> prompt = {1, 4, 2, 8, 5, 7};
  const auto start = [&](recur_session** s, std::vector<float>* logits) {
    REQUIRE(recur_session_create(model, nullptr, s) == RECUR_OK);
    std::vector<float> out(prompt.size() * width);
    recur_input in = {prompt.data(), nullptr, prompt.size()};
    REQUIRE(recur_session_prefill(*s, prompt.size(), &in, out.data()) == RECUR_OK);
    logits->assign(out.end() - long(width), out.end());
  };

  recur_session* whole = nullptr;
  std::vector<float> logits;
  start(&whole, &logits);
  uint64_t rng = 77;
  std::vector<int32_t> tokens_whole;
  std::vector<float> logits_whole;
  run(whole, &logits, &rng, 20, &tokens_whole, &logits_whole);

  recur_session* first = nullptr;
  start(&first, &logits);
  uint64_t rng2 = 77;
  std::vector<int32_t> tokens_split;
  std::vector<float> logits_split;
  run(first, &logits, &rng2, 10, &tokens_split, &logits_split);
  size_t size = 0;
  REQUIRE(recur_session_state_size(first, &size) == RECUR_OK);
  std::vector<unsigned char> blob(size);
  REQUIRE(recur_session_state_save(first, 0, blob.data(), size) == RECUR_OK);
  recur_session_free(first);
  recur_session* second = nullptr;
  REQUIRE(recur_session_create(model, nullptr, &second) == RECUR_OK);
  REQUIRE(recur_session_state_load(second, 0, blob.data(), size) == RECUR_OK);
  run(second, &logits, &rng2, 10, &tokens_split, &logits_split);

  CHECK(tokens_split == tokens_whole);
  REQUIRE(logits_split.size() == logits_whole.size());
  CHECK(std::memcmp(logits_split.data(), logits_whole.data(), logits_whole.size() * 4) == 0);
  CHECK(rng2 == rng);
  recur_session_free(whole);
  recur_session_free(second);
  recur_model_free(model);
}
