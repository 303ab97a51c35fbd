#!/usr/bin/env bash
# test_bench_sd_resume.sh: `beagle bench-sd -o FILE` killed (SIGKILL, from outside) once 2 of 6 prompts are
# done (FILE.partial holds them: test/tools/kill_when.py watches it) resumes from
# FILE.partial and reports what an uninterrupted run reports (every count, tau, acceptance by depth and
# mismatch tally equal; timings and the timing-chosen draft threads excepted), says how many prompts it
# read back, and removes FILE.partial; a partial result of other options (-n, --topk), a damaged line
# and a file that is not a partial result are refused with the file, the line or the option named; temp
# files of killed writers (FILE.partial, FILE, the charts) are removed.
# --repeat 2 (each prompt's modes run twice, each mode's fastest run kept) reports the same counts.
# Tree at a fixed size: a cost-aware tree chooses its depth from timings, so its counts are not repeatable.
set -u
cd "$(dirname "$0")/../.."
B=${BEAGLE_BIN:-build/beagle}
M=$PWD/data/models
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
run() { "$B" bench-sd -m "$M/stories260K.bin" -z "$M/tok512.bin" -d weights/beagle-stories260K.bin \
          --prompts test/data/stories_prompts.txt --no-chat --per-category 6 --modes none,chain,tree --total-tokens 12 \
          -t 1 "$@" > /dev/null; }
run -n 48 -o "$tmp/a.json" 2> "$tmp/a.log" || { bad "uninterrupted run"; cat "$tmp/a.log"; }
[ -e "$tmp/a.json.partial" ] && bad "a finished run left a.json.partial" || ok "a finished run leaves no .partial"
# the kill comes from outside once FILE.partial has its header and 2 prompts' lines; one more prompt may
# finish before it lands, so k, the prompts done, is read back from the file
kill_when() { python3 test/tools/kill_when.py --lines "$1" "$2" -- "${@:3}" > /dev/null; }
kill_when "$tmp/b.json.partial" 3 "$B" bench-sd -m "$M/stories260K.bin" -z "$M/tok512.bin" -d weights/beagle-stories260K.bin \
  --prompts test/data/stories_prompts.txt --no-chat --per-category 6 --modes none,chain,tree --total-tokens 12 \
  -t 1 -n 48 -o "$tmp/b.json" 2> /dev/null; rc=$?
lines=$(wc -l < "$tmp/b.json.partial" 2> /dev/null)
k=$((${lines:-0} - 1))
[ $rc -eq 137 ] && [ ! -e "$tmp/b.json" ] && [ $k -ge 2 ] && [ $k -lt 6 ] && ok "killed by SIGKILL (exit $rc) after $k prompts: no report, .partial of $lines lines" \
    || bad "the kill: exit $rc, .partial lines '$lines'"
cp "$tmp/b.json.partial" "$tmp/keep.partial"

