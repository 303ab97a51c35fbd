#!/usr/bin/env bash
# typical_stories260k.sh: what Medusa-2's typical acceptance (--accept typical, lossy) gains and costs on the
# stories260K target, reported in docs/paper-comparison.md ("Medusa heads on stories260K"). For each of the 50
# held-out story starts (test/data/stories_prompts.txt), 128 tokens at temperature TEMP (0.7) and seed 1:
# plain sampling, then speculative sampling with each draft (DRAFTS: the shipped Medusa and Beagle drafts), tree
# of 60 nodes, under the lossless rule (exact) and under typical acceptance; plain greedy decoding as the
# reference; each sampled configuration with every seed of SEEDS ("1 2 3"). Per configuration: tau (tokens per
# verify round, pooled over prompts and seeds), the fraction of outputs identical to plain greedy's, and the
# perplexity of the outputs under the target (beagle perplexity over all 50 texts, chunks of 128 tokens; mean and
# range over the seeds: the range is the sampling noise of 50 texts). Work files in OUT (build/typical).
set -euo pipefail
cd "$(dirname "$0")/.."
M=data/models/stories260K.bin
Z=data/models/tok512.bin
OUT=${OUT:-build/typical}
TEMP=${TEMP:-0.7}
SEEDS=${SEEDS:-"1 2 3"}
DRAFTS=${DRAFTS:-"weights/medusa-stories260K.bin weights/beagle-stories260K.bin"}
PROMPTS=test/data/stories_prompts.txt
make -j2 build/beagle >/dev/null
mkdir -p "$OUT"
gen() {  # name, seed, then generate flags: prompt i's text to OUT/name/i.txt, all of them to OUT/name.txt, stats to OUT/name.jsonl
    local name=$1 seed=$2 i=0; shift 2
    mkdir -p "$OUT/$name"; : > "$OUT/$name.txt"; : > "$OUT/$name.jsonl"
    while IFS= read -r p; do
        i=$((i + 1))
        { printf '%s' "$p"; build/beagle generate -m "$M" -z "$Z" -p "$p" -n 128 -s "$seed" -t 1 --no-stream --json "$@" \
            2> "$OUT/$name/$i.err"; } > "$OUT/$name/$i.txt"
        { cat "$OUT/$name/$i.txt"; echo; } >> "$OUT/$name.txt"
        tail -n 1 "$OUT/$name/$i.err" >> "$OUT/$name.jsonl"
    done < "$PROMPTS"
}
gen greedy 1 --temp 0
for s in $SEEDS; do
    gen "plain.s$s" "$s" --temp "$TEMP"
    for d in $DRAFTS; do
        n=$(basename "$d" .bin)
        gen "$n.exact.s$s" "$s" --temp "$TEMP" -d "$d" --spec tree --total-tokens 60
        gen "$n.typical.s$s" "$s" --temp "$TEMP" -d "$d" --spec tree --total-tokens 60 --accept typical
    done
done
for f in "$OUT"/*.txt; do
    build/beagle perplexity -m "$M" -z "$Z" -f "$f" -c 128 -t 1 --json 2>/dev/null > "${f%.txt}.ppl.json"
done
python3 - "$OUT" "$TEMP" "$SEEDS" "$DRAFTS" <<'PY'
import json, sys, os
out, temp, seeds, drafts = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
def texts(n): return [open(f"{out}/{n}/{i}.txt").read() for i in range(1, 51)]
greedy = texts("greedy")
print(f"temperature {temp}, 50 prompts x 128 tokens, tree of 60 nodes, seeds {' '.join(seeds)}: perplexity mean (min-max)\n")
print("| configuration | tau | outputs equal to plain greedy | perplexity under the target |")
print("|---|---|---|---|")
configs = [("greedy", ["greedy"]), ("plain sampling", [f"plain.s{s}" for s in seeds])]
for d in drafts:
    n = os.path.basename(d)[:-4]
    configs += [(f"{n}, exact", [f"{n}.exact.s{s}" for s in seeds]), (f"{n}, typical", [f"{n}.typical.s{s}" for s in seeds])]
for label, runs in configs:
    same = sum(a == b for n in runs for a, b in zip(texts(n), greedy)) / (50 * len(runs))
    stats = [json.loads(l) for n in runs for l in open(f"{out}/{n}.jsonl") if l.strip()]
    rounds = sum(s.get("rounds", 0) for s in stats)  # tau: tokens per verify round, weighted by rounds (plain: 1)
    tau = sum(s["tau"] * s.get("rounds", 0) for s in stats) / rounds if rounds else 1.0
    ppl = [json.load(open(f"{out}/{n}.ppl.json"))["ppl"] for n in runs]
    rng = f" ({min(ppl):.3f}-{max(ppl):.3f})" if len(ppl) > 1 else ""
    print(f"| {label} | {tau:.3f} | {same:.2f} | {sum(ppl) / len(ppl):.3f}{rng} |")
PY
