#!/bin/sh
# make_models.sh PYTHON SOURCE_DIR RECUR_CONVERT OUT: exports the Python
# package's test models (models/reference/export.py, seed 1) and converts them
# to OUT/NAME.recur.
set -eu
python=$1 src=$2 convert=$3 out=$4
mkdir -p "$out"
for name in tiny_pre_tokens small_post_features softmax_tokens linformer_features; do
  "$python" "$src/models/reference/export.py" --config "$src/models/configs/$name.json" \
    --seed 1 --out "$out/$name" >/dev/null
  "$convert" "$out/$name/weights.safetensors" --config "$out/$name/config.json" \
    -o "$out/$name.recur" >/dev/null
done
echo "models in $out"
