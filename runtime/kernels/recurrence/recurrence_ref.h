// Scalar reference for RecurrenceStep (the spec; used by tests): every sum
// and product in double, S' and y rounded to float once.
#ifndef RECUR_KERNELS_RECURRENCE_RECURRENCE_REF_H_
#define RECUR_KERNELS_RECURRENCE_RECURRENCE_REF_H_

#include <cstddef>

#include "kernels/recurrence/recurrence.h"

namespace recur::impl::kernels::ref {

// Same contract as recur::impl::kernels::RecurrenceStep (recurrence.h).
inline void RecurrenceStep(const RecurrenceStepArgs& p, float* s, float* y) {
  for (size_t i = 0; i < p.dv; ++i) {
    float* row = s + i * p.dk;
    double sa = 0.0;
    if (p.a != nullptr) {
      for (size_t j = 0; j < p.dk; ++j) sa += static_cast<double>(row[j]) * p.a[j];
    }
    double out = 0.0;
    for (size_t j = 0; j < p.dk; ++j) {
      const double w = p.w != nullptr ? p.w[j] : p.w_scalar;
      double next = static_cast<double>(row[j]) * w + static_cast<double>(p.v[i]) * p.k[j];
      if (p.b != nullptr) next += sa * p.b[j];
      row[j] = static_cast<float>(next);
      out += static_cast<double>(row[j]) * p.r[j];
    }
    y[i] = static_cast<float>(out);
  }
}

}  // namespace recur::impl::kernels::ref

#endif  // RECUR_KERNELS_RECURRENCE_RECURRENCE_REF_H_
