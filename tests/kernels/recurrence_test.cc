// RecurrenceStep vs its reference on every Highway target, for each update
// rule of the family, and the reference vs the models' own formulas.
//
// Each step starts both implementations from the same state (u = 2⁻²⁴):
//   S'[i][j]  4u·(|S w| + |v k| + |sa b|) + δsa·|b_j|: three roundings of the
//             kernel's s·w, v·k + ·, sa·b + · against the reference's one;
//             sa = S a is a dot of dk terms, δsa = Float32SumBound(dk + 1)·Σ|S a|
//   y_i       Σ_j tol(S'[i][j])·|r_j| + Float32SumBound(dk + 2)·Σ_j |S'_ij r_j|
#include "kernels/recurrence/recurrence.h"

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/recurrence/recurrence_ref.h"
#include "test_util.h"

namespace recur::impl::kernels::test {
namespace {

using recur::impl::testing::Float32SumBound;
using recur::impl::testing::kFloat32Unit;

// The update rules (which operands a step has), as the models use them.
enum class Rule { kVectorDecayLowRank, kVectorDecay, kScalarDecayLowRank, kScalarDecay, kNoDecay };
const Rule kRules[] = {Rule::kVectorDecayLowRank, Rule::kVectorDecay, Rule::kScalarDecayLowRank,
                       Rule::kScalarDecay, Rule::kNoDecay};
const char* RuleName(Rule rule) {
  switch (rule) {
    case Rule::kVectorDecayLowRank: return "vector decay + low rank (RWKV-7)";
    case Rule::kVectorDecay: return "vector decay (GLA)";
    case Rule::kScalarDecayLowRank: return "scalar decay + low rank (Gated DeltaNet)";
    case Rule::kScalarDecay: return "scalar decay (Mamba2, RetNet)";
    case Rule::kNoDecay: return "no decay";
  }
  return "";
}

// Runs `steps` steps of one rule at (dk, dv) from a random state on every
// target (ForEachTarget); returns the number of failures. Each step's
// operands, the reference's step and the tolerances are made once; every
// target steps from the reference's state before it.
size_t CheckSteps(std::mt19937& rng, Rule rule, size_t dk, size_t dv, size_t offset, int steps) {
  Buffer w(dk, offset), a(dk, (offset + 1) % 4), b(dk, (offset + 2) % 4), k(dk, (offset + 3) % 4);
  Buffer v(dv, offset), r(dk, (offset + 2) % 4), s(dv * dk, (offset + 1) % 4);
  Buffer y(dv, (offset + 3) % 4);
  std::vector<float> s_ref(dv * dk), y_ref(dv);
  std::vector<double> s_tol(dv * dk), y_tol(dv);
  FillUniform(rng, s_ref.data(), s_ref.size(), -1.0f, 1.0f);
  const bool vector_decay = rule == Rule::kVectorDecayLowRank || rule == Rule::kVectorDecay;
  const bool low_rank = rule == Rule::kVectorDecayLowRank || rule == Rule::kScalarDecayLowRank;
  size_t failures = 0;
  for (int step = 0; step < steps; ++step) {
    FillUniform(rng, w.data(), dk, 0.5f, 1.0f);
    FillUniform(rng, a.data(), dk, -1.0f, 1.0f);
    FillUniform(rng, b.data(), dk, -1.0f, 1.0f);
    FillUniform(rng, k.data(), dk, -1.0f, 1.0f);
    FillUniform(rng, v.data(), dv, -2.0f, 2.0f);
    FillUniform(rng, r.data(), dk, -1.0f, 1.0f);
    RecurrenceStepArgs p{dk,
                         dv,
                         vector_decay ? w.data() : nullptr,
                         rule == Rule::kNoDecay ? 1.0f : 0.875f,
                         low_rank ? a.data() : nullptr,
                         low_rank ? b.data() : nullptr,
                         k.data(),
                         v.data(),
                         r.data()};
    p.warm = step % 2 == 1;  // both loops
    const std::vector<float> s_prev = s_ref;
    ref::RecurrenceStep(p, s_ref.data(), y_ref.data());
    for (size_t i = 0; i < dv; ++i) {
      const float* prev = s_prev.data() + i * dk;
      double sa = 0, sa_mag = 0;
      for (size_t j = 0; low_rank && j < dk; ++j) {
        sa += double{prev[j]} * a[j];
        sa_mag += std::fabs(double{prev[j]} * a[j]);
      }
      const double d_sa = Float32SumBound(dk + 1.0) * sa_mag;
      double yt = 0, y_mag = 0;
      for (size_t j = 0; j < dk; ++j) {
        const size_t e = i * dk + j;
        const double wj = vector_decay ? w[j] : p.w_scalar;
        const double bj = low_rank ? b[j] : 0.0;
        s_tol[e] =
            4 * kFloat32Unit *
                (std::fabs(prev[j] * wj) + std::fabs(double{v[i]} * k[j]) + std::fabs(sa * bj)) +
            d_sa * std::fabs(bj);
        yt += s_tol[e] * std::fabs(r[j]);
        y_mag += std::fabs(double{s_ref[e]} * r[j]);
      }
      y_tol[i] = yt + Float32SumBound(dk + 2.0) * y_mag;
    }
    ForEachTarget([&](const std::string&) {
      std::copy(s_prev.begin(), s_prev.end(), s.data());
      RecurrenceStep(p, s.data(), y.data());
      for (size_t i = 0; i < dv; ++i) {
        for (size_t j = 0; j < dk; ++j) {
          const size_t e = i * dk + j;
          if (!(std::fabs(double{s[e]} - s_ref[e]) <= s_tol[e]) && failures++ < 3) {
            FAIL_CHECK("S step " << step << " i=" << i << " j=" << j << " got " << s[e] << " want "
                                 << s_ref[e]);
          }
        }
        if (!(std::fabs(double{y[i]} - y_ref[i]) <= y_tol[i]) && failures++ < 3) {
          FAIL_CHECK("y step " << step << " i=" << i << " got " << y[i] << " want " << y_ref[i]);
        }
      }
      for (const Buffer* buf : {&w, &a, &b, &k, &v, &r, &s, &y}) {
        if (!buf->GuardsIntact()) {
          ++failures;
          FAIL_CHECK("wrote outside an array, step " << step);
          break;
        }
      }
    });
  }
  return failures;
}

TEST_CASE("RecurrenceStep: every update rule, dk swept 0..70 and 128, several dv, misaligned") {
  std::vector<size_t> dks;
  for (size_t dk = 0; dk <= 70; ++dk) dks.push_back(dk);
  dks.push_back(128);
  std::mt19937 rng(38);
  for (Rule rule : kRules) {
    for (size_t dk : dks) {
      for (size_t dv : {0, 1, 3, 16, 17, 64}) {
        INFO(RuleName(rule) << " dk=" << dk << " dv=" << dv);
        CHECK(CheckSteps(rng, rule, dk, dv, (dk + dv) % 4, 2) == 0);
      }
    }
  }
}

// RWKV-7's head (64×64) over a long sequence, each kernel on its own state:
// κ̂ unit-norm, α in (0, 1) and w in [e^{-e^{-0.5}}, 1) keep the transition
// diag(w) − κ̂ (κ̂ ⊙ α)ᵀ a contraction, so the states stay bounded and the
// kernel's and the reference's stay within a few float roundings per step.
// Each step's operands and the reference's step once; every target steps its
// own state on them.
TEST_CASE("RecurrenceStep: RWKV-7's rule over 1,000 steps stays with the reference") {
  const size_t n = 64;
  struct Run {
    std::vector<float> s, y;
    double worst = 0;
  };
  std::map<std::string, Run> runs;
  std::mt19937 rng(7);
  std::vector<float> w(n), kk(n), a(n), b(n), k(n), v(n), r(n);
  std::vector<float> s_ref(n * n, 0.0f), y_ref(n);
  double scale = 0;
  for (int step = 0; step < 1000; ++step) {
    double norm = 0;
    for (size_t j = 0; j < n; ++j) {
      kk[j] = std::uniform_real_distribution<float>(-1, 1)(rng);
      norm += double{kk[j]} * kk[j];
    }
    for (size_t j = 0; j < n; ++j) {
      kk[j] = static_cast<float>(kk[j] / std::sqrt(norm));
      const float alpha = std::uniform_real_distribution<float>(0.01f, 0.99f)(rng);
      a[j] = -kk[j];
      b[j] = kk[j] * alpha;
      w[j] = std::exp(-std::exp(-0.5f) * std::uniform_real_distribution<float>(0, 1)(rng));
    }
    FillUniform(rng, k.data(), n, -1.0f, 1.0f);
    FillUniform(rng, v.data(), n, -1.0f, 1.0f);
    FillUniform(rng, r.data(), n, -1.0f, 1.0f);
    const RecurrenceStepArgs p{n,        n,        w.data(), 1.0f,    a.data(),
                               b.data(), k.data(), v.data(), r.data()};
    ref::RecurrenceStep(p, s_ref.data(), y_ref.data());
    for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(double{y_ref[i]}));
    ForEachTarget([&](const std::string& name) {
      Run& run = runs[name];
      if (run.s.empty()) run.s.assign(n * n, 0.0f), run.y.resize(n);
      RecurrenceStep(p, run.s.data(), run.y.data());
      for (size_t i = 0; i < n; ++i) {
        run.worst = std::max(run.worst, std::fabs(double{run.y[i]} - y_ref[i]));
      }
    });
  }
  CHECK(!runs.empty());
  for (const auto& [name, run] : runs) {
    INFO("target " << name << ": max |Δy| " << run.worst << " of max |y| " << scale);
    CHECK(scale > 1.0);
    CHECK(run.worst <= 1e-5 * scale);
  }
}

// Gated DeltaNet's and GLA's operands as their mixers set them, over a long
// run on each target, each kernel on its own state. Gated DeltaNet (dk 64,
// dv 128): k unit-norm, β in (0, 1), g ≤ 0: w = e^g, a = k, b = −β e^g k,
// the write (β v) kᵀ; the transition e^g (I − β k kᵀ) is a contraction. GLA
// (dk 64, dv 64): w = exp(logsigmoid(x)/16) per key dimension, x standard
// normal (so w in about (0.8, 1)), no low rank, the write v kᵀ.
TEST_CASE("RecurrenceStep: Gated DeltaNet's and GLA's rules over 1,000 steps stay with the reference") {
  for (const bool delta : {true, false}) {
    const size_t dk = 64, dv = delta ? 128 : 64;
    INFO((delta ? "Gated DeltaNet" : "GLA"));
    // Each step's operands and the reference's step once; every target steps
    // its own state on them.
    struct Run {
      std::vector<float> s, y;
      double worst = 0;
    };
    std::map<std::string, Run> runs;
    std::mt19937 rng(delta ? 17 : 19);
    std::normal_distribution<float> normal;
    std::vector<float> w(dk), a(dk), b(dk), k(dk), v(dv), r(dk);
    std::vector<float> s_ref(dv * dk, 0.0f), y_ref(dv);
    double scale = 0;
    for (int step = 0; step < 1000; ++step) {
      FillUniform(rng, k.data(), dk, -1.0f, 1.0f);
      FillUniform(rng, v.data(), dv, -1.0f, 1.0f);
      FillUniform(rng, r.data(), dk, -0.2f, 0.2f);
      RecurrenceStepArgs p{dk, dv, nullptr, 1.0f, nullptr, nullptr, k.data(), v.data(), r.data()};
      if (delta) {
        double norm = 0;
        for (size_t j = 0; j < dk; ++j) norm += double{k[j]} * k[j];
        const float beta = std::uniform_real_distribution<float>(0.01f, 0.99f)(rng);
        const float decay = std::exp(-std::uniform_real_distribution<float>(0.0f, 2.0f)(rng));
        for (size_t j = 0; j < dk; ++j) {
          k[j] = static_cast<float>(k[j] / std::sqrt(norm));
          b[j] = -beta * decay * k[j];
        }
        for (size_t i = 0; i < dv; ++i) v[i] *= beta;
        p.w_scalar = decay;
        p.a = k.data();
        p.b = b.data();
      } else {
        for (size_t j = 0; j < dk; ++j) {
          const float x = normal(rng);  // logsigmoid(x) = −log(1 + e^{−x})
          w[j] = std::exp(-std::log1p(std::exp(-x)) / 16.0f);
        }
        p.w = w.data();
      }
      ref::RecurrenceStep(p, s_ref.data(), y_ref.data());
      for (size_t i = 0; i < dv; ++i) scale = std::max(scale, std::fabs(double{y_ref[i]}));
      ForEachTarget([&](const std::string& name) {
        Run& run = runs[name];
        if (run.s.empty()) run.s.assign(dv * dk, 0.0f), run.y.resize(dv);
        RecurrenceStep(p, run.s.data(), run.y.data());
        for (size_t i = 0; i < dv; ++i) {
          run.worst = std::max(run.worst, std::fabs(double{run.y[i]} - y_ref[i]));
        }
      });
    }
    CHECK(!runs.empty());
    for (const auto& [name, run] : runs) {
      INFO("target " << name << ": max |Δy| " << run.worst << " of max |y| " << scale);
      CHECK(scale > 0.1);
      CHECK(run.worst <= 1e-5 * scale);
    }
  }
}

// The family's operands as the models set them, against each model's own
// formula in double: RWKV-7's reference (state·w + state @ ((−κ̂) (κ̂ ⊙ α)ᵀ) + v kᵀ,
// y = state r) and Gated DeltaNet's (S ← e^g S, S ← S + β k (v − Sᵀk)ᵀ, o = Sᵀq,
// with its S (dk, dv) the transpose of the family's).
TEST_CASE("RecurrenceStep reference: RWKV-7's and Gated DeltaNet's own formulas") {
  const size_t dk = 5, dv = 3;
  std::mt19937 rng(11);
  std::vector<float> s(dv * dk), kk(dk), alpha(dk), w(dk), k(dk), v(dv), r(dk);
  FillUniform(rng, s.data(), s.size(), -1, 1);
  FillUniform(rng, kk.data(), dk, -1, 1);
  FillUniform(rng, alpha.data(), dk, 0, 1);
  FillUniform(rng, w.data(), dk, 0.5f, 1);
  FillUniform(rng, k.data(), dk, -1, 1);
  FillUniform(rng, v.data(), dv, -1, 1);
  FillUniform(rng, r.data(), dk, -1, 1);

  SUBCASE("RWKV-7") {
    std::vector<double> want(dv * dk), y_want(dv, 0.0);
    for (size_t i = 0; i < dv; ++i) {
      for (size_t j = 0; j < dk; ++j) {
        double state_ab = 0;  // (state @ ab)[i][j], ab[m][j] = −κ̂_m·(κ̂_j α_j)
        for (size_t m = 0; m < dk; ++m) state_ab += double{s[i * dk + m]} * -kk[m] * kk[j] * alpha[j];
        want[i * dk + j] = double{s[i * dk + j]} * w[j] + state_ab + double{v[i]} * k[j];
        y_want[i] += want[i * dk + j] * r[j];
      }
    }
    std::vector<float> a(dk), b(dk), got = s, y(dv);
    for (size_t j = 0; j < dk; ++j) {
      a[j] = -kk[j];
      b[j] = static_cast<float>(double{kk[j]} * alpha[j]);
    }
    const RecurrenceStepArgs p{dk, dv, w.data(), 1.0f, a.data(), b.data(),
                               k.data(), v.data(), r.data()};
    ref::RecurrenceStep(p, got.data(), y.data());
    for (size_t e = 0; e < dv * dk; ++e) CHECK(got[e] == doctest::Approx(want[e]).epsilon(1e-6));
    for (size_t i = 0; i < dv; ++i) CHECK(y[i] == doctest::Approx(y_want[i]).epsilon(1e-6));
  }
  SUBCASE("Gated DeltaNet") {
    const double g = -0.3, beta = 0.7, decay = std::exp(g);
    // Its S: (dk, dv), S_gdn[j][i] = s[i][j].
    std::vector<double> gdn(dk * dv);
    for (size_t i = 0; i < dv; ++i) {
      for (size_t j = 0; j < dk; ++j) gdn[j * dv + i] = decay * s[i * dk + j];
    }
    for (size_t i = 0; i < dv; ++i) {
      double stk = 0;  // (Sᵀ k)_i
      for (size_t j = 0; j < dk; ++j) stk += gdn[j * dv + i] * k[j];
      for (size_t j = 0; j < dk; ++j) gdn[j * dv + i] += beta * k[j] * (v[i] - stk);
    }
    std::vector<float> a = k, b(dk), bk(dk), got = s, y(dv);
    for (size_t j = 0; j < dk; ++j) {
      b[j] = static_cast<float>(-beta * decay * k[j]);
      bk[j] = static_cast<float>(beta * k[j]);
    }
    // No decay vector; the write β v kᵀ through k = β k.
    const RecurrenceStepArgs p{dk, dv, nullptr, static_cast<float>(decay), a.data(), b.data(),
                               bk.data(), v.data(), r.data()};
    ref::RecurrenceStep(p, got.data(), y.data());
    for (size_t i = 0; i < dv; ++i) {
      double o = 0;  // (Sᵀ q)_i with q = r
      for (size_t j = 0; j < dk; ++j) {
        CHECK(got[i * dk + j] == doctest::Approx(gdn[j * dv + i]).epsilon(1e-6));
        o += gdn[j * dv + i] * r[j];
      }
      CHECK(y[i] == doctest::Approx(o).epsilon(1e-6));
    }
  }
}

}  // namespace
}  // namespace recur::impl::kernels::test
