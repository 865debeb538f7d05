// Dynamic dispatch for RecurrenceStep (recurrence-inl.h).
#include "kernels/recurrence/recurrence.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/recurrence/recurrence.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/recurrence/recurrence-inl.h"

HWY_BEFORE_NAMESPACE();
namespace recur::impl::kernels {
namespace HWY_NAMESPACE {

void RecurrenceStepImpl(const RecurrenceStepArgs& args, float* s, float* y) {
  HWY_NAMESPACE::RecurrenceStep(args, s, y);  // qualified: ADL would find the dispatcher too
}

}  // namespace HWY_NAMESPACE
}  // namespace recur::impl::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace recur::impl::kernels {

HWY_EXPORT(RecurrenceStepImpl);

void RecurrenceStep(const RecurrenceStepArgs& args, float* s, float* y) {
  HWY_DYNAMIC_DISPATCH(RecurrenceStepImpl)(args, s, y);
}

}  // namespace recur::impl::kernels
#endif  // HWY_ONCE
