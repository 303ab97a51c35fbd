#!/usr/bin/env bash
# test_eagle_ttt.sh: `beagle train --arch eagle --ttt` (the EAGLE draft's training-time test, EAGLE-3 /
# HASS: stage 2 runs --sim-steps steps, each fed the draft's own features of the step before) end to end
# on stories260K: the run finishes with finite stage-2 losses and records ttt in its summary and
# checkpoint config; greedy speculative decoding with the draft gives plain decoding's tokens (bench-sd:
# 0 mismatches, tree tau > 1); resuming the checkpoint without --ttt is refused (another run's config);
# --ttt without --arch eagle is refused. (Gradients: test_gradcheck.sh; training step k == the inference
# chain's depth k, bit for bit: test_eagle_draft; memory: test_stage2_memory; CUDA backend: test_cuda_backend_train.)
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
tr() { "$B" train "${T[@]}" --data "$tmp/x" --arch eagle --stage1-epochs 2 --stage2-epochs 2 --batch 4 --seq-len 128 \
         --window 3 --sim-steps 3 -t 1 -q "$@"; }
tr --ttt -o "$tmp/e.bin" --ckpt-every 5 > "$tmp/log" 2>&1 && ok "train --arch eagle --ttt --sim-steps 3" || { bad "train"; cat "$tmp/log"; }
python3 - "$tmp/e.bin" <<'PY' && ok "summary: ttt 1; stage-2 losses finite" || bad "summary / losses"
import json, math, sys
j = json.load(open(sys.argv[1] + ".json"))
rows = [l.split() for l in open(sys.argv[1] + ".loss.tsv").readlines()[1:]]
s2 = [float(r[2]) for r in rows if r[1] == "2"]
print("ttt", j["config"].get("ttt"), "stage-2 steps", len(s2), "last", s2[-1:] )
sys.exit(0 if str(j["config"].get("ttt")) == "1" and s2 and all(math.isfinite(x) and x > 0 for x in s2) else 1)
PY
"$B" bench-sd "${T[@]}" -d "$tmp/e.bin" --prompts test/data/stories_prompts.txt --no-chat -n 48 --modes none,chain,tree \
    -t 1 -o "$tmp/b.json" > /dev/null 2>&1 || bad "bench-sd"
python3 - "$tmp/b.json" <<'PY' && ok "greedy SD with the ttt draft = plain decoding (chain, tree: 0 mismatches)" || bad "mismatches"
import json, sys
o = json.load(open(sys.argv[1]))["overall"]
print({m: (round(o[m]["tau"], 3), o[m]["mismatches"]) for m in o})
sys.exit(0 if all(o[m]["mismatches"] == 0 for m in o) and o["tree"]["tau"] > 1.0 else 1)
PY
out=$(tr -o "$tmp/e.bin" --resume "$tmp/e.bin.ckpt" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "ttt" && ok "resume without --ttt: refused" || bad "resume without --ttt: exit $rc, $(echo "$out" | tail -2)"
out=$("$B" train "${T[@]}" --data "$tmp/x" --ttt -o "$tmp/f.bin" 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "add --arch eagle" && ok "--ttt without --arch eagle: refused" || bad "--ttt on beagle: exit $rc, $out"
echo "$fails failed"
[ $fails -eq 0 ]
