#!/usr/bin/env bash
# ablation_stories260k.sh: the training ablations of docs/ablation.md on the stories260K draft, all
# arms with the same data, seed and epoch budget (SPEC 3; the paper's Figs 4 and 10):
#   window 1 vs 3 vs 5 in stage 1 (stage 1 only), and stage 1 only vs stage 1 + stage 2 (w 3, S 3).
# Each arm is one `beagle train` whose DRAFT.json holds tau (greedy chain gamma 5 and EAGLE-2 tree on
# the 50 held-out prompts of test/data/stories_prompts.txt) and the acceptance rate by depth; the
# script prints a markdown table of them. Arms run two at a time, one thread each.
# Env: DATA (a `beagle datagen` dir; default: the first SHARDS shards of build/s260k/data, made by
# scripts/train_stories260k.sh or here), SHARDS (16 = 1024 sequences), EPOCHS (4), OUT (build/ablation).
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${BEAGLE_SHARED:-../shared}
M=$SHARED/data/models/stories260K.bin
Z=$SHARED/data/models/tok512.bin
OUT=${OUT:-build/ablation}
SHARDS=${SHARDS:-16}
EPOCHS=${EPOCHS:-4}
HALF=$((EPOCHS / 2))
make -j2 build/beagle >/dev/null
mkdir -p "$OUT"
if [ -z "${DATA:-}" ]; then
    FULL=build/s260k/data
    if [ ! -f "$FULL/shard-$(printf %05d $((SHARDS - 1))).bin" ]; then
        build/beagle datagen -m "$M" -z "$Z" --sample $((SHARDS * 64)) -o "$FULL" --seed 1234 -t 2
    fi
    DATA=$OUT/data
    mkdir -p "$DATA"
    for i in $(seq 0 $((SHARDS - 1))); do
        f=shard-$(printf %05d "$i").bin
        ln -sf "$(cd "$FULL" && pwd)/$f" "$DATA/$f"
    done
fi
COMMON=(-m "$M" -z "$Z" --data "$DATA" --batch 16 --seq-len 512 --seed 1 --lr 3e-3
        --eval-prompts test/data/stories_prompts.txt --eval-n 50 --eval-tokens 128 -t 1 -q)
arm() {  # name, flags...
    local name=$1; shift
    if [ -f "$OUT/$name.bin.json" ] && grep -q tau_tree "$OUT/$name.bin.json"; then return; fi
    build/beagle train "${COMMON[@]}" -o "$OUT/$name.bin" "$@" > "$OUT/$name.log" 2>&1
}
start=$(date +%s)
arm s1_w1 --stage1-epochs "$EPOCHS" --stage2-epochs 0 --window 1 &
arm s1_w3 --stage1-epochs "$EPOCHS" --stage2-epochs 0 --window 3 &
wait
arm s1_w5 --stage1-epochs "$EPOCHS" --stage2-epochs 0 --window 5 &
arm s12_w3 --stage1-epochs "$HALF" --stage2-epochs $((EPOCHS - HALF)) --window 3 --sim-steps 3 &
wait
echo "ablation: $(( $(date +%s) - start )) s for 4 arms (data $DATA, $EPOCHS epochs each)" >&2

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
arms = [("s1_w1", "stage 1 only, w = 1"), ("s1_w3", "stage 1 only, w = 3"), ("s1_w5", "stage 1 only, w = 5"),
        ("s12_w3", "stage 1 + stage 2, w = 3, S = 3")]
rows = []
for name, label in arms:
    j = json.load(open(f"{out}/{name}.bin.json"))
    fmt = lambda v: " / ".join(f"{x:.2f}" for x in v)
    rows.append((label, j["epochs"], j["steps"], j["train_seconds"], j["final_loss"]["last"], j["tau_chain"], j["tau_tree"],
                 fmt(j["accept_by_depth"]["chain"]), fmt(j["accept_by_depth"]["tree"])))
j0 = json.load(open(f"{out}/{arms[0][0]}.bin.json"))
print(f"Data: {j0['data_seqs']} sequences, {j0['data_tokens']} tokens ({j0['items']} chunks); batch {j0['config']['batch']}, "
      f"lr {j0['config']['lr']}, seed {j0['config']['seed']}; eval: {j0['eval']['prompts']} prompts x "
      f"{j0['eval']['tokens_per_prompt']} tokens, greedy.\n")
print("| arm | epochs (s1+s2) | steps | train s | final loss | tau chain (gamma 5) | tau tree (60 nodes) | chain accept by depth 1..5 | tree accept by depth 1..5 |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1][0]}+{r[1][1]} | {r[2]} | {r[3]:.0f} | {r[4]:.3f} | {r[5]:.3f} | {r[6]:.3f} | {r[7]} | {r[8]} |")
PY
