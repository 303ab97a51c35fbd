#!/usr/bin/env bash
# sysdeps.sh: Debian packages beyond g++, by group; installs only what is absent, does nothing otherwise.
#   build (default)  the C++ build's header-only packages: libstb-dev (stb_image_write.h,
#                    stb_easy_font.h: the PNG charts) and nlohmann-json3-dev (the one JSON writer of
#                    every report, src/io/json_write.h) and libcpp-httplib-dev
#                    (`beagle serve`: httplib.h plus libcpp-httplib.so, which the binary links) with libssl-dev
#                    (OpenSSL: HTTPS of `serve --ssl-cert-file`). Called by the Makefile when a header is missing.
#   test             tools the test suite runs: valgrind (memcheck of the CUDA emulator) and OpenMPI
#                    (openmpi-bin: mpirun and libmpi.so.40, which `beagle train/datagen` load at run
#                    time under mpirun; libopenmpi-dev: its headers and mpicc) and the openssl command (the
#                    self-signed certificate of the HTTPS test). `make test`.
#   fuzz             clang and libclang-rt-dev (libFuzzer, sanitizer runtimes); checks that a
#                    -fsanitize=fuzzer,address,undefined program links. `make fuzz`.
# Usage: scripts/sysdeps.sh [build|test|fuzz]...
set -euo pipefail
fuzzer_links() {
    command -v clang++ >/dev/null || return 1
    local d rc
    d=$(mktemp -d)
    printf '#include <stddef.h>\n#include <stdint.h>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$d/t.cpp"
    clang++ -fsanitize=fuzzer,address,undefined "$d/t.cpp" -o "$d/t" >/dev/null 2>&1 && rc=0 || rc=1
    rm -rf "$d"
    return $rc
}
need=()
for group in "${@:-build}"; do
    case $group in
        build)
            [ -f /usr/include/stb/stb_image_write.h ] || need+=(libstb-dev)
            [ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
            [ -f /usr/include/httplib.h ] || need+=(libcpp-httplib-dev)
            [ -f /usr/include/openssl/ssl.h ] || need+=(libssl-dev) ;;
        test) command -v valgrind >/dev/null || need+=(valgrind)
              command -v mpirun >/dev/null || need+=(openmpi-bin)
              [ -f /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] || need+=(libopenmpi-dev)
              command -v openssl >/dev/null || need+=(openssl) ;;
        fuzz) command -v clang++ >/dev/null || need+=(clang)
              fuzzer_links || need+=(libclang-rt-dev) ;;
        *) echo "sysdeps.sh: unknown group '$group' (expected build, test or fuzz)" >&2; exit 2 ;;
    esac
done
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || { echo "sysdeps.sh: need root (or sudo) to apt-get install ${need[*]}" >&2; exit 1; }
        SUDO=sudo
    fi
    echo "sysdeps.sh: installing ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y -q "${need[@]}" >&2 || { $SUDO apt-get update -q >&2 && $SUDO apt-get install -y -q "${need[@]}" >&2; }
fi
for group in "${@:-build}"; do
    case $group in
        build)
            [ -f /usr/include/stb/stb_image_write.h ] || { echo "sysdeps.sh: libstb-dev installed but stb_image_write.h is missing" >&2; exit 1; }
            [ -f /usr/include/nlohmann/json.hpp ] || { echo "sysdeps.sh: nlohmann-json3-dev installed but nlohmann/json.hpp is missing" >&2; exit 1; }
            [ -f /usr/include/httplib.h ] || { echo "sysdeps.sh: libcpp-httplib-dev installed but httplib.h is missing" >&2; exit 1; }
            [ -f /usr/include/openssl/ssl.h ] || { echo "sysdeps.sh: libssl-dev installed but openssl/ssl.h is missing" >&2; exit 1; } ;;
        test) command -v valgrind >/dev/null || { echo "sysdeps.sh: valgrind is still missing" >&2; exit 1; }
              command -v mpirun >/dev/null || { echo "sysdeps.sh: openmpi-bin installed but mpirun is missing" >&2; exit 1; }
              command -v openssl >/dev/null || { echo "sysdeps.sh: openssl is still missing" >&2; exit 1; } ;;
        fuzz) fuzzer_links || { echo "sysdeps.sh: clang++ -fsanitize=fuzzer,address,undefined still does not link" >&2; exit 1; } ;;
    esac
done
