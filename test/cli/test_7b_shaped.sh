#!/usr/bin/env bash
# test_7b_shaped.sh: a 7B-shaped target (dim 4096, heads 32/8, ffn 14336, 2 layers, random Q4_1
# weights from test/tools/tool_random_llama.cpp, files kept in build/r7b/) on the CUDA backend with every
# kernel in the CPU emulator (build/beagle-cuda-emu):
#   - vocab 32000: `generate --plan model` lists the buffers the code allocates: the counting allocator's
#     peak_device_bytes of a plain greedy run is at least the plan's total and at most PLAN_SLACK (3 MiB)
#     above it. The slack is what the plan leaves out: the backend's scratch (activation quantization,
#     1.5 x 16 rows x 14336 x 34/32 bytes = 0.35 MiB; top-k, < 0.1 MiB; the attention's split-KV partials,
#     12.9 MB at 32-key slices, are a line of the plan) and the caching allocator's size classes (< 1/8
#     of each activation buffer: < 1.7 MiB at -b 16, vocab 128256); weights and KV caches are exact. One
#     layer's K cache at -c 1024 is 4 MiB, so a buffer missing from the plan fails this;
#   - datagen (2 sampled sequences of 6 tokens), then 1 training step of a draft of the target's shape (stage 1,
#     batch 1: forward, backward and AdamW at these sizes): a finite loss, the training summary's gpu
#     peak_device_bytes;
#   - greedy speculative decoding with that (barely trained) draft, chain (gamma 2) and tree (depth 2,
#     top-k 2, 4 nodes), gives the text of plain greedy decoding, and its peak is within PLAN_SLACK of
#     `--plan model -d DRAFT` with the same drafting flags;
#   - vocab 128256 (Llama-3's): loads, the plan bounds the peak the same way, 1 greedy token.
# Sizes are small (a 4-token prompt, 3 new tokens, -c 1024 -b 16) because the emulator runs a 7B-shaped
# layer at seconds per forward: about 4 minutes in all on an idle 2-core machine.
# Times of each step are printed (docs/gpu.md quotes them). BEAGLE_CUDA_BIN=build/beagle-cuda runs the
# same on a real GPU (scripts/gpu_check.sh).
set -u
cd "$(dirname "$0")/../.."
B=$(dirname "${BEAGLE_BIN:-build/beagle}")
EMU=${BEAGLE_CUDA_BIN:-$B/beagle-cuda-emu}
GEN=$B/test/tool_random_llama
DIR=${R7B_DIR:-$B/r7b}
PLAN_SLACK=$((3 << 20))  # bytes: see above (docs/gpu.md "Device memory: the plan")
[ -x "$EMU" ] || { echo "FAIL: $EMU missing (make cuda-emu)"; exit 1; }
[ -x "$GEN" ] || { echo "FAIL: $GEN missing (make tests)"; exit 1; }
mkdir -p "$DIR"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
json_field() { python3 -c 'import json,sys; j=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(eval("j"+sys.argv[2]))' "$@"; }

# the models: regenerated when missing or older than the generator (fixed seed: the same bytes)
model() {  # vocab -> path
  local m=$DIR/r7b-2l-v$1.gguf
  if [ ! -s "$m" ] || [ "$GEN" -nt "$m" ]; then "$GEN" "$m" --layers 2 --vocab "$1" 2> "$tmp/gen.log" || { cat "$tmp/gen.log"; return 1; }; fi
  echo "$m"
}
M=$(model 32000) || { echo "FAIL generator"; exit 1; }
M3=$(model 128256) || { echo "FAIL generator"; exit 1; }
common=(-c 1024 -b 16 --temp 0 -t 1)
P="Hi"

# plan vs the counting allocator: planned <= measured <= planned + PLAN_SLACK
plan_check() {  # name, plan output file, json file
  local planned measured
  planned=$(awk '/^total_bytes/ {print $2}' "$2")
  measured=$(json_field "$3" '["gpu"]["peak_device_bytes"]')
  if awk -v p="$planned" -v m="$measured" -v t="$PLAN_SLACK" 'BEGIN { exit !(p > 0 && m >= p && m <= p + t) }'; then
    ok "$1: planned $planned bytes, peak_device_bytes $measured (+$(awk -v p="$planned" -v m="$measured" 'BEGIN{printf "%.3f MiB", (m-p)/1048576}'))"
  else
    bad "$1: planned $planned bytes, peak_device_bytes $measured: not in [plan, plan + $PLAN_SLACK]"; cat "$2"
  fi
}

