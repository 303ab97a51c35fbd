#!/usr/bin/env bash
# run_tests.sh: runs every test (C++ binaries build/test/**/test_*, test/**/test_*.sh,
# test/**/test_*.py), each with a time limit, logs to build/test-logs/, and ends with the line
# "N passed, M failed, K skipped". A test that exits 77 (the automake convention) could not run,
# or not all of it, because a tool or file is missing: SKIP, not a pass. Under CI (CI=true) a skip
# counts as a failure: CI must have every tool.
# EXCLUDE=FILE: the tests named there ("<test file name or glob> <reason>" lines; # comments) are not
# run; every line is printed first as EXCL with its reason (make test-asan: test/sanitizer-exclude.txt).
# They are neither passes nor skips.
# Usage: scripts/run_tests.sh [BUILD_DIR] [FILTER_REGEX]
set -u
BUILD=${1:-build}
FILTER=${2:-.}
cd "$(dirname "$0")/.."
export BEAGLE_ROOT=$PWD
export BEAGLE_BIN=$PWD/$BUILD/beagle
export BEAGLE_MODEL=${BEAGLE_MODEL:-$PWD/weights/SmolLM2-135M-Instruct.Q4_1.gguf}
LOGS=$BUILD/test-logs
mkdir -p "$LOGS"
TIMEOUT=${TEST_TIMEOUT:-900}

tests=()
for f in $(find "$BUILD/test" -type f -name 'test_*' ! -name '*.d' 2>/dev/null | sort); do [ -x "$f" ] && tests+=("$f"); done
for f in $(find test -type f \( -name 'test_*.sh' -o -name 'test_*.py' \) | sort); do tests+=("$f"); done

excluded=()
if [ -n "${EXCLUDE:-}" ]; then
  while read -r pat reason; do
    case "$pat" in ''|'#'*) continue ;; esac
    excluded+=("$pat"); printf 'EXCL %-40s %s\n' "$pat" "$reason"
  done < "$EXCLUDE"
fi
is_excluded() { local p; for p in "${excluded[@]}"; do [[ $1 == $p ]] && return 0; done; return 1; }

pass=0; fail=0; skip=0; failed=(); skipped=()
for t in "${tests[@]}"; do
  name=$(basename "$t")
  echo "$name" | grep -Eq "$FILTER" || continue
  is_excluded "$name" && continue
  log=$LOGS/$name.log
  start=$(date +%s.%N)
  case "$t" in
    *.py) cmd=(python3 "$t") ;;
    *.sh) cmd=(bash "$t") ;;
    *)    cmd=("$t") ;;
  esac
  timeout --kill-after=10 "$TIMEOUT" "${cmd[@]}" </dev/null >"$log" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" "BEGIN{print b-a}")
  if [ $rc -eq 77 ] && [ "${CI:-}" = true ]; then
    echo "SKIP under CI=true counts as a failure: a tool or file this test needs is missing" >>"$log"
  fi
  if [ $rc -eq 0 ]; then
    pass=$((pass+1)); printf 'PASS %-40s %6.1fs\n' "$name" "$secs"
  elif [ $rc -eq 77 ] && [ "${CI:-}" != true ]; then
    skip=$((skip+1)); skipped+=("$name")
    printf 'SKIP %-40s %6.1fs (log %s)\n' "$name" "$secs" "$log"
    grep -a 'SKIP' "$log" | head -n 5 | sed 's/^/    | /'
  else
    fail=$((fail+1)); failed+=("$name")
    printf 'FAIL %-40s %6.1fs (exit %d, log %s)\n' "$name" "$secs" "$rc" "$log"
    tail -n 25 "$log" | sed 's/^/    | /'
  fi
done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
[ ${#skipped[@]} -gt 0 ] && echo "skipped: ${skipped[*]}"
[ ${#excluded[@]} -gt 0 ] && echo "not run: ${#excluded[@]} entries of $EXCLUDE (EXCL lines above, each with its reason)"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ $pass -gt 0 ]
