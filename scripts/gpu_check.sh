#!/usr/bin/env bash
# gpu_check.sh: everything a machine with an NVIDIA GPU (sm_80 or newer, e.g. an H100) must show, in one
# command, offline (the models are weights/ and data/, copied along with the tree):
#   1. builds: make cuda (build/beagle-cuda, real CUDA runtime), the CPU build, and the backend tests
#      linked against the nvcc-compiled kernels (make cuda-device-tests: build/test-device/);
#   2. every op of the op interface on the device against the CPU backend (test_cuda_backend_ops: every
#      kernel is behind one of them; the runtime counters' checks) and draft training on the device
#      against the CPU (test_cuda_backend_train: gradients, AdamW steps, the trained draft's forward), the
#      captured decode step (test_cuda_backend_graph: a replayed CUDA graph == the step without, bit for bit),
#      the greedy tree drafted on the device (test_cuda_backend_tree: == the host loop's tree, node for node);
#   3. golden generation and greedy speculative exactness on the device: test_cuda_emu_generate.sh with
#      build/beagle-cuda (stories260K == run.c's golden text; lookup / chain / tree SD == plain greedy;
#      SmolLM2 == the CPU backend), and bench-sd on SmolLM2 (every output checked against plain greedy);
#   4. 8 training steps of the CLI on the device vs the CPU build (per-step losses, rtol 1e-3: two fp32
#      backends with different summation orders);
#   5. the benchmark JSON (build/gpu_check/bench.json): decode tok/s and the verify cost T = 1..64
#      (beagle bench, with CUDA graphs and again with BEAGLE_CUDA_GRAPH=0), the SD speedup on 40 MT-Bench turns with a tree of 60 (bench-sd), training step time
#      and device memory at SmolLM2 size, and the runtime counters per round (generate --json "gpu");
#   6. 7B-shaped: test/cli/test_7b_shaped.sh on the device (a 2-layer dim-4096 random-weights target: plan
#      vs measured device memory, training, greedy SD == plain), then 8 training steps of its draft (step
#      time, peak_device_bytes) and its SD rounds (tree, checked == plain) into bench.json, with the
#      inference plan of the real 7B (32 layers, Q4_1, ctx 4096: generate --plan).
# --dry-run (no GPU needed; CI runs it): builds everything of step 1, prints the plan, exits 0.
# Building needs nvcc, g++ and the Debian headers of the Makefile (stb, nlohmann-json; cpp-httplib is
# optional here: without it and without a network to install it, the build uses NO_HTTP=1).
# --prebuilt: skip the build and use the binaries already in build/ (built by `make cuda ...` on another
#   machine with the same nvcc, e.g. when the GPU machine lacks the CPU build's libraries); --only NAMES
#   (comma-separated step names, as printed by `== name`) runs those steps alone, for a GPU time budget split
#   into several calls: bench.json is written from whatever results are in --out; STEP_TIMEOUT=S bounds
#   each step (default 900 s), so one hung step cannot eat the budget.
# --data DIR: the data folder (default data/: the small models and the MT-Bench prompts).
# Usage: scripts/gpu_check.sh [--dry-run] [--prebuilt] [--only NAMES] [--out DIR] [--data DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=0
PREBUILT=0
ONLY=
OUT=build/gpu_check
DATA=$PWD/data
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --prebuilt) PREBUILT=1 ;;
    --only) ONLY=,$2,; shift ;;
    --out) OUT=$2; shift ;;
    --data) DATA=$2; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (expected --dry-run, --prebuilt, --only NAMES, --out DIR, --data DIR)" >&2; exit 2 ;;
  esac
  shift
done
M=$DATA/models
SMOL=${BEAGLE_MODEL:-$PWD/weights/SmolLM2-135M-Instruct.Q4_1.gguf}
SMOL_DRAFT=weights/beagle-smollm2-135m.bin
MTBENCH=$DATA/eval/mt_bench_question.jsonl
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
for f in "$M/stories260K.bin" "$M/tok512.bin" "$SMOL_DRAFT" "$MTBENCH"; do
  [ -f "$f" ] || { echo "gpu_check.sh: missing $f (weights/ and data/ must be copied along)" >&2; exit 1; }
