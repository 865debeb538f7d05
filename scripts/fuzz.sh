#!/usr/bin/env bash
# Runs the libFuzzer targets (tests/fuzz) for a while each and prints a table:
# executions, corpus size and coverage. Builds the asan preset (clang 14,
# ASan + UBSan) first if needed; the corpora grow in
# build/asan/tests/fuzz/corpus/<target> across runs, crashes are written to
# build/asan/fuzz-artifacts/.
#   scripts/fuzz.sh [SECONDS per target, default 600] [TARGET...]
# Targets: model_load state_load safetensors config npy pt gguf vocab (default: all).
# With two or more cores, set JOBS=N to run N targets at once.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(model_load state_load safetensors config npy pt gguf vocab)
jobs=${JOBS:-1}

build=build/asan
[ -f "$build/build.ninja" ] || cmake --preset asan >/dev/null
cmake --build --preset asan --target recur_fuzz_seeds $(printf 'fuzz_%s ' "${targets[@]}") >/dev/null
seeds=$build/tests/fuzz/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{model,state,safetensors,config,npy,pt,gguf,vocab} "$build/fuzz-artifacts"
"$build/tests/fuzz/recur_fuzz_seeds" "$seeds" >/dev/null
cp models/configs/*.json tests/fuzz/config_seeds/*.json "$seeds/config/"
cp tests/fuzz/pt_seeds/* "$seeds/pt/"
cp tests/fuzz/gguf_seeds/* "$seeds/gguf/"
cp tests/fuzz/vocab_seeds/* "$seeds/vocab/"

seed_dir() {
  case $1 in model_load) echo model ;; state_load) echo state ;; *) echo "$1" ;; esac
}

run_one() {
  local t=$1 corpus=$build/tests/fuzz/corpus/$1 rc=0
  mkdir -p "$corpus"
  "$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 \
    -artifact_prefix="$build/fuzz-artifacts/$t-" "$corpus" "$seeds/$(seed_dir "$t")" \
    >"$build/fuzz-artifacts/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$build/fuzz-artifacts/$t.rc"
}

running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
done
wait || true

status=0
printf '%-12s %8s %12s %9s %8s %8s %8s  %s\n' target seconds executions exec/s corpus cov ft result
for t in "${targets[@]}"; do
  log=$build/fuzz-artifacts/$t.log
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
  ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
  corpus=$(ls "$build/tests/fuzz/corpus/$t" | wc -l)
  if [ "$(cat "$build/fuzz-artifacts/$t.rc" 2>/dev/null)" = 0 ]; then
    result=ok
  else
    result="FAILED: see $log"
    status=1
  fi
  printf '%-12s %8s %12s %9s %8s %8s %8s  %s\n' "$t" "$seconds" "${runs:-?}" "${rate:-?}" "$corpus" \
    "${cov:-?}" "${ft:-?}" "$result"
done
exit $status
