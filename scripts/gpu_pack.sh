#!/usr/bin/env bash
# gpu_pack.sh: packs what scripts/gpu_check.sh needs on a GPU machine that receives only a copy of the
# working tree, at most 64 MiB per call, and has neither network nor cpp-httplib (an offline
# H100 or H200): stripped binaries built here (make cuda cuda-device-tests, the same nvcc), the shared
# libraries they need beyond the CUDA image (data/ travels with the tree), the shipped SmolLM2 draft,
# and the default model xz-compressed and split in two. Part A goes with the first call (the steps
# without SmolLM2), part B with the second (the SmolLM2 steps, then CORPUS_SECONDS of the corpus's GPU parts, whose
# shards come back in corpus/ for `bash scripts/corpus.sh ingest`); the machine must stay warm between
# them, since part A's half of the model waits in build/dev/ there. Writes .dev/a, .dev/b (git-ignored
# through .git/info/exclude) and prints the calls.
# The model alone is 90 MB compressed, so the tree must be small while the calls run: `gpu_pack.sh stash`
# moves what the device does not read (the draft, which part A carries; docs/; data/train/ and data/corpus/,
# so the corpus step runs the self-prompted parts) to .dev-stash/, and `gpu_pack.sh restore` puts it back.
# The model is split so that tree + part stays under 64 MiB in each call (checked, with the sizes printed).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=weights/SmolLM2-135M-Instruct.Q4_1.gguf
STASH="weights/beagle-smollm2-135m.bin docs data/train data/corpus"
LIMIT=67108864  # bytes a call may carry, tree and part together (64 MiB)
for x in /.dev/ /.dev-stash/; do grep -qx "$x" .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo "$x" >> .git/info/exclude; }; done
case "${1:-}" in
  stash)
    [ ! -e .dev-stash ] || { echo "gpu_pack.sh: .dev-stash exists: restore first" >&2; exit 1; }
    for p in $STASH; do mkdir -p ".dev-stash/$(dirname "$p")" && mv "$p" ".dev-stash/$p"; done
    echo "moved out of the tree until 'gpu_pack.sh restore': $STASH"; exit 0 ;;
  restore)
    for p in $STASH; do
      [ -e ".dev-stash/$p" ] || continue
      [ ! -e "$p" ] || { echo "gpu_pack.sh: $p is back already; .dev-stash/$p left alone" >&2; exit 1; }
      mv ".dev-stash/$p" "$p"
    done
    rm -rf .dev-stash; git status --short | head; echo "restored: $STASH"; exit 0 ;;
  "") ;;
  *) echo "usage: gpu_pack.sh [stash | restore]" >&2; exit 2 ;;
esac
[ ! -e .dev-stash ] || { echo "gpu_pack.sh: pack before stash (the draft is in .dev-stash): restore first" >&2; exit 1; }
make -j"$(nproc)" cuda cuda-device-tests build/beagle build/test/tool_random_llama
rm -rf .dev/a .dev/b .dev/c && mkdir -p .dev/a .dev/b
pk=$(mktemp -d); trap 'rm -rf "$pk"' EXIT
mkdir -p "$pk/build/test-device" "$pk/build/test" "$pk/lib"
for f in beagle beagle-cuda test/tool_random_llama test-device/test_cuda_backend_ops test-device/test_cuda_backend_train \
         test-device/test_cuda_backend_graph test-device/test_cuda_backend_tree; do
  [ -f "build/$f" ] && strip -o "$pk/build/$f" "build/$f"
done
for l in $(ldd build/beagle-cuda | awk '/httplib|brotli|libssl|libcrypto/ {print $3}'); do cp -L "$l" "$pk/lib/"; done
cp weights/beagle-smollm2-135m.bin "$pk/"
tar -C "$pk" -cf - . | xz -6 -T0 > .dev/a/pk.tar.xz
# the model compressed once (kept in .dev/ beside its SHA-256), then split so that both calls fit
sha256sum "$MODEL" > .dev/b/model.sha
cmp -s .dev/b/model.sha .dev/model.xz.sha 2> /dev/null || { xz -9 -T0 -c "$MODEL" > .dev/model.xz && cp .dev/b/model.sha .dev/model.xz.sha; }
tree=$(git ls-files -z | grep -zv "^\($(echo "$STASH" | sed 's/ /\\|/g')\)" | xargs -0 du -cb | tail -1 | cut -f1)
budget=$((LIMIT - tree - 262144))  # bytes a part may take beside the stashed tree (256 KiB for the scripts)
m1=$((budget - $(stat -c %s .dev/a/pk.tar.xz)))
head -c "$m1" .dev/model.xz > .dev/a/m1
tail -c +$((m1 + 1)) .dev/model.xz > .dev/b/m2
# the peer: llama.cpp's CUDA build for sm_90 (H100 / H200), when it has been built here (about 20 minutes on
# two cores: CUDA_ARCH=90 bash scripts/build_llama_cpp.sh build/peer llama-cuda90 OFF llama-bench). Stripped
# it is 70 MB, 41 MB compressed: too much beside a part of the model, so it goes in a third part, C, whose call
# (about a minute, after B: it reads the model B unpacked) runs step peer_cuda alone.
LB=build/peer/llama-cuda90/bin/llama-bench
if [ -x "$LB" ]; then
  mkdir -p .dev/c && strip -o "$pk/llama-bench" "$LB" && xz -9 -T0 -c "$pk/llama-bench" > .dev/c/llama-bench.xz
  cat > .dev/c/run.sh <<'C'