done
# The default model is fetched (scripts/fetch_model.sh, make model), not shipped: a dry run (CI runs it
# before make test fetches the model) only says so; a real run needs it.
if [ ! -f "$SMOL" ]; then
  echo "gpu_check.sh: missing $SMOL (make model fetches it)" >&2
  # a dry run, or --only steps that do not read it, can go on
  case "$ONLY" in
    "") [ $DRY = 1 ] || exit 1 ;;
    *,backend_graph,*|*,generate,*|*,bench_sd,*|*,bench_sd_nograph,*|*,bench,*|*,bench_nograph,*|*,train_smollm2,*|*,counters,*|*,knobs,*|*,kernel_profile,*|*,peer_cuda,*|*,corpus,*) exit 1 ;;
  esac
fi

if [ $PREBUILT = 1 ]; then
  echo "== build: skipped (--prebuilt): using the binaries in build/"
  for f in build/beagle-cuda build/beagle build/test/tool_random_llama build/test-device/test_cuda_backend_ops \
           build/test-device/test_cuda_backend_train build/test-device/test_cuda_backend_graph \
           build/test-device/test_cuda_backend_tree; do
    [ -x "$f" ] || { echo "gpu_check.sh: --prebuilt but $f is missing" >&2; exit 1; }
  done
else
  # A GPU machine without cpp-httplib and without network cannot install it:
  # build without the HTTP server there (NO_HTTP=1: `serve` and --server say so; no step below needs them).
  NOHTTP=()
  if { [ ! -f /usr/include/httplib.h ] || [ ! -f /usr/include/openssl/ssl.h ]; } && ! timeout 120 bash scripts/sysdeps.sh >/dev/null 2>&1; then
    echo "gpu_check.sh: no cpp-httplib here and it cannot be installed: building with NO_HTTP=1 (no beagle serve)"
    NOHTTP=(NO_HTTP=1)
  fi
  echo "== build: make cuda, the CPU build, the device tests ($JOBS jobs) ${NOHTTP[*]}"
  make -j"$JOBS" "${NOHTTP[@]}" cuda build/beagle cuda-device-tests build/test/tool_random_llama
fi
# the inference memory plan of a 7B-class target (32 layers, Mistral/Llama-3-8B MLP) at Q4_1, ctx 4096, with its draft
PLAN7B=(generate --plan 7b,ffn=14336,q4_1 -c 4096)
plan7b_line="7B plan (build/beagle ${PLAN7B[*]}): $(build/beagle "${PLAN7B[@]}" | grep '^TOTAL' | awk '{print $(NF-3), "GiB", $(NF-2), $(NF-1), $NF}' || true)"

