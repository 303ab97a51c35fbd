#!/usr/bin/env bash
# test_cuda_dev.sh: the kernel progressions of cuda/dev/ (build/dev/<op>, built by `make tests` for the
# CPU emulator). Every binary must exit 0 and print "<op> v<N> ok max_err <e>" for versions 1..N of each
# op, N >= 3, for the ops expected below (a missing op, a missing version or a FAIL line fails the test).
# Then the checker itself is shown to fail: with BEAGLE_DEV_PLANT=<op> the dev file moves one output of
# the last (shipped) version of <op> by 1e-3 (1 + |value|); that version's line must read FAIL, the
# earlier versions must still pass, and the binary must exit non-zero.
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
# op:binary:versions (the last version is the shipped kernel)
expected="matmul:matmul:3 qmatmul:qmatmul:5 attention:attention:7 xattn_fwd:xattn:3 xattn_bwd:xattn:3"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for src in cuda/dev/*.cu; do
  bin=$B/dev/$(basename "$src" .cu)
  [ -x "$bin" ] || { fail "$bin missing (make tests builds it from $src)"; continue; }
  "$bin" > "$out/$(basename "$bin").log" 2>&1
  rc=$?
  cat "$out/$(basename "$bin").log"
  [ $rc -eq 0 ] || fail "$bin exited $rc"
done

for e in $expected; do
  IFS=: read -r op bin n <<< "$e"
  [ "$n" -ge 3 ] || fail "$op: $n versions, at least 3 expected"
  log=$out/$bin.log
  [ -f "$log" ] || { fail "$op: no output of $bin"; continue; }
  for v in $(seq 1 "$n"); do
    grep -Eq "^$op v$v ok max_err [0-9.e+-]+$" "$log" || fail "$op v$v: no ok line"
  done
  extra=$(grep -Ec "^$op v[0-9]+ " "$log")
  [ "$extra" -eq "$n" ] || fail "$op: $extra version lines, $n expected"
  # the planted bug in the shipped version must be caught
  BEAGLE_DEV_PLANT=$op "$B/dev/$bin" > "$out/plant.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] || fail "$op: planted bug, but $bin exited 0"
  grep -Eq "^$op v$n FAIL max_err " "$out/plant.log" || fail "$op: planted bug in v$n not reported as FAIL"
  for v in $(seq 1 $((n - 1))); do
    grep -Eq "^$op v$v ok " "$out/plant.log" || fail "$op: v$v should still pass with the bug planted in v$n"
  done
  echo "planted bug in $op v$n: $(grep "^$op v$n " "$out/plant.log")"
done
echo "$fails problems"
[ $fails -eq 0 ]
