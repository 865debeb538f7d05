// LinearAttentionStep vs the reference on every Highway target.
//
// Each step starts both implementations from the same state, so per-step
// tolerances apply (u = 2⁻²⁴):
//   z, z's compensation   exact: the same f32 operations in the same order
//   S, S's compensation   4u·(|S_prev| + |φk_j·v_k|): the two differ only in
//          whether φk·v − comp is fused (u·|φk·v|); t = S + y then rounds in
//          both (2u·(|S| + |φk·v|)), and comp = (t − S) − y inherits both: 4u
//   out    Float32SumBound(c + 2)·(Σ_j φq_j·(|S_prev,jk| + |φk_j·v_k|) / den
//          + |out|): a dot of c terms, then the division (S itself may
//          differ by 4u of |S_prev| + |φk·v|, which matters where the update
//          cancels; that is inside the same Σ)
// Plain sums (null compensations) are checked the same way, without them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/linear_attention/linear_attention.h"
#include "kernels/linear_attention/linear_attention_ref.h"
#include "test_util.h"

namespace recur::impl::kernels::test {
namespace {

// Runs `steps` steps for one (c, m), compensated or plain sums, on every
// target (ForEachTarget); returns the number of failures. Each step's
// operands, the reference's step and the tolerances are made once; every
// target steps from the reference's state before it.
size_t CheckSteps(std::mt19937& rng, size_t c, size_t m, size_t offset, int steps,
                  bool compensated = true) {
  Buffer q(c, offset), k(c, (offset + 1) % 4), v(m, (offset + 2) % 4);
  Buffer s(c * m, (offset + 3) % 4), z(c, offset), out(m, (offset + 1) % 4);
  Buffer s_comp(c * m, offset), z_comp(c, (offset + 2) % 4);
  std::vector<float> s_ref(c * m, 0.0f), z_ref(c, 0.0f), out_ref(m);
  std::vector<float> s_comp_ref(c * m, 0.0f), z_comp_ref(c, 0.0f);
  std::vector<double> s_tol(c * m), out_tol(m);
  size_t failures = 0;
  const float eps = 1e-6f;
  for (int step = 0; step < steps; ++step) {
    // φ(·) = elu + 1 is positive; v has either sign.
    FillUniform(rng, q.data(), c, 0.01f, 3.0f);
    FillUniform(rng, k.data(), c, 0.01f, 3.0f);
    FillUniform(rng, v.data(), m, -2.0f, 2.0f);
    const std::vector<float> s_prev = s_ref, z_prev = z_ref;
    const std::vector<float> s_comp_prev = s_comp_ref, z_comp_prev = z_comp_ref;
    ref::LinearAttentionStep(q.data(), k.data(), v.data(), c, m, eps, s_ref.data(),
                             compensated ? s_comp_ref.data() : nullptr, z_ref.data(),
                             compensated ? z_comp_ref.data() : nullptr, out_ref.data());
    for (size_t j = 0; j < c; ++j) {
      for (size_t i = 0; i < m; ++i) {
        const size_t e = j * m + i;
        s_tol[e] = 4 * recur::impl::testing::kFloat32Unit *
                   (std::fabs(s_prev[e]) + std::fabs(double{k[j]} * v[i]));
      }
    }
    double den = eps;
    for (size_t j = 0; j < c; ++j) den += double{q[j]} * z_ref[j];
    for (size_t i = 0; i < m; ++i) {
      double mag = 0;
      for (size_t j = 0; j < c; ++j) {
        mag += double{q[j]} * (std::fabs(s_prev[j * m + i]) + std::fabs(double{k[j]} * v[i]));
      }
      out_tol[i] = recur::impl::testing::Float32SumBound(c + 2.0) *
                   (mag / den + std::fabs(double{out_ref[i]}));
    }
    ForEachTarget([&](const std::string&) {
      std::copy(s_prev.begin(), s_prev.end(), s.data());
      std::copy(z_prev.begin(), z_prev.end(), z.data());
      std::copy(s_comp_prev.begin(), s_comp_prev.end(), s_comp.data());
      std::copy(z_comp_prev.begin(), z_comp_prev.end(), z_comp.data());
      LinearAttentionStep(q.data(), k.data(), v.data(), c, m, eps, s.data(),
                          compensated ? s_comp.data() : nullptr, z.data(),
                          compensated ? z_comp.data() : nullptr, out.data());
      for (size_t j = 0; j < c; ++j) {
        if ((z[j] != z_ref[j] || (compensated && z_comp[j] != z_comp_ref[j])) && failures++ < 3) {
          FAIL_CHECK("z step " << step << " j=" << j);
        }
        for (size_t i = 0; i < m; ++i) {
          const size_t e = j * m + i;
          if (!(std::fabs(double{s[e]} - s_ref[e]) <= s_tol[e]) && failures++ < 3) {
            FAIL_CHECK("S step " << step << " j=" << j << " i=" << i << " got " << s[e] << " want "
                                 << s_ref[e]);
          }
          if (compensated && !(std::fabs(double{s_comp[e]} - s_comp_ref[e]) <= s_tol[e]) &&
              failures++ < 3) {
            FAIL_CHECK("S compensation step " << step << " j=" << j << " i=" << i);
          }
        }
      }
      for (size_t i = 0; i < m; ++i) {
        if (!(std::fabs(double{out[i]} - out_ref[i]) <= out_tol[i]) && failures++ < 3) {
          FAIL_CHECK("out step " << step << " i=" << i << " got " << out[i] << " want "
                                 << out_ref[i]);
        }
      }
      if (!q.GuardsIntact() || !k.GuardsIntact() || !v.GuardsIntact() || !s.GuardsIntact() ||
          !z.GuardsIntact() || !out.GuardsIntact() || !s_comp.GuardsIntact() ||
          !z_comp.GuardsIntact()) {
        ++failures;
        FAIL_CHECK("wrote outside an array, step " << step);
      }
    });
  }
  return failures;
}

TEST_CASE("LinearAttentionStep: m swept 0..64 and beyond, several c") {
  std::vector<size_t> ms;
  for (size_t m = 0; m <= 64; ++m) ms.push_back(m);
  for (size_t m : {65, 100, 127, 128, 129, 256}) ms.push_back(m);
  std::mt19937 rng(2024);
  for (size_t c : {1, 2, 3, 7, 16, 17, 32, 33, 64}) {
    for (size_t m : ms) {
      INFO("c=" << c << " m=" << m);
      CHECK(CheckSteps(rng, c, m, (c + m) % 4, 3) == 0);
    }
  }
}

TEST_CASE("LinearAttentionStep: plain sums (null compensations), m and c swept") {
  std::mt19937 rng(5);
  for (size_t c : {1, 3, 16, 17, 32, 64}) {
    for (size_t m = 0; m <= 70; ++m) {
      INFO("c=" << c << " m=" << m);
      CHECK(CheckSteps(rng, c, m, (c + m) % 4, 3, /*compensated=*/false) == 0);
    }
  }
}

TEST_CASE("LinearAttentionStep: c swept 0..64 at m = 32, 64") {
  std::mt19937 rng(77);
  for (size_t c = 0; c <= 64; ++c) {
    for (size_t m : {32, 64}) {
      INFO("c=" << c << " m=" << m);
      CHECK(CheckSteps(rng, c, m, c % 4, 2) == 0);
    }
  }
}

TEST_CASE("LinearAttentionStep: long sequence stays close to the reference") {
  // 200 steps, each kernel evolving its own state. out = φq·S/(φq·z + eps)
  // is a convex combination of past v's, and Σ_j φq_j·|S_jk| / den ≤ max|v|
  // = 2: each read is within Float32SumBound(c + 2)·(2 + |out|) of its
  // state's exact value (the out tolerance above), and each compensated state
  // within (3u + O(steps·u²)) of the exact sums (next test), which moves out
  // by at most 2·3u·2 on each side.
  ForEachTarget([&](const std::string&) {
    const size_t c = 64, m = 64;
    std::mt19937 rng(8);
    std::vector<float> q(c), k(c), v(m);
    std::vector<float> s(c * m, 0), z(c, 0), out(m), s_ref(c * m, 0), z_ref(c, 0), out_ref(m);
    std::vector<float> s_comp(c * m, 0), z_comp(c, 0), s_comp_ref(c * m, 0), z_comp_ref(c, 0);
    double worst = 0;
    for (int step = 0; step < 200; ++step) {
      FillUniform(rng, q.data(), c, 0.01f, 3.0f);
      FillUniform(rng, k.data(), c, 0.01f, 3.0f);
      FillUniform(rng, v.data(), m, -2.0f, 2.0f);
      ref::LinearAttentionStep(q.data(), k.data(), v.data(), c, m, 1e-6f, s_ref.data(),
                               s_comp_ref.data(), z_ref.data(), z_comp_ref.data(), out_ref.data());
      LinearAttentionStep(q.data(), k.data(), v.data(), c, m, 1e-6f, s.data(), s_comp.data(),
                          z.data(), z_comp.data(), out.data());
      for (size_t i = 0; i < m; ++i) {
        const double d = std::fabs(double{out[i]} - out_ref[i]);
        if (!(d <= worst)) worst = d;  // NaN-propagating
      }
    }
    const double tol = 2 * recur::impl::testing::Float32SumBound(c + 2.0) * (2 + 2) +
                       2 * 2 * 3 * recur::impl::testing::kFloat32Unit * 2;
    CHECK(worst <= tol);
  });
}

TEST_CASE("LinearAttentionStep: compensated sums stay exact over 10^5 steps") {
  // The same term added 10^5 times to a float sum loses its low bits every
  // time once the sum is large (the drift docs/reliability.md "Long runs" measures); the
  // compensated sums must stay within a few ulps of the exact double sums.
  ForEachTarget([&](const std::string&) {
    const size_t c = 5, m = 7;
    std::mt19937 rng(3);
    std::vector<float> q(c), k(c), v(m), out(m);
    std::vector<float> s(c * m, 0), z(c, 0), s_comp(c * m, 0), z_comp(c, 0);
    std::vector<double> s_exact(c * m, 0), z_exact(c, 0);
    FillUniform(rng, q.data(), c, 0.01f, 3.0f);
    for (int step = 0; step < 100000; ++step) {
      FillUniform(rng, k.data(), c, 0.01f, 3.0f);
      FillUniform(rng, v.data(), m, 0.1f, 2.0f);
      LinearAttentionStep(q.data(), k.data(), v.data(), c, m, 1e-6f, s.data(), s_comp.data(),
                          z.data(), z_comp.data(), out.data());
      for (size_t j = 0; j < c; ++j) {
        // The kernel adds fl(φk·v − comp) (one rounding); exact sums use the float product.
        for (size_t i = 0; i < m; ++i) s_exact[j * m + i] += double{k[j]} * v[i];
        z_exact[j] += k[j];
      }
    }
    double worst = 0;
    auto note = [&](double d) { worst = d <= worst ? worst : d; };  // NaN-propagating
    for (size_t e = 0; e < c * m; ++e) note(std::fabs(s[e] / s_exact[e] - 1));
    for (size_t j = 0; j < c; ++j) note(std::fabs(z[j] / z_exact[j] - 1));
    // Kahan: (2u + O(steps·u²))·Σ|terms| (steps·u² = 0.006u), plus the
    // product k·v, rounded (no FMA) before the compensated add: 3u; 4u
    // leaves 1u for the O term.
    CHECK(worst <= 4 * recur::impl::testing::kFloat32Unit);
  });
}

}  // namespace
}  // namespace recur::impl::kernels::test