plan() {
  cat <<EOF
plan (output in $OUT):
  1. build/test-device/test_cuda_backend_ops       every op on the device vs the CPU backend; runtime counters
  2. build/test-device/test_cuda_backend_train     draft training on the device vs the CPU (grads, AdamW, forward)
     build/test-device/test_cuda_backend_graph     the captured decode step (CUDA graph) == the step without, bit for bit
     build/test-device/test_cuda_backend_tree      the greedy tree drafted on the device == the host loop's, node for node
  3. test/cli/test_cuda_emu_generate.sh            with BEAGLE_CUDA_BIN=build/beagle-cuda: golden stories260K,
                                                   greedy SD (lookup, chain, tree) == plain, SmolLM2 == CPU
  4. bench-sd SmolLM2 + $SMOL_DRAFT on 40 MT-Bench turns, none + chain + tree-60 + auto (outputs checked == plain)
  5. train 8 steps (stories260K datagen data) on cuda and on cpu: per-step losses agree (rtol 1e-3);
     data-parallel on NCCL (docs/distributed.md): mpirun -np 1 == one process bit for bit, then -np 2 on
     this one GPU (NCCL may refuse two ranks on one device: then its error, exit non-zero, no hang)
  6. bench.json: beagle bench (decode tok/s, verify cost T = 1..64; again with BEAGLE_CUDA_GRAPH=0), the bench-sd speedups, training step
     time and device memory at SmolLM2 size (train --max-steps 8 on SmolLM2 datagen data), generate --json
     runtime counters per round (plain, chain, tree; chain and tree sampled); SmolLM2 requantized to Q4_K_M:
     beagle bench, and greedy tree SD == plain on it
  7. test/cli/test_7b_shaped.sh                    with BEAGLE_CUDA_BIN=build/beagle-cuda: 7B-shaped 2-layer random target
                                                   (build/test/tool_random_llama): plan vs peak_device_bytes, training, SD == plain
  8. bench.json: the 7B-shaped draft's training step time and peak memory (8 steps), its SD rounds (tree, == plain);
     r7b_full: beagle bench of the 7B shape at full depth (32 layers of random Q4_1, about 4 GB): decode tok/s, the
     fraction of the device's HBM roofline (nominal peak by device name), verify cost T = 1..64
  9. knobs: scripts/gpu_knobs.sh on SmolLM2 (each launch knob's settings timed by beagle bench, knobs.json)
 10. kernel_profile: ncu's per-kernel times of a SmolLM2 prefill and 5 decode steps (kernels.json, scripts/ncu_kernels.py)
 11. dram_bytes: ncu's DRAM bytes per kernel row of one forward (T = 1, 4, 16, 64) beside scripts/gpu_bytes.py's must / does
     (random Q4_1 targets of SmolLM2's shape and the 7B shape; dram/*.json, scripts/ncu_bytes.py)
 12. peer_cuda: llama.cpp's CUDA build (llama-bench, carried) on the same SmolLM2 file: prefill 128 and decode 64 tok/s
     beside beagle bench's (bench.json llama_cpp_cuda_smollm2)
 13. corpus: the corpus's g-* parts generated on the device (tokens only, CORPUS_SECONDS, default 120 s) into
     $OUT/corpus for scripts/corpus.sh ingest; corpus.json (tokens per second)
  $plan7b_line
EOF
}
if [ $DRY = 1 ]; then
  plan
  echo "dry run: built everything, no GPU used"
  exit 0
fi

mkdir -p "$OUT"
if ! build/beagle-cuda generate -m "$M/stories260K.bin" -z "$M/tok512.bin" -n 1 --backend cuda > /dev/null 2> "$OUT/device.txt"; then
  echo "gpu_check.sh: no usable CUDA device: $(cat "$OUT/device.txt")" >&2
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/device.txt" 2>/dev/null || true
plan
fails=0
step() {  # name, command... (a function or a program; STEP_TIMEOUT bounds it: functions cannot go through timeout(1))
  local name=$1; shift
  case "$ONLY" in ""|*,"$name",*) ;; *) return 0 ;; esac
  echo "== $name"
  local t0=$SECONDS
  ( "$@" ) > "$OUT/$name.log" 2>&1 &
  local pid=$!
  ( sleep "${STEP_TIMEOUT:-900}"; echo "gpu_check.sh: step $name ran past STEP_TIMEOUT=${STEP_TIMEOUT:-900} s" >> "$OUT/$name.log"
    pkill -TERM -P "$pid"; kill -TERM "$pid" ) 2> /dev/null &
  local watchdog=$!
  if wait "$pid"; then echo "ok   $name ($((SECONDS - t0)) s)"
  else echo "FAIL $name ($((SECONDS - t0)) s, log $OUT/$name.log)"; tail -20 "$OUT/$name.log"; fails=$((fails+1)); fi
  kill "$watchdog" 2> /dev/null || true
}
export BEAGLE_MODEL=$SMOL BEAGLE_BIN=$PWD/build/beagle
step backend_ops build/test-device/test_cuda_backend_ops
step backend_train build/test-device/test_cuda_backend_train
step backend_graph build/test-device/test_cuda_backend_graph
step backend_tree build/test-device/test_cuda_backend_tree
step generate env BEAGLE_CUDA_BIN=build/beagle-cuda bash test/cli/test_cuda_emu_generate.sh
step bench_sd build/beagle-cuda bench-sd -m "$SMOL" -d "$SMOL_DRAFT" --prompts "$MTBENCH" --per-category 5 \
  --modes none,chain,tree,auto --total-tokens 60 -n 128 -o "$OUT/bench_sd.json"
