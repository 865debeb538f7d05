#!/usr/bin/env bash
# The main job: install, build, then take a small linear transformer from
# PyTorch to a .recur model and generate with it in RNN mode, and run the two
# demos on the trained models that ship in models/zoo.
#   1. export a reference model's weights (safetensors + config.json)
#   2. recur-convert it, inspect and verify it
#   3. generate tokens with examples/minimal_c built against the installed package
#   4. check recur-run's outputs against PyTorch's, and benchmark a step
#   5. image demo: convert the Fashion-MNIST models, sample and complete images
#      (PNG), test-set bits/dim of the linear model and its softmax baseline
#   6. speech demo: convert the digit recogniser, synthesise held-out-speaker
#      utterances, transcribe one as it streams, score them all
#   7. text demo: convert the small language model with its vocabulary and
#      let recur-generate continue two prompts
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

echo "== 5. image demo (models/zoo/fashion_linear, fashion_softmax; Fashion-MNIST test set)"
for m in fashion_linear fashion_softmax; do
  "$bin/recur-convert" "models/zoo/$m/weights.safetensors" --config "models/zoo/$m/config.json" \
    -o "$out/$m.recur" | tail -n 1
done
"$bin/recur-image" sample "$out/fashion_linear.recur" --count 64 --seed 1 -o "$out/image_samples.png"
"$bin/recur-image" complete "$out/fashion_linear.recur" --count 8 --samples 3 \
  -o "$out/image_completions.png"
for m in fashion_linear fashion_softmax; do
  echo "-- $m: bits/dim over the 10,000 test images (lower is better)"
  "$bin/recur-image" eval "$out/$m.recur" --threads 2
done

echo "== 6. speech demo (models/zoo/speech_digits; espeak-ng voices never heard in training)"
"$bin/recur-convert" models/zoo/speech_digits/weights.safetensors \
  --config models/zoo/speech_digits/config.json -o "$out/speech_digits.recur" | tail -n 1
/usr/bin/python3 models/reference/make_speech_corpus.py --out "$out/speech_corpus" --train 0 \
  --test 200 --seed 2
echo "-- streaming transcription of speech_corpus/test/00000.wav" \
  "(reference: $(awk -F'\t' 'NR == 2 {print $2}' "$out/speech_corpus/test.tsv"))"
"$bin/recur-speech" transcribe "$out/speech_digits.recur" "$out/speech_corpus/test/00000.wav"
"$bin/recur-speech" eval "$out/speech_digits.recur" --corpus "$out/speech_corpus" \
  > "$out/speech_eval.txt"
tail -n 2 "$out/speech_eval.txt"
echo "-- the same with RWKV-7 blocks (models/zoo/speech_digits_rwkv7)"
"$bin/recur-convert" models/zoo/speech_digits_rwkv7/weights.safetensors \
  --config models/zoo/speech_digits_rwkv7/config.json -o "$out/speech_digits_rwkv7.recur" | tail -n 1
"$bin/recur-speech" transcribe "$out/speech_digits_rwkv7.recur" "$out/speech_corpus/test/00000.wav"
"$bin/recur-speech" eval "$out/speech_digits_rwkv7.recur" --corpus "$out/speech_corpus" \
  > "$out/speech_rwkv7_eval.txt"
tail -n 2 "$out/speech_rwkv7_eval.txt"

echo "== 7. text demo (models/zoo/text_rwkv7; trained on Debian's documentation)"
"$bin/recur-convert" models/zoo/text_rwkv7/weights.safetensors \
  --config models/zoo/text_rwkv7/config.json -o "$out/text_rwkv7.recur" | tail -n 1
"$bin/recur-generate" "$out/text_rwkv7.recur" --prompt "The Debian project" -n 80 \
  --temperature 0.8 --top-p 0.9 --seed 3
"$bin/recur-generate" "$out/text_rwkv7.recur" --prompt "Python is" -n 60 --temperature 0

cat <<EOF
done: files are in $out
  image_samples.png      64 unconditional samples of the linear model (8 per row)
  image_completions.png  test images (row 1), their upper halves (row 2), 3 completions each
  speech_eval.txt        every mis-transcribed utterance, then the scores
bits/dim: mean -log2 p(pixel | pixels before it) over the test set (lower is better);
digit error rate: (substituted + inserted + deleted digits) / reference digits;
real-time factor: compute time / audio duration on one thread (0.05 = 20x faster than real time).
EOF
