#!/usr/bin/env bash
# train_smollm2_next.sh: phase 8 of the SmolLM2 draft (aim: tree-60 tau >= 3.0 on MT-Bench):
# the shipped draft (scripts/train_smollm2.sh, phase 7) trained on more self-distilled data. Resumable:
# every datagen and the training resume after a kill, so rerun the script until it prints its summary.
#   1. data D again, as train_smollm2.sh step 9 wrote it (the Q4_1 target's greedy answers to every
#      ShareGPT prompt, the self-instruct seeds and the first 3000 GSM8K questions, two sampled answers per
#      ShareGPT prompt), into WORK; it is the data phase 7 saw, replayed so the draft does not drift.
#   2. data E, new: a third sampled answer per ShareGPT prompt (temperature 0.7, seeds 41 / 42), greedy
#      answers to the rest of GSM8K's training questions (--skip 3000), and SELF (default 8000) Magpie-style
#      conversations whose user turns the target writes itself (`datagen --self-prompts`, seed 51).
#   3. data F, new: the target's greedy answers to the long prompts, the ShareGPT first turns
#      (sg90k and v3) of at least 1000 characters (about 700), kept up to 1792 tokens (D and E cut every
#      prompt at 256). The shipped draft never saw a context past 512 tokens, and on Spec-Bench's
#      long-document categories its tree-60 tau is 1.5-1.7 (summarization 1.53 on 10 articles, 1.94 with
#      the same articles cut to 1000 characters: docs/training.md).
#   4. phase 8: --init the shipped draft, D, E and F merged, 1 + 1 epochs, lr decaying over the second half,
#      seed 10, --seq-len 2048 (a long sequence is one item, as the draft sees it at inference), --new-vocab:
#      the 8192 draft tokens chosen again from all this data (the shipped draft's come from phase 1's data A
#      and cover 89.3% of the target's tokens in its MT-Bench answers; chosen from D and E, 92.3%) -> OUT
#      (default WORK/beagle-smollm2-135m.phase8.bin, never the shipped file).
#   5. scripts/eval_smollm2_draft.sh on the shipped draft and OUT, side by side: tau chain / tree-60 on the
#      40 MT-Bench turns and on Spec-Bench datasets no training data came from, teacher-forced top-1 / top-5,
#      drafting time per verify pass.
# About 8 hours on 2 idle cores (datagen ~5 h, training ~3 h). Environment: WORK, OUT, SELF, THREADS.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$PWD/data
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
tr=$DATA/train
sg=$tr/sharegpt_sg90k_first_sampled_sorted.json
v3=$tr/sharegpt_v3_filtered_1000.json
# 1. data D (train_smollm2.sh step 9: scripts/smollm2_data_d.sh)
bash scripts/smollm2_data_d.sh "$WORK" "$THREADS"
# 2. data E
build/beagle datagen "${gen[@]}" --prompts "$sg" --temp 0.7 --seed 41 -o "$WORK/e-sg90k-t07c"
build/beagle datagen "${gen[@]}" --prompts "$v3" --temp 0.7 --seed 42 -o "$WORK/e-v3-t07c"
build/beagle datagen "${gen[@]}" --prompts "$tr/gsm8k_train.jsonl" --skip 3000 -o "$WORK/e-gsm8k-rest-greedy"
build/beagle datagen "${gen[@]}" --self-prompts "$SELF" --max-prompt 128 --seed 51 -o "$WORK/e-self"
# 3. data F: the long prompts (a prompts file written once, in the two files' order)
long=$WORK/long_prompts.json
[ -s "$long" ] || python3 - "$sg" "$v3" "$long" <<'PY'
import json, os, sys
*srcs, out = sys.argv[1:]
keep = [x for f in srcs for x in json.load(open(f))
        if x.get("conversations") and len(x["conversations"][0]["value"]) >= 1000]
json.dump(keep, open(out + ".tmp", "w"))
os.replace(out + ".tmp", out)
print("data F: %d prompts of >= 1000 characters" % len(keep))
PY
build/beagle datagen -m "$M" -n 256 --max-prompt 1792 --batch 16 --shard-seqs 32 -t "$THREADS" --prompts "$long" -o "$WORK/f-long-greedy"
bash scripts/merge_data.sh "$WORK/data-phase8" "$WORK"/data-p6-{sg90k-greedy,v3-greedy,selfinstruct-greedy,gsm8k-greedy,sg90k-t07a,v3-t07a,sg90k-t05b,v3-t05b} \
    "$WORK"/e-{sg90k-t07c,v3-t07c,gsm8k-rest-greedy,self} \
    "$WORK/f-long-greedy"
# 4. phase 8 (the shipped recipe's flags, but --seq-len 2048 for data F and --new-vocab; weights/beagle-smollm2-135m.bin.json
#    records them)
build/beagle train -m "$M" --window 2 --sim-steps 2 --batch 4 --seq-len 2048 --lr 3e-3 --draft-vocab 8192 --new-vocab --loss-on-prompt \
    --data "$WORK/data-phase8" -o "$OUT" --ckpt "$WORK/phase8.ckpt" --init "$SHIPPED" \
    --stage1-epochs 1 --stage2-epochs 1 --lr-decay 0.5 --vloss-weight 1 --seed 10 -t "$THREADS" \
    --eval-prompts "$DATA/eval/mt_bench_question.jsonl" --eval-n 10 --eval-tokens 128
# 5. the new draft next to the shipped one (tau and top-k deterministic: greedy)
phase8=$OUT
OUT="$WORK/eval" bash scripts/eval_smollm2_draft.sh "$SHIPPED" "$phase8"