# the same turns with the rounds' kernels launched one by one (BEAGLE_CUDA_GRAPH=0): what the round graphs save
step bench_sd_nograph env BEAGLE_CUDA_GRAPH=0 build/beagle-cuda bench-sd -m "$SMOL" -d "$SMOL_DRAFT" --prompts "$MTBENCH" \
  --per-category 5 --modes none,chain,tree --total-tokens 60 -n 128 -o "$OUT/bench_sd_nograph.json"

# training: the same 8 steps on both backends
T=(-m "$M/stories260K.bin" -z "$M/tok512.bin")
train_cmp() {
  build/beagle datagen "${T[@]}" --sample 16 -n 64 --shard-seqs 16 --keep-states -o "$OUT/data" -t 2 > /dev/null
  local common=(--data "$OUT/data" --batch 2 --seq-len 64 --window 2 --sim-steps 2 --stage1-epochs 1 --stage2-epochs 1
                --max-steps 8 -s 3 -q)
  build/beagle train "${T[@]}" "${common[@]}" --backend cpu -o "$OUT/cpu.bin"
  build/beagle-cuda train "${T[@]}" "${common[@]}" --backend cuda -o "$OUT/cuda.bin"
  paste "$OUT/cpu.bin.loss.tsv" "$OUT/cuda.bin.loss.tsv" | awk -F'\t' 'NR > 1 { n = NF / 2; a = $3; b = $(n + 3);
    d = a - b; if (d < 0) d = -d; if (d > 1e-3 * (a < 0 ? -a : a) + 1e-6) { print "step " NR - 1 ": cpu " a " cuda " b; bad++ } }
    END { if (NR < 9) { print "only " NR - 1 " steps"; exit 1 } exit bad > 0 }'
}
step train_vs_cpu train_cmp
# data-parallel training over NCCL: the same bits as one process with the same global batch
nccl_ranks() {
  local C=(--data "$OUT/data" --seq-len 32 --window 2 --sim-steps 2 --stage1-epochs 1 --stage2-epochs 1 --batch 8 -q)
  build/beagle-cuda train "${T[@]}" "${C[@]}" -o "$OUT/dp1.bin"
  mpirun --allow-run-as-root -np 1 build/beagle-cuda train "${T[@]}" "${C[@]}" -o "$OUT/dpm1.bin"
  cmp "$OUT/dp1.bin" "$OUT/dpm1.bin"
  timeout 600 mpirun --allow-run-as-root --oversubscribe -np 2 build/beagle-cuda train "${T[@]}" "${C[@]}" -o "$OUT/dpm2.bin"
  cmp "$OUT/dp1.bin" "$OUT/dpm2.bin"
}
nccl_step() {
  command -v mpirun > /dev/null 2>&1 || { echo "mpirun missing (scripts/sysdeps.sh test installs openmpi-bin)"; return 1; }
  nccl_ranks
}
step nccl_ranks nccl_step

