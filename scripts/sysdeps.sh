#!/usr/bin/env bash
# sysdeps.sh: Debian packages the C++ build needs beyond g++: header-only libstb-dev (stb_image_write.h,
# stb_easy_font.h: the PNG charts) and nlohmann-json3-dev (the one JSON writer of every report,
# src/io/json_write.h); libcpp-httplib-dev (`beagle serve`'s HTTP server: Debian ships httplib.h plus
# libcpp-httplib.so, which the binary links). Called by the Makefile when a header is missing; installs
# only what is absent, does nothing otherwise.
set -euo pipefail
need=()
[ -f /usr/include/stb/stb_image_write.h ] || need+=(libstb-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -f /usr/include/httplib.h ] || need+=(libcpp-httplib-dev)
[ ${#need[@]} -eq 0 ] && exit 0
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "sysdeps.sh: need root (or sudo) to apt-get install ${need[*]}" >&2; exit 1; }
    SUDO=sudo
fi
echo "sysdeps.sh: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q "${need[@]}" >&2 || { $SUDO apt-get update -q >&2 && $SUDO apt-get install -y -q "${need[@]}" >&2; }
[ -f /usr/include/stb/stb_image_write.h ] || { echo "sysdeps.sh: libstb-dev installed but stb_image_write.h is missing" >&2; exit 1; }
[ -f /usr/include/nlohmann/json.hpp ] || { echo "sysdeps.sh: nlohmann-json3-dev installed but nlohmann/json.hpp is missing" >&2; exit 1; }
[ -f /usr/include/httplib.h ] || { echo "sysdeps.sh: libcpp-httplib-dev installed but httplib.h is missing" >&2; exit 1; }
