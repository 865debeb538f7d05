#!/usr/bin/env bash
# Installs what is needed, builds (Release) and runs the whole test suite:
# C++ unit tests, kernel tests on every Highway target, the PyTorch reference
# tests, runtime-vs-PyTorch parity, and the installed-package example.
# Usage (as root on Debian 12): scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release
cmake --build --preset release
ctest --preset release
