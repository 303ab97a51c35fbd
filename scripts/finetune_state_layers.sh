#!/usr/bin/env bash
# finetune_state_layers.sh: do fused target layers help the shipped SmolLM2 draft? An
# A/B at the shipped level: both arms start from weights/beagle-smollm2-135m.bin (--init) and fine-tune on
# the same data, steps, seed and learning rate: the comparison's data (scripts/compare_smollm2.sh: the Q4_1
# target's greedy answers to the first 608 ShareGPT prompts), arm A as the shipped draft is, arm B with
# --state-layers 22,27 (W_mix starts at zero, so B starts as exactly the shipped draft; its data is the
# same tokens and states plus those layers' rows, data-sl). Then, for the shipped draft and both arms: tau
# on the 40 MT-Bench turns of docs/training.md's table (bench-sd --per-category 5, chain and a 60-node
# tree, 128 tokens) and teacher-forced top-1 / top-5 on the target's answers to the 80 MT-Bench turns.
# Needs compare_smollm2.sh's data (VARIANTS=s12sl makes data-sl and mt-bench-greedy-sl). Resumable: each
# step skips what is done, a training continues from its checkpoint. About 30 minutes per arm on 2 cores.
# Env: CMP (build/compare-smollm2), OUT (build/finetune-sl), EPOCHS (1: stage-1 epochs, as many stage-2), LR (1e-3).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$PWD/data
M=weights/SmolLM2-135M-Instruct.Q4_1.gguf
SHIPPED=weights/beagle-smollm2-135m.bin
CMP=${CMP:-build/compare-smollm2}
OUT=${OUT:-build/finetune-sl}
EPOCHS=${EPOCHS:-1}
LR=${LR:-1e-3}
make -j2 build/beagle build/test/draft_topk > /dev/null
for d in "$CMP/data" "$CMP/data-sl" "$CMP/mt-bench-greedy" "$CMP/mt-bench-greedy-sl"; do
  [ -d "$d" ] || { echo "finetune_state_layers: $d missing (run scripts/compare_smollm2.sh with VARIANTS=s12sl first)" >&2; exit 1; }
done
mkdir -p "$OUT"
arm() {  # name data extra-flags...
  local name=$1 data=$2 d=$OUT/$1.bin; shift 2
  [ -f "$d.json" ] && return
  local resume=()
  [ -f "$d.ckpt" ] && resume=(--resume "$d.ckpt")
  build/beagle train -m "$M" --data "$data" -o "$d" --init "$SHIPPED" --stage1-epochs "$EPOCHS" --stage2-epochs "$EPOCHS" \
      --window 2 --sim-steps 2 --batch 4 --seq-len 512 --lr "$LR" --lr-decay 0.5 --warmup 20 --draft-vocab 8192 \
      --loss-on-prompt --vloss-weight 1 --seed 10 --ckpt-every 50 --eval-prompts "$DATA/eval/mt_bench_question.jsonl" \
      --eval-n 10 --eval-tokens 128 -t 2 -q "${resume[@]}" "$@" > "$d.log" 2>&1
}
arm A "$CMP/data"
arm B "$CMP/data-sl" --state-layers 22,27
for d in "$SHIPPED" "$OUT/A.bin" "$OUT/B.bin"; do
  j=$OUT/$(basename "$d").tau.json
  [ -s "$j" ] || build/beagle bench-sd -m "$M" -d "$d" --prompts "$DATA/eval/mt_bench_question.jsonl" \
      --per-category 5 --modes chain,tree --total-tokens 60 -n 128 -t 2 -o "$j" > /dev/null
  held=$CMP/mt-bench-greedy
  [ "$d" = "$OUT/B.bin" ] && held=$CMP/mt-bench-greedy-sl
  t=$OUT/$(basename "$d").topk.txt
  [ -s "$t" ] || { build/test/draft_topk "$M" "$d" "$held" > "$t.tmp" && mv "$t.tmp" "$t"; }
done
python3 - "$OUT" "$SHIPPED" <<'PY'
import json, sys
out, shipped = sys.argv[1], sys.argv[2]
sys.path.insert(0, "scripts")
from topk_stats import topk
print("| draft | MT-Bench tau chain / tree-60 | top-1 / top-5 | draft ms / verify pass (tree) |")
print("|---|---|---|---|")
for name, d in [("shipped", shipped), ("A: fine-tuned", out + "/A.bin"), ("B: fine-tuned, state layers 22,27", out + "/B.bin")]:
    b = json.load(open(f"{out}/{d.split('/')[-1]}.tau.json"))["mt_bench"]
    t1, t5, _ = topk(f"{out}/{d.split('/')[-1]}.topk.txt")
    tr = b["tree"]
    print(f"| {name} | {b['chain']['tau']:.3f} / {tr['tau']:.3f} | {t1:.3f} / {t5:.3f} | "
          f"{tr['draft_ms_per_pass']:.2f} |")
PY
