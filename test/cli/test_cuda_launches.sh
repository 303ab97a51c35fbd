#!/usr/bin/env bash
# test_cuda_launches.sh: the kernel launches of one plain greedy decode step of SmolLM2-135M Q4_1 on the
# CUDA backend (run in the emulator: build/beagle-cuda-emu; the counts are exact, the same as on a GPU).
# gpu.launches_per_round of generate --json (the JSON object on stderr's last line) averages the rounds
# after the prefill (at this size a step is launch-bound; docs/gpu.md).
#   BEAGLE_CUDA_GRAPH=0: every kernel launched, at most 300. Fusions that keep it there: Q/K/V and gate/up
#     in one GEMM launch that quantizes its activations itself, RoPE of q and k in one launch, the residual
#     adds fused with the next RMSNorm: 9 launches per layer, 275 per step (unfused: 664).
#   default: the step's forward is one replayed CUDA graph: 1 graph launch + the head's RMSNorm, LM head
#     and argmax = 4 launches per round, and the same text as without graphs.
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
EMU=${BEAGLE_CUDA_BIN:-$B/beagle-cuda-emu}
[ -x "$EMU" ] || { echo "FAIL: $EMU missing (make cuda-emu)"; exit 1; }
[ -f "${BEAGLE_MODEL:-}" ] || { echo "SKIP: no model at '${BEAGLE_MODEL:-}' (make model)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for g in 0 1; do
  BEAGLE_CUDA_GRAPH=$g "$EMU" generate -m "$BEAGLE_MODEL" -p Hello -n 12 --temp 0 --backend cuda --json \
    >"$tmp/out$g" 2>"$tmp/err$g" || { echo "FAIL: generate (BEAGLE_CUDA_GRAPH=$g) exited $?"; cat "$tmp/err$g"; exit 1; }
done
cmp -s "$tmp/out0" "$tmp/out1" || { echo "FAIL: the text differs with CUDA graphs"; cat "$tmp/out0" "$tmp/out1"; exit 1; }
python3 - "$tmp/err0" "$tmp/err1" <<'PY'
import json, sys
def gpu(path):
    return json.loads(open(path).read().splitlines()[-1])["gpu"]
off, on = gpu(sys.argv[1]), gpu(sys.argv[2])
for name, g in (("graphs off", off), ("graphs on", on)):
    print(f"{name}: {g['launches_per_round']} launches ({g['graph_launches_per_round']} graph launches) per round "
          f"over {g['rounds']} rounds")
    if g["rounds"] < 5:
        sys.exit(f"FAIL: only {g['rounds']} rounds measured")
if off["launches_per_round"] > 300 or off["graph_launches_per_round"] != 0:
    sys.exit("FAIL: without graphs a plain decode step must launch at most 300 kernels and no graph")
if on["launches_per_round"] > 4 or on["graph_launches_per_round"] != 1:
    sys.exit("FAIL: with graphs a plain decode step must be 1 graph launch + at most 3 kernels")
print("ok")
PY
