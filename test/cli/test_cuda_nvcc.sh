#!/usr/bin/env bash
# test_cuda_nvcc.sh: compile gate of the CUDA kernels. Every cuda/*.cu, cuda/emu/*.cu and cuda/dev/*.cu
# (the kernel progressions) must compile with nvcc for sm_80 and sm_90 (one nvcc run per file, both
# targets), so the nvcc side of cuda/compat.cuh and every kernel stay buildable although the tests run
# them in the CPU emulator.
# Nothing is linked or run (no GPU needed). Without nvcc the test is skipped (exit 77, says so).
set -u
cd "$(dirname "$0")/../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
if [ ! -x "$NVCC" ]; then
    echo "SKIP: no nvcc at $NVCC"
    exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

compile() {
    local f=$1 dir=$2
    local o="$dir/$(echo "$f" | tr / _).o"
    if "$NVCC" -std=c++17 -Icuda -I"$CUDA_HOME/include/cccl" \
        -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
        -c "$f" -o "$o" >"$o.log" 2>&1; then
        echo "ok    $f (sm_80, sm_90)"
        [ -s "$o.log" ] && sed 's/^/      /' "$o.log"
        return 0
    fi
    echo "FAIL  $f"
    sed 's/^/      /' "$o.log"
    return 1
}
export -f compile
export NVCC CUDA_HOME

files=$(ls cuda/*.cu cuda/emu/*.cu cuda/dev/*.cu 2>/dev/null)
[ -n "$files" ] || { echo "no kernel files"; exit 1; }
printf '%s\n' $files | xargs -P 2 -I{} bash -c 'compile "$1" "$2"' _ {} "$out"
rc=$?
[ $rc -eq 0 ] && echo "all kernel files compile with nvcc for sm_80 and sm_90"
exit $rc
