#!/usr/bin/env bash
# Makes build/venv, the virtual environment of the Python package's tests
# (tests/python): Debian's /usr/bin/python3 with its site packages visible
# (numpy, torch), pinned pytest, scikit-build-core and nanobind from PyPI,
# and the package recur built from this tree (`pip install .`, into
# build/python-tests/). Idempotent: an existing environment is reused and the
# package reinstalled. Needs the Debian packages of scripts/install-deps.sh.
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
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation \
  --no-deps $(scripts/python-env.sh --test-build-settings) .
echo "python-env: $venv ready ($("$venv/bin/python" -c 'import recur; print("recur", recur.version())'))"