t0=$(now)
"$EMU" generate -m "$M" --plan model "${common[@]}" > "$tmp/plan.txt" 2> "$tmp/err.txt" || { bad "plan"; cat "$tmp/err.txt"; }
"$EMU" generate -m "$M" -p "$P" -n 3 "${common[@]}" --json > "$tmp/plain.txt" 2> "$tmp/plain.json" ||
  { bad "plain greedy"; cat "$tmp/plain.json"; }
echo "     vocab 32000: plain greedy, 3 tokens: $(since "$t0") s"
plan_check "vocab 32000, plain greedy" "$tmp/plan.txt" "$tmp/plain.json"

t0=$(now)
"$EMU" datagen -m "$M" --sample 2 -n 6 --batch 2 --shard-seqs 2 --keep-states -o "$tmp/data" -t 1 --backend cuda 2> "$tmp/dg.log" ||
  { bad "datagen"; tail -5 "$tmp/dg.log"; }
echo "     datagen, 2 sequences x 6 tokens: $(since "$t0") s"
t0=$(now)
"$EMU" train -m "$M" --data "$tmp/data" --batch 1 --seq-len 8 --window 2 --stage1-epochs 1 --stage2-epochs 0 \
  --max-steps 1 --warmup 0 -t 1 -q --backend cuda -o "$tmp/d.bin" > /dev/null 2> "$tmp/train.log" ||
  { bad "train"; tail -5 "$tmp/train.log"; }
echo "     train, 1 step: $(since "$t0") s"
if [ -s "$tmp/d.bin.json" ]; then
  steps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["steps"])' "$tmp/d.bin.json")
  peak=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpu"]["peak_device_bytes"])' "$tmp/d.bin.json")
  sps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["seconds_per_step"])' "$tmp/d.bin.json")
  finite=$(python3 -c 'import math,sys; v=[float(l.split()[3]) for l in open(sys.argv[1]).readlines()[1:]]; print("yes" if v and all(math.isfinite(x) and x > 0 for x in v) else "no")' "$tmp/d.bin.loss.tsv")
  [ "$steps" = 1 ] && [ "$finite" = yes ] && ok "7B-shaped draft training: $steps step, $sps s/step, peak_device_bytes $peak, losses $(awk 'NR>1{printf "%s ", $4}' "$tmp/d.bin.loss.tsv")" ||
    bad "training: $steps steps, finite losses: $finite"
else
  bad "training wrote no summary"
fi

for spec in chain tree; do
  if [ $spec = chain ]; then flags=(--spec chain --gamma 2); else flags=(--spec tree --depth 2 --topk 2 --total-tokens 4); fi
  t0=$(now)
  "$EMU" generate -m "$M" -p "$P" -n 3 "${common[@]}" -d "$tmp/d.bin" "${flags[@]}" --json > "$tmp/sd.txt" 2> "$tmp/sd.json" ||
    { bad "SD $spec"; tail -5 "$tmp/sd.json"; continue; }
  echo "     SD ${flags[*]}, 3 tokens: $(since "$t0") s"
  if cmp -s "$tmp/plain.txt" "$tmp/sd.txt"; then
    ok "greedy SD ($spec, $(json_field "$tmp/sd.json" '["target_passes"]') target passes) == plain greedy: $(cat "$tmp/sd.txt")"
  else
    bad "greedy SD ($spec) differs from plain greedy"; diff "$tmp/plain.txt" "$tmp/sd.txt" | head -5
  fi
  "$EMU" generate -m "$M" -d "$tmp/d.bin" "${flags[@]}" --plan model "${common[@]}" > "$tmp/plan_sd.txt" 2> "$tmp/err.txt" ||
    { bad "plan with draft"; cat "$tmp/err.txt"; }
  plan_check "vocab 32000, SD $spec" "$tmp/plan_sd.txt" "$tmp/sd.json"
done

t0=$(now)
"$EMU" generate -m "$M3" --plan model "${common[@]}" > "$tmp/plan3.txt" 2> "$tmp/err.txt" || { bad "plan 128256"; cat "$tmp/err.txt"; }
"$EMU" generate -m "$M3" -p "$P" -n 1 "${common[@]}" --json > "$tmp/plain3.txt" 2> "$tmp/plain3.json" ||
  { bad "vocab 128256 greedy"; tail -5 "$tmp/plain3.json"; }
echo "     vocab 128256: plain greedy, 1 token: $(since "$t0") s"
n3=$(json_field "$tmp/plain3.json" '["tokens"]')
[ "$n3" = 1 ] && ok "vocab 128256: loads and generates $n3 tokens" || bad "vocab 128256: $n3 tokens"
plan_check "vocab 128256, plain greedy" "$tmp/plan3.txt" "$tmp/plain3.json"

echo "$fails failures"
[ $fails -eq 0 ]
