#!/usr/bin/env bash
# test_isa_avx2.sh: exactness on the AVX2 matmul path, forced with BEAGLE_ISA=avx2 on any machine (the
# rest of the suite runs the path the CPU picks: AVX-512 VNNI where present). Batch invariance of the
# logits and states by memcmp (stories260K F32 + GGUF, SmolLM2 Q4_1, tree verify, compaction), then
# greedy speculative decoding of SmolLM2 with the shipped draft equal to plain greedy decoding on 8
# MT-Bench turns x 48 tokens in tree, lookup and hybrid modes (bench-sd counts mismatches). On a CPU
# with AVX-512 VNNI too: SmolLM2's logits of a chat prompt (every position) and its 16-token greedy
# continuation are byte-identical on the two paths (both run the row-group kernels, whose float steps
# are the same, matmul.h), so test_smollm2_reference's verdicts hold on the AVX2 path as well. And the
# same bits with the weights in 4 KiB pages as in 2 MiB pages (BEAGLE_HUGEPAGES).
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
DATA=$PWD/data
MODEL=${BEAGLE_MODEL:-weights/SmolLM2-135M-Instruct.Q4_1.gguf}
export BEAGLE_ISA=avx2
fail=0
out=$("$B"/test/test_batch_invariance 2>&1); rc=$?
echo "$out" | tail -3
echo "$out" | grep -q "^matmul ISA path: avx2 " || { echo "FAIL: batch invariance did not run on the AVX2 path"; fail=1; }
[ $rc -eq 0 ] || { echo "FAIL: batch invariance on the AVX2 path (exit $rc)"; fail=1; }
json=$(mktemp); tmp=$(mktemp -d); trap 'rm -rf "$json" "$tmp"' EXIT
ids=1,9690,314,253,1345,2914,28,416,260,1456,30,2,198,1,520,9531,198  # a chat turn's first tokens
# same_logits VAR A B WHAT: SmolLM2's logits of $ids (every position) and its 16-token greedy continuation,
# run with VAR=A and with VAR=B, must be byte-identical
same_logits() {
  local var=$1 a=$2 b=$3 what=$4 v
  for v in "$a" "$b"; do
    env "$var=$v" "$B"/test/tool_logits "$MODEL" $ids "$tmp/logits.$var.$v" --greedy 16 > "$tmp/greedy.$var.$v" \
      || { echo "FAIL: tool_logits with $var=$v"; fail=1; }
  done
  if cmp -s "$tmp/logits.$var.$a" "$tmp/logits.$var.$b" && cmp -s "$tmp/greedy.$var.$a" "$tmp/greedy.$var.$b"; then
    echo "$what: logits of $(echo $ids | tr ',' ' ' | wc -w) positions and 16 greedy tokens byte-identical"
  else
    echo "FAIL: SmolLM2 logits or greedy tokens differ between $var=$a and $var=$b"; fail=1
  fi
}
if grep -q avx512_vnni /proc/cpuinfo; then
  same_logits BEAGLE_ISA avx2 avx512 "avx2 = avx512"
fi
# 4 KiB pages (BEAGLE_HUGEPAGES=0) against 2 MiB pages: the same bits (where the weights live changes no
# arithmetic), and test_matmul's check that nothing was advised for huge pages then
same_logits BEAGLE_HUGEPAGES 0 1 "4 KiB pages = 2 MiB pages"
BEAGLE_HUGEPAGES=0 "$B"/test/test_matmul > "$tmp/matmul.hp0" 2>&1 \
  || { tail -5 "$tmp/matmul.hp0"; echo "FAIL: test_matmul with BEAGLE_HUGEPAGES=0"; fail=1; }
"$B"/beagle bench-sd -m "$MODEL" -d weights/beagle-smollm2-135m.bin -t 2 -n 48 --per-category 1 \
    --prompts "$DATA/eval/mt_bench_question.jsonl" --modes none,tree,lookup,hybrid -o "$json" > /dev/null 2>&1 \
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
