#!/usr/bin/env bash
# Builds the arm64 sysroot that the aarch64 presets link against: Debian 12's
# arm64 builds of recur's libraries, unpacked into a private folder.
#   scripts/arm64-sysroot.sh [SYSROOT]     (default: build/sysroot-aarch64)
# Nothing is installed through dpkg and the system's apt state is not touched:
# libxnnpack-dev and libpthreadpool-dev are not Multi-Arch, so installing their
# arm64 builds would remove the amd64 ones (and python3-torch with them). A
# private apt state (APT::Architecture=arm64) downloads the .debs instead.
# libc, libstdc++ and libgcc come from the cross toolchain (g++-aarch64-linux-gnu,
# /usr/aarch64-linux-gnu), not from here. Idempotent: a finished sysroot is
# kept while its package list (recorded in .complete) is this script's.
set -euo pipefail
cd "$(dirname "$0")/.."

sysroot="$(realpath -m "${1:-build/sysroot-aarch64}")"

packages=(
  libhwy-dev libflatbuffers-dev libxnnpack-dev libpthreadpool-dev libcpuinfo-dev libdnnl-dev
  doctest-dev nlohmann-json3-dev libcli11-dev libzip-dev
  libkissfft-dev libstb-dev libsndfile1-dev zlib1g-dev
)
if [ -f "$sysroot/.complete" ] && [ "$(cat "$sysroot/.complete")" = "${packages[*]}" ]; then
  echo "arm64-sysroot: $sysroot is ready"
  exit 0
fi
# Provided by the cross toolchain; a second copy would shadow it.
toolchain_provides='^(libc6|libc6-dev|libgcc-s1|libstdc\+\+6|libstdc\+\+-12-dev|gcc-12-base|libcrypt1|libcrypt-dev|linux-libc-dev|libgcc-12-dev|libasan8|libtsan2|libubsan1|liblsan0|libatomic1|libitm1|libhwasan0|libgomp1|libgomp1-dev)$'

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
touch "$work/status"
apt_opts=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o Debug::NoLocking=1
          -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache"
          -o Dir::State::status="$work/status")
apt-get "${apt_opts[@]}" update -q >/dev/null
# The packages and everything they depend on, less the toolchain's own.
mapfile -t closure < <(apt-cache "${apt_opts[@]}" depends --recurse --no-recommends --no-suggests \
    --no-conflicts --no-breaks --no-replaces --no-enhances "${packages[@]}" \
  | grep -v '^ ' | grep -v '^<' | sed 's/:arm64$//' | sort -u | grep -Ev "$toolchain_provides")
echo "arm64-sysroot: ${#closure[@]} packages into $sysroot"
(cd "$work/debs" && apt-get "${apt_opts[@]}" download -q "${closure[@]}" 2>&1 \
  | grep -v 'unsandboxed as root' || true)
rm -rf "$sysroot"
mkdir -p "$sysroot"
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
echo "${packages[*]}" >"$sysroot/.complete"
echo "arm64-sysroot: done"