# other options: refused, naming the option; the partial result is left as it was
out=$(run -n 32 -o "$tmp/b.json" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "another run's partial result (n_predict: expected 32, found 48)" \
    && ok "other -n refused: $out" || bad "other -n: exit $rc, $out"
out=$(run -n 48 --topk 4 -o "$tmp/b.json" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "drafting.topk: expected 4, found 10" && ok "other --topk refused" || bad "other --topk: exit $rc, $out"
cmp -s "$tmp/b.json.partial" "$tmp/keep.partial" && ok "a refused run leaves the partial result alone" || bad "a refused run changed it"
# a damaged record line, and a file that is not a partial result
sed -i '3s/"tokens":48/"tokens":"x"/' "$tmp/b.json.partial"
out=$(run -n 48 -o "$tmp/b.json" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "b.json.partial line 3: .*type must be number" && ok "damaged line refused: $out" || bad "damaged line: exit $rc, $out"
echo '{"x": 1}' > "$tmp/c.json.partial"
out=$(run -n 48 -o "$tmp/c.json" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "is not a bench-sd partial result" && ok "foreign file refused" || bad "foreign file: exit $rc, $out"

# the resume; a killed writer's temp file (pid 999999999 > pid_max: gone) is removed, a live one's (this shell) kept
cp "$tmp/keep.partial" "$tmp/b.json.partial"
touch "$tmp/b.json.partial.tmp.999999999" "$tmp/b.speedup.png.tmp.999999999" "$tmp/b.json.tmp.$$"
run -n 48 -o "$tmp/b.json" 2> "$tmp/b.log" || { bad "resumed run"; cat "$tmp/b.log"; }
grep -q "resuming after $k of 6 prompts" "$tmp/b.log" && ok "resumed after $k of 6 prompts" || { bad "no resume message"; head -3 "$tmp/b.log"; }
[ $(grep -c "prompts (all)" "$tmp/b.log") = $((6 - k)) ] && ok "ran the other $((6 - k)) prompts only" || bad "ran $(grep -c "prompts (all)" "$tmp/b.log") prompts"
[ -e "$tmp/b.json.partial" ] && bad "b.json.partial left after the resumed run finished" || ok "the resumed run removed its .partial"
[ ! -e "$tmp/b.json.partial.tmp.999999999" ] && [ ! -e "$tmp/b.speedup.png.tmp.999999999" ] && [ -e "$tmp/b.json.tmp.$$" ] \
    && ok "dead writers' temp files removed, a live one's kept" || bad "temp files: $(ls "$tmp" | grep tmp)"
python3 - "$tmp/a.json" "$tmp/b.json" "$k" <<'PY' && ok "resumed report = uninterrupted report (timings aside)" || bad "resumed report differs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
timing = {"tok_s", "speedup", "ms_per_pass", "draft_ms_per_pass", "peak_rss_bytes", "draft_threads", "prompt_speedup"}
diffs = []
def walk(x, y, path):
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            if k not in timing and not (path == "" and k == "resumed_prompts"): walk(x.get(k), y.get(k), path + "." + k)
    elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for i, (u, v) in enumerate(zip(x, y)): walk(u, v, "%s[%d]" % (path, i))
    elif x != y: diffs.append((path, x, y))
walk(a, b, "")
print("resumed_prompts", b.get("resumed_prompts"), "tree tau", b["overall"]["tree"]["tau"], "diffs", diffs[:5])
sys.exit(0 if not diffs and b.get("resumed_prompts") == int(sys.argv[3]) and "resumed_prompts" not in a
         and b["overall"]["chain"]["prompts"] == 6 and b["overall"]["tree"]["mismatches"] == 0 else 1)
PY
# --repeat 2: the same counts, tau and acceptance as one run (timings aside); --repeat 0 refused
run -n 48 --repeat 2 -o "$tmp/d.json" 2> "$tmp/d.log" || { bad "--repeat 2"; cat "$tmp/d.log"; }
python3 - "$tmp/a.json" "$tmp/d.json" <<'PY' && ok "--repeat 2 = one run (timings aside)" || bad "--repeat 2 differs"
import json, sys
a, d = (json.load(open(p)) for p in sys.argv[1:3])
assert d["repeat"] == 2 and a["repeat"] == 1
for m in ("chain", "tree"):
    for k in ("prompts", "tokens", "tau", "mismatches", "accept_by_depth"):
        assert a["overall"][m][k] == d["overall"][m][k], (m, k, a["overall"][m][k], d["overall"][m][k])
print("tree tau", d["overall"]["tree"]["tau"])
PY
out=$(run -n 48 --repeat 0 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "repeat 0: expected 1 to 100" && ok "--repeat 0 refused" || bad "--repeat 0: exit $rc, $out"
# a random-weights draft (make bench-sd-exact) names no file to fingerprint: it runs with -o and resumes too
rnd() { "$B" bench-sd -m "$M/stories260K.bin" -z "$M/tok512.bin" --random-draft 3 --prompts test/data/stories_prompts.txt \
          --no-chat --per-category 3 -n 16 --modes none,chain -t 1 -o "$tmp/r.json" > /dev/null; }
kill_when "$tmp/r.json.partial" 2 "$B" bench-sd -m "$M/stories260K.bin" -z "$M/tok512.bin" --random-draft 3 \
  --prompts test/data/stories_prompts.txt --no-chat --per-category 3 -n 16 --modes none,chain -t 1 -o "$tmp/r.json" 2> /dev/null
k=$(($(wc -l < "$tmp/r.json.partial" 2> /dev/null || echo 1) - 1))
rnd 2> "$tmp/r.log" && [ $k -ge 1 ] && grep -q "resuming after $k of 3 prompts" "$tmp/r.log" && [ -s "$tmp/r.json" ] \
    && ok "--random-draft: killed after $k of 3, resumed" || { bad "--random-draft with -o"; cat "$tmp/r.log"; }
echo "$fails failures"
[ $fails -eq 0 ]