# benchmarks
step bench build/beagle-cuda bench -m "$SMOL" -o "$OUT/bench.json.part"
step bench_nograph env BEAGLE_CUDA_GRAPH=0 build/beagle-cuda bench -m "$SMOL" -o "$OUT/bench_nograph.json.part"
# the peer on the same device and file: llama.cpp's CUDA build (scripts/build_llama_cpp.sh with CUDA_ARCH, one
# architecture, carried by gpu_pack.sh), llama-bench's prefill of 128 tokens and decode of 64 as `beagle bench`
# measures them (its defaults), all layers on the GPU, best of the repetitions set beside Beagle's in bench.json
peer_cuda() {
  local L=${LLAMA_BENCH_CUDA:-build/peer-cuda/llama-bench}
  [ -x "$L" ] || { echo "no llama.cpp CUDA build at $L (CUDA_ARCH=90 bash scripts/build_llama_cpp.sh build/peer" \
    "llama-cuda90 OFF llama-bench; gpu_pack.sh carries it)"; return 1; }
  "$L" -m "$SMOL" -ngl 99 -p 128 -n 64 -r 5 -o json > "$OUT/llama_bench_cuda.json"
}
step peer_cuda peer_cuda
# llama.cpp's usual type: SmolLM2 requantized to Q4_K_M here (Q4_K, Q6_K, Q5_0, Q8_0 tensors), benched, and
# greedy SD == plain on it
kquant() {
  local K=$OUT/smol-q4_k_m.gguf P="Write a short story about a robot who learns to paint."
  build/beagle quantize --allow-requantize "$SMOL" "$K" Q4_K_M > /dev/null
  build/beagle-cuda bench -m "$K" -o "$OUT/bench_q4_k_m.json.part"
  build/beagle-cuda generate -m "$K" -p "$P" -n 64 --temp 0 --chat > "$OUT/kq_plain.txt"
  build/beagle-cuda generate -m "$K" -d "$SMOL_DRAFT" --spec tree --total-tokens 60 -p "$P" -n 64 --temp 0 --chat \
    > "$OUT/kq_tree.txt"
  cmp "$OUT/kq_plain.txt" "$OUT/kq_tree.txt"
}
step kquant kquant
smol_train() {
  build/beagle-cuda datagen -m "$SMOL" --prompts "$MTBENCH" --limit 16 -n 128 --keep-states -o "$OUT/smol_data" > /dev/null
  build/beagle-cuda train -m "$SMOL" --data "$OUT/smol_data" --batch 4 --seq-len 256 --stage1-epochs 1 --stage2-epochs 1 \
    --max-steps 8 -q -o "$OUT/smol.bin"
}
step train_smollm2 smol_train
counters() {
  local P="Write a short story about a robot who learns to paint."
  build/beagle-cuda generate -m "$SMOL" -p "$P" -n 64 --temp 0 --chat --json --no-stream 2> "$OUT/gen_none.json"
  build/beagle-cuda generate -m "$SMOL" -d "$SMOL_DRAFT" --spec chain -p "$P" -n 64 --temp 0 --chat --json --no-stream 2> "$OUT/gen_chain.json"
  build/beagle-cuda generate -m "$SMOL" -d "$SMOL_DRAFT" --spec tree --total-tokens 60 -p "$P" -n 64 --temp 0 --chat --json \
    --no-stream 2> "$OUT/gen_tree.json"
  # sampled: the chain drawn and accepted on the device (3 syncs per round), the tree's path rows
  build/beagle-cuda generate -m "$SMOL" -d "$SMOL_DRAFT" --spec chain -p "$P" -n 64 --temp 0.8 --seed 5 --chat --json \
    --no-stream 2> "$OUT/gen_chain_sampled.json"
  build/beagle-cuda generate -m "$SMOL" -d "$SMOL_DRAFT" --spec tree --total-tokens 60 -p "$P" -n 64 --temp 0.8 --seed 5 \
    --chat --json --no-stream 2> "$OUT/gen_tree_sampled.json"
}
step counters counters
# the launch knobs (same bits, other kernels or grids) timed side by side: scripts/gpu_knobs.sh
step knobs bash scripts/gpu_knobs.sh "$SMOL" "$OUT/knobs.json"
# where the time goes: ncu's kernel durations of a SmolLM2 prefill (a 40-token prompt, one forward) and
# 5 decode steps, graphs off (ncu serialises kernels: each carries a few us of launch and drain)
kernel_profile() {
  command -v ncu > /dev/null 2>&1 || { echo "ncu missing (Nsight Compute)"; return 1; }
  local P="The history of the city begins with a small settlement on the river, where traders met to exchange grain, salt and wool."
  BEAGLE_CUDA_GRAPH=0 ncu --csv --metrics gpu__time_duration.sum --launch-count 2000 build/beagle-cuda generate -m "$SMOL" \
    -p "$P" -n 6 --temp 0 > "$OUT/ncu.csv"
  python3 scripts/ncu_kernels.py "$OUT/ncu.csv" > "$OUT/kernels.json"
}
step kernel_profile kernel_profile
# the corpus's GPU parts (scripts/corpus.sh: the g-* parts not complete, or CORPUS_PARTS): the target's answers
# as token ids, CORPUS_BATCH (256) sequences a pass, for CORPUS_SECONDS (120) at most; every complete shard is
# packed into $OUT/corpus (commit with `bash scripts/corpus.sh ingest DIR/corpus`), corpus.json says how fast
corpus_gen() {
  local parts=${CORPUS_PARTS:-$(bash scripts/corpus.sh status | awk '$1 ~ /^g-/ && $2 != $4 {print $1}')} t0=$SECONDS p
  # without data/train (gpu_pack.sh stash leaves it here), only the parts whose prompts the target writes itself
  [ -n "${CORPUS_PARTS:-}" ] || [ -d data/train ] || parts=$(for p in $parts; do case $p in g-self*) echo "$p" ;; esac; done)
  for p in $parts; do cat "data/corpus/smollm2/$p/SHA256SUMS" 2> /dev/null | awk -v p="$p" '{print p "/" $2}'; done \
    > "$OUT/corpus_before.txt"  # shards committed before this run: not counted
  # shellcheck disable=SC2086
  timeout "${CORPUS_SECONDS:-120}" env BIN=build/beagle-cuda BATCH="${CORPUS_BATCH:-256}" THREADS="$JOBS" NICE=0 \
    bash scripts/corpus.sh generate $parts || true
  local secs=$((SECONDS - t0))
  # shellcheck disable=SC2086
  bash scripts/corpus.sh pack $parts
  mkdir -p "$OUT/corpus"
  for p in $parts; do [ -d "data/corpus/smollm2/$p" ] && cp -r "data/corpus/smollm2/$p" "$OUT/corpus/"; done
  python3 - "$OUT" "$secs" $parts <<'PY'
