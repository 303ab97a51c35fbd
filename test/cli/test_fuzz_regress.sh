#!/usr/bin/env bash
# test_fuzz_regress.sh: the fuzz harnesses (test/fuzz/fuzz_<name>.cpp) built -O2 against the normal
# library as replay programs (build/test/fuzz/replay_<name>, test/fuzz/fuzz.mk). (1) Every input that
# once crashed, hung or leaked a harness (test/fuzz/regress/<name>/*) must now end in a clean
# beagle::Error: the replay prints "<file>: error: <message>" and exits 0 (a file named ok-* must be
# accepted instead). (2) The seed corpora (test/fuzz/make_seeds.sh: small valid files of every format
# and the real files of data) replay without a crash, and the synthetic valid seeds load.
# The chat_template harness needs the default model: without it that part is skipped (exit 77).
set -u
shopt -s nullglob
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
R=$B/test/fuzz
tmp=$(mktemp -d "${TMPDIR:-/tmp}/beagle_fuzzregress_XXXXXX"); trap 'rm -rf "$tmp"' EXIT
fails=0 n=0 skips=0
MODEL=${BEAGLE_MODEL:-weights/SmolLM2-135M-Instruct.Q4_1.gguf}
needs_model() { [ "$1" = chat_template ] && [ ! -f "$MODEL" ]; }
bad() { echo "FAIL $*"; fails=$((fails+1)); }
names=$(ls test/fuzz/fuzz_*.cpp | sed 's|.*/fuzz_||; s|\.cpp$||')
for name in $names; do [ -x "$R/replay_$name" ] || bad "$R/replay_$name missing (make tests)"; done
[ $fails -eq 0 ] || exit 1

# replay NAME FILES...: runs the replay program; its stdout goes to $tmp/out
replay() {
  local name=$1; shift
  timeout -s KILL 120 "$R/replay_$name" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ $rc -eq 0 ] || { bad "replay_$name exited $rc on $*"; tail -5 "$tmp/err"; return 1; }
}

# (1) regression inputs
for dir in test/fuzz/regress/*/; do
  name=$(basename "$dir")
  if needs_model "$name"; then echo "SKIP: regress/$name: no model at $MODEL (make model)"; skips=$((skips+1)); continue; fi
  [ -x "$R/replay_$name" ] || { bad "regress/$name has no harness fuzz_$name.cpp"; continue; }
  for f in "$dir"*; do
    [ -f "$f" ] || continue
    n=$((n+1))
    replay "$name" "$f" || continue
    case $(basename "$f") in
      ok-*) grep -q ": accepted$" "$tmp/out" || bad "$f: expected accepted, got: $(cat "$tmp/out")" ;;
      *)    grep -q ": error: " "$tmp/out" || bad "$f: expected a clean error, got: $(cat "$tmp/out")" ;;
    esac
  done
done
echo "ok   $n regression inputs replayed"

# (2) seeds
BUILD=$B bash test/fuzz/make_seeds.sh "$tmp/seeds" >"$tmp/seeds.log" 2>&1 || { bad "make_seeds.sh"; cat "$tmp/seeds.log"; exit 1; }
for name in $names; do
  if needs_model "$name"; then echo "SKIP: $name seeds: no model at $MODEL (make model)"; skips=$((skips+1)); continue; fi
  [ -d "$tmp/seeds/$name" ] || { bad "no seeds for $name"; continue; }
  replay "$name" "$tmp/seeds/$name"/* || continue
  acc=$(grep -c ": accepted$" "$tmp/out"); tot=$(wc -l <"$tmp/out")
  # every harness has at least one seed that loads (the synthetic ones are valid by construction)
  [ "$acc" -ge 1 ] && echo "ok   $name: $tot seeds replayed, $acc accepted" || { bad "$name: no seed accepted"; cat "$tmp/out"; }
done
echo "$fails failures, $skips parts skipped"
[ $fails -eq 0 ] || exit 1
[ $skips -eq 0 ] || exit 77
