#!/usr/bin/env bash
# Installs what is needed, builds and runs the whole test suite in these
# configurations (CMakePresets.json):
#   release  g++ 12: C++ unit tests, kernel tests on every Highway target, the
#            PyTorch reference tests, runtime-vs-PyTorch parity, the demos'
#            tests, the installed-package example; and, where nvcc exists,
#            the CUDA parity path (platforms/cuda), whose GPU tests CTest
#            reports as skipped, with the reason, on a machine without a GPU;
#   release-avx2  the release build's API, model, parity and reference tests
#            once more as an AVX2-only CPU runs them: recur's kernels capped
#            at AVX2 (RECUR_MAX_SIMD_TARGET), and PyTorch, oneDNN and
#            OpenBLAS held to AVX2 (docs/testing.md, "Running as another CPU");
#   release-sse4  the same as an SSE4-only CPU (not in the default list);
#   asan     clang 14 with AddressSanitizer, UndefinedBehaviorSanitizer and
#            LeakSanitizer: the same suite (less the pure-Python tests and the
#            install test, see CMakePresets.json) plus a short run of every
#            fuzz target;
#   tsan     clang 14 with ThreadSanitizer: the concurrency tests;
#   minimal  Highway only (static, from Debian's source: scripts/hwy-source.sh),
#            no threads, a fully static examples/minimal_c;
#   aarch64  the suite cross-built for arm64 (g++-aarch64-linux-gnu against the
#            sysroot of scripts/arm64-sysroot.sh) and run under qemu-aarch64
#            with -cpu max and 128-bit SVE vectors: Highway dispatches to
#            SVE2_128, the kernel tests sweep SVE2_128, SVE and NEON;
#            less the longest runs under the emulator (docs/testing.md);
#   aarch64-full    all of it (not in the default list);
#   aarch64-neon    the whole suite under -cpu cortex-a72 (NEON only);
#   aarch64-sve512  the whole suite under -cpu max with 512-bit SVE (slow).
# Every preset runs even when one before it fails; a summary with each
# preset's result, wall time and CPU time (user + sys of everything it ran:
# docs/testing.md keeps each preset's budget) ends the output, and the exit
# status is non-zero if any failed. Compiles go through ccache
# (CMakeLists.txt); the parity goldens are kept in a cache of the machine's,
# shared by clones ($RECUR_GOLDEN_CACHE, default ~/.cache/recur/golden).
# Usage (as root on Debian 12): scripts/test.sh [PRESET ...]
# (default, as CI runs it: release release-avx2 asan tsan minimal aarch64)
set -euo pipefail
cd "$(dirname "$0")/.."

presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release release-avx2 asan tsan minimal aarch64)

# cpu_now: CPU seconds (user + sys) of the processes this shell has waited
# for, into $cpu (`times` runs in this shell: in a $(...) it would count the
# subshell's children only).
cpu_file=$(mktemp)
trap 'rm -f "$cpu_file"' EXIT
cpu_now() {
  times >"$cpu_file"
  cpu=$(awk 'END { s = 0; for (i = 1; i <= 2; i++) { split($i, t, "m"); sub("s", "", t[2]); s += t[1] * 60 + t[2] } printf "%.0f", s }' "$cpu_file")
}

# The machine's caches (ccache's and the goldens') live under the home folder:
# take it from the user database where the environment has none.
[ -n "${HOME:-}" ] || export HOME="$(getent passwd "$(id -u)" | cut -d: -f6)"
golden_cache=${RECUR_GOLDEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/recur/golden}

start=$SECONDS
scripts/install-deps.sh
cpu_now
summary=("install-deps: $((SECONDS - start)) s, CPU $cpu s")
command -v ccache >/dev/null && ccache --zero-stats >/dev/null
failed=0

# Configures and builds the preset's build and runs its tests. Steps are
# chained with && : set -e does not apply inside the `if` that calls this.
run_preset() {
  local preset=$1 configure build
  case "$preset" in
    release-*) configure=release build=release ;;
    # aarch64-full, -neon and -sve512 run the whole suite: they build everything.
    aarch64-*) configure=aarch64 build=aarch64-all ;;
    *) configure=$preset build=$preset ;;
  esac
  { [ "$configure" != aarch64 ] || scripts/arm64-sysroot.sh; } &&
    { [ "$configure" != minimal ] || scripts/hwy-source.sh >/dev/null; } &&
    cmake --preset "$configure" -DRECUR_GOLDEN_CACHE="$golden_cache" &&
    cmake --build --preset "$build" &&
    cpu_now && build_cpu=$cpu &&
    ctest --preset "$preset"
}

for preset in "${presets[@]}"; do
  echo "== test.sh: preset $preset"
  t0=$SECONDS build_cpu=
  cpu_now
  c0=$cpu
  if run_preset "$preset"; then result=passed; else result=FAILED; failed=1; fi
  cpu_now
  line="$preset: $result in $((SECONDS - t0)) s, CPU $((cpu - c0)) s"
  [ -z "$build_cpu" ] || line+=" (build $((build_cpu - c0)), tests $((cpu - build_cpu)))"
  summary+=("$line")
  echo "== test.sh: preset $line"
done

cpu_now
echo "== test.sh: summary ($((SECONDS - start)) s in all, CPU $cpu s)"
printf '  %s\n' "${summary[@]}"
if command -v ccache >/dev/null; then
  echo "  ccache: $(ccache --print-stats | awk -F'\t' '$1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { hits += $2 } $1 == "cache_miss" { misses = $2 } END { printf "%d hits, %d misses", hits, misses }')"
fi
exit $failed
