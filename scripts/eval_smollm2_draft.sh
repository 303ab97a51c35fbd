#!/usr/bin/env bash
# eval_smollm2_draft.sh: the fixed measurement of SmolLM2 drafts (docs/training.md), so a
# new draft is judged as the shipped one was. Per draft: greedy tau (chain of 5, 60-node tree) and the
# drafting time per verify pass on (1) the 40 MT-Bench turns of docs/training.md's table and (2) 20 Spec-Bench
# prompts from datasets no training data of the drafts came from (5 each of translation: WMT14, summarization:
# CNN/DailyMail, qa: Natural Questions, rag: NQ with passages; the drafts saw ShareGPT, self-instruct seeds,
# GSM8K and self-written turns); (3) teacher-forced top-1 / top-5 of the draft's first step at every position
# of the target's greedy answers to the 80 MT-Bench first turns, and the share of those positions whose next token
# is in the draft's (reduced) vocabulary at all (drafts of any architecture with a draft block: Beagle, EAGLE,
# MoA). tau and top-k are deterministic (greedy);
# the drafting time is wall time of this machine. Usage: bash scripts/eval_smollm2_draft.sh DRAFT [DRAFT ...]
# (default: the shipped draft). Resumable: what is in OUT is not measured again. About 6 minutes per draft
# on 2 idle cores, plus 5 for the MT-Bench answers once. Env: OUT (build/eval-smollm2).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=$PWD/data
M=weights/SmolLM2-135M-Instruct.Q4_1.gguf
OUT=${OUT:-build/eval-smollm2}
[ $# -gt 0 ] || set -- weights/beagle-smollm2-135m.bin
make -s -j2 build/beagle build/test/draft_topk
[ -f "$M" ] || bash scripts/fetch_model.sh
mkdir -p "$OUT"
# the answers keep the target's layers 22 and 27 too (the same tokens and states), which MoA drafts read
held=$OUT/mt-bench-greedy-sl
build/beagle datagen -m "$M" --prompts "$DATA/eval/mt_bench_question.jsonl" -n 256 --max-prompt 1024 --batch 32 \
    --shard-seqs 80 -t 2 --keep-states --state-layers 22,27 -o "$held" > /dev/null
for d in "$@"; do
  [ -f "$d" ] || { echo "eval_smollm2_draft: no draft file '$d'" >&2; exit 1; }
  n=$OUT/$(basename "$d")
  [ -s "$n.mt.json" ] || build/beagle bench-sd -m "$M" -d "$d" --prompts "$DATA/eval/mt_bench_question.jsonl" \
      --per-category 5 --modes chain,tree --total-tokens 60 -n 128 -t 2 -o "$n.mt.json" > /dev/null
  [ -s "$n.held.json" ] || build/beagle bench-sd -m "$M" -d "$d" --prompts "$DATA/eval/spec_bench_question.jsonl" \
      --categories translation,summarization,qa,rag --per-category 5 --modes chain,tree --total-tokens 60 -n 128 -t 2 \
      -o "$n.held.json" > /dev/null
  [ -s "$n.topk.txt" ] || { build/test/draft_topk "$M" "$d" "$held" > "$n.topk.tmp" && mv "$n.topk.tmp" "$n.topk.txt"; }
done
python3 - "$OUT" "$@" <<'PY'
import json, os, sys
sys.path.insert(0, "scripts")
from topk_stats import topk, in_vocab
out, drafts = sys.argv[1], sys.argv[2:]
HELD = ["translation", "summarization", "qa", "rag"]
print("| draft | MT-Bench tau chain / tree-60 | held-out datasets tau chain / tree-60 | top-1 / top-5 "
      "| next token in the draft's vocabulary | draft ms per verify pass (tree-60, MT-Bench) |")
print("|---|---|---|---|---|---|")
for d in drafts:
    n = os.path.join(out, os.path.basename(d))
    mt, held = json.load(open(n + ".mt.json")), json.load(open(n + ".held.json"))
    if sorted(held["categories"]) != sorted(HELD):
        raise SystemExit("eval_smollm2_draft: %s.held.json has categories %s, expected %s" % (n, sorted(held["categories"]), HELD))
    bad = [(f, m) for f, o in (("mt", mt["mt_bench"]), ("held", held["overall"])) for m in ("chain", "tree") if o[m]["mismatches"]]
    if bad:
        raise SystemExit("eval_smollm2_draft: outputs differ from plain greedy decoding in %s" % bad)
    mt, h = mt["mt_bench"], held["overall"]  # overall: tokens / target passes over the four categories
    t1, t5, _ = topk(n + ".topk.txt")
    cov = in_vocab(n + ".topk.txt")
    print("| %s | %.3f / %.3f | %.3f / %.3f | %.3f / %.3f | %s | %.2f |" % (
        d, mt["chain"]["tau"], mt["tree"]["tau"], h["chain"]["tau"], h["tree"]["tau"], t1, t5,
        "-" if cov is None else "%.3f" % cov, mt["tree"]["draft_ms_per_pass"]))
PY
