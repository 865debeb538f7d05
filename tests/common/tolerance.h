// Tolerances for comparing two float32 runs of the same math that differ in
// summation order or FMA contraction: another SIMD target's lane count, a
// GEMM's blocking, chunked against stepped sums. docs/testing.md, "Tolerances",
// derives them; exact comparisons are for runs of the same kernels in the
// same order on the same shapes.
#ifndef RECUR_TESTS_COMMON_TOLERANCE_H_
#define RECUR_TESTS_COMMON_TOLERANCE_H_

#include <cmath>
#include <cstddef>
#include <vector>

namespace recur::impl::testing {

inline constexpr double kFloat32Unit = 0x1p-24;  // u: half an ulp of 1

// Relative bound on how far two such runs may differ after `stages` dependent
// reductions of at most `terms` terms each. A reduction of n terms in any
// order is off by at most n·u·Σ|terms| (each term passes through at most n
// roundings), and Σ|terms| ≈ √n·|result| for terms of either sign; the stages'
// errors add.
inline double Float32OrderBound(double terms, double stages) {
  return stages * terms * std::sqrt(terms) * kFloat32Unit;
}

// Relative bound for k dependent roundings on one chain without a sum of
// many terms (a scale, a bias add, an accumulate): γ_k = k·u/(1 − k·u)
// (Higham, Accuracy and Stability, Lemma 3.1), relative to the sum of the
// magnitudes the chain adds.
inline double Float32ChainBound(double roundings) {
  return roundings * kFloat32Unit / (1 - roundings * kFloat32Unit);
}

// Bound on a float32 sum of terms, relative to Σ|terms|, when each term
// passes through at most `roundings` roundings (the n − 1 adds of the
// longest order any SIMD target may use, the product, a bias, an
// accumulate). The worst case is γ_n; with independent rounding errors of
// mean zero (round to nearest on data that is not exactly representable),
// each term's product of n factors (1 + δ) stays within λ·√n·u of 1 with
// probability at least 1 − 2·exp(−λ²/2) (Azuma–Hoeffding; Higham & Mary,
// SIAM J. Sci. Comput. 41(5), 2019, Lemma 2.3), and within it for all n
// terms at once with probability at least 1 − 2n·exp(−λ²/2). λ = 8:
// 1 − 2.5e-14·n per output. The worst case γ_n would hide a dropped term
// of a 4096-term sum; this bound does not.
inline constexpr double kRoundingLambda = 8;
inline double Float32SumBound(double roundings) {
  return kRoundingLambda * std::sqrt(roundings) * kFloat32Unit;
}

// Stated maximum errors of the transcendental functions the kernels call
// (hwy/contrib/math/math-inl.h: Exp 1 ulp, Log 4 ulp). An ulp of y is at
// most 2u·|y|.
inline constexpr double kExpUlps = 1;
inline constexpr double kLogUlps = 4;

// max over i of |a[i] − b[i]| / (1 + |b[i]|): relative for large values,
// absolute near zero. NaN anywhere gives NaN (no bound holds).
inline double WorstRelative(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return NAN;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - b[i]) / (1.0 + std::fabs(double(b[i])));
    if (!(d <= worst)) worst = d;  // NaN-propagating
  }
  return worst;
}

// The tiny models of test_models.h: reductions of at most 48 terms (d_ff and
// d_model at most 32, and the 40-45 positions a test sums over), about 8
// dependent ones per block (two norms, the projections, the mixer's two or
// three, the feed-forward's two) and 4 after the last (norm, head, softmax).
inline double TinyModelOutputBound(unsigned layers) { return Float32OrderBound(48, 8.0 * layers + 4); }
// A layer's state sits mid-block: about 8 reductions per block up to it.
inline double TinyModelStateBound(unsigned layers) { return Float32OrderBound(48, 8.0 * layers); }

}  // namespace recur::impl::testing

#endif  // RECUR_TESTS_COMMON_TOLERANCE_H_
