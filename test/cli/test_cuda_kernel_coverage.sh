#!/usr/bin/env bash
# test_cuda_kernel_coverage.sh: every __global__ kernel in cuda/*.cu must have been run under the CPU
# emulator against a reference by the kernel tests (build/test/test_emu_kernels_*), which write one log
# line per kernel they launched and compared (test/kernels/cuda_kernel_test.h). Test binaries whose log is
# missing or older than the binary are (re)run here first. Writes the combined kernel-test log
# <build>/kernel-test.log (kernel name, launches, max error, tolerance) and fails if a kernel was not
# exercised or failed.
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
export BEAGLE_KERNEL_LOG_DIR=$B/kernel-tests
mkdir -p "$BEAGLE_KERNEL_LOG_DIR"
bins=$(ls "$B"/test/test_emu_kernels_* 2>/dev/null | grep -v '\.d$')
[ -n "$bins" ] || { echo "FAIL: no kernel test binaries in $B/test (make tests)"; exit 1; }
for b in $bins; do
  log=$BEAGLE_KERNEL_LOG_DIR/$(basename "$b").log
  if [ ! -s "$log" ] || [ "$log" -ot "$b" ]; then
    echo "running $(basename "$b") (no fresh log)"
    "$b" > /dev/null 2>&1 || echo "  $(basename "$b") failed"
  fi
done
# Only the logs of the binaries that exist now, each newer than its binary: a log left behind by a
# removed or renamed test (or by an older build) vouches for nothing.
logs_of() {  # logs_of LOGDIR BIN...: the fresh log of each binary, in order; "MISSING:<bin>" for none
  local dir=$1; shift
  for b in "$@"; do
    local l=$dir/$(basename "$b").log
    if [ -s "$l" ] && ! [ "$l" -ot "$b" ]; then echo "$l"; else echo "MISSING:$(basename "$b")"; fi
  done
}
# Self-check: a scratch log directory holding a fresh log of the one existing binary and a stale log of
# a removed one; only the first may count.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
touch "$tmp/test_emu_kernels_a"; sleep 0.01
echo "kernel k_a 1 0 ok" > "$tmp/test_emu_kernels_a.log"; echo "kernel k_gone 1 0 ok" > "$tmp/test_emu_kernels_gone.log"
self=$(logs_of "$tmp" "$tmp/test_emu_kernels_a")
if [ "$self" != "$tmp/test_emu_kernels_a.log" ]; then echo "FAIL self-check: a stale log was counted: $self"; exit 1; fi
echo "self-check: the stale log of a removed test binary is not counted"
logs=$(logs_of "$BEAGLE_KERNEL_LOG_DIR" $bins)
missing=$(echo "$logs" | grep '^MISSING:' | sed 's/^MISSING://')
logs=$(echo "$logs" | grep -v '^MISSING:')
out=$B/kernel-test.log
{
  echo "# kernel-test log: every __global__ kernel of cuda/*.cu run in the CPU emulator against a reference"
  echo "# (from $(echo $logs | wc -w) test binaries; max_err/tol <= 1 passes, tol = atol + rtol |ref| of the worst case)"
  cat $logs | grep '^kernel ' | sort
} > "$out"
fails=0
names=$(grep -ho '__global__[[:space:]]\+void[[:space:]]\+[A-Za-z_0-9]\+' cuda/*.cu | awk '{print $3}' | sort -u)
for k in $names; do
  line=$(grep "^kernel $k " "$out" | head -1)
  if [ -z "$line" ]; then
    echo "FAIL $k: declared in $(grep -l "__global__[[:space:]]\+void[[:space:]]\+$k\b" cuda/*.cu | tr '\n' ' ')but not run by any kernel test"
    fails=$((fails+1))
  elif ! echo "$line" | grep -q ' ok '; then
    echo "FAIL $line"
    fails=$((fails+1))
  fi
done
for m in $missing; do echo "FAIL $m: no log newer than the binary (it crashed before writing one?)"; fails=$((fails+1)); done
failed_logs=$(grep -l '^# .*FAILED' $logs)
[ -n "$failed_logs" ] && { echo "FAIL: kernel tests failed: $failed_logs"; fails=$((fails+1)); }
cat "$out"
echo "$(echo $names | wc -w) __global__ kernels in cuda/*.cu, $fails problems"
[ $fails -eq 0 ]
