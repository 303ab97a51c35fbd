#!/usr/bin/env bash
# sd_ceiling.sh: how much speculative decoding can gain on this machine for the default target and
# a draft, from offline data (timing-free except the verify cost table): the target's greedy answers to
# the 80 MT-Bench first turns (beagle datagen, 256 tokens), the draft's teacher-forced depth-1
# predictions on them (test/tools/draft_topk.cpp, built by the Makefile's test rule), the verify cost curve (beagle bench), then
# scripts/sd_ceiling.py. Usage: bash scripts/sd_ceiling.sh [DRAFT] (default: the shipped draft).
# Outputs in build/sd-ceiling/; about 5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$PWD/data
M=weights/SmolLM2-135M-Instruct.Q4_1.gguf
DRAFT=${1:-weights/beagle-smollm2-135m.bin}
W=build/sd-ceiling
make -s build/beagle build/test/draft_topk
[ -f "$M" ] || bash scripts/fetch_model.sh
mkdir -p "$W"
build/beagle datagen -m "$M" --prompts "$DATA/eval/mt_bench_question.jsonl" -n 256 --max-prompt 1024 --batch 32 \
    --shard-seqs 80 -t 2 -o "$W/mt-bench-greedy"
[ -f "$W/bench.json" ] || build/beagle bench -m "$M" -t 2 -o "$W/bench.json" > /dev/null
build/test/draft_topk "$M" "$DRAFT" "$W/mt-bench-greedy" > "$W/topk.txt"
python3 scripts/sd_ceiling.py "$W/mt-bench-greedy" "$W/topk.txt" "$W/bench.json"
