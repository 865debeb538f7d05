#!/usr/bin/env bash
# Size report: librecur.a and examples/minimal_c per build
# configuration, as a Markdown table for the README.
#   scripts/size-report.sh [CONFIG ...]
# CONFIG: release, minimal, minimal-linear (the minimal preset with only the
# LinearAttention mixer), aarch64, aarch64-minimal. Default: all five. Each is
# configured and built (only librecur and minimal_c) in build/size-<CONFIG>.
# "static deps" is what a fully static link adds beside librecur.a (the static
# Highway); shared libraries (libhwy.so, XNNPACK, oneDNN, pthreadpool) are not
# counted in the release rows: they are listed instead.
set -euo pipefail
cd "$(dirname "$0")/.."

configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(release minimal minimal-linear aarch64 aarch64-minimal)

hwy_src=""
need_hwy() { [ -n "$hwy_src" ] || hwy_src="$(scripts/hwy-source.sh)"; }
minimal_flags() {
  need_hwy
  echo "-DRECUR_HWY_SOURCE_DIR=$hwy_src -DRECUR_WITH_THREADS=OFF -DRECUR_WITH_PTHREADPOOL=OFF" \
       "-DRECUR_WITH_XNNPACK=OFF -DRECUR_WITH_ONEDNN=OFF -DRECUR_LINK_STATIC=ON -DCMAKE_BUILD_TYPE=MinSizeRel"
}
aarch64_flags() {
  scripts/arm64-sysroot.sh >/dev/null
  echo "-DCMAKE_TOOLCHAIN_FILE=$PWD/platforms/toolchains/aarch64-linux-gnu.cmake" \
       "-DRECUR_ARM64_SYSROOT=$PWD/build/sysroot-aarch64"
}

kib() { echo $(( ($(stat -c %s "$1") + 512) / 1024 )); }
strip_for() { case "$1" in aarch64*) echo aarch64-linux-gnu-strip ;; *) echo strip ;; esac; }

echo "| configuration | librecur.a | static deps | minimal_c (stripped) | linked against |"
echo "|---|---|---|---|---|"
for config in "${configs[@]}"; do
  case "$config" in
    release) flags="-DCMAKE_BUILD_TYPE=Release" ;;
    minimal) flags="$(minimal_flags)" ;;
    minimal-linear) flags="$(minimal_flags) -DRECUR_MIXERS=LinearAttention" ;;
    aarch64) flags="$(aarch64_flags) -DCMAKE_BUILD_TYPE=Release" ;;
    aarch64-minimal) flags="$(aarch64_flags) $(minimal_flags)" ;;
    *) echo "size-report: unknown configuration '$config'" >&2; exit 2 ;;
  esac
  dir="build/size-$config"
  # shellcheck disable=SC2086
  cmake -G Ninja -S . -B "$dir" -DRECUR_BUILD_TESTS=OFF $flags >/dev/null
  cmake --build "$dir" --target recur minimal_c >/dev/null
  lib="$dir/runtime/librecur.a"
  deps=0
  [ -f "$dir/hwy/libhwy.a" ] && deps=$(kib "$dir/hwy/libhwy.a")
  "$(strip_for "$config")" -o "$dir/minimal_c.stripped" "$dir/examples/minimal_c"
  needed="$(readelf -d "$dir/examples/minimal_c" 2>/dev/null | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' \
    | paste -sd' ' -)"
  echo "| $config | $(kib "$lib") KiB | ${deps} KiB | $(kib "$dir/minimal_c.stripped") KiB |" \
       "${needed:-nothing (fully static)} |"
done
