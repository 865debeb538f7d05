#!/usr/bin/env bash
# Installs what is needed, builds and runs the whole test suite three times:
#   release  g++ 12: C++ unit tests, kernel tests on every Highway target, the
#            PyTorch reference tests, runtime-vs-PyTorch parity, the demos'
#            tests, the installed-package example;
#   asan     clang 14 with AddressSanitizer, UndefinedBehaviorSanitizer and
#            LeakSanitizer: the same suite (less the pure-Python tests and the
#            install test, see CMakePresets.json) plus a short run of every
#            fuzz target;
#   tsan     clang 14 with ThreadSanitizer: the concurrency tests;
#   aarch64  the suite cross-built for arm64 (g++-aarch64-linux-gnu against the
#            sysroot of scripts/arm64-sysroot.sh) and run under qemu-aarch64
#            with -cpu max (SVE2; kernel tests sweep SVE2, SVE and NEON);
#   aarch64-neon  the same build under -cpu cortex-a72 (NEON only);
#   minimal  Highway only (static, from Debian's source: scripts/hwy-source.sh),
#            no threads, a fully static examples/minimal_c.
# Usage (as root on Debian 12): scripts/test.sh [PRESET ...]
# (default: release asan tsan minimal; the aarch64 presets are not in the default list
# yet: under qemu the kernel sweeps alone take over 20 minutes, see README)
set -euo pipefail
cd "$(dirname "$0")/.."

presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release asan tsan minimal)
scripts/install-deps.sh
for preset in "${presets[@]}"; do
  echo "== test.sh: preset $preset"
  build="${preset%-neon}"  # aarch64-neon tests the aarch64 build
  [ "$build" != aarch64 ] || scripts/arm64-sysroot.sh
  [ "$build" != minimal ] || scripts/hwy-source.sh >/dev/null
  cmake --preset "$build"
  cmake --build --preset "$build"
  ctest --preset "$preset"
done
