#!/usr/bin/env bash
# test_generate_golden.sh: stories260K greedy generation equals karpathy's run.c output (the golden
# text in data/models/stories260K.md) byte for byte, from the llama2.c .bin, from the
# GGUF (tokenizer from its metadata), and from our HF safetensors export; and the seeded sample
# `-t 1.0 -p 0.9 -s 133742` equals run.c's too.
set -u
M=$BEAGLE_ROOT/data/models
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
python3 test/oracles/golden.py "-t 0.0" > "$tmp/greedy.txt" || exit 1
python3 test/oracles/golden.py "-s 133742" > "$tmp/sample.txt" || exit 1
check() {  # name, expected file, command...
  local name=$1 want=$2; shift 2
  "$@" > "$tmp/got.txt" 2> "$tmp/err.txt"
  local rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL $name: exit $rc"; cat "$tmp/err.txt"; fails=$((fails+1)); return; fi
  if cmp -s "$tmp/got.txt" "$want"; then echo "ok   $name"; else
    echo "FAIL $name: output differs from run.c golden"; diff "$want" "$tmp/got.txt" | head -20; fails=$((fails+1)); fi
}
for t in 1 2; do
  check "bin greedy -t $t" "$tmp/greedy.txt" "$BEAGLE_BIN" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -n 256 --temp 0 -t $t
done
check "gguf greedy" "$tmp/greedy.txt" "$BEAGLE_BIN" generate -m "$M/stories260K.gguf" -n 256 --temp 0
check "bin greedy, prefill batch 1" "$tmp/greedy.txt" "$BEAGLE_BIN" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -n 256 --temp 0 -b 1
python3 scripts/export_safetensors.py "$M/stories260K.bin" "$tmp/st" > /dev/null || { echo "FAIL export"; exit 1; }
check "safetensors greedy" "$tmp/greedy.txt" "$BEAGLE_BIN" generate -m "$tmp/st" -z "$M/tok512.bin" -n 256 --temp 0
python3 scripts/export_safetensors.py "$M/stories260K.bin" "$tmp/st2" --shards 3 > /dev/null || { echo "FAIL export shards"; exit 1; }
check "safetensors sharded greedy" "$tmp/greedy.txt" "$BEAGLE_BIN" generate -m "$tmp/st2" -z "$M/tok512.bin" -n 256 --temp 0
check "bin seeded sample" "$tmp/sample.txt" "$BEAGLE_BIN" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -n 256 --temp 1.0 --top-p 0.9 --seed 133742
echo "$fails failures"
[ $fails -eq 0 ]
