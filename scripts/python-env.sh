#!/usr/bin/env bash
# Makes build/venv, the virtual environment of the Python package's tests
# (tests/python): Debian's /usr/bin/python3 with its site packages visible
# (numpy, torch), pinned pytest, scikit-build-core and nanobind from PyPI,
# and the package recur built from this tree (`pip install .`, into
# build/python/). Idempotent: an existing environment is reused and the
# package reinstalled. Needs the Debian packages of scripts/install-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=build/venv
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r python/requirements.txt
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation \
  --no-deps .
echo "python-env: $venv ready ($("$venv/bin/python" -c 'import recur; print("recur", recur.version())'))"
