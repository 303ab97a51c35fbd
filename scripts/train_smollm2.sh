#!/usr/bin/env bash
# train_smollm2.sh: reproduces the shipped draft weights/beagle-smollm2-135m.bin for the default target
# SmolLM2-135M-Instruct (Q4_1 GGUF, `make model`) from scratch on a 2-core CPU (about 11 hours).
#   1. `beagle datagen`: the target answers the first LIMIT (608) ShareGPT prompts of
#      data/train/sharegpt_sg90k_first_sampled_sorted.json (chat template, greedy, up to 192
#      new tokens, prompts cut to 256 tokens), 16 sequences per target pass, f32 weights; shards of
#      tokens + f16 states go to WORK/data-smollm2 (resumable: rerun the script after a kill).
#   2. `beagle train`, phase 1: EAGLE-3-style reduced draft vocabulary (the 8192 most frequent training
#      targets), loss on prompt and answer positions (soft labels from the target's own states),
#      stage 1 (window 2) for 4 epochs then stage 2 (S = 2) for 1, batch 4 x 512 tokens, lr 3e-3,
#      vloss weight 1 (not the default 10: SmolLM2's states are large, see docs/training.md), seed 1.
#   3. `beagle train --init` phase 2: continued from phase 1's weights (fresh AdamW state), 3 + 2 epochs,
#      vloss weight VLOSS2, seed 2.
#   4. `beagle datagen` again, now with the Q4_1 target itself (the states the draft sees at inference):
#      the first 1600 ShareGPT prompts (the 608 above among them), same limits -> WORK/data-smollm2-q41.
#   5. `beagle train --init` phase 3 on that data (the reduced vocabulary stays phase 2's), 3 + 1 epochs,
#      seed 3, 2 threads -> WORK/beagle-smollm2-135m.phase3.bin.
#   6. `beagle datagen` (Q4_1 target) over the ShareGPT prompts not used yet: the rest of sg90k (--skip
#      1600) and all of sharegpt_v3_filtered_1000.json, plus the first 576 sg90k prompts again (a
#      replay of part of step 4's data); merged into WORK/data-smollm2-phase4 (links to the shards).
#   7. `beagle train --init` phase 4 on that: 3 + 1 epochs, seed 4.
#   8. phase 5, the same data again: 2 + 1 epochs, seed 5 -> WORK/beagle-smollm2-135m.phase5.bin.
#   9. `beagle datagen` (Q4_1 target, up to 256 new tokens, 32 sequences per pass): greedy answers to all
#      ShareGPT prompts, the self-instruct seeds and the first 3000 GSM8K training questions, and two
#      sampled answers per ShareGPT prompt (temperature 0.7, seeds 21/22; 0.5, seeds 31/32); merged into
#      WORK/data-smollm2-phase6.
#  10. phase 6a on the greedy ShareGPT answers: --init phase 5, 1 + 1 epochs, lr decaying linearly to 0
#      over the second half (--lr-decay 0.5), seed 7.
#  11. phase 6 on all of step 9's data: --init phase 6a, 1 + 1 epochs, --lr-decay 0.5, seed 8.
#  12. phase 7, the same data again: --init phase 6, 1 + 1 epochs, --lr-decay 0.5, seed 9, then the
#      evaluation on held-out prompts (the first 10 MT-Bench first turns; no training prompt is among them).
# The numbers of the shipped run (data size, epochs, time) are in weights/beagle-smollm2-135m.bin.json
# and docs/training.md. Environment: LIMIT, WORK, OUT, THREADS, VLOSS2 override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$PWD/data
M=weights/SmolLM2-135M-Instruct.Q4_1.gguf
WORK=${WORK:-weights}
OUT=${OUT:-weights/beagle-smollm2-135m.bin}
LIMIT=${LIMIT:-608}
THREADS=${THREADS:-1}
VLOSS2=${VLOSS2:-1}
make -j2 build/beagle
[ -f "$M" ] || bash scripts/fetch_model.sh
mkdir -p "$WORK" "$(dirname "$OUT")"
start=$(date +%s)
build/beagle datagen -m "$M" --prompts "$DATA/train/sharegpt_sg90k_first_sampled_sorted.json" --limit "$LIMIT" \
    -n 192 --max-prompt 256 -o "$WORK/data-smollm2" --batch 16 --shard-seqs 32 -t 2 --f32-weights
t_data=$(( $(date +%s) - start ))
common=(-m "$M" --window 2 --sim-steps 2 --batch 4 --seq-len 512 --lr 3e-3 --draft-vocab 8192 --loss-on-prompt)
build/beagle train "${common[@]}" --data "$WORK/data-smollm2" -t "$THREADS" -o "$WORK/beagle-smollm2-135m.phase1.bin" --ckpt "$WORK/beagle-smollm2-135m.phase1.ckpt" \
    --stage1-epochs 4 --stage2-epochs 1 --vloss-weight 1 --seed 1