set -u
[ -f weights/SmolLM2-135M-Instruct.Q4_1.gguf ] || { echo "the model is missing: run part B first, machine warm"; exit 3; }
export LD_LIBRARY_PATH=$PWD/build/dev/lib
mkdir -p build/peer-cuda && xz -dc .dev/c/llama-bench.xz > build/peer-cuda/llama-bench && chmod +x build/peer-cuda/llama-bench
STEP_TIMEOUT=${STEP_TIMEOUT:-120} bash scripts/gpu_check.sh --prebuilt --out build/gpu_check --only peer_cuda
cd build/gpu_check && cp bench.json llama_bench_cuda.json "$OUT/" 2>/dev/null; true
C
else
  echo "gpu_pack.sh: no $LB: no part C, step peer_cuda not packed (see the line above it in this script)"
fi
cat > .dev/a/run.sh <<'A'
set -u
mkdir -p build/dev && xz -dc .dev/a/pk.tar.xz | tar -C build/dev -xf -
cp .dev/a/m1 build/dev/m1 && cp -a build/dev/build/. build/ && cp build/dev/beagle-smollm2-135m.bin weights/
export LD_LIBRARY_PATH=$PWD/build/dev/lib
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
STEP_TIMEOUT=${STEP_TIMEOUT:-120} bash scripts/gpu_check.sh --prebuilt --out build/gpu_check \
  --only backend_ops,backend_train,backend_tree,train_vs_cpu,r7b_test,r7b_bench,r7b_full,dram_bytes
A
cat > .dev/b/run.sh <<'B'
set -u
[ -f build/dev/m1 ] || { echo "build/dev/m1 missing: the machine went cold between the calls"; exit 3; }
export LD_LIBRARY_PATH=$PWD/build/dev/lib
cp build/dev/beagle-smollm2-135m.bin weights/
cat build/dev/m1 .dev/b/m2 | xz -dc > weights/SmolLM2-135M-Instruct.Q4_1.gguf && sha256sum -c .dev/b/model.sha || exit 4
STEP_TIMEOUT=${STEP_TIMEOUT:-120} bash scripts/gpu_check.sh --prebuilt --out build/gpu_check \
  --only backend_graph,generate,bench_sd,bench_sd_nograph,bench,bench_nograph,train_smollm2,counters,knobs,kernel_profile,corpus
cd build/gpu_check && tar -czf "$OUT/results.tgz" *.log *.json *.txt *.tsv *.png *.csv r7b/*.log dram/*.json 2>/dev/null
cp bench.json "$OUT/" 2>/dev/null; cp -r corpus "$OUT/" 2>/dev/null; true
B
# what travels with each call: the tree (with the stash moved out) and the part; at most 64 MiB
over=0
for p in .dev/a .dev/b .dev/c; do
  [ -d "$p" ] || continue
  total=$((tree + $(du -sb "$p" | cut -f1)))
  echo "$p: tree $((tree / 1048576)) MiB + part = $(echo "$total / 1048576" | bc -l | cut -c1-5) MiB"
  [ $total -le $LIMIT ] || { echo "gpu_pack.sh: $p is over 64 MiB with the tree" >&2; over=1; }
done
[ $over = 0 ] || exit 1
echo "first: bash scripts/gpu_pack.sh stash (and bash scripts/gpu_pack.sh restore after the last call)"
echo "call 1: run 'bash .dev/a/run.sh' with carry [.dev/a]; call 2 at once after it: 'bash .dev/b/run.sh' with carry [.dev/b]"
[ -d .dev/c ] && echo "call 3 (llama.cpp's CUDA build, after call 2): 'bash .dev/c/run.sh' with carry [.dev/c]"
true
