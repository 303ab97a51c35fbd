#!/usr/bin/env bash
# train_smollm2.sh: reproduces the shipped draft weights/beagle-smollm2-135m.bin for the default target
# SmolLM2-135M-Instruct (Q4_1 GGUF, `make model`) from scratch on a 2-core CPU.
#   1. `beagle datagen`: the target answers the first LIMIT ShareGPT prompts of
#      ../shared/data/train/sharegpt_sg90k_first_sampled_sorted.json (chat template, greedy, up to 192
#      new tokens, prompts cut to 256 tokens), 16 sequences per target pass, f32 weights; shards of
#      tokens + f16 states go to WORK/data (resumable: rerun the script after a kill).
#   2. `beagle train`: EAGLE-3-style reduced draft vocabulary (the 8192 most frequent training
#      targets), loss on prompt and answer positions (soft labels from the target's own states),
#      stage 1 (window 1) then stage 2 (S = 2), batch 4, lr 1e-3, seed 1; evaluation on held-out
#      prompts (MT-Bench first turns; no ShareGPT prompt is among them).
# The numbers of the shipped run (data size, epochs, time) are in weights/beagle-smollm2-135m.bin.json
# and docs/training.md. Environment: LIMIT, WORK, OUT, THREADS, E1, E2 override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${BEAGLE_SHARED:-../shared}
M=weights/SmolLM2-135M-Instruct.Q4_1.gguf
WORK=${WORK:-weights}
OUT=${OUT:-weights/beagle-smollm2-135m.bin}
LIMIT=${LIMIT:-1200}
THREADS=${THREADS:-2}
E1=${E1:-2}
E2=${E2:-1}
make -j2 build/beagle
[ -f "$M" ] || bash scripts/fetch_model.sh
mkdir -p "$WORK" "$(dirname "$OUT")"
start=$(date +%s)
build/beagle datagen -m "$M" --prompts "$SHARED/data/train/sharegpt_sg90k_first_sampled_sorted.json" --limit "$LIMIT" \
    -n 192 --max-prompt 256 -o "$WORK/data-smollm2" --batch 16 --shard-seqs 32 -t "$THREADS" --f32-weights
t_data=$(( $(date +%s) - start ))
build/beagle train -m "$M" --data "$WORK/data-smollm2" -o "$OUT" --ckpt "$WORK/beagle-smollm2-135m.ckpt" \
    --stage1-epochs "$E1" --stage2-epochs "$E2" --window 2 --sim-steps 2 --batch 4 --seq-len 512 --lr 1e-3 --seed 1 \
    --draft-vocab 8192 --loss-on-prompt \
    --eval-prompts "$SHARED/data/eval/mt_bench_question.jsonl" --eval-n 10 --eval-tokens 128 -t "$THREADS" "$@"
total=$(( $(date +%s) - start ))
echo "train_smollm2: datagen ${t_data} s, total ${total} s ($(( total / 60 )) min); summary in $OUT.json"
