#!/usr/bin/env bash
# test_cuda_kernel_coverage.sh: every __global__ kernel in cuda/*.cu must have been run under the CPU
# emulator against a reference by the kernel tests (build/test/test_emu_kernels_*), which write one log
# line per kernel they launched and compared (test/kernels/cuda_kernel_test.h), headed by the identity of
# the binary that wrote it ("# binary SIZE MTIME"). A log counts only if that identity is the binary's
# that exists now; binaries without such a log are (re)run here first. Writes the combined kernel-test log
# <build>/kernel-test.log (kernel name, launches, max error, tolerance) and fails if a kernel was not
# exercised or failed.
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
export BEAGLE_KERNEL_LOG_DIR=$B/kernel-tests
mkdir -p "$BEAGLE_KERNEL_LOG_DIR"
bins=$(ls "$B"/test/test_emu_kernels_* 2>/dev/null | grep -v '\.d$')
[ -n "$bins" ] || { echo "FAIL: no kernel test binaries in $B/test (make tests)"; exit 1; }
# Only the logs of the binaries that exist now, each written by that very binary (its "# binary" line is
# the binary's size and mtime now): a log left behind by a removed or renamed test, or by an older build
# of the same test (whatever its own timestamp), vouches for nothing.
is_fresh() {  # is_fresh LOG BIN: LOG was written by BIN as it is now
  [ -s "$1" ] && [ "$(grep -m1 '^# binary ' "$1")" = "# binary $(stat -L -c '%s %.9Y' "$2")" ]
}
logs_of() {  # logs_of LOGDIR BIN...: the fresh log of each binary, in order; "MISSING:<bin>" for none
  local dir=$1; shift
  for b in "$@"; do
    local l=$dir/$(basename "$b").log
    if is_fresh "$l" "$b"; then echo "$l"; else echo "MISSING:$(basename "$b")"; fi
  done
}
for b in $bins; do
  if ! is_fresh "$BEAGLE_KERNEL_LOG_DIR/$(basename "$b").log" "$b"; then
    echo "running $(basename "$b") (no log of this build)"
    "$b" > /dev/null 2>&1 || echo "  $(basename "$b") failed"
  fi
done
# Self-check on planted stale logs in a scratch directory: binaries a and b exist; a's log is its own,
# b's log was written by an older build of b (a different identity, though newer than b), and a log of
# the removed test "gone" sits beside them. Only a's log may count.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo a > "$tmp/test_emu_kernels_a"; echo b > "$tmp/test_emu_kernels_b"
printf '# test_emu_kernels_a: passed\n# binary %s\nkernel k_a ok\n' "$(stat -L -c '%s %.9Y' "$tmp/test_emu_kernels_a")" \
  > "$tmp/test_emu_kernels_a.log"
printf '# test_emu_kernels_b: passed\n# binary 12345 1.000000000\nkernel k_b ok\n' > "$tmp/test_emu_kernels_b.log"
printf '# test_emu_kernels_gone: passed\n# binary %s\nkernel k_gone ok\n' "$(stat -L -c '%s %.9Y' "$tmp/test_emu_kernels_a")" \
  > "$tmp/test_emu_kernels_gone.log"
self=$(logs_of "$tmp" "$tmp/test_emu_kernels_a" "$tmp/test_emu_kernels_b" | tr '\n' ' ')
if [ "$self" != "$tmp/test_emu_kernels_a.log MISSING:test_emu_kernels_b " ]; then
  echo "FAIL self-check: a stale log was counted: $self"; exit 1
fi
echo "self-check: the log of a removed test and the log of an older build are not counted"
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
for m in $missing; do echo "FAIL $m: no log written by this build of it (it crashed before writing one?)"; fails=$((fails+1)); done
failed_logs=$(grep -l '^# .*FAILED' $logs)
[ -n "$failed_logs" ] && { echo "FAIL: kernel tests failed: $failed_logs"; fails=$((fails+1)); }
cat "$out"
echo "$(echo $names | wc -w) __global__ kernels in cuda/*.cu, $fails problems"
[ $fails -eq 0 ]
