#!/usr/bin/env bash
# test_moa.sh: `beagle train --arch moa` (the Mixture of Attentions draft, docs/method.md section 4) end to end:
#   - trains on stories260K token shards (datagen's default: the states and the --state-layers rows are
#     computed in the training loop), finite losses; the file records "arch moa" and its state layers, info
#     names it;
#   - greedy speculative decoding with the draft gives plain decoding's tokens on 50 stories260K prompts
#     (bench-sd: chain, tree, hybrid; 0 mismatches), on 2 of them on the CUDA backend in the emulator (chain,
#     tree) and, with a one-step draft for SmolLM2-135M (layers 10, 20),
#     on 2 SmolLM2 prompts (chain, tree) when the model is present;
#   - refused: --arch moa without --state-layers, --no-concat with a MoA draft, an unknown arch line.
# (Gradients: test_gradcheck.sh; training rows == inference bit for bit: test_moa_draft; memory:
# test_stage2_memory; exactness with verify rows: test_spec_exact; sampling: test_spec_sampling.)
set -u
cd "$(dirname "$0")/../.."
B=${BEAGLE_BIN:-build/beagle}
M=$PWD/data/models
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
T=(-m "$M/stories260K.bin" -z "$M/tok512.bin")
"$B" datagen "${T[@]}" --sample 24 -n 100 --shard-seqs 12 -o "$tmp/x" -t 1 2> /dev/null || bad "datagen"
no_mismatches() {  # bench-sd JSON [min tree tau]: every mode gave plain decoding's tokens
  python3 - "$1" "${2:-0}" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))["overall"]
print({m: (round(o[m]["tau"], 3), o[m]["mismatches"]) for m in o})
sys.exit(0 if all(o[m]["mismatches"] == 0 for m in o) and o["tree"]["tau"] >= float(sys.argv[2]) else 1)
PY
}
tr() { "$B" train "${T[@]}" --data "$tmp/x" --arch moa --stage1-epochs 2 --stage2-epochs 1 --batch 4 --seq-len 128 -t 1 -q "$@"; }
tr -o "$tmp/m.bin" --state-layers 1,3 > "$tmp/log" 2>&1 && ok "train --arch moa --state-layers 1,3 (token shards)" || { bad "train"; cat "$tmp/log"; }
python3 - "$tmp/m.bin" <<'PY' && ok "file: arch moa, state_layers 1,3; losses finite" || bad "file / losses"
import json, math, sys
head = open(sys.argv[1], "rb").read(4096)
rows = [l.split() for l in open(sys.argv[1] + ".loss.tsv").readlines()[1:]]
loss = [float(r[2]) for r in rows]
j = json.load(open(sys.argv[1] + ".json"))
print("arch", j["config"].get("arch"), "steps", len(loss), "first", loss[:1], "last", loss[-1:])
sys.exit(0 if b"arch moa\n" in head and b"state_layers 1,3\n" in head and loss and all(math.isfinite(x) for x in loss)
         and j["config"].get("arch") == "moa" else 1)
PY
"$B" info "$tmp/m.bin" 2>&1 | grep -q "Mixture of Attentions" && ok "info names the architecture" || bad "info"
"$B" bench-sd "${T[@]}" -d "$tmp/m.bin" --prompts test/data/stories_prompts.txt --per-category 50 --no-chat -n 48 \
    --modes none,chain,tree,hybrid --total-tokens 12 -t 1 -o "$tmp/b.json" > "$tmp/log" 2>&1 || { bad "bench-sd"; cat "$tmp/log"; }
no_mismatches "$tmp/b.json" 1.01 && ok "greedy SD with the MoA draft = plain decoding, 50 prompts (chain, tree, hybrid: 0 mismatches)" || bad "mismatches"
# the CUDA backend in the emulator (some 40x slower: 2 prompts): the same exactness
EMU=${BEAGLE_CUDA_EMU_BIN:-$(dirname "$B")/beagle-cuda-emu}
if [ -x "$EMU" ]; then
  "$EMU" bench-sd "${T[@]}" -d "$tmp/m.bin" --prompts test/data/stories_prompts.txt --per-category 2 --no-chat -n 32 \
      --modes none,chain,tree --total-tokens 12 -t 1 -o "$tmp/be.json" > "$tmp/log" 2>&1 || { bad "bench-sd (emu)"; cat "$tmp/log"; }
  no_mismatches "$tmp/be.json" && ok "CUDA backend (emulator): greedy SD with the MoA draft = plain decoding (chain, tree)" || bad "emu mismatches"
else
  echo "skip emulator part: $EMU not built"
fi
# SmolLM2-135M: a draft of one training step on two short answers (its layers 10 and 20 computed in the loop)
S=${BEAGLE_MODEL:-$PWD/weights/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ -f "$S" ]; then
  printf 'Name three colors.\nWhat is two plus two?\n' > "$tmp/p.txt"
  "$B" datagen -m "$S" --prompts "$tmp/p.txt" -n 16 -o "$tmp/s" -t 2 > /dev/null 2>&1 || bad "datagen SmolLM2"
  "$B" train -m "$S" --data "$tmp/s" --arch moa --state-layers 10,20 --stage1-epochs 1 --stage2-epochs 0 --batch 2 \
      --seq-len 64 -t 2 -q -o "$tmp/sm.bin" > "$tmp/log" 2>&1 || { bad "train SmolLM2"; cat "$tmp/log"; }
  "$B" bench-sd -m "$S" -d "$tmp/sm.bin" --prompts "$tmp/p.txt" -n 24 --modes none,chain,tree --total-tokens 12 -t 2 \
      -o "$tmp/bs.json" > "$tmp/log" 2>&1 || { bad "bench-sd SmolLM2"; cat "$tmp/log"; }
  no_mismatches "$tmp/bs.json" && ok "SmolLM2-135M: greedy SD with a MoA draft = plain decoding (chain, tree)" || bad "SmolLM2 mismatches"
else
  echo "skip SmolLM2 part: $S not present"
fi
out=$(tr -o "$tmp/e.bin" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "at least one target layer" && ok "--arch moa without --state-layers: refused" || bad "no state layers: exit $rc, $out"
out=$("$B" generate "${T[@]}" -d "$tmp/m.bin" --spec tree --no-concat -p "Once" -n 4 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "MoA draft's self-attention" && ok "--no-concat with a MoA draft: refused" || bad "--no-concat: exit $rc, $out"
python3 - "$tmp/m.bin" "$tmp/bad.bin" <<'PY'
import struct, sys, zlib
b = open(sys.argv[1], "rb").read().replace(b"arch moa\n", b"arch mob\n", 1)[:-4]  # with a valid checksum again
open(sys.argv[2], "wb").write(b + struct.pack("<I", zlib.crc32(b)))
PY
out=$("$B" info "$tmp/bad.bin" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "'mob' is not one of beagle, eagle, medusa, moa" && ok "an unknown arch line: refused" ||
  bad "unknown arch: exit $rc, $out"
echo "$fails failed"
[ $fails -eq 0 ]
