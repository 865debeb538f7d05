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

namespace recur::testing {

inline constexpr double kFloat32Unit = 0x1p-24;  // u: half an ulp of 1

// Relative bound on how far two such runs may differ after `stages` dependent
// reductions of at most `terms` terms each. A reduction of n terms in any
// order is off by at most n·u·Σ|terms| (each term passes through at most n
// roundings), and Σ|terms| ≈ √n·|result| for terms of either sign; the stages'
// errors add.
inline double Float32OrderBound(double terms, double stages) {
  return stages * terms * std::sqrt(terms) * kFloat32Unit;
}

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

}  // namespace recur::testing

#endif  // RECUR_TESTS_COMMON_TOLERANCE_H_
