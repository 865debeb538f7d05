#!/usr/bin/env bash
# Installs every Debian 12 package recur needs to build, test, benchmark and
# run its demos. Idempotent: re-running it only re-checks what is installed.
# Run as root (or through sudo). There is no other source of dependencies
# but PyPI, for the Python package's pinned build and test tools
# (scripts/python-env.sh, run at the end, makes build/venv).
set -euo pipefail

packages=(
  # toolchain; clang 14 with its sanitizer and libFuzzer runtimes (presets asan, tsan)
  build-essential cmake ninja-build pkg-config git clang-14 libclang-rt-14-dev
  # a compiler cache kept between builds and clones on the machine (CMakeLists.txt)
  ccache
  # arm64 cross build and emulation (presets aarch64, aarch64-neon; the arm64
  # libraries come from scripts/arm64-sysroot.sh, not from dpkg)
  g++-aarch64-linux-gnu qemu-user
  # runtime libraries
  libhwy-dev libflatbuffers-dev flatbuffers-compiler flatbuffers-compiler-dev
  libxnnpack-dev libpthreadpool-dev libcpuinfo-dev libdnnl-dev
  # converter / tools / tests (libzip: the converter's torch.save reader)
  nlohmann-json3-dev libcli11-dev doctest-dev libzip-dev
  # the Unicode Character Database that scripts/unicode-classes.py reads
  unicode-data
  # demos
  libkissfft-dev libstb-dev libsndfile1-dev zlib1g-dev dataset-fashion-mnist espeak-ng sox
  # PyTorch reference (only /usr/bin/python3 sees it) and a fast BLAS for it
  python3-torch python3-numpy python3-matplotlib libopenblas0-openmp
  # pytorch-fast-transformers' C++ extensions, built against Debian's torch
  # without build isolation (tests/layouts/requirements.txt, scripts/python-env.sh)
  libtorch-dev pybind11-dev python3-wheel
  # the Python package's virtual environment (scripts/python-env.sh)
  python3-venv python3-packaging python3-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# build/venv: pinned tools from PyPI and the package recur built from this tree.
"$(dirname "$0")/python-env.sh"
