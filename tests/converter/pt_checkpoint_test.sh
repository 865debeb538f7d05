#!/bin/sh
# converter_pt_checkpoint: torch.save checkpoints convert to the same model as
# the same weights in safetensors (f32, f16, bf16; a nested state dict chosen
# with --state-dict-key; a tensor at a storage offset; the legacy non-zip
# format; a checkpoint re-zipped
# with deflate; a fast-transformers checkpoint), and a non-contiguous tensor is
# refused. Usage: pt_checkpoint_test.sh RECUR_CONVERT PYTHON SOURCE_DIR WORK_DIR
set -eu
convert=$1 python=$2 src=$3 work=$4
helper=$src/tests/converter/pt_checkpoint.py
if [ ! -x "$python" ]; then
  echo "skipped: $python missing"
  exit 77
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "skipped: $python has no torch"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
config=$src/models/configs/tiny_pre_tokens.json
key=$("$python" "$helper" make "$src" "$config" "$work")

for dtype in f32 f16 bf16; do
  "$convert" "$work/$dtype.safetensors" --config "$config" -o "$work/$dtype-st.recur"
  "$convert" "$work/$dtype.pt" --config "$config" -o "$work/$dtype-pt.recur"
  "$python" "$helper" same "$work/$dtype-st.recur" "$work/$dtype.safetensors" \
    "$work/$dtype-pt.recur" "$work/$dtype.pt"
  echo "$dtype: safetensors and .pt give the same model"
done

"$convert" "$work/pytorch_model.bin" --state-dict-key model --config "$config" -o "$work/nested.recur"
"$python" "$helper" same "$work/f32-st.recur" "$work/f32.safetensors" \
  "$work/nested.recur" "$work/pytorch_model.bin"
echo "nested {\"model\": state_dict}: the same model"

# Without the key the nested dict is named, and the option is suggested.
if "$convert" "$work/pytorch_model.bin" --config "$config" -o "$work/x.recur" 2>"$work/err.txt"; then
  echo "a nested checkpoint converted without --state-dict-key"; exit 1
fi
grep -q -- '"model" holds a dict, not a tensor (choose a nested state dict with --state-dict-key model)' \
  "$work/err.txt" || { cat "$work/err.txt"; exit 1; }

"$convert" "$work/offset.pt" --config "$config" -o "$work/offset.recur"
"$python" "$helper" same "$work/f32-st.recur" "$work/f32.safetensors" \
  "$work/offset.recur" "$work/offset.pt"
echo "a tensor at a storage offset: the same model"

for legacy in legacy legacy_offset; do
  "$convert" "$work/$legacy.pt" --config "$config" -o "$work/$legacy.recur"
  "$python" "$helper" same "$work/f32-st.recur" "$work/f32.safetensors" \
    "$work/$legacy.recur" "$work/$legacy.pt"
done
echo "the legacy (non-zip) format, also at a storage offset: the same model"

"$convert" "$work/deflated.pt" --config "$config" -o "$work/deflated.recur"
"$python" "$helper" same "$work/f32-st.recur" "$work/f32.safetensors" \
  "$work/deflated.recur" "$work/deflated.pt"
echo "re-zipped with deflate: the same model"

if "$convert" "$work/transposed.pt" --config "$config" -o "$work/x.recur" 2>"$work/err.txt"; then
  echo "a non-contiguous tensor was accepted"; exit 1
fi
grep -q 'is not contiguous' "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
echo "a non-contiguous $key: refused"

# The fast-transformers layout: the reference exporter's safetensors, saved
# again with torch.save.
"$python" "$src/models/reference/export.py" --config "$src/models/configs/ft_small.json" --seed 3 \
  --out "$work/ft" --layout fast-transformers >/dev/null
"$python" "$helper" resave "$src" "$work/ft/weights.safetensors" "$work/ft/model.pt"
"$convert" "$work/ft/weights.safetensors" --config "$work/ft/config.json" --layout fast-transformers \
  -o "$work/ft/st.recur"
"$convert" "$work/ft/model.pt" --config "$work/ft/config.json" --layout fast-transformers \
  -o "$work/ft/pt.recur"
"$python" "$helper" same "$work/ft/st.recur" "$work/ft/weights.safetensors" \
  "$work/ft/pt.recur" "$work/ft/model.pt"
echo "fast-transformers: safetensors and .pt give the same model"
