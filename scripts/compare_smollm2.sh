#!/usr/bin/env bash
# compare_smollm2.sh: the comparison of docs/paper-comparison.md on the default target SmolLM2-135M-Instruct
# (Q4_1), with the same budget for every variant: the same self-distilled data (the target's greedy
# answers to the first LIMIT ShareGPT prompts, as step 1 of scripts/train_smollm2.sh but with the Q4_1
# target), the same STEPS optimizer steps of batch 4 x 512 tokens, the same recipe as the shipped draft
# (reduced draft vocabulary 8192, loss on prompt positions, vloss weight 1, lr 3e-3, window 2, S 2) and
# the same SEEDS. Variants (VARIANTS): s1 (Beagle stage 1 only), s12 (stage 1 + 2), s12gt (stage 1 + 2
# with --sim-grad-through), eagle (--arch eagle); not in the default list: s12sl (s12 with state layers
# 22, 27: docs/paper-comparison.md "Fusing target layers (EAGLE-3)"), eaglettt (eagle with its
# training-time test in stage 2, --ttt over S 2: EAGLE-3 / HASS), medusa (Medusa-1 heads, --arch medusa, K 4;
# no teacher-forced top-k: draft_topk runs a draft block, which heads do not have), moa (the Mixture of
# Attentions draft, --arch moa, its Layer Self-Attention over f and the rows of layers 22 and 27). Then `beagle bench-sd` of each draft on Spec-Bench (all
# its categories, PER prompts each, MT-Bench among them; chain, 60-node tree, cost-aware tree).
# Cost on 2 cores: a stage-1 step on 1 thread takes about 1 s on the AVX-512 path (more on AVX2; the same
# bits), stage 2 more, so the default budget is about 3-4 hours per seed; datagen of 608 answers about 10 minutes; a
# bench-sd at PER 2, NTOK 96 under load about 30 minutes. docs/paper-comparison.md has a run at STEPS=400 EPOCHS=3 PER=2 NTOK=96 AUTO=0. It is resumable: every step skips what is finished, an
# interrupted training continues from its checkpoint (--ckpt-every 50, --resume), datagen resumes its shards.
# Env: OUT (build/compare-smollm2), LIMIT (608), STEPS (2000), EPOCHS (14: with LIMIT 608 an epoch is
# about 152 steps, so 14 epochs outlast STEPS; two-stage variants switch to stage 2 after EPOCHS / 2),
# SEEDS ("1"), PER (10), NTOK (128: tokens per bench-sd prompt), AUTO (1: also the cost-aware tree), JOBS (1:
# trainings at a time), TRAIN_THREADS (1: threads per training; the same bits at any count: test_train_loop),
# VARIANTS ("s1 s12 s12gt eagle"). Each finished draft's bench-sd and teacher-forced
# top-1 / top-5 (on the target's greedy answers to the 80 MT-Bench first turns) run while the next variant trains.
# Results: $OUT/VARIANT.sSEED.bin{,.json,.bench-60.json,.bench-auto.json}.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$PWD/data
M=weights/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=${OUT:-build/compare-smollm2}
LIMIT=${LIMIT:-608}
STEPS=${STEPS:-2000}
EPOCHS=${EPOCHS:-14}
HALF=$((EPOCHS / 2))
SEEDS=${SEEDS:-"1"}
PER=${PER:-10}
NTOK=${NTOK:-128}
AUTO=${AUTO:-1}
JOBS=${JOBS:-1}
TRAIN_THREADS=${TRAIN_THREADS:-1}
VARIANTS=${VARIANTS:-"s1 s12 s12gt eagle"}
N="nice -n 10"
B="$N build/beagle"
make -j2 build/beagle build/test/draft_topk >/dev/null
[ -f "$M" ] || bash scripts/fetch_model.sh
mkdir -p "$OUT"
# the variants that read the target's layers 22 and 27 (the -sl data and held-out set)
reads_layers() { case $1 in s12sl|moa) return 0 ;; esac; return 1; }
any_reads_layers() { local v; for v in $VARIANTS; do reads_layers "$v" && return 0; done; return 1; }
# the training data: the target's answers with its states kept (13 epochs read them; computing them in the
# loop gives the same bits at a prefill a step)
TDATA=$OUT/data
$B datagen -m "$M" --prompts "$DATA/train/sharegpt_sg90k_first_sampled_sorted.json" --limit "$LIMIT" \
    -n 192 --max-prompt 256 -o "$TDATA" --batch 16 --shard-seqs 32 -t 2 --keep-states
