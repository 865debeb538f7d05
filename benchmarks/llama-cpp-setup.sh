#!/bin/sh
# llama.cpp for benchmarks/llama_cpp_bench.py: the llama.cpp that llama-cpp-python
# 0.3.36 vendors (its source distribution on PyPI), built for this CPU, with the
# package's ctypes bindings beside it, and a virtual environment with the `gguf`
# package that writes the benchmark's files. Not part of the build or the tests.
#
#   benchmarks/llama-cpp-setup.sh [DIR]     # default build/llama-cpp (ignored by git)
#
# Leaves DIR/bin (a link to DIR/build/bin) with {llama-bench,llama-batched-bench,llama-quantize,llama-completion,
# llama-tokenize}, DIR/bin/libllama.so (what the bindings load: LLAMA_CPP_LIB_PATH),
# DIR/python/llama_cpp (the bindings) and DIR/venv (gguf 0.19.0; Debian's numpy and
# torch through --system-site-packages). Needs python3-venv, cmake and a C++ compiler;
# everything else comes from PyPI by the ordinary pip client. About 20 minutes of
# compiling on 2 cores.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
dir=${1:-"$repo/build/llama-cpp"}
version=0.3.36
jobs=${JOBS:-$(nproc)}

if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
  echo "llama-cpp-setup: python3-venv is missing (apt-get install python3-venv)" >&2
  exit 1
fi
mkdir -p "$dir"
[ -x "$dir/venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$dir/venv"
"$dir/venv/bin/pip" install gguf==0.19.0

sdist="$dir/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  # The source distribution itself (no wheel exists for this platform); its build
  # dependencies come as wheels only to read its metadata.
  "$dir/venv/bin/pip" download --no-deps --no-binary llama-cpp-python -d "$dir" \
    "llama-cpp-python==$version"
fi
src="$dir/llama_cpp_python-$version"
[ -d "$src" ] || tar -xzf "$sdist" -C "$dir"

cmake -S "$src/vendor/llama.cpp" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
cmake --build "$dir/build" -j "$jobs" --target llama-bench llama-batched-bench llama-quantize \
  llama-completion llama-tokenize
ln -sfn build/bin "$dir/bin"   # llama.cpp puts programs and shared libraries in BUILD/bin

rm -rf "$dir/python"
mkdir -p "$dir/python"
cp -r "$src/llama_cpp" "$dir/python/"
# The bindings as the benchmark loads them (llama_peer: the package's high-level API
# and its dependencies are not needed).
PYTHONPATH="$here" "$dir/venv/bin/python" -c \
  'import sys, gguf, llama_peer; llama_peer.load(sys.argv[1]); print("llama.cpp bindings and gguf load")' "$dir"
"$dir/bin/llama-bench" --help > /dev/null
echo "llama-cpp-setup: ready in $dir"
