#!/usr/bin/env bash
# compare_smollm2.sh: the comparison of docs/paper-comparison.md on the default target SmolLM2-135M-Instruct
# (Q4_1), with the same budget for every variant: the same self-distilled data (the target's greedy
# answers to the first LIMIT ShareGPT prompts, as step 1 of scripts/train_smollm2.sh but with the Q4_1
# target), the same STEPS optimizer steps of batch 4 x 512 tokens, the same recipe as the shipped draft
# (reduced draft vocabulary 8192, loss on prompt positions, vloss weight 1, lr 3e-3, window 2, S 2) and
# the same SEEDS. Variants (VARIANTS): s1 (Beagle stage 1 only), s12 (stage 1 + 2), s12gt (stage 1 + 2
# with --sim-grad-through), eagle (--arch eagle). Then `beagle bench-sd` of each draft on Spec-Bench (all
# its categories, PER prompts each, MT-Bench among them; chain, 60-node tree, cost-aware tree).
# Not run to completion in the session that wrote it: about TIME_PER_STEP x STEPS x 4 variants x seeds of
# CPU (roughly 1 s per step per variant on this 2-core machine, so the default budget is about 3 hours per
# seed) plus the datagen (about an hour). It is resumable: every step skips what is finished, an
# interrupted training continues from its checkpoint (--ckpt-every 50, --resume), datagen resumes its shards.
# Env: OUT (build/compare-smollm2), LIMIT (608), STEPS (2000), EPOCHS (14: with LIMIT 608 an epoch is
# about 152 steps, so 14 epochs outlast STEPS; two-stage variants switch to stage 2 after EPOCHS / 2),
# SEEDS ("1"), PER (10), JOBS (1), VARIANTS ("s1 s12 s12gt eagle"). Results: $OUT/VARIANT.sSEED.bin{,.json,.bench.json}.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${BEAGLE_SHARED:-../shared}
M=weights/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=${OUT:-build/compare-smollm2}
LIMIT=${LIMIT:-608}
STEPS=${STEPS:-2000}
EPOCHS=${EPOCHS:-14}
HALF=$((EPOCHS / 2))
SEEDS=${SEEDS:-"1"}
PER=${PER:-10}
JOBS=${JOBS:-1}
VARIANTS=${VARIANTS:-"s1 s12 s12gt eagle"}
B="nice -n 10 build/beagle"
make -j2 build/beagle >/dev/null
[ -f "$M" ] || bash scripts/fetch_model.sh
mkdir -p "$OUT"
DATA=$OUT/data
$B datagen -m "$M" --prompts "$SHARED/data/train/sharegpt_sg90k_first_sampled_sorted.json" --limit "$LIMIT" \
    -n 192 --max-prompt 256 -o "$DATA" --batch 16 --shard-seqs 32 -t 2
# EPOCHS outlast STEPS (--max-steps ends every run); stage 2 starts at the same step in every two-stage variant
flags() {
    case $1 in
        s1) echo "--stage1-epochs $EPOCHS --stage2-epochs 0" ;;
        s12) echo "--stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF))" ;;
        s12gt) echo "--stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF)) --sim-grad-through" ;;
        eagle) echo "--arch eagle --stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF))" ;;
        *) echo "unknown variant $1" >&2; exit 2 ;;
    esac
}
train_one() {  # variant seed
    local d=$OUT/$1.s$2.bin
    if [ -f "$d.json" ]; then return; fi
    local resume=()
    [ -f "$d.ckpt" ] && resume=(--resume "$d.ckpt")
    # shellcheck disable=SC2046
    $B train -m "$M" --data "$DATA" -o "$d" $(flags "$1") --window 2 --sim-steps 2 --batch 4 --seq-len 512 --lr 3e-3 \
        --draft-vocab 8192 --loss-on-prompt --vloss-weight 1 --seed "$2" --max-steps "$STEPS" --ckpt-every 50 \
        --eval-prompts "$SHARED/data/eval/mt_bench_question.jsonl" --eval-n 10 --eval-tokens 128 -t 1 -q "${resume[@]}" \
        > "$d.log" 2>&1
}
running=0
for seed in $SEEDS; do
    for v in $VARIANTS; do
        train_one "$v" "$seed" &
        running=$((running + 1))
        if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
    done
done
wait
for seed in $SEEDS; do for v in $VARIANTS; do
    d=$OUT/$v.s$seed.bin
    [ -f "$d.json" ] || { echo "compare_smollm2: $v seed $seed did not finish (see $d.log)" >&2; exit 1; }
    for mode in "chain,tree 60" "tree auto"; do
        read -r modes total <<< "$mode"
        j=$d.bench-$total.json
        [ -f "$j" ] || $B bench-sd -m "$M" -d "$d" --prompts "$SHARED/data/eval/spec_bench_question.jsonl" \
            --per-category "$PER" -n 128 -t 2 --modes "none,$modes" --total-tokens "$total" -o "$j" > /dev/null
    done
done; done
python3 - "$OUT" "$SEEDS" "$VARIANTS" <<'PY'
import json, sys
out, seeds, variants = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print("| variant | seed | params | tau chain | tau tree-60 | tau cost-aware | mt-bench tree-60 | s / step (stage 1 / 2) | peak KiB (stage 1 / 2) |")
print("|---|---|---|---|---|---|---|---|---|")
for v in variants:
    for s in seeds:
        d = f"{out}/{v}.s{s}.bin"
        j, b60, ba = json.load(open(d + ".json")), json.load(open(d + ".bench-60.json")), json.load(open(d + ".bench-auto.json"))
        mt = b60.get("mt_bench", {}).get("tree", {}).get("tau", float("nan"))
        sps, pk = j["seconds_per_step_by_stage"], j["iteration_peak_bytes"]
        print(f"| {v} | {s} | {j['params']} | {b60['overall']['chain']['tau']:.3f} | {b60['overall']['tree']['tau']:.3f} "
              f"| {ba['overall']['tree']['tau']:.3f} | {mt:.3f} | {sps[0]:.2f} / {sps[1]:.2f} | {pk[0] / 1024:.0f} / {pk[1] / 1024:.0f} |")
PY
