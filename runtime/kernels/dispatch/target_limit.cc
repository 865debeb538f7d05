#include "kernels/dispatch/target_limit.h"

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <strings.h>

#include "hwy/highway.h"
#include "hwy/targets.h"

namespace recur::kernels {
namespace {

// Calls f(bit) for each target compiled into this build, best (lowest bit) first.
template <typename F>
void ForEachBuildTarget(F&& f) {
  for (int64_t targets = HWY_TARGETS; targets != 0; targets &= targets - 1) f(targets & -targets);
}

}  // namespace

std::string TargetNamesOfBuild() {
  std::string names;
  ForEachBuildTarget([&](int64_t bit) {
    if (!names.empty()) names += ", ";
    names += hwy::TargetName(bit);
  });
  return names;
}

Status SetMaxSimdTarget(const char* name) {
  if (name == nullptr || name[0] == '\0') {
    hwy::DisableTargets(0);
    return Status::Ok();
  }
  int64_t ceiling = 0;
  ForEachBuildTarget([&](int64_t bit) {
    if (ceiling == 0 && strcasecmp(name, hwy::TargetName(bit)) == 0) ceiling = bit;
  });
  if (ceiling == 0) {
    return InvalidArgument("unknown SIMD target '%s' (this build has %s)", name,
                           TargetNamesOfBuild().c_str());
  }
  // Every better target has a lower bit; the next dispatch re-chooses.
  hwy::DisableTargets(ceiling - 1);
  return Status::Ok();
}

Status ApplyTargetLimitFromEnvironment() {
  static std::once_flag once;
  static Status result;
  std::call_once(once, [] {
    const char* value = std::getenv(kMaxSimdTargetVariable);
    if (value != nullptr && value[0] != '\0') {
      result = SetMaxSimdTarget(value).WithContext(kMaxSimdTargetVariable);
    }
  });
  return result;
}

}  // namespace recur::kernels
