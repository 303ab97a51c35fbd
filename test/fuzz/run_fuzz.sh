#!/usr/bin/env bash
# run_fuzz.sh: runs every libFuzzer harness built in $FUZZ_BUILD/fuzz/ for SECONDS seconds on its
# corpus ($FUZZ_BUILD/corpus/<name>, grown across runs), seeded with $FUZZ_BUILD/seeds/<name>
# (test/fuzz/make_seeds.sh), test/fuzz/seeds/<name> and test/fuzz/regress/<name>, with
# test/fuzz/dict/<name>.dict. Prints one line per harness:
#   fuzz <name> execs <n> cov <c> crashes <k>
# (execs: libFuzzer's stat::number_of_executed_units; cov: the last "cov:" it printed; crashes: the
# crash/leak/timeout/oom reproducers it wrote to $FUZZ_BUILD/artifacts/<name>/) and exits non-zero
# if any harness found one. Logs: $FUZZ_BUILD/logs/<name>.log. Called by `make fuzz`.
# Usage: test/fuzz/run_fuzz.sh SECONDS [NAME_REGEX]
set -u
SECONDS_EACH=${1:?usage: run_fuzz.sh SECONDS [NAME_REGEX]}
ONLY=${2:-.}
cd "$(dirname "$0")/../.."
FB=${FUZZ_BUILD:-build-fuzz}
# FUZZ_KEEP_SEEDS=1: use $FB/seeds as it is (several run_fuzz.sh at once must not rebuild it under each other)
if [ "${FUZZ_KEEP_SEEDS:-0}" != 1 ] || [ ! -d "$FB/seeds" ]; then
  bash test/fuzz/make_seeds.sh "$FB/seeds" || { echo "run_fuzz.sh: seed corpora could not be made" >&2; exit 1; }
fi
mkdir -p "$FB/logs"
# Harnesses run JOBS at a time (default 2, one per core: each is one single-threaded process); the lines
# are printed in name order once all have finished.
JOBS=${FUZZ_JOBS:-2}
fuzz_one() {  # name -> $FB/logs/<name>.log, its summary line in .line, its exit code in .rc
  local name=$1 bin=$FB/fuzz/fuzz_$1
  local corpus=$FB/corpus/$name art=$FB/artifacts/$name log=$FB/logs/$name.log
  mkdir -p "$corpus" "$art"
  local dirs=("$corpus") d
  for d in "$FB/seeds/$name" "test/fuzz/seeds/$name" "test/fuzz/regress/$name"; do [ -d "$d" ] && dirs+=("$d"); done
  local opts=(-max_total_time="$SECONDS_EACH" -print_final_stats=1 -timeout=20 -rss_limit_mb=2560 -max_len=131072
        -artifact_prefix="$art/")
  [ -f "test/fuzz/dict/$name.dict" ] && opts+=(-dict="test/fuzz/dict/$name.dict")
  local before rc execs cov crashes
  before=$(ls "$art" | wc -l)
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    nice -n 5 "$bin" "${opts[@]}" "${dirs[@]}" >"$log" 2>&1
  rc=$?
  execs=$(grep -a '^stat::number_of_executed_units:' "$log" | tail -1 | awk '{print $2}')
  cov=$(grep -ao 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  crashes=$(( $(ls "$art" | wc -l) - before ))
  [ $rc -ne 0 ] && [ $crashes -eq 0 ] && crashes=1  # died without a reproducer (e.g. out of memory at start-up)
  echo "fuzz $name execs ${execs:-0} cov ${cov:-0} crashes $crashes" > "$log.line"
  echo $crashes > "$log.rc"
}
names=()
for bin in "$FB"/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=${bin##*/fuzz_}
  echo "$name" | grep -Eq "$ONLY" || continue
  names+=("$name")
  rm -f "$FB/logs/$name.log.line" "$FB/logs/$name.log.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  fuzz_one "$name" &
done
wait
[ ${#names[@]} -gt 0 ] || { echo "run_fuzz.sh: no harness in $FB/fuzz matches '$ONLY'" >&2; exit 1; }
bad=0
for name in "${names[@]}"; do
  log=$FB/logs/$name.log
  if [ ! -f "$log.rc" ]; then echo "fuzz $name: no result (the runner died)"; bad=1; continue; fi
  cat "$log.line"
  if [ "$(cat "$log.rc")" -ne 0 ]; then
    bad=1
    grep -a -m1 -B2 -A12 'ERROR: \|runtime error\|==ERROR\|deadly signal\|Test unit written' "$log" | head -30 | sed 's/^/    | /'
  fi
done
exit $bad
