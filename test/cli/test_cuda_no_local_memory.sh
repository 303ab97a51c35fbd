#!/usr/bin/env bash
# test_cuda_no_local_memory.sh: no kernel of cuda/*.cu keeps per-thread state in local memory. ptxas
# (nvcc -Xptxas -v, sm_90) reports each kernel's stack frame: a per-thread array indexed at run time
# (a loop with a runtime bound over register state, a kernel-argument array indexed by blockIdx) lands
# there, and every access is then a memory round trip: a 304-byte frame per thread in the query-tiled
# attention makes a launch-bound SmolLM2 decode step many times slower (docs/gpu.md).
# Allowed, with the reason: rope_kernel (sinf/cosf keep their slow-path argument reduction, |x| > 105615,
# on the stack; the angles here are position x frequency, far below). Nothing is run (no GPU needed);
# without nvcc the test is skipped (exit 77).
set -u
cd "$(dirname "$0")/../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA_HOME/bin/nvcc}
[ -x "$NVCC" ] || { echo "SKIP: no nvcc at $NVCC"; exit 77; }
ALLOWED="rope_kernel"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
report() {  # one line per kernel: file name frame_bytes registers
  local f=$1 o=$2/$(basename "$1" .cu)
  "$NVCC" -std=c++17 -O2 -Icuda -Isrc -isystem "$CUDA_HOME/include/cccl" -arch=sm_90 -Xptxas -v -c "$f" -o "$o.o" \
    > "$o.log" 2>&1 || { echo "$f COMPILE-FAILED 0 0"; cat "$o.log" >&2; return 0; }
  awk -v f="$f" '/Compiling entry function/ { match($0, /_Z[A-Za-z0-9_]+/); k = substr($0, RSTART, RLENGTH) }
                 /bytes stack frame/ { frame = $1 }
                 /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($i == "Used") regs = $(i + 1); print f, k, frame, regs }' "$o.log"
}
export -f report
export NVCC CUDA_HOME
ls cuda/*.cu | xargs -P 2 -I{} bash -c 'report "$1" "$2"' _ {} "$out" > "$out/all.txt"
bad=0; n=0
while read -r f k frame regs; do
  name=$(echo "$k" | c++filt | sed 's/(.*//')
  n=$((n + 1))
  if [ "$k" = COMPILE-FAILED ]; then echo "FAIL  $f does not compile"; bad=$((bad + 1)); continue; fi
  case "$frame$regs" in *[!0-9]*|"") echo "FAIL  cannot read ptxas's report for '$k' ($f): '$frame' '$regs'"; bad=$((bad + 1)); continue ;; esac
  if [ "$frame" -gt 0 ]; then
    case " $ALLOWED " in
      *" $name "*) echo "ok    $name: $frame-byte stack frame (allowed, see the header)" ;;
      *) echo "FAIL  $name ($f): $frame-byte stack frame, $regs registers"; bad=$((bad + 1)) ;;
    esac
  fi
done < "$out/all.txt"
[ $n -gt 20 ] || { echo "FAIL: only $n kernels found in the ptxas output (expected every kernel of cuda/*.cu)"; exit 1; }
echo "$n kernels checked, $bad with local memory"
[ $bad -eq 0 ]
