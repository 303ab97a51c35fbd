#!/usr/bin/env bash
# test_cuda_emu_generate.sh: generation through the CUDA backend with every kernel running in the CPU
# emulator (build/beagle-cuda-emu):
#   - stories260K greedy (llama2.c .bin and GGUF) equals karpathy's run.c output byte for byte (the
#     golden block after the `-t 0.0` command in data/models/stories260K.md, test/oracles/golden.py);
#   - with a prompt, prefill in one batch (-b 64) and one token at a time (-b 1) give the same text
#     (batch-invariant kernels), which is also the CPU backend's text, and greedy speculative decoding
#     (prompt lookup; the shipped Beagle draft in chain and tree mode: the draft's cross-attention with
#     concat predictions, tree-mask verify, KV compaction; the shipped EAGLE-style draft in chain and tree
#     mode) gives that same text;
#   - over a 408-token prompt (a KV cache of many attention slices: split-KV decode, query-tiled
#     prefill) the text is the CPU backend's, and greedy SD (lookup) gives the same;
#   - SmolLM2-135M Q4_1 (quantized matmuls, tied Q8_0 embedding/LM head, GQA 9:3): a short greedy
#     continuation equals the CPU backend's;
#   - a tiny random Qwen2 GGUF (Q8_0, q/k/v biases: the add kernel's bias rows, rotate-half rows permuted on
#     load): greedy text, plain and speculative (lookup), equals the CPU backend's;
#   - --backend cpu in the same binary still gives the golden text.
# BEAGLE_CUDA_BIN=build/beagle-cuda runs the same checks on a real GPU (scripts/gpu_check.sh).
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
EMU=${BEAGLE_CUDA_BIN:-$B/beagle-cuda-emu}  # scripts/gpu_check.sh: build/beagle-cuda on a real GPU
CPU=${BEAGLE_BIN:-build/beagle}
M=$PWD/data/models
[ -x "$EMU" ] || { echo "FAIL: $EMU missing (make cuda-emu)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
skips=0
python3 test/oracles/golden.py "-t 0.0" > "$tmp/golden.txt" || exit 1
check() {  # name, expected file, command...
  local name=$1 want=$2; shift 2
  local t0=$(date +%s.%N)
  "$@" > "$tmp/got.txt" 2> "$tmp/err.txt"
  local rc=$? secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  if [ $rc -ne 0 ]; then echo "FAIL $name: exit $rc"; cat "$tmp/err.txt"; fails=$((fails+1)); return; fi
  if cmp -s "$tmp/got.txt" "$want"; then echo "ok   $name (${secs}s)"; else
    echo "FAIL $name: output differs"; diff "$want" "$tmp/got.txt" | head -10; fails=$((fails+1)); fi
}
check "cuda-emu stories260K.bin greedy == run.c golden" "$tmp/golden.txt" \
  "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -n 256 --temp 0
check "cuda-emu stories260K.gguf greedy == run.c golden" "$tmp/golden.txt" \
  "$EMU" generate -m "$M/stories260K.gguf" -n 256 --temp 0
check "cuda-emu binary, --backend cpu == run.c golden" "$tmp/golden.txt" \
  "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -n 256 --temp 0 --backend cpu
P="Once upon a time, there was a little dog named Max who liked to run"
"$CPU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$P" -n 80 --temp 0 > "$tmp/cpu_prompt.txt" 2>/dev/null
check "cuda-emu prompt, prefill batch 64 == cpu backend" "$tmp/cpu_prompt.txt" \
  "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$P" -n 80 --temp 0 -b 64
check "cuda-emu prompt, prefill batch 1 == batch 64" "$tmp/cpu_prompt.txt" \
  "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$P" -n 80 --temp 0 -b 1
# greedy speculative decoding (prompt-lookup drafts, multi-token verify with a tree mask, KV-cache
# compaction) must give exactly the plain greedy text on this backend too
check "cuda-emu greedy SD (--spec lookup) == plain greedy" "$tmp/cpu_prompt.txt" \
  "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$P" -n 80 --temp 0 --spec lookup
# a 408-token prompt: the KV cache spans many key slices, so decode steps and short verify passes
# run split-KV (attn_fwd_tiled_kernel over key slices + attn_combine_kernel) and prefill / long verify
# passes it unsplit: one reduction order, so the CPU backend's text and greedy SD == plain greedy
L=$(for i in $(seq 1 14); do printf "Once upon a time, there was a little dog named Max who liked to run in the park. "; done)
"$CPU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$L" -n 30 --temp 0 > "$tmp/cpu_long.txt" 2>/dev/null
check "cuda-emu long prompt (split-KV decode) == cpu backend" "$tmp/cpu_long.txt" \
  "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$L" -n 30 --temp 0
check "cuda-emu greedy SD (--spec lookup) over the long prompt == plain greedy" "$tmp/cpu_long.txt" \
  "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$L" -n 30 --temp 0 --spec lookup
# ... and with the shipped drafts on the GPU: the Beagle draft (its cross-attention, concat predictions,
# dynamic tree) and the EAGLE-style draft (arch eagle: fc([E(t); f]), causal self-attention over its own
# rows, its KV cache growing with the tree; drafted in the host loop on this backend)
for draft in "Beagle:weights/beagle-stories260K.bin" "EAGLE:weights/eagle-stories260K.bin"; do
  name=${draft%%:*} D=${draft#*:}
  if [ ! -f "$D" ]; then echo "SKIP: $name draft SD checks: no draft at $D"; skips=$((skips+1)); continue; fi
  check "cuda-emu greedy SD ($name draft, chain) == plain greedy" "$tmp/cpu_prompt.txt" \
    "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$P" -n 80 --temp 0 -d "$D" --spec chain
  check "cuda-emu greedy SD ($name draft, tree of 24) == plain greedy" "$tmp/cpu_prompt.txt" \
    "$EMU" generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -p "$P" -n 80 --temp 0 -d "$D" --spec tree --total-tokens 24
done
if [ -f "${BEAGLE_MODEL:-}" ]; then
  Q="The capital of France is"
  "$CPU" generate -m "$BEAGLE_MODEL" -p "$Q" -n 4 --temp 0 > "$tmp/cpu_smol.txt" 2>/dev/null
  check "cuda-emu SmolLM2-135M Q4_1 greedy == cpu backend" "$tmp/cpu_smol.txt" \
    "$EMU" generate -m "$BEAGLE_MODEL" -p "$Q" -n 4 --temp 0
else
  echo "SKIP: SmolLM2 check: no model at '${BEAGLE_MODEL:-}' (make model)"; skips=$((skips+1))
fi
# Qwen2: the bias adds run in prefill (many rows), decode (one) and verify (a few)
RL=$B/test/tool_random_llama
if [ -x "$RL" ]; then
  "$RL" "$tmp/qwen2.gguf" --qwen2 1 --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 200 --type q8_0 \
    --seed 7 2>/dev/null
  QP="a b c d e f a b c d e f a b c"
  "$CPU" generate -m "$tmp/qwen2.gguf" -p "$QP" -n 24 --temp 0 > "$tmp/cpu_qwen2.txt" 2>/dev/null
  check "cuda-emu Qwen2 (biases) greedy == cpu backend" "$tmp/cpu_qwen2.txt" \
    "$EMU" generate -m "$tmp/qwen2.gguf" -p "$QP" -n 24 --temp 0
  check "cuda-emu Qwen2 greedy SD (--spec lookup) == plain greedy" "$tmp/cpu_qwen2.txt" \
    "$EMU" generate -m "$tmp/qwen2.gguf" -p "$QP" -n 24 --temp 0 --spec lookup
else
  echo "SKIP: Qwen2 checks: $RL missing (make tests)"; skips=$((skips+1))
fi
echo "$fails failures, $skips parts skipped"
[ $fails -eq 0 ] || exit 1
[ $skips -eq 0 ] || exit 77
