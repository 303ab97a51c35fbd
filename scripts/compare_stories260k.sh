#!/usr/bin/env bash
# compare_stories260k.sh: the Beagle paper's comparison (Beagle vs EAGLE-2 on the same data and
# budget) on the stories260K target, reported in docs/paper-comparison.md. Every variant trains on the
# same data (the 768 stories of scripts/ablation_stories260k.sh: `beagle datagen --sample 768 --seed
# 1234`), the same steps (EPOCHS epochs of batch 16, lr 3e-3, warm-up 5%), the same losses (soft CE +
# 10 SmoothL1, noise 0.2) and each of the SEEDS:
#   s1      Beagle, stage 1 only (window 3)
#   s12     Beagle, stage 1 + stage 2 (w 3, S 3; detached)
#   s12gt   Beagle, stage 1 + stage 2 with --sim-grad-through
#   eagle   the EAGLE-1/2-style draft (--arch eagle; its two "stages" are the same objective)
#   s12p    (control, not in the default VARIANTS) s12 with --ffn 214: EAGLE's parameter count
#   eaglettt the EAGLE draft with its training-time test in stage 2 (--ttt, S 3: EAGLE-3 / HASS; not in the
#           default VARIANTS)
#   medusa  Medusa-1 heads (--arch medusa, K 4; one objective, CE only; not in the default VARIANTS; no
#           teacher-forced top-k: draft_topk runs a draft block, which Medusa heads do not have)
#   moa     the Mixture of Attentions draft (--arch moa, LSA over f and layers 0..3: every layer's output; its
#           two "stages" are the same objective; not in the default VARIANTS)
# Per draft: tau of the chain (gamma 5) and the 60-node EAGLE-2 tree from the trainer's evaluation (the
# 50 held-out prompt starts of test/data/stories_prompts.txt, 128 greedy tokens each); `beagle bench-sd`
# on the same prompts for the cost-aware tree (--total-tokens auto), the draft's time per round and a
# check that every output equals plain greedy; teacher-forced top-1 / top-5 of the draft's first step
# on the target's greedy answers to those prompts (test/tools/draft_topk.cpp); trainable parameters,
# the training iteration's peak buffer bytes and seconds per step from DRAFT.json. Prints a markdown
# table (mean and range over the seeds) and writes $OUT/summary.json.
# Resumable: a finished draft (DRAFT.json with tau_tree) is not trained again, an interrupted one
# continues from its checkpoint (--ckpt-every 16, --resume), finished measurements are kept.
# Runs niced, JOBS trainings at a time, one thread each. Env: OUT (build/compare), SEEDS ("1 2"),
# EPOCHS (4), JOBS (2), VARIANTS ("s1 s12 s12gt eagle").
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$PWD/data
M=$DATA/models/stories260K.bin
Z=$DATA/models/tok512.bin
OUT=${OUT:-build/compare}
SEEDS=${SEEDS:-"1 2"}
EPOCHS=${EPOCHS:-4}
JOBS=${JOBS:-2}
VARIANTS=${VARIANTS:-"s1 s12 s12gt eagle"}
HALF=$((EPOCHS / 2))
PROMPTS=test/data/stories_prompts.txt
B="nice -n 10 build/beagle"
make -j2 build/beagle build/test/draft_topk >/dev/null
mkdir -p "$OUT"
DATA=$OUT/data
[ -f "$DATA/shard-00011.bin" ] || $B datagen -m "$M" -z "$Z" --sample 768 -o "$DATA" --seed 1234 -t 1
HELD=$OUT/heldout  # the target's greedy continuations of the held-out prompts (teacher forcing)
[ -f "$HELD/meta.txt" ] || $B datagen -m "$M" -z "$Z" --prompts "$PROMPTS" -n 128 --no-chat --keep-states -o "$HELD" -t 1 > /dev/null
HELDX=$OUT/heldout-layers  # the same with layers 0..3 kept (the moa draft reads them)
case " $VARIANTS " in *" moa "*) [ -f "$HELDX/meta.txt" ] || $B datagen -m "$M" -z "$Z" --prompts "$PROMPTS" -n 128 --no-chat \
    --keep-states --state-layers 0,1,2,3 -o "$HELDX" -t 1 > /dev/null ;; esac

