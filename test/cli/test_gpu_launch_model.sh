#!/usr/bin/env bash
# test_gpu_launch_model.sh: the launch side of scripts/gpu_bytes.py's model (docs/gpu-kernels.md, "The verify
# regime") against the emulator. A random Q4_1 target with SmolLM2's widths (2 layers, vocabulary 512) prefills
# T prompt tokens on the CUDA backend (build/beagle-cuda-emu, BEAGLE_CUDA_PROFILE=1: every launch counted with
# its grid); for T = 4, 8, 16 and 40 (the dp4a kernel's 8-, 16- and 32-row blocks and the tensor-core kernel),
# and for two decode steps after a 4-token prompt, every kernel the model names must be launched as often as it
# says, with the fewest thread blocks it says, and the emulator must launch no kernel the model leaves out
# (sampling aside). The profile turns CUDA graphs off, so the decode steps write their K/V rows without the
# graph step's rows_scatter_kernel. Planted: the model told that the dp4a kernel takes up to 8 tokens must
# disagree.
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
EMU=${BEAGLE_CUDA_BIN:-$B/beagle-cuda-emu}
[ -x "$EMU" ] || { echo "FAIL: $EMU missing (make cuda-emu)"; exit 1; }
[ -x "$B/test/tool_random_llama" ] || { echo "FAIL: $B/test/tool_random_llama missing (make tests)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
M=$tmp/r.gguf
"$B/test/tool_random_llama" "$M" --layers 2 --vocab 512 --dim 576 --heads 9 --kv-heads 3 --ffn 1536 --type q4_1 > /dev/null 2>&1 \
  || { echo "FAIL: tool_random_llama"; exit 1; }
fails=0
check() {  # check LABEL PROFILE PLANT MODEL_JSON:TIMES...
  python3 - "$@" <<'PY'
import json, re, sys
label, err, plant, *models = sys.argv[1:]
emu = {}
for line in open(err):
    m = re.match(r"\s+(\w+)\s+(\d+) launches\s+[\d.]+ s\s+(\d+) blocks\s+(\d+) fewest", line)
    if m:
        emu[m.group(1)] = (int(m.group(2)), int(m.group(4)))
model = {}
for spec in models:
    path, times = spec.rsplit(":", 1)
    for k, v in json.load(open(path)).items():
        if k == "rows_scatter_kernel":  # the graph step's; the profile runs without graphs
            continue
        o = model.setdefault(k, {"launches": 0, "fewest_blocks": v["fewest_blocks"]})
        o["launches"] += v["launches"] * int(times)
        if v["fewest_blocks"] is not None:
            o["fewest_blocks"] = min(o["fewest_blocks"] or v["fewest_blocks"], v["fewest_blocks"])
if plant == "1":  # the dp4a kernels modelled as if they stopped at 8 tokens: the layers' GEMMs on tensor cores
    model = {("gemm_q4_1_mma_kernel" if k.startswith("gemm_q4_1") and "mma" not in k and v["launches"] > 1 else k): v
             for k, v in model.items()}
    model["quantize_q8_kernel"] = {"launches": 8, "fewest_blocks": None}
bad = []
for k, v in model.items():
    if k not in emu:
        bad.append(f"{k}: the model launches it {v['launches']} times, the emulator never")
        continue
    if emu[k][0] != v["launches"]:
        bad.append(f"{k}: {emu[k][0]} launches, the model says {v['launches']}")
    if v["fewest_blocks"] is not None and emu[k][1] != v["fewest_blocks"]:
        bad.append(f"{k}: fewest blocks {emu[k][1]}, the model says {v['fewest_blocks']}")
for k in emu:
    if k not in model and not k.startswith("topk"):
        bad.append(f"{k}: launched {emu[k][0]} times, not in the model")
if plant == "1":
    print(("ok   %s: caught: %s" % (label, bad[0])) if bad else "FAIL %s: not caught" % label)
    sys.exit(0 if bad else 1)
print(("ok   %s: %d kernels, launches and fewest blocks as modelled" % (label, len(model))) if not bad
      else "FAIL %s:\n  %s" % (label, "\n  ".join(bad)))
sys.exit(1 if bad else 0)
PY
  [ $? -eq 0 ] || fails=$((fails + 1))
}
model() {  # model T HEAD_T: the model's launches for this target
  python3 scripts/gpu_bytes.py --launches "smollm2,L=2,V=512,cache=$3,head_dt=Q4_1,embd_dt=Q4_1:$1:$2" > "$tmp/model-$1-$3.json" \
    || { echo "FAIL: gpu_bytes.py --launches"; exit 1; }
}
prompt() {  # a prompt of exactly $1 tokens: the tokenizer gives <s>, a leading piece and one token per letter
  p=$(python3 -c "import string, sys; print((string.ascii_lowercase * 4)[:int(sys.argv[1]) - 2])" "$1")
  local got
  got=$("$B/beagle" tokenize -m "$M" -p "$p" 2>&1 > /dev/null | awk '/tokens$/ {print $1}')
  [ "$got" = "$1" ] || { echo "FAIL: the prompt of T = $1 has $got tokens"; exit 1; }
}
profile() {  # profile PROMPT N OUT
  BEAGLE_CUDA_PROFILE=1 "$EMU" generate -m "$M" -p "$1" -n "$2" --temp 0 --backend cuda > /dev/null 2> "$3" \
    || { echo "FAIL: generate -n $2"; tail -3 "$3"; exit 1; }
}
for T in 4 8 16 40; do
  prompt $T; profile "$p" 1 "$tmp/err$T"; model $T 1 0
  check "prefill T = $T" "$tmp/err$T" 0 "$tmp/model-$T-0.json:1"
  [ $T -eq 16 ] && check "planted (dp4a up to 8 tokens)" "$tmp/err$T" 1 "$tmp/model-$T-0.json:1"
done
# decode: a 4-token prefill, then two steps (T = 1 over a cache of 4 and 5 keys: one tiled attention block each)
prompt 4; profile "$p" 3 "$tmp/dec"; model 1 1 4; model 4 1 0
check "decode T = 1" "$tmp/dec" 0 "$tmp/model-4-0.json:1" "$tmp/model-1-4.json:2"
exit $((fails > 0))