build/beagle train "${common[@]}" --data "$WORK/data-smollm2" -t "$THREADS" -o "$WORK/beagle-smollm2-135m.phase2.bin" --ckpt "$WORK/beagle-smollm2-135m.phase2.ckpt" \
    --init "$WORK/beagle-smollm2-135m.phase1.bin" --stage1-epochs 3 --stage2-epochs 2 --vloss-weight "$VLOSS2" --seed 2
build/beagle datagen -m "$M" --prompts "$DATA/train/sharegpt_sg90k_first_sampled_sorted.json" --limit 1600 \
    -n 192 --max-prompt 256 -o "$WORK/data-smollm2-q41" --batch 16 --shard-seqs 32 -t 2
build/beagle train "${common[@]}" --data "$WORK/data-smollm2-q41" -o "$WORK/beagle-smollm2-135m.phase3.bin" --ckpt "$WORK/beagle-smollm2-135m.phase3.ckpt" \
    --init "$WORK/beagle-smollm2-135m.phase2.bin" --stage1-epochs 3 --stage2-epochs 1 --vloss-weight 1 --seed 3 -t 2
gen=(-m "$M" -n 192 --max-prompt 256 --batch 16 --shard-seqs 32 -t 2)
build/beagle datagen "${gen[@]}" --prompts "$DATA/train/sharegpt_sg90k_first_sampled_sorted.json" --limit 576 -o "$WORK/data-p4-replay"
build/beagle datagen "${gen[@]}" --prompts "$DATA/train/sharegpt_sg90k_first_sampled_sorted.json" --skip 1600 -o "$WORK/data-p4-sg90k"
build/beagle datagen "${gen[@]}" --prompts "$DATA/train/sharegpt_v3_filtered_1000.json" -o "$WORK/data-p4-v3"
bash scripts/merge_data.sh "$WORK/data-smollm2-phase4" "$WORK/data-p4-replay" "$WORK/data-p4-sg90k" "$WORK/data-p4-v3"
build/beagle train "${common[@]}" --data "$WORK/data-smollm2-phase4" -o "$WORK/beagle-smollm2-135m.phase4.bin" --ckpt "$WORK/beagle-smollm2-135m.phase4.ckpt" \
    --init "$WORK/beagle-smollm2-135m.phase3.bin" --stage1-epochs 3 --stage2-epochs 1 --vloss-weight 1 --seed 4 -t 2
build/beagle train "${common[@]}" --data "$WORK/data-smollm2-phase4" -o "$WORK/beagle-smollm2-135m.phase5.bin" --ckpt "$WORK/beagle-smollm2-135m.phase5.ckpt" \
    --init "$WORK/beagle-smollm2-135m.phase4.bin" --stage1-epochs 2 --stage2-epochs 1 --vloss-weight 1 --seed 5 -t 2
bash scripts/smollm2_data_d.sh "$WORK" 2
bash scripts/merge_data.sh "$WORK/data-smollm2-phase6" "$WORK"/data-p6-{sg90k-greedy,v3-greedy,selfinstruct-greedy,gsm8k-greedy,sg90k-t07a,v3-t07a,sg90k-t05b,v3-t05b}
build/beagle train "${common[@]}" --data "$WORK/data-p6-sg90k-greedy" -o "$WORK/beagle-smollm2-135m.phase6a.bin" --ckpt "$WORK/beagle-smollm2-135m.phase6a.ckpt" \
    --init "$WORK/beagle-smollm2-135m.phase5.bin" --stage1-epochs 1 --stage2-epochs 1 --lr-decay 0.5 --vloss-weight 1 --seed 7 -t 2
build/beagle train "${common[@]}" --data "$WORK/data-smollm2-phase6" -o "$WORK/beagle-smollm2-135m.phase6.bin" --ckpt "$WORK/beagle-smollm2-135m.phase6.ckpt" \
    --init "$WORK/beagle-smollm2-135m.phase6a.bin" --stage1-epochs 1 --stage2-epochs 1 --lr-decay 0.5 --vloss-weight 1 --seed 8 -t 2
build/beagle train "${common[@]}" --data "$WORK/data-smollm2-phase6" -o "$OUT" --ckpt "$WORK/beagle-smollm2-135m.ckpt" \
    --init "$WORK/beagle-smollm2-135m.phase6.bin" --stage1-epochs 1 --stage2-epochs 1 --lr-decay 0.5 --vloss-weight 1 --seed 9 -t 2 \
    --eval-prompts "$DATA/eval/mt_bench_question.jsonl" --eval-n 10 --eval-tokens 128 "$@"
total=$(( $(date +%s) - start ))
echo "train_smollm2: datagen ${t_data} s, total ${total} s ($(( total / 60 )) min); summary in $OUT.json"
