#!/usr/bin/env bash
# The main job: install, build, then take a small linear transformer from
# PyTorch to a .recur model and generate with it in RNN mode.
#   1. export a reference model's weights (safetensors + config.json)
#   2. recur-convert it, inspect and verify it
#   3. generate tokens with examples/minimal_c built against the installed package
#   4. check recur-run's outputs against PyTorch's, and benchmark a step
# Usage (as root on Debian 12): scripts/main.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/out/main
mkdir -p "$out"

scripts/install-deps.sh
cmake --preset release
cmake --build --preset release
cmake --install build/release --prefix "$out/prefix" >/dev/null
bin=$out/prefix/bin

echo "== 1. export a PyTorch model (models/configs/long_pre_tokens.json, seed 1)"
/usr/bin/python3 models/reference/export.py --config models/configs/long_pre_tokens.json \
  --seed 1 --out "$out/model"

echo "== 2. convert, inspect, verify"
"$bin/recur-convert" "$out/model/weights.safetensors" --config "$out/model/config.json" \
  -o "$out/model.recur"
"$bin/recur-convert" inspect "$out/model.recur" > "$out/inspect.txt"
head -n 40 "$out/inspect.txt"
"$bin/recur-convert" verify "$out/model.recur"

echo "== 3. generate with examples/minimal_c (built with find_package(recur))"
cmake -S examples/minimal_c -B "$out/minimal_c" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$out/prefix" >/dev/null
cmake --build "$out/minimal_c" >/dev/null
"$out/minimal_c/minimal_c" "$out/model.recur" 48 7

echo "== 4. recur-run vs PyTorch on 500 tokens, and a step benchmark"
/usr/bin/python3 models/reference/compare_run.py --model-dir "$out/model" \
  --recur-run "$bin/recur-run" --model "$out/model.recur" --steps 500
"$bin/recur-bench" "$out/model.recur" --steps 2000
echo "done: files are in $out"