# variants s12sl (s12 with the target's layers 22 and 27 fused into the key states) and moa read the same data
# with those layers' rows kept too: the same tokens and states (datagen --state-layers changes neither)
if any_reads_layers; then
    $B datagen -m "$M" --prompts "$DATA/train/sharegpt_sg90k_first_sampled_sorted.json" --limit "$LIMIT" \
        -n 192 --max-prompt 256 -o "$TDATA-sl" --batch 16 --shard-seqs 32 -t 2 --keep-states --state-layers 22,27
fi
# held-out: the target's greedy answers (128 tokens) to the 80 MT-Bench first turns, for the teacher-forced top-1 / top-5
HELD=$OUT/mt-bench-greedy
$B datagen -m "$M" --prompts "$DATA/eval/mt_bench_question.jsonl" -n 128 --max-prompt 1024 --batch 16 \
    --shard-seqs 80 -t 1 --keep-states -o "$HELD"
if any_reads_layers; then
    $B datagen -m "$M" --prompts "$DATA/eval/mt_bench_question.jsonl" -n 128 --max-prompt 1024 --batch 16 \
        --shard-seqs 80 -t 1 -o "$HELD-sl" --keep-states --state-layers 22,27
fi
# EPOCHS outlast STEPS (--max-steps ends every run); stage 2 starts at the same step in every two-stage variant
flags() {
    case $1 in
        s1) echo "--stage1-epochs $EPOCHS --stage2-epochs 0" ;;
        s12) echo "--stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF))" ;;
        s12gt) echo "--stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF)) --sim-grad-through" ;;
        eagle) echo "--arch eagle --stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF))" ;;
        eaglettt) echo "--arch eagle --ttt --stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF))" ;;
        s12sl) echo "--stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF)) --state-layers 22,27" ;;
        medusa) echo "--arch medusa --stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF))" ;;
        moa) echo "--arch moa --state-layers 22,27 --stage1-epochs $HALF --stage2-epochs $((EPOCHS - HALF))" ;;
        *) echo "unknown variant $1" >&2; exit 2 ;;
    esac
}
train_one() {  # variant seed
    local d=$OUT/$1.s$2.bin
    if [ -f "$d.json" ]; then return; fi
    local resume=()
    [ -f "$d.ckpt" ] && resume=(--resume "$d.ckpt")
    # shellcheck disable=SC2046
    local data=$TDATA
    if reads_layers "$1"; then data=$TDATA-sl; fi
    $B train -m "$M" --data "$data" -o "$d" $(flags "$1") --window 2 --sim-steps 2 --batch 4 --seq-len 512 --lr 3e-3 \
        --draft-vocab 8192 --loss-on-prompt --vloss-weight 1 --seed "$2" --max-steps "$STEPS" --ckpt-every 50 \
        --eval-prompts "$DATA/eval/mt_bench_question.jsonl" --eval-n 10 --eval-tokens 128 -t "$TRAIN_THREADS" -q "${resume[@]}" \
        > "$d.log" 2>&1
}
train_all() {
    local running=0 seed v
    for seed in $SEEDS; do
        for v in $VARIANTS; do
            train_one "$v" "$seed" &
            running=$((running + 1))
            if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
        done
    done
    wait
}
bench_one() {  # variant seed: Spec-Bench (PER prompts per category) with chain + tree-60, then the cost-aware tree (AUTO=1)
    local d=$OUT/$1.s$2.bin mode modes total j
    local modes_list=("chain,tree 60")
    [ "$AUTO" = 1 ] && modes_list+=("tree auto")
    for mode in "${modes_list[@]}"; do
        read -r modes total <<< "$mode"
        j=$d.bench-$total.json
        [ -f "$j" ] || $B bench-sd -m "$M" -d "$d" --prompts "$DATA/eval/spec_bench_question.jsonl" \
            --per-category "$PER" -n "$NTOK" -t 2 --modes "none,$modes" --total-tokens "$total" -o "$j" > /dev/null
    done
    local held=$HELD
    if reads_layers "$1"; then held=$HELD-sl; fi
    [ "$1" = medusa ] || [ -s "$d.topk.txt" ] || { $N build/test/draft_topk "$M" "$d" "$held" > "$d.topk.tmp" && mv "$d.topk.tmp" "$d.topk.txt"; }
}
train_all &
trainer=$!
for seed in $SEEDS; do for v in $VARIANTS; do
    d=$OUT/$v.s$seed.bin
    while [ ! -f "$d.json" ] && kill -0 "$trainer" 2> /dev/null; do sleep 20; done
    [ -f "$d.json" ] || { echo "compare_smollm2: $v seed $seed did not finish (see $d.log)" >&2; exit 1; }
    bench_one "$v" "$seed"
