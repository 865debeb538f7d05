#!/bin/sh
# converter_pytorch_export: PyTorch export → recur-convert → verify/inspect.
# Usage: pytorch_export_test.sh RECUR_CONVERT PYTHON SOURCE_DIR WORK_DIR
set -eu
convert=$1 python=$2 src=$3 work=$4
export_py=$src/models/reference/export.py
if [ ! -x "$python" ] || [ ! -f "$export_py" ]; then
  echo "skipped: $python or $export_py missing"
  exit 77
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "skipped: $python has no torch"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"

check() {  # check NAME LAYOUT
  name=$1 layout=$2
  dir=$work/$name
  "$python" "$export_py" --config "$src/models/configs/$name.json" --seed 3 --out "$dir" --layout "$layout"
  "$convert" "$dir/weights.safetensors" --config "$dir/config.json" --layout "$layout" \
    -o "$dir/model.recur" --notes "exported by $0"
  "$convert" verify "$dir/model.recur"
  "$convert" inspect "$dir/model.recur" > "$dir/inspect.txt"
  "$convert" inspect --json "$dir/model.recur" > "$dir/inspect.json"
  # Every tensor 64-byte aligned; the file exactly P + data_size long.
  if grep -q ' NO$' "$dir/inspect.txt"; then echo "$name: misaligned tensor"; exit 1; fi
  grep -q 'length ok' "$dir/inspect.txt" || { echo "$name: wrong file length"; exit 1; }
  sha=$("$python" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' \
        "$dir/weights.safetensors")
  grep -q "source_hash: *$sha" "$dir/inspect.txt" || { echo "$name: wrong source_hash"; exit 1; }
  echo "$name ($layout): ok"
}

check tiny_pre_tokens recur
check small_post_features recur
check ft_small fast-transformers