import glob, json, os, struct, sys
out, secs, parts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
before = set(open(os.path.join(out, "corpus_before.txt")).read().split())
r = {"seconds": secs, "parts": {}}
for p in parts:  # the shards this run wrote
    seqs = toks = 0
    shards = [f for f in sorted(glob.glob(os.path.join("build/corpus", p, "shard-*.bin")))
              if p + "/" + os.path.basename(f) not in before]
    for f in shards:
        n_seqs, n_toks = struct.unpack_from("<IQ", open(f, "rb").read(32), 20)
        seqs, toks = seqs + n_seqs, toks + n_toks
    r["parts"][p] = {"shards": len(shards), "sequences": seqs, "tokens": toks}
r["tokens"] = sum(v["tokens"] for v in r["parts"].values())
r["tokens_per_s"] = round(r["tokens"] / max(secs, 1), 1)
json.dump(r, open(os.path.join(out, "corpus.json"), "w"), indent=2)
print(json.dumps(r))
PY
}
step corpus corpus_gen
# the byte model beside the device: ncu's DRAM bytes of one forward, row by row against scripts/gpu_bytes.py
# (docs/gpu-kernels.md), for a random Q4_1 target of SmolLM2's shape (30 layers) and the 7B shape (2 layers):
# prefills of T = 4, 16, 64 prompt tokens (forward 0, an empty cache) and a decode step after 4 tokens (forward 1)
dram_bytes() {
  command -v ncu > /dev/null 2>&1 || { echo "ncu missing (Nsight Compute)"; return 1; }
  mkdir -p "$OUT/dram"
  local shape R spec T p
  for shape in smollm2 7b; do
    R=$OUT/dram/$shape.gguf
    if [ $shape = smollm2 ]; then
      [ -s "$R" ] || build/test/tool_random_llama "$R" --layers 30 --vocab 49152 --dim 576 --heads 9 --kv-heads 3 --ffn 1536
      spec="smollm2,V=49152,head_dt=Q4_1,embd_dt=Q4_1"
    else
      [ -s "$R" ] || build/test/tool_random_llama "$R" --layers 2 --vocab 32000
      spec="7b,L=2,head_dt=Q4_1,embd_dt=Q4_1"
    fi
    for T in 1 4 16 64; do
      # a prompt of exactly n tokens: <s>, a leading piece, one token a letter; the forward read: the prefill of
      # T tokens (forward 0, cache 0), or for T = 1 the decode step after a 4-token prompt (forward 1, cache 4)
      local n=$T gen=1 fwd=0 mspec="$spec,cache=0:$T:1" f=$OUT/dram/$shape-$T
      [ $T = 1 ] && { n=4; gen=2; fwd=1; mspec="$spec,cache=4:1"; }
      p=$(python3 -c "import string, sys; print((string.ascii_lowercase * 4)[:int(sys.argv[1]) - 2])" $n)
      [ "$(build/beagle tokenize -m "$R" -p "$p" 2>&1 > /dev/null | awk '/tokens$/ {print $1}')" = $n ] \
        || { echo "the prompt of $n tokens tokenizes to another count"; return 1; }
      ncu --csv --print-units base --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
        build/beagle-cuda generate -m "$R" -p "$p" -n $gen --temp 0 > "$f.csv"
      python3 scripts/gpu_bytes.py --bytes "$mspec" > "$f.model.json"
      python3 scripts/ncu_bytes.py "$f.csv" $fwd "$f.model.json" > "$f.json"
    done
  done
}
step dram_bytes dram_bytes

