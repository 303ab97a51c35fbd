#!/usr/bin/env bash
# test_gpu_check_dry_run.sh: scripts/gpu_check.sh --dry-run (what CI runs without a GPU) builds the CUDA
# binary and the device tests (build/test-device/, linked with the nvcc objects), prints the plan and
# exits 0 without touching a GPU, with the 7B target's inference plan line (under 24 GiB at Q4_1, ctx 4096) (also before the default model is fetched, as on CI's fresh clone); a missing data file or an unknown argument is refused with a
# message naming it. Cheap after test_cuda_build.sh (make cuda is then up to date: only the device
# tests are linked). Skipped (exit 77, says so) when nvcc is absent.
set -u
cd "$(dirname "$0")/../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "${NVCC:-$CUDA_HOME/bin/nvcc}" ]; then
  echo "SKIP: no nvcc at ${NVCC:-$CUDA_HOME/bin/nvcc}"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
if JOBS=2 bash scripts/gpu_check.sh --dry-run > "$tmp/out" 2>&1; then ok "--dry-run exits 0"; else bad "--dry-run failed"; tail -20 "$tmp/out"; fi
grep -q "^dry run: built everything, no GPU used" "$tmp/out" && ok "says it used no GPU" || bad "no dry-run line"
for s in test_cuda_backend_ops test_cuda_backend_train test_cuda_emu_generate.sh bench-sd bench.json test_7b_shaped.sh \
         ncu_bytes.py llama-bench "corpus.sh ingest"; do
  grep -q "$s" "$tmp/out" && ok "plan names $s" || bad "plan does not name $s"
done
grep -Eq "^  7B plan \(build/beagle generate --plan 7b,ffn=14336,q4_1 -c 4096\): [0-9.]+ GiB < 24 GiB" "$tmp/out" &&
  ok "plan line of the 7B target: $(grep '7B plan' "$tmp/out")" || { bad "no 7B plan line"; grep -i 7b "$tmp/out"; }
for b in build/beagle-cuda build/test/tool_random_llama build/test-device/test_cuda_backend_ops build/test-device/test_cuda_backend_train; do
  [ -x "$b" ] && ok "built $b" || bad "$b not built"
done
if bash scripts/gpu_check.sh --dry-run --data "$tmp/none" > "$tmp/miss" 2>&1; then
  bad "a missing data folder was accepted"
else
  grep -q "missing $tmp/none/models/stories260K.bin" "$tmp/miss" && ok "missing model named: $(head -1 "$tmp/miss")" ||
    { bad "unclear message"; cat "$tmp/miss"; }
fi
# CI runs the dry run on a fresh clone before make test has fetched the default model: built, said, exit 0
if BEAGLE_MODEL="$tmp/none.gguf" bash scripts/gpu_check.sh --dry-run > "$tmp/nomodel" 2>&1 &&
   grep -q "missing $tmp/none.gguf (make model fetches it)" "$tmp/nomodel"; then
  ok "dry run without the fetched default model: says so, exit 0"
else
  bad "dry run without the fetched default model"; tail -5 "$tmp/nomodel"
fi
bash scripts/gpu_check.sh --bogus > "$tmp/arg" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "unknown argument '--bogus'" "$tmp/arg" && ok "unknown argument refused (exit 2)" || bad "--bogus: exit $rc"
echo "$fails failures"
[ $fails -eq 0 ]
