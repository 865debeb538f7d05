#!/usr/bin/env bash
# Fetches Debian 12's Highway source package (the version libhwy-dev is built
# from) and unpacks it with Debian's patches applied, for the static Highway of
# the minimal preset (CMake RECUR_HWY_SOURCE_DIR): Debian ships libhwy only as
# a shared library, so a fully static binary needs it built from source.
#   scripts/hwy-source.sh [DIR]     (default: build/hwy-src; the source lands in DIR/highway)
# Uses a private apt state with a deb-src list: the system's apt configuration
# is not touched. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="$(realpath -m "${1:-build/hwy-src}")"
if [ -f "$dir/.complete" ]; then cat "$dir/.complete"; exit 0; fi
version="$(dpkg-query -W -f='${Version}' libhwy-dev 2>/dev/null || true)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
cat > "$work/sources.list" <<LIST
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian bookworm-updates main
deb-src http://deb.debian.org/debian-security bookworm-security main
LIST
apt_opts=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=-
          -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Debug::NoLocking=1)
apt-get "${apt_opts[@]}" update -q >/dev/null
rm -rf "$dir"
mkdir -p "$dir"
(cd "$dir" && apt-get "${apt_opts[@]}" source -q "highway${version:+=$version}" 2>&1 \
  | grep -v 'unsandboxed as root' >&2 || true)
src="$(find "$dir" -maxdepth 1 -mindepth 1 -type d -name 'highway-*' | head -1)"
[ -n "$src" ] && [ -f "$src/CMakeLists.txt" ] || { echo "hwy-source: no source in $dir" >&2; exit 1; }
mv "$src" "$dir/highway"  # a fixed path for the preset (RECUR_HWY_SOURCE_DIR)
echo "$dir/highway" > "$dir/.complete"
echo "$dir/highway"
