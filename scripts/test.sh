#!/usr/bin/env bash
# Installs what is needed, builds and runs the whole test suite in five configurations:
#   release  g++ 12: C++ unit tests, kernel tests on every Highway target, the
#            PyTorch reference tests, runtime-vs-PyTorch parity, the demos'
#            tests, the installed-package example; and, where nvcc exists,
#            the CUDA parity path (platforms/cuda), whose GPU tests CTest
#            reports as skipped, with the reason, on a machine without a GPU;
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
#            SVE2_128, the kernel tests sweep SVE2_128, SVE2, SVE and NEON;
#   aarch64-neon    the same build under -cpu cortex-a72 (NEON only);
#   aarch64-sve512  the same build under -cpu max with 512-bit SVE (slow).
# Usage (as root on Debian 12): scripts/test.sh [PRESET ...]
# (default, as CI runs it: release asan tsan minimal aarch64)
set -euo pipefail
cd "$(dirname "$0")/.."

presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release asan tsan minimal aarch64)
scripts/install-deps.sh
for preset in "${presets[@]}"; do
  echo "== test.sh: preset $preset"
  build="${preset%-*}"  # aarch64-neon and aarch64-sve512 test the aarch64 build
  [ "$build" != aarch64 ] || scripts/arm64-sysroot.sh
  [ "$build" != minimal ] || scripts/hwy-source.sh >/dev/null
  cmake --preset "$build"
  cmake --build --preset "$build"
  ctest --preset "$preset"
done
