#!/usr/bin/env bash
# test_isa_avx2.sh: exactness on the AVX2 matmul path, forced with BEAGLE_ISA=avx2 on any machine (the
# rest of the suite runs the path the CPU picks: AVX-512 VNNI where present). Batch invariance of the
# logits and states by memcmp (stories260K F32 + GGUF, SmolLM2 Q4_1, tree verify, compaction), then
# greedy speculative decoding of SmolLM2 with the shipped draft equal to plain greedy decoding on 8
# MT-Bench turns x 48 tokens in tree, lookup and hybrid modes (bench-sd counts mismatches).
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
SHARED=${BEAGLE_SHARED:-../shared}
MODEL=${BEAGLE_MODEL:-weights/SmolLM2-135M-Instruct.Q4_1.gguf}
export BEAGLE_ISA=avx2
fail=0
out=$("$B"/test/test_batch_invariance 2>&1); rc=$?
echo "$out" | tail -3
echo "$out" | grep -q "^matmul ISA path: avx2 " || { echo "FAIL: batch invariance did not run on the AVX2 path"; fail=1; }
[ $rc -eq 0 ] || { echo "FAIL: batch invariance on the AVX2 path (exit $rc)"; fail=1; }
json=$(mktemp); trap 'rm -f "$json"' EXIT
"$B"/beagle bench-sd -m "$MODEL" -d weights/beagle-smollm2-135m.bin -t 2 -n 48 --per-category 1 \
    --prompts "$SHARED/data/eval/mt_bench_question.jsonl" --modes none,tree,lookup,hybrid -o "$json" > /dev/null 2>&1 \
    || { echo "FAIL: bench-sd on the AVX2 path exited non-zero"; fail=1; }
python3 - "$json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
bad = 0
for mode, r in d["overall"].items():
    print(f"avx2 {mode:7s} prompts {r['prompts']} tokens {r['tokens']} tau {r['tau']:.3f} mismatches {r['mismatches']}")
    if r["prompts"] != 8 or r["tokens"] < 8 * 40 or r["mismatches"] != 0:
        bad += 1
if set(d["overall"]) != {"none", "tree", "lookup", "hybrid"}:
    print("FAIL: modes", sorted(d["overall"])); bad += 1
sys.exit(1 if bad else 0)
PY
[ $fail -eq 0 ] && echo "AVX2 path: batch-invariant, greedy SD equal to plain decoding" || echo "FAIL"
exit $fail
