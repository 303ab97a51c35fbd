#!/usr/bin/env bash
# test_emu_valgrind.sh: the CUDA emulator under valgrind memcheck. Its fiber stacks are registered
# with valgrind, so (1) the emulator's own tests run with zero memcheck errors, and (2) a kernel that
# writes past the end of a cudaMalloc buffer is reported at the kernel's source line, which makes
# memcheck a bounds checker for emulated kernels. Skipped (exit 77, says so) without valgrind
# (make test installs it: make testdeps, scripts/sysdeps.sh).
set -u
cd "$(dirname "$0")/../.."
BUILD=$(dirname "${BEAGLE_BIN:-$PWD/build/beagle}")
command -v valgrind >/dev/null || { echo "SKIP: valgrind not installed"; exit 77; }
fail=0
for t in test_emu_runtime test_emu_warp; do
    log=$(valgrind --error-exitcode=99 "$BUILD/test/$t" 2>&1)
    rc=$?
    if [ $rc -ne 0 ] || ! grep -q "ERROR SUMMARY: 0 errors" <<<"$log"; then
        echo "FAIL: $t under memcheck (exit $rc)"; tail -30 <<<"$log"; fail=1
    else
        echo "ok: $t has no memcheck errors"
    fi
done
log=$(valgrind "$BUILD/test/test_emu_runtime" --oob 2>&1)
if grep -q "Invalid write of size 4" <<<"$log" && grep -q "write_past_end(float\*) (cuda_emu_runtime.cpp:" <<<"$log"; then
    echo "ok: out-of-bounds write in a kernel reported at its source line"
else
    echo "FAIL: memcheck did not report the kernel's out-of-bounds write"; tail -30 <<<"$log"; fail=1
fi
exit $fail
