#!/usr/bin/env bash
# test_cuda_kernels_valgrind.sh: the kernel tests under valgrind memcheck. The emulator registers its
# fiber stacks with valgrind and the tests pass exact-size buffers, so memcheck is a bounds checker
# for the kernels in cuda/*.cu: any read or write past a buffer (a wrong index, a missing bounds check
# in a ragged tile) fails here with the kernel's source line. Runs the cheaper kernel tests and the
# CUDA backend's op test by default (~30 s); BEAGLE_VALGRIND_ALL=1 runs every kernel test (~3 min).
# Skipped (exit 77, says so) without valgrind (make test installs it:
# scripts/testdeps.sh).
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
command -v valgrind >/dev/null || { echo "SKIP: valgrind not installed"; exit 77; }
tests="test_emu_kernels_rows test_emu_kernels_gemm_quant test_cuda_backend_ops"
[ "${BEAGLE_VALGRIND_ALL:-0}" = 1 ] && tests="$tests test_emu_kernels_attention test_emu_kernels_loss test_emu_kernels_gemm"
export BEAGLE_KERNEL_LOG_DIR=$(mktemp -d)
trap 'rm -rf "$BEAGLE_KERNEL_LOG_DIR"' EXIT
fail=0
for t in $tests; do
  [ -x "$B/test/$t" ] || { echo "FAIL: $B/test/$t missing (make tests)"; fail=1; continue; }
  log=$(valgrind --error-exitcode=99 "$B/test/$t" 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "ERROR SUMMARY: 0 errors" <<<"$log"; then
    echo "FAIL: $t under memcheck (exit $rc)"; grep -A12 -m3 "Invalid\|uninitialised" <<<"$log" | head -40; tail -5 <<<"$log"; fail=1
  else
    echo "ok   $t: no memcheck errors"
  fi
done
exit $fail
