#!/usr/bin/env bash
# Installs what is needed, builds and runs the whole test suite three times:
#   release  g++ 12: C++ unit tests, kernel tests on every Highway target, the
#            PyTorch reference tests, runtime-vs-PyTorch parity, the demos'
#            tests, the installed-package example;
#   asan     clang 14 with AddressSanitizer, UndefinedBehaviorSanitizer and
#            LeakSanitizer: the same suite (less the pure-Python tests and the
#            install test, see CMakePresets.json) plus a short run of every
#            fuzz target;
#   tsan     clang 14 with ThreadSanitizer: the concurrency tests.
# Usage (as root on Debian 12): scripts/test.sh [release|asan|tsan ...] (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."

presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(release asan tsan)
scripts/install-deps.sh
for preset in "${presets[@]}"; do
  echo "== test.sh: preset $preset"
  cmake --preset "$preset"
  cmake --build --preset "$preset"
  ctest --preset "$preset"
done
