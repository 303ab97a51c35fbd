#!/usr/bin/env bash
# ablation_stories260k.sh: the training ablations of docs/paper-comparison.md on the stories260K draft, all
# arms with the same data, seed and epoch budget (docs/method.md section 6; the paper's Figs 4 and 10):
#   window 1 vs 3 vs 5 in stage 1 (stage 1 only), and stage 1 only vs stage 1 + stage 2 (w 3, S 3).
# Each arm is one `beagle train` whose DRAFT.json holds tau (greedy chain gamma 5 and EAGLE-2 tree on
# the 50 held-out prompts of test/data/stories_prompts.txt) and the acceptance rate by depth; the
# script prints a markdown table of them. Arms run two at a time, one thread each.
# Env: DATA (a `beagle datagen` dir; default: the first SHARDS shards of build/s260k/data, made by
# scripts/train_stories260k.sh or here), SHARDS (16 = 1024 sequences), EPOCHS (4), OUT (build/ablation).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$PWD/data
M=$DATA/models/stories260K.bin
Z=$DATA/models/tok512.bin
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
# the same drafts evaluated in no-concat mode (queries see true states only): resuming a finished
# checkpoint trains nothing and only re-runs the evaluation
for name in s1_w1 s1_w3 s1_w5 s12_w3; do
    if [ -f "$OUT/$name.nc.bin.json" ] && grep -q tau_tree "$OUT/$name.nc.bin.json"; then continue; fi
    flags=$(python3 -c "import json; c = json.load(open('$OUT/$name.bin.json'))['config']; print(c['stage1_epochs'], c['stage2_epochs'], c['window'], c['sim_steps'])")
    read -r e1 e2 w s <<< "$flags"
    build/beagle train "${COMMON[@]}" -o "$OUT/$name.nc.bin" --resume "$OUT/$name.bin.ckpt" --ckpt "$OUT/$name.nc.ckpt" \
        --stage1-epochs "$e1" --stage2-epochs "$e2" --window "$w" --sim-steps "$s" --eval-no-concat > "$OUT/$name.nc.log" 2>&1 &
done
wait
echo "ablation: $(( $(date +%s) - start )) s for 4 arms (data $DATA, $EPOCHS epochs each) + no-concat evaluations" >&2

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
arms = [("s1_w1", "stage 1 only, w = 1"), ("s1_w3", "stage 1 only, w = 3"), ("s1_w5", "stage 1 only, w = 5"),
        ("s12_w3", "stage 1 + stage 2, w = 3, S = 3")]
fmt = lambda v: " / ".join(f"{x:.2f}" for x in v)
j0 = json.load(open(f"{out}/{arms[0][0]}.bin.json"))
print(f"Data: {j0['data_seqs']} sequences, {j0['data_tokens']} tokens ({j0['items']} chunks); batch {j0['config']['batch']}, "
      f"lr {j0['config']['lr']}, seed {j0['config']['seed']}; eval: {j0['eval']['prompts']} prompts x "
      f"{j0['eval']['tokens_per_prompt']} tokens, greedy; tree = depth 5, top-k 10, 60 nodes.\n")
print("| arm | epochs (s1+s2) | steps | train s | final loss | tau chain | tau tree | tau chain, no-concat | tau tree, no-concat |")
print("|---|---|---|---|---|---|---|---|---|")
for name, label in arms:
    j = json.load(open(f"{out}/{name}.bin.json"))
    n = json.load(open(f"{out}/{name}.nc.bin.json"))
    print(f"| {label} | {j['epochs'][0]}+{j['epochs'][1]} | {j['steps']} | {j['train_seconds']:.0f} | {j['final_loss']['last']:.3f} "
          f"| {j['tau_chain']:.3f} | {j['tau_tree']:.3f} | {n['tau_chain']:.3f} | {n['tau_tree']:.3f} |")
print("\nAcceptance rate by depth 1..5 (accepted / reached, given the path so far; concat mode):\n")
print("| arm | chain (gamma 5) | tree | chain, no-concat | tree, no-concat |")
print("|---|---|---|---|---|")
for name, label in arms:
    j = json.load(open(f"{out}/{name}.bin.json"))
    n = json.load(open(f"{out}/{name}.nc.bin.json"))
    print(f"| {label} | {fmt(j['accept_by_depth']['chain'])} | {fmt(j['accept_by_depth']['tree'])} "
          f"| {fmt(n['accept_by_depth']['chain'])} | {fmt(n['accept_by_depth']['tree'])} |")
PY
