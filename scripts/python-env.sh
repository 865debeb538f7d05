#!/usr/bin/env bash
# Makes build/venv, the virtual environment of the Python package's tests
# (tests/python): Debian's /usr/bin/python3 with its site packages visible
# (numpy, torch), pinned pytest, scikit-build-core and nanobind from PyPI,
# the pinned libraries whose models the converter imports
# (tests/layouts/requirements.txt), and the package recur built from this tree
# (`pip install .`, into build/python-tests/). Idempotent: an existing
# environment is reused, what is installed at its pinned version is kept, and
# the package reinstalled. Needs the Debian packages of scripts/install-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests' build of the package: its own folder, and the kernels for the
# compiler's target only (RECUR_KERNELS_STATIC_TARGET_ONLY): the Python tests
# test the binding, the kernel tests every SIMD target, and this halves the
# package's build (24 against 52 s on 2 cores). `pip install .` for use
# builds every target.
if [ "${1:-}" = --test-build-settings ]; then
  echo "--config-settings=build-dir=build/python-tests/{wheel_tag}" \
       "--config-settings=cmake.define.RECUR_KERNELS_STATIC_TARGET_ONLY=ON"
  exit 0
fi

venv=build/venv
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r python/requirements.txt

# The libraries of the layout tests' reference models, every dependency pinned
# and installed without pip's resolver (--no-deps), so that PyPI's torch never
# comes in. pytorch-fast-transformers is an sdist whose setup.py compiles C++
# extensions against Debian's torch (hence no build isolation), and CUDA ones
# whenever `nvcc` runs (Debian's torch has no CUDA): its PATH has no nvcc. Its
# build, once (pip skips what is installed at its pinned version), compiles 7
# files one at a time: 140 s of CPU, 2.5 min (-g0: no debug information, a
# quarter less time and 2 against 59 MB).
system_path=/usr/sbin:/usr/bin:/sbin:/bin
if PATH=$system_path command -v nvcc >/dev/null; then
  echo "python-env: nvcc is on $system_path: pytorch-fast-transformers would build CUDA extensions" >&2
  exit 1
fi
# mamba-ssm's setup.py: MAMBA_SKIP_CUDA_BUILD leaves its CUDA extensions out and
# MAMBA_FORCE_BUILD skips its download of prebuilt ones (pure Python files remain).
env PATH=$system_path CFLAGS="${CFLAGS:-} -g0" MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE \
  "$venv/bin/python" -m pip install --quiet \
  --disable-pip-version-check --no-deps --no-build-isolation -r tests/layouts/requirements.txt
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation \
  --no-deps $(scripts/python-env.sh --test-build-settings) .
echo "python-env: $venv ready ($("$venv/bin/python" -c 'import recur; print("recur", recur.version())'))"