flags() {  # variant -> training flags
    case $1 in
        s1) echo "--stage1-epochs $EPOCHS --stage2-epochs 0 --window 3" ;;
        s12) echo "--stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF)) --window 3 --sim-steps 3" ;;
        s12gt) echo "--stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF)) --window 3 --sim-steps 3 --sim-grad-through" ;;
        s12p) echo "--stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF)) --window 3 --sim-steps 3 --ffn 214" ;;
        eagle) echo "--arch eagle --stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF)) --window 3 --sim-steps 3" ;;
        medusa) echo "--arch medusa --stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF)) --window 3 --sim-steps 3" ;;
        eaglettt) echo "--arch eagle --ttt --stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF)) --window 3 --sim-steps 3" ;;
        moa) echo "--arch moa --state-layers 0,1,2,3 --stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF)) --window 3 --sim-steps 3" ;;
        *) echo "unknown variant $1" >&2; exit 2 ;;
    esac
}
train_one() {  # variant seed
    local d=$OUT/$1.s$2.bin
    if [ -f "$d.json" ] && grep -q tau_tree "$d.json"; then return; fi
    local resume=()
    [ -f "$d.ckpt" ] && resume=(--resume "$d.ckpt")
    # shellcheck disable=SC2046
    $B train -m "$M" -z "$Z" --data "$DATA" -o "$d" $(flags "$1") --batch 16 --seq-len 512 --lr 3e-3 --seed "$2" \
        --ckpt-every 16 --eval-prompts "$PROMPTS" --eval-n 50 --eval-tokens 128 -t 1 -q "${resume[@]}" > "$d.log" 2>&1
}
measure_one() {  # variant seed: bench-sd (chain, tree-60; cost-aware tree) and teacher-forced top-k
    local d=$OUT/$1.s$2.bin
    [ -f "$d.bench60.json" ] || $B bench-sd -m "$M" -z "$Z" -d "$d" --prompts "$PROMPTS" --per-category 50 -n 128 \
        --no-chat -t 1 --modes none,chain,tree --total-tokens 60 -o "$d.bench60.json" > /dev/null 2>> "$d.log"
    [ -f "$d.benchauto.json" ] || $B bench-sd -m "$M" -z "$Z" -d "$d" --prompts "$PROMPTS" --per-category 50 -n 128 \
        --no-chat -t 1 --modes none,tree --total-tokens auto -o "$d.benchauto.json" > /dev/null 2>> "$d.log"
    local held=$HELD
    [ "$1" = moa ] && held=$HELDX
    [ "$1" = medusa ] || [ -s "$d.topk.txt" ] || nice -n 10 build/test/draft_topk "$M" "$d" "$held" > "$d.topk.txt"
}
start=$(date +%s)
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
    [ -f "$OUT/$v.s$seed.bin.json" ] || { echo "compare: $v seed $seed did not finish (see $OUT/$v.s$seed.bin.log)" >&2; exit 1; }
    measure_one "$v" "$seed"
done; done
echo "compare_stories260k: $(( $(date +%s) - start )) s (variants: $VARIANTS; seeds: $SEEDS; $EPOCHS epochs)" >&2

python3 - "$OUT" "$SEEDS" "$VARIANTS" <<'PY'
import json, sys
out, seeds, variants = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
label = {"s1": "Beagle, stage 1 only", "s12": "Beagle, stage 1 + 2", "s12gt": "Beagle, stage 1 + 2, --sim-grad-through",
         "s12p": "Beagle, stage 1 + 2, --ffn 214", "eagle": "EAGLE-1/2 style (--arch eagle)",
         "eaglettt": "EAGLE, training-time test in stage 2 (--ttt)", "medusa": "Medusa-1 heads (--arch medusa, K 4)",
         "moa": "Mixture of Attentions (--arch moa)"}
sys.path.insert(0, "scripts")
from topk_stats import topk
rows, summary = [], {}
for v in variants:
    per = []
    for s in seeds:
        d = f"{out}/{v}.s{s}.bin"
        j, b60, ba = json.load(open(d + ".json")), json.load(open(d + ".bench60.json")), json.load(open(d + ".benchauto.json"))
        t1, t5, _ = topk(d + ".topk.txt") if v != "medusa" else (None, None, None)
        o60, oa = b60["overall"], ba["overall"]
        pk = j["iteration_peak_bytes"]  # [stage 1, stage 2] (a scalar in files of older builds: both stages)
        pk = pk if isinstance(pk, list) else [pk, None]
        sps = j.get("seconds_per_step_by_stage", [j["seconds_per_step"], None])
        per.append({"seed": int(s), "tau_chain": j["tau_chain"], "tau_tree60": j["tau_tree"], "tau_auto": oa["tree"]["tau"],
                    "auto_nodes": oa["tree"]["nodes_per_verify"], "top1": t1, "top5": t5, "params": j["params"],
                    "peak_kib_s1": pk[0] / 1024 if pk[0] else None, "peak_kib_s2": pk[1] / 1024 if pk[1] else None,
                    "s_per_step_s1": sps[0] or None, "s_per_step_s2": sps[1] or None,
                    "final_loss": j["final_loss"]["last"],
                    "draft_ms_chain": o60["chain"]["draft_ms_per_pass"], "draft_ms_tree60": o60["tree"]["draft_ms_per_pass"],
                    "draft_ms_auto": oa["tree"]["draft_ms_per_pass"],
                    "mismatches": sum(o["mismatches"] for o in (o60["chain"], o60["tree"], oa["tree"]))})
    summary[v] = per
    def cell(k, f="{:.3f}"):
        xs = [p[k] for p in per if p[k] is not None]
        if not xs: return "-"
        m = sum(xs) / len(xs)
        return f.format(m) + (f" ({f.format(min(xs))}-{f.format(max(xs))})" if len(xs) > 1 and min(xs) != max(xs) else "")
    rows.append(f"| {label.get(v, v)} | {per[0]['params']} | {cell('tau_chain')} | {cell('tau_tree60')} | {cell('tau_auto')} "
                f"| {cell('top1')} | {cell('top5')} | {cell('peak_kib_s1', '{:.0f}')} / {cell('peak_kib_s2', '{:.0f}')} "
                f"| {cell('s_per_step_s1', '{:.2f}')} / {cell('s_per_step_s2', '{:.2f}')} "
                f"| {cell('draft_ms_chain', '{:.3f}')} / {cell('draft_ms_tree60', '{:.3f}')} / {cell('draft_ms_auto', '{:.3f}')} "
                f"| {sum(p['mismatches'] for p in per)} |")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print(f"Seeds {' '.join(seeds)}: mean (min-max).\n")
print("| variant | params | tau chain | tau tree-60 | tau cost-aware tree | top-1 | top-5 | iteration peak KiB (stage 1 / 2) "
      "| s / step (stage 1 / 2) | draft ms per round (chain / tree-60 / cost-aware) | mismatches |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
PY