# 7B-shaped: the test on the device, then the benchmark runs (random Q4_1 weights, 2 layers, vocab 32000)
step r7b_test env BEAGLE_CUDA_BIN=build/beagle-cuda R7B_DIR="$OUT/r7b" bash test/cli/test_7b_shaped.sh
r7b_bench() {
  local R=$OUT/r7b/r7b-2l-v32000.gguf P="Once upon a time there was"
  [ -s "$R" ] || build/test/tool_random_llama "$R" --layers 2 --vocab 32000
  build/beagle-cuda datagen -m "$R" --sample 16 -n 64 --batch 16 --shard-seqs 16 --keep-states -o "$OUT/r7b_data" > /dev/null
  build/beagle-cuda train -m "$R" --data "$OUT/r7b_data" --batch 2 --seq-len 64 --window 2 --sim-steps 2 --stage1-epochs 1 --stage2-epochs 1 \
    --max-steps 8 -q -o "$OUT/r7b_draft.bin"
  build/beagle-cuda generate -m "$R" -p "$P" -n 64 --temp 0 --json -c 512 > "$OUT/r7b_plain.txt" 2> "$OUT/r7b_plain.json"
  build/beagle-cuda generate -m "$R" -d "$OUT/r7b_draft.bin" --spec tree -p "$P" -n 64 --temp 0 --json -c 512 \
    > "$OUT/r7b_tree.txt" 2> "$OUT/r7b_tree.json"
  cmp "$OUT/r7b_plain.txt" "$OUT/r7b_tree.txt"
  build/beagle generate -m "$R" -d "$OUT/r7b_draft.bin" --plan model -c 512 > "$OUT/r7b_plan.txt"
  build/beagle "${PLAN7B[@]}" > "$OUT/plan_7b.txt"
}
step r7b_bench r7b_bench
# the 7B shape at full depth: decode against the HBM roofline, and the verify cost curve
r7b_full() {
  local R=$OUT/r7b/r7b-32l-v32000.gguf
  mkdir -p "$OUT/r7b"
  [ -s "$R" ] || build/test/tool_random_llama "$R" --layers 32 --vocab 32000
  build/beagle-cuda bench -m "$R" -o "$OUT/bench_7b_32l.json.part"
}
step r7b_full r7b_full

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def load(name, last_line=False):
    p = os.path.join(out, name)
    if not os.path.exists(p): return None
    txt = open(p).read().strip()
    try: return json.loads(txt.splitlines()[-1] if last_line else txt)
    except Exception: return None
r = {"device": open(os.path.join(out, "device.txt")).read().strip()}
b = load("bench.json.part")
if b: r["bench"] = b
b = load("bench_q4_k_m.json.part")
if b: r["bench_q4_k_m"] = b
b = load("bench_7b_32l.json.part")
if b: r["bench_7b_32_layers"] = b
# the HBM roofline: decode reads every weight byte once a token; nominal peak bandwidth by device name (bytes/s)
PEAK = [("H200", 4.8e12), ("H100 NVL", 3.9e12), ("H100 PCIe", 2.0e12), ("H100", 3.35e12), ("A100-SXM4-80GB", 2.039e12),
        ("A100", 1.555e12), ("L40S", 0.864e12), ("4090", 1.008e12)]
