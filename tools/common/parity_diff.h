// The parity comparison, in one place: how recur-parity, parity_check and
// the GPU-path tests measure one array against its reference and judge it.
//
//   max|Δ|    largest absolute difference (a NaN anywhere makes it NaN)
//   rel       ‖Δ‖₂ / ‖ref‖₂ over the whole array (‖Δ‖₂ when ref is all zero)
//   NMSE      rel²
//
// The rule: max|Δ| ≤ abs × max(1, max|ref|) and rel ≤ rel_tol. The absolute
// limit grows with the reference's magnitude because residual streams of
// random models reach |x| ≈ 440, where one f32 ulp is 3e-5, and states are
// sums that grow with the sequence; below 1 it is plain absolute.
// parity_check keeps a plain absolute limit for outputs and layers (its
// references are float64 and small) and scales it for states only.
#ifndef RECUR_TOOLS_COMMON_PARITY_DIFF_H_
#define RECUR_TOOLS_COMMON_PARITY_DIFF_H_

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace parity {

struct Diff {
  double max_abs = 0, max_ref = 0, sq_diff = 0, sq_ref = 0;

  void Add(double got, double want) {
    const double d = std::fabs(got - want);
    if (!(d <= max_abs)) max_abs = d;  // NaN-propagating
    max_ref = std::max(max_ref, std::fabs(want));
    sq_diff += d * d;
    sq_ref += want * want;
  }
  double rel() const { return sq_ref > 0 ? std::sqrt(sq_diff / sq_ref) : std::sqrt(sq_diff); }
  double nmse() const { return rel() * rel(); }
  // max|Δ| ≤ tol_abs × max(1, max|ref|) (or ≤ tol_abs when !scale_abs) and
  // rel ≤ tol_rel; false for NaN.
  bool Within(double tol_abs, double tol_rel, bool scale_abs = true) const {
    const double abs_limit = scale_abs ? tol_abs * std::max(1.0, max_ref) : tol_abs;
    return max_abs <= abs_limit && rel() <= tol_rel;
  }
};

// Compares n elements of `got` with `ref` (any arithmetic element types).
template <typename Got, typename Ref>
Diff Compare(const Got* got, const Ref* ref, size_t n) {
  Diff d;
  for (size_t i = 0; i < n; ++i) d.Add(static_cast<double>(got[i]), static_cast<double>(ref[i]));
  return d;
}

}  // namespace parity

#endif  // RECUR_TOOLS_COMMON_PARITY_DIFF_H_
