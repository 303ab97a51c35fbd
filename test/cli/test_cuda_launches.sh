#!/usr/bin/env bash
# test_cuda_launches.sh: the kernel launches of one plain greedy decode step of SmolLM2-135M Q4_1 on the
# CUDA backend (run in the emulator: build/beagle-cuda-emu; the count is exact, the same as on a GPU) stay
# at most 300 (issue 17: at this size a step is launch-bound). gpu.launches_per_round of generate --json
# (the JSON object on stderr's last line) averages the rounds after the prefill. Fusions that keep it there (docs/gpu.md): Q/K/V and gate/up in
# one GEMM launch that quantizes its activations itself, RoPE of q and k in one launch, the residual adds
# fused with the next RMSNorm: 9 launches per layer, 275 per step (664 before).
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
EMU=${BEAGLE_CUDA_BIN:-$B/beagle-cuda-emu}
MAX=300
[ -x "$EMU" ] || { echo "FAIL: $EMU missing (make cuda-emu)"; exit 1; }
[ -f "${BEAGLE_MODEL:-}" ] || { echo "SKIP: no model at '${BEAGLE_MODEL:-}' (make model)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$EMU" generate -m "$BEAGLE_MODEL" -p Hello -n 12 --temp 0 --backend cuda --json >"$tmp/out" 2>"$tmp/err" ||
  { echo "FAIL: generate exited $?"; cat "$tmp/err"; exit 1; }
tail -n 1 "$tmp/err" | python3 -c '
import json, sys
MAX = int(sys.argv[1])
g = json.load(sys.stdin)["gpu"]
n, rounds = g["launches_per_round"], g["rounds"]
print(f"plain decode step: {n} launches per round over {rounds} rounds (limit {MAX})")
if rounds < 5:
    sys.exit(f"FAIL: only {rounds} rounds measured")
if n > MAX:
    sys.exit(f"FAIL: {n} launches per plain decode step > {MAX}")
print("ok")
' "$MAX"
