#include "kernels/dispatch/target_limit.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <strings.h>

#include "hwy/highway.h"
#include "hwy/targets.h"

namespace recur::impl::kernels {
namespace {

// Calls f(bit) for each target compiled into this build, best (lowest bit) first.
template <typename F>
void ForEachBuildTarget(F&& f) {
  for (int64_t targets = HWY_TARGETS; targets != 0; targets &= targets - 1) f(targets & -targets);
}

// AVX3 is compiled for x86 builds that can name AVX3_VNNI.
constexpr bool kBuildHasAvx3 = HWY_ARCH_X86 && (HWY_TARGETS & HWY_AVX3) != 0;

std::atomic<bool> vnni_allowed{true};

}  // namespace

bool CpuHasAvx512Vnni() {
#if HWY_ARCH_X86 && (defined(__GNUC__) || defined(__clang__))
  // libgcc's checks include the OS saving the 512-bit state.
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

bool Avx512VnniEnabled() {
  return vnni_allowed.load(std::memory_order_relaxed) && CpuHasAvx512Vnni();
}

void SetAvx512VnniAllowed(bool allowed) { vnni_allowed.store(allowed, std::memory_order_relaxed); }

std::string TargetNamesOfBuild() {
  std::string names;
  ForEachBuildTarget([&](int64_t bit) {
    if (!names.empty()) names += ", ";
    if (kBuildHasAvx3 && bit == HWY_AVX3) names += std::string(kAvx3VnniName) + ", ";
    names += hwy::TargetName(bit);
  });
  return names;
}

Status SetMaxSimdTarget(const char* name) {
  if (name == nullptr || name[0] == '\0') {
    hwy::DisableTargets(0);
    SetAvx512VnniAllowed(true);
    return Status::Ok();
  }
  int64_t ceiling = 0;
  bool vnni = false;
  if (kBuildHasAvx3 && strcasecmp(name, kAvx3VnniName) == 0) {
    ceiling = HWY_AVX3;
    vnni = true;
  }
  ForEachBuildTarget([&](int64_t bit) {
    if (ceiling == 0 && strcasecmp(name, hwy::TargetName(bit)) == 0) {
      ceiling = bit;
      vnni = bit < HWY_AVX3;  // better than AVX3 (AVX3_DL where compiled)
    }
  });
  if (ceiling == 0) {
    return InvalidArgument("unknown SIMD target '%s' (this build has %s)", name,
                           TargetNamesOfBuild().c_str());
  }
  // Every better target has a lower bit; the next dispatch re-chooses.
  hwy::DisableTargets(ceiling - 1);
  SetAvx512VnniAllowed(vnni);
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

}  // namespace recur::impl::kernels
