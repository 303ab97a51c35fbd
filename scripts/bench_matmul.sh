#!/usr/bin/env bash
# bench_matmul.sh: builds and runs the cpu_matmul micro-benchmark (test/tools/bench_matmul.cpp) against
# build/libbeagle.a. Usage: bash scripts/bench_matmul.sh [--quick] [--threads N] [--model-only] [--sweep] [--sizes]
set -eu
cd "$(dirname "$0")/.."
make -s build/libbeagle.a
g++ -std=c++17 -O2 -g -pthread -mavx2 -mfma -mf16c -Isrc -o build/bench_matmul test/tools/bench_matmul.cpp build/libbeagle.a -pthread
exec build/bench_matmul "$@"
