#!/usr/bin/env bash
# smollm2_data_d.sh WORK [THREADS]: data D of the SmolLM2 draft (docs/training.md, step 9), written by the
# Q4_1 target itself: greedy answers to every ShareGPT prompt of data/train, the self-instruct
# seeds and the first 3000 GSM8K training questions, and two sampled answers per ShareGPT prompt
# (top-p 0.9; temperature 0.7, seeds 21 / 22, and 0.5, seeds 31 / 32); up to 256 new tokens, prompts cut to
# 256 tokens, 32 sequences per target pass. Into WORK/data-p6-*; resumable. Used by train_smollm2.sh and
# train_smollm2_next.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$1
THREADS=${2:-2}
DATA=$PWD/data
tr=$DATA/train
sg=$tr/sharegpt_sg90k_first_sampled_sorted.json
v3=$tr/sharegpt_v3_filtered_1000.json
gen=(-m weights/SmolLM2-135M-Instruct.Q4_1.gguf -n 256 --max-prompt 256 --batch 32 --shard-seqs 64 -t "$THREADS")
build/beagle datagen "${gen[@]}" --prompts "$sg" -o "$WORK/data-p6-sg90k-greedy"
build/beagle datagen "${gen[@]}" --prompts "$v3" -o "$WORK/data-p6-v3-greedy"
build/beagle datagen "${gen[@]}" --prompts "$tr/selfinstruct_seed_tasks.jsonl" -o "$WORK/data-p6-selfinstruct-greedy"
build/beagle datagen "${gen[@]}" --prompts "$tr/gsm8k_train.jsonl" --limit 3000 -o "$WORK/data-p6-gsm8k-greedy"
build/beagle datagen "${gen[@]}" --prompts "$sg" --temp 0.7 --seed 21 -o "$WORK/data-p6-sg90k-t07a"
build/beagle datagen "${gen[@]}" --prompts "$v3" --temp 0.7 --seed 22 -o "$WORK/data-p6-v3-t07a"
build/beagle datagen "${gen[@]}" --prompts "$sg" --temp 0.5 --seed 31 -o "$WORK/data-p6-sg90k-t05b"
build/beagle datagen "${gen[@]}" --prompts "$v3" --temp 0.5 --seed 32 -o "$WORK/data-p6-v3-t05b"
