#!/usr/bin/env bash
# train_stories260k.sh: reproduces the shipped draft weights/beagle-stories260K.bin from scratch for the
# stories260K target (data/models/stories260K.bin + tok512.bin): `beagle datagen` samples
# 3000 stories from BOS (temperature 1, top-p 0.9, seed 1234; disjoint from the 50 held-out prompt
# starts in test/data/stories_prompts.txt), then `beagle train` runs 2 epochs of stage 1 (window 3)
# and 2 epochs of stage 2 (S = 3), batch 16, lr 3e-3 (warm-up 5% of the steps), seed 1, and evaluates
# tau on the held-out prompts (greedy chain gamma 5 and EAGLE-2 tree). Next to the draft: .json
# summary, .loss.png, .accept.png, .loss.tsv. Work files go to build/s260k/ (WORK=...).
# Time on the 2-core dev machine (shared with other jobs): see docs/training.md (well under an hour).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$PWD/data
M=$DATA/models/stories260K.bin
Z=$DATA/models/tok512.bin
WORK=${WORK:-build/s260k}
OUT=${OUT:-weights/beagle-stories260K.bin}
THREADS=${THREADS:-1}   # the draft's ops are tiny: one thread is as fast as two on this machine
make -j2 build/beagle
mkdir -p "$WORK" "$(dirname "$OUT")"
start=$(date +%s)
build/beagle datagen -m "$M" -z "$Z" --sample 3000 -o "$WORK/data" --seed 1234 -t "$THREADS"
t_data=$(( $(date +%s) - start ))
build/beagle train -m "$M" -z "$Z" --data "$WORK/data" -o "$OUT" --ckpt "$WORK/beagle-stories260K.ckpt" \
    --stage1-epochs 2 --stage2-epochs 2 --window 3 --sim-steps 3 --batch 16 --seq-len 512 --lr 3e-3 --seed 1 \
    --eval-prompts test/data/stories_prompts.txt --eval-n 50 --eval-tokens 128 -t "$THREADS" "$@"
total=$(( $(date +%s) - start ))
echo "train_stories260k: datagen ${t_data} s, total ${total} s ($(( total / 60 )) min); summary in $OUT.json"
