#!/usr/bin/env bash
# test_cuda_kernels_valgrind.sh: the kernel tests under valgrind memcheck. The emulator registers its
# fiber stacks with valgrind and the tests pass exact-size buffers, so memcheck is a bounds checker
# for the kernels in cuda/*.cu: any read or write past a buffer (a wrong index, a missing bounds check
# in a ragged tile) fails here with the kernel's source line. By default (make test) the cheap ones: the row
# kernels, the tree kernels and the CUDA backend's op test (about a minute on a 2-core Zen 3);
# BEAGLE_VALGRIND_ALL=1 (.ci/run) runs every kernel test binary (build/test/test_emu_kernels_*, about 5 minutes
# there, two at a time) and then fails unless every __global__ kernel of cuda/*.cu was launched and compared
# under memcheck (from the kernel-test logs those runs write).
# Skipped (exit 77, says so) without valgrind (make test installs it:
# make testdeps, scripts/sysdeps.sh).
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
command -v valgrind >/dev/null || { echo "SKIP: valgrind not installed"; exit 77; }
tests="test_emu_kernels_rows test_emu_kernels_tree test_cuda_backend_ops"
all=${BEAGLE_VALGRIND_ALL:-0}
[ "$all" = 1 ] && tests="$(cd "$B/test" && ls test_emu_kernels_* | grep -v '\.d$' | tr '\n' ' ')test_cuda_backend_ops"
export BEAGLE_KERNEL_LOG_DIR=$(mktemp -d)
# Kernel tests that honour it drop their largest shapes under memcheck (test_emu_kernels_sample: ~50 s instead of
# over 20 minutes; its every path still runs, down to the 1024-thread block).
export BEAGLE_KERNEL_TEST_QUICK=1
# One emulator worker thread: valgrind runs one thread at a time anyway, and a second worker only adds the
# hand-overs (test_emu_kernels_rows: 8.4 s with 1, 13 s with 2). Every block still runs; which OS thread runs
# it is not what memcheck checks. Instead the test binaries run two at a time (JOBS, default 2: one per core).
export BEAGLE_EMU_THREADS=1
JOBS=${JOBS:-2}
trap 'rm -rf "$BEAGLE_KERNEL_LOG_DIR"' EXIT
fail=0
check() {  # test name -> its memcheck log in $BEAGLE_KERNEL_LOG_DIR/$1.vg, its exit code in .rc
  valgrind --error-exitcode=99 "$B/test/$1" > "$BEAGLE_KERNEL_LOG_DIR/$1.vg" 2>&1
  echo $? > "$BEAGLE_KERNEL_LOG_DIR/$1.rc"
}
ran=""
for t in $tests; do
  [ -x "$B/test/$t" ] || { echo "FAIL: $B/test/$t missing (make tests)"; fail=1; continue; }
  ran="$ran $t"
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  check "$t" &
done
wait
for t in $ran; do
  [ -f "$BEAGLE_KERNEL_LOG_DIR/$t.rc" ] || { echo "FAIL: $t under memcheck: no exit code (its run died)"; fail=1; continue; }
  rc=$(cat "$BEAGLE_KERNEL_LOG_DIR/$t.rc"); log=$BEAGLE_KERNEL_LOG_DIR/$t.vg
  if [ "$rc" -ne 0 ] || ! grep -q "ERROR SUMMARY: 0 errors" "$log"; then
    echo "FAIL: $t under memcheck (exit $rc)"; grep -A12 -m3 "Invalid\|uninitialised" "$log" | head -40; tail -5 "$log"; fail=1
  else
    echo "ok   $t: no memcheck errors"
  fi
done
if [ "$all" = 1 ]; then  # every kernel ran under memcheck: the logs the kernel tests wrote under valgrind
  names=$(grep -ho '__global__[[:space:]]\+void[[:space:]]\+[A-Za-z_0-9]\+' cuda/*.cu | awk '{print $3}' | sort -u)
  ran=$(cat "$BEAGLE_KERNEL_LOG_DIR"/*.log 2>/dev/null | awk '$1 == "kernel" && $3 == "ok" {print $2}' | sort -u)
  missing=$(comm -23 <(echo "$names") <(echo "$ran"))
  if [ -n "$missing" ]; then echo "FAIL: kernels not run under memcheck: $(echo $missing)"; fail=1
  else echo "ok   all $(echo $names | wc -w) __global__ kernels of cuda/*.cu ran under memcheck with no errors"; fi
fi
exit $fail
