#!/usr/bin/env bash
# train_smollm2_next.sh: phase 8 of the SmolLM2 draft (issue 20, item 3: tree-60 tau >= 3.0 on MT-Bench):
# the shipped draft (scripts/train_smollm2.sh, phase 7) trained on more self-distilled data. Resumable:
# every datagen and the training resume after a kill, so rerun the script until it prints its summary.
#   1. data D again, as train_smollm2.sh step 9 wrote it (the Q4_1 target's greedy answers to every
#      ShareGPT prompt, the self-instruct seeds and the first 3000 GSM8K questions, two sampled answers per
#      ShareGPT prompt), into WORK; it is the data phase 7 saw, replayed so the draft does not drift.
#   2. data E, new: a third sampled answer per ShareGPT prompt (temperature 0.7, seeds 41 / 42), greedy
#      answers to the rest of GSM8K's training questions (--skip 3000), and SELF (default 8000) Magpie-style
#      conversations whose user turns the target writes itself (`datagen --self-prompts`, seed 51).
#   3. phase 8: --init the shipped draft, D and E merged, 1 + 1 epochs, lr decaying over the second half,
#      seed 10 -> OUT (default WORK/beagle-smollm2-135m.phase8.bin, never the shipped file).
#   4. tau of OUT and of the shipped draft on the 40 MT-Bench turns of docs/training.md's table
#      (bench-sd --per-category 5 --modes chain,tree --total-tokens 60 -n 128), side by side.
# About 7 hours on 2 idle cores (datagen ~4.5 h, training ~2.5 h). Environment: WORK, OUT, SELF, THREADS.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${BEAGLE_SHARED:-../shared}
M=weights/SmolLM2-135M-Instruct.Q4_1.gguf
SHIPPED=weights/beagle-smollm2-135m.bin
WORK=${WORK:-build/smollm2-next}
OUT=${OUT:-$WORK/beagle-smollm2-135m.phase8.bin}
SELF=${SELF:-8000}
THREADS=${THREADS:-2}
make -j2 build/beagle
[ -f "$M" ] || bash scripts/fetch_model.sh
mkdir -p "$WORK"
gen=(-m "$M" -n 256 --max-prompt 256 --batch 32 --shard-seqs 64 -t "$THREADS")
tr=$SHARED/data/train
sg=$tr/sharegpt_sg90k_first_sampled_sorted.json
v3=$tr/sharegpt_v3_filtered_1000.json
# 1. data D (train_smollm2.sh step 9: scripts/smollm2_data_d.sh)
bash scripts/smollm2_data_d.sh "$WORK" "$THREADS"
# 2. data E
build/beagle datagen "${gen[@]}" --prompts "$sg" --temp 0.7 --seed 41 -o "$WORK/e-sg90k-t07c"
build/beagle datagen "${gen[@]}" --prompts "$v3" --temp 0.7 --seed 42 -o "$WORK/e-v3-t07c"
build/beagle datagen "${gen[@]}" --prompts "$tr/gsm8k_train.jsonl" --skip 3000 -o "$WORK/e-gsm8k-rest-greedy"
build/beagle datagen "${gen[@]}" --self-prompts "$SELF" --max-prompt 128 --seed 51 -o "$WORK/e-self"
bash scripts/merge_data.sh "$WORK/data-phase8" "$WORK"/data-p6-{sg90k-greedy,v3-greedy,selfinstruct-greedy,gsm8k-greedy,sg90k-t07a,v3-t07a,sg90k-t05b,v3-t05b} \
    "$WORK"/e-{sg90k-t07c,v3-t07c,gsm8k-rest-greedy,self}
# 3. phase 8 (the shipped recipe's flags; weights/beagle-smollm2-135m.bin.json records them)
build/beagle train -m "$M" --window 2 --sim-steps 2 --batch 4 --seq-len 512 --lr 3e-3 --draft-vocab 8192 --loss-on-prompt \
    --data "$WORK/data-phase8" -o "$OUT" --ckpt "$WORK/phase8.ckpt" --init "$SHIPPED" \
    --stage1-epochs 1 --stage2-epochs 1 --lr-decay 0.5 --vloss-weight 1 --seed 10 -t "$THREADS" \
    --eval-prompts "$SHARED/data/eval/mt_bench_question.jsonl" --eval-n 10 --eval-tokens 128
# 4. tau, the new draft next to the shipped one (deterministic: greedy)
for d in "$SHIPPED" "$OUT"; do
  [ -s "$WORK/$(basename "$d").tau.json" ] || build/beagle bench-sd -m "$M" -d "$d" --prompts "$SHARED/data/eval/mt_bench_question.jsonl" \
      --per-category 5 --modes chain,tree --total-tokens 60 -n 128 -t "$THREADS" -o "$WORK/$(basename "$d").tau.json" > /dev/null
done
python3 - "$WORK/$(basename "$SHIPPED").tau.json" "$WORK/$(basename "$OUT").tau.json" <<'PY'
import json, sys
for f in sys.argv[1:]:
    o = json.load(open(f))["mt_bench"]
    print("%-45s tau chain %.3f  tree-60 %.3f" % (f, o["chain"]["tau"], o["tree"]["tau"]))
PY
