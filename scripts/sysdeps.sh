#!/usr/bin/env bash
# sysdeps.sh: system packages the C++ build needs beyond g++: Debian's libstb-dev (stb_image_write.h
# and stb_easy_font.h, header-only; src/train/plot.cpp draws the training charts with them).
# Called by the Makefile when /usr/include/stb/stb_image_write.h is missing; does nothing otherwise.
set -euo pipefail
HDR=/usr/include/stb/stb_image_write.h
if [ -f "$HDR" ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "sysdeps.sh: need root (or sudo) to apt-get install libstb-dev" >&2; exit 1; }
    SUDO=sudo
fi
echo "sysdeps.sh: installing libstb-dev (for $HDR)" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q libstb-dev >&2 || { $SUDO apt-get update -q >&2 && $SUDO apt-get install -y -q libstb-dev >&2; }
[ -f "$HDR" ] || { echo "sysdeps.sh: libstb-dev installed but $HDR is missing" >&2; exit 1; }