done; done
wait "$trainer"
python3 - "$OUT" "$SEEDS" "$VARIANTS" <<'PY'
# The table of docs/paper-comparison.md: tau = tokens / target passes, summed over a category group's prompts
# (MT-Bench: its 8 categories; other: Spec-Bench's translation, summarization, qa, math_reasoning, rag).
import json, sys
out, seeds, variants = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
MT = ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"]
def tau(b, mode, cats):
    c = [b["categories"][k][mode] for k in b["categories"] if (k in MT) == (cats == "mt")]
    return sum(x["tokens"] for x in c) / sum(x["target_passes"] for x in c)
sys.path.insert(0, "scripts")
from topk_stats import topk
print("| variant | seed | params | MT-Bench tau chain / tree-60 / cost-aware | other tau chain / tree-60 / cost-aware "
      "| trainer eval tau chain / tree-60 | top-1 / top-5 | s / step (stage 1 / 2) | peak KiB (stage 1 / 2) | mismatches |")
print("|---|---|---|---|---|---|---|---|---|---|")
for v in variants:
    for s in seeds:
        d = f"{out}/{v}.s{s}.bin"
        j, b60 = json.load(open(d + ".json")), json.load(open(d + ".bench-60.json"))
        try: ba = json.load(open(d + ".bench-auto.json"))
        except FileNotFoundError: ba = None  # AUTO=0
        try: t1, t5, n = topk(d + ".topk.txt")
        except FileNotFoundError: t1 = t5 = n = None  # medusa: no draft block to teacher-force
        sps, pk = j["seconds_per_step_by_stage"], j["iteration_peak_bytes"]
        mis = sum(b["overall"][m]["mismatches"] for b in (b60, ba) if b for m in b["overall"])
        cells = [" / ".join(f"{x:.2f}" for x in (tau(b60, "chain", g), tau(b60, "tree", g))) + (f" / {tau(ba, 'tree', g):.2f}" if ba else " / -")
                 for g in ("mt", "other")]
        print(f"| {v} | {s} | {j['params']:,} | {cells[0]} | {cells[1]} | {j['tau_chain']:.2f} / {j['tau_tree']:.2f} "
              + (f"| {t1:.3f} / {t5:.3f} ({n} pos.) |" if n else "| - |") + f" {sps[0]:.2f} / {f'{sps[1]:.2f}' if sps[1] else '-'} | {pk[0] / 1024:,.0f} / {f'{pk[1] / 1024:,.0f}' if pk[1] else '-'} | {mis} |")
PY
