#!/usr/bin/env bash
# test_cuda_vector_access.sh: kernels access memory as vector types (float4, int4, __half2, ...) only
# through VLOAD / VSTORE (cuda/compat.cuh), never by casting a pointer to a vector pointer: the emulator
# checks the alignment in VLOAD / VSTORE (a misaligned vector access faults on the GPU, runs fine on the
# CPU), so a raw cast would be a hardware fault no test can see. Scans cuda/*.cu, cuda/*.cuh and
# cuda/dev/*.cu (cuda/compat.cuh defines the macros; cuda/emu/ is the emulator itself). A planted raw
# cast in a scratch file must be found first (the scan can fail).
set -u
cd "$(dirname "$0")/../.."
pattern='reinterpret_cast<[[:space:]]*(const[[:space:]]+)?(u?char|u?short|u?int|u?long|u?longlong|float|double|__half|__nv_bfloat16|half|bfloat16)[1-4][[:space:]]*\*'
scan() { grep -nE "$pattern" "$@"; }
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
echo '    const float4 v = *reinterpret_cast<const float4*>(x + 4 * i);' > "$tmp"
if ! scan "$tmp" > /dev/null; then echo "FAIL self-check: the scan misses a planted raw float4 cast"; exit 1; fi
echo "self-check: a planted raw float4 cast is found"
files=$(ls cuda/*.cu cuda/*.cuh cuda/dev/*.cu | grep -v '^cuda/compat.cuh$')
hits=$(scan $files)
if [ -n "$hits" ]; then
    echo "FAIL: vector accesses by pointer cast (use VLOAD / VSTORE, cuda/compat.cuh):"
    echo "$hits"
    exit 1
fi
echo "ok: no raw vector pointer casts in $(echo $files | wc -w) kernel files"
