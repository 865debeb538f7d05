#!/usr/bin/env bash
# Installs recur into a scratch prefix, builds examples/minimal_c against it
# with find_package(recur), and generates with a converted model.
#   install_test.sh BUILD_DIR SOURCE_DIR MODEL.recur
set -euo pipefail
build=$1 source=$2 model=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/lib/librecur.a"
test -f "$work/prefix/include/recur/recur.h"
test -f "$work/prefix/include/recur/recur.hpp"
cmake -S "$source/examples/minimal_c" -B "$work/minimal_c" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/minimal_c" >/dev/null
out=$("$work/minimal_c/minimal_c" "$model" 40 3)
echo "$out"
# 40 sampled token ids, each within the vocabulary.
tokens=$(echo "$out" | sed -n 's/^generated://p')
count=$(echo $tokens | wc -w)
[ "$count" -eq 40 ] || { echo "expected 40 tokens, got $count"; exit 1; }
# The example also fails cleanly on a missing file.
if "$work/minimal_c/minimal_c" /nonexistent.recur 2>"$work/err"; then
  echo "minimal_c accepted a missing file"; exit 1
fi
grep -q "RECUR_IO_ERROR" "$work/err"
echo "install test passed"
