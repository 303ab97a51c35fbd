#!/usr/bin/env bash
# test_datagen.sh: `beagle datagen` writes shards atomically and resumes after a kill with exactly
# the bytes of an uninterrupted run; a deleted shard is regenerated bit-identically; the batch size
# and thread count do not change the data (batch-invariant target, per-sequence RNG streams);
# a data dir made with other settings (the backend among them) is refused; training on a directory datagen did
# not finish is refused;
# a resumed run removes the temp files of killed writers (not those of live processes).
set -u
M=$BEAGLE_ROOT/data/models
B=$BEAGLE_BIN
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
gen() { "$B" datagen -m "$M/stories260K.bin" -z "$M/tok512.bin" --sample 48 -n 200 --shard-seqs 8 "$@"; }
gen -o "$tmp/a" --batch 8 -t 1 2> "$tmp/a.log" || { bad "clean run"; cat "$tmp/a.log"; }
[ "$(ls "$tmp/a"/shard-*.bin | wc -l)" = 6 ] && ok "6 shards" || bad "shard count: $(ls "$tmp/a")"
# different batch size and threads: identical bytes
gen -o "$tmp/b" --batch 3 -t 2 2> /dev/null || bad "batch 3 run"
if diff -r "$tmp/a" "$tmp/b" > /dev/null; then ok "batch 3 / 2 threads = batch 8 / 1 thread, byte for byte"; else bad "batch size changed the data"; fi
# killed (SIGKILL, as kill -9) from outside once 2 of 6 shards are on disk, then resume. kill_when.py
# starts beagle itself, so the signal reaches beagle and not a shell around it.
python3 "$BEAGLE_ROOT/test/tools/kill_when.py" --files "$tmp/c/shard-*.bin" 2 -- \
  "$B" datagen -m "$M/stories260K.bin" -z "$M/tok512.bin" --sample 48 -n 200 --shard-seqs 8 -o "$tmp/c" --batch 8 -t 1 2> /dev/null; rc=$?
n_before=$(ls "$tmp/c"/shard-*.bin 2> /dev/null | wc -l)
[ $rc -eq 137 ] && [ "$n_before" -ge 2 ] && [ "$n_before" -lt 6 ] && ok "killed by SIGKILL (exit $rc) with $n_before of 6 shards written" || bad "the kill: exit $rc, $n_before shards"
# temp files: one of a writer that is gone (pid 999999999 > pid_max) is removed on resume, one of a live
# process (this shell) is left alone
touch "$tmp/c/shard-00002.bin.tmp.999999999" "$tmp/c/shard-00004.bin.tmp.$$"
gen -o "$tmp/c" --batch 8 -t 1 2> "$tmp/c.log" || { bad "resume"; cat "$tmp/c.log"; }
if diff -r -x "*.tmp.$$" "$tmp/a" "$tmp/c" > /dev/null; then ok "killed after $n_before shards, resumed: identical to the clean run"; else bad "resumed data differs"; fi
[ -e "$tmp/c/shard-00002.bin.tmp.999999999" ] && bad "a dead writer's temp file was not removed" || ok "a dead writer's temp file removed"
[ -e "$tmp/c/shard-00004.bin.tmp.$$" ] && ok "a live process's temp file kept" || bad "a live process's temp file was removed"
rm -f "$tmp/c/shard-00004.bin.tmp.$$"
# a run over a finished directory generates nothing: its rate counts no resumed shard (it read 9625102 seq/s)
gen -o "$tmp/a" --batch 8 -t 1 2> "$tmp/r.log" || bad "rerun of a finished directory"
grep -q "^datagen: 48/48 seq, 0.0 seq/s" "$tmp/r.log" && ok "rerun of a finished directory: $(tail -1 "$tmp/r.log")" || { bad "rerun's rate"; cat "$tmp/r.log"; }
# a deleted shard is regenerated identically
rm "$tmp/c/shard-00003.bin"
gen -o "$tmp/c" --batch 5 -t 1 2> /dev/null && cmp -s "$tmp/a/shard-00003.bin" "$tmp/c/shard-00003.bin" && ok "deleted shard regenerated identically" || bad "regenerated shard differs"
# a directory datagen did not finish is not read as a data set: training on it fails, naming the gap
cp -r "$tmp/a" "$tmp/p" && rm "$tmp/p/shard-00003.bin"
if "$B" train -m "$M/stories260K.bin" -z "$M/tok512.bin" --data "$tmp/p" -o "$tmp/p.bin" -q 2> "$tmp/e.log"; then bad "incomplete data dir accepted"; else
  grep -q "incomplete: 5 of its 6 shards (shard-00003.bin is missing)" "$tmp/e.log" && ok "incomplete data dir refused: $(cat "$tmp/e.log")" || { bad "incomplete dir: unclear message"; cat "$tmp/e.log"; }; fi
# other settings into the same dir: refused with a clear message
if "$B" datagen -m "$M/stories260K.bin" -z "$M/tok512.bin" --sample 48 -n 100 --shard-seqs 8 -o "$tmp/a" 2> "$tmp/e.log"; then bad "mismatched settings accepted"; else
  grep -q "max_new" "$tmp/e.log" && ok "mismatched settings refused: $(cat "$tmp/e.log")" || { bad "unclear message"; cat "$tmp/e.log"; }; fi
# the backend is part of the settings: a directory begun on the CPU is not resumed on the (emulated) GPU
grep -qx "backend cpu" "$tmp/a/meta.txt" && ok "meta.txt names the backend" || bad "meta.txt: no backend line"
EMU=${BEAGLE_CUDA_EMU_BIN:-$(dirname "$B")/beagle-cuda-emu}
if [ ! -x "$EMU" ]; then bad "no $EMU (make cuda-emu)"
else
  if "$EMU" datagen -m "$M/stories260K.bin" -z "$M/tok512.bin" --sample 48 -n 200 --shard-seqs 8 --backend cuda -o "$tmp/a" 2> "$tmp/e.log"; then
    bad "a CPU directory resumed on the GPU backend"
  else grep -q "backend = cpu, this run has cuda" "$tmp/e.log" && ok "other backend refused: $(cat "$tmp/e.log")" || { bad "backend: unclear message"; cat "$tmp/e.log"; }; fi
fi
# bad inputs
"$B" datagen -m "$M/stories260K.bin" -z "$M/tok512.bin" -o "$tmp/x" 2> "$tmp/e.log"; [ $? -eq 1 ] && grep -q "exactly one of" "$tmp/e.log" && ok "no source: $(cat "$tmp/e.log")" || bad "no source"
printf '[{"conversations": [{"from": "human", "value": "hi"}]}, 7]' > "$tmp/bad.json"
"$B" datagen -m "$M/stories260K.bin" -z "$M/tok512.bin" --prompts "$tmp/bad.json" -o "$tmp/y" 2> "$tmp/e.log"; [ $? -eq 1 ] && grep -q "record 1" "$tmp/e.log" && ok "bad prompt file: $(cat "$tmp/e.log")" || { bad "bad prompt file"; cat "$tmp/e.log"; }
echo "$fails failures"
[ $fails -eq 0 ]