peak = next((bw for name, bw in PEAK if name in r["device"]), None)
if peak:
    r["hbm_peak_bytes_s"] = peak
    for key in ("bench", "bench_7b_32_layers"):
        b = r.get(key)
        if b and b.get("paths"):
            d = b["paths"][0]["decode_tok_s"]
            b["hbm_roofline_tok_s"] = round(peak / b["weight_bytes_per_token"], 1)
            b["hbm_roofline_fraction"] = round(d * b["weight_bytes_per_token"] / peak, 4)
b = load("bench_nograph.json.part")
if b: r["bench_without_cuda_graphs"] = b
s = load("bench_sd.json")
if s: r["bench_sd_mt_bench_40_tree60"] = s
s = load("bench_sd_nograph.json")
if s: r["bench_sd_mt_bench_40_tree60_without_cuda_graphs"] = s
t = load("smol.bin.json")
if t: r["train_smollm2"] = {k: t.get(k) for k in ("steps", "train_seconds", "tokens_trained", "gpu")}
t = load("r7b_draft.bin.json")
if t: r["train_7b_shaped_draft"] = {k: t.get(k) for k in ("steps", "seconds_per_step", "train_seconds", "gpu")}
def total_bytes(name):
    p = os.path.join(out, name)
    if not os.path.exists(p): return None
    return [float(l.split()[1]) for l in open(p) if l.startswith("total_bytes")][0]
r["sd_7b_shaped_2l"] = {m: {k: (load("r7b_%s.json" % m, True) or {}).get(k) for k in ("tokens", "tau", "tok_s", "gpu")}
                        for m in ("plain", "tree")}
r["sd_7b_shaped_2l"]["planned_bytes_tree"] = total_bytes("r7b_plan.txt")
r["plan_7b_q4_1_ctx4096_bytes"] = total_bytes("plan_7b.txt")
k = load("knobs.json")
if k: r["knobs_smollm2"] = k
k = load("kernels.json")
if k: r["kernels_ncu"] = k
k = load("corpus.json")
if k: r["corpus_datagen_cuda"] = k
# llama-bench's JSON: one object per test (n_prompt, n_gen, avg_ts); Beagle's bench on the same file beside it
lb = load("llama_bench_cuda.json")
if lb:
    peer = {"llama_bench": lb}
    pp = [t["avg_ts"] for t in lb if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0]
    tg = [t["avg_ts"] for t in lb if t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0]
    mine = (r.get("bench") or {}).get("paths", [{}])[0]
    if pp and mine.get("prefill_tok_s"): peer["prefill_over_llama_cpp"] = round(mine["prefill_tok_s"] / pp[0], 3)
    if tg and mine.get("decode_tok_s"): peer["decode_over_llama_cpp"] = round(mine["decode_tok_s"] / tg[0], 3)
    r["llama_cpp_cuda_smollm2"] = peer
# step dram_bytes: dram/SHAPE-T.json beside its .csv and .model.json
dram, ddir = {}, os.path.join(out, "dram")
for f in sorted(os.listdir(ddir)) if os.path.isdir(ddir) else []:
    d = load("dram/" + f) if f.endswith(".json") and not f.endswith(".model.json") else None
    if d: dram[f[:-len(".json")].replace("-", "_T")] = d
if dram: r["dram_bytes_ncu_vs_model"] = dram
r["generate_counters"] = {m: (load("gen_%s.json" % m, True) or {}).get("gpu")
                          for m in ("none", "chain", "tree", "chain_sampled", "tree_sampled")}
json.dump(r, open(os.path.join(out, "bench.json"), "w"), indent=2)
print("wrote", os.path.join(out, "bench.json"))
EOF
echo "$fails failed steps"
[ $fails -eq 0 ]
