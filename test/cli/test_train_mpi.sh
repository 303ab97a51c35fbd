#!/usr/bin/env bash
# test_train_mpi.sh: data-parallel `beagle train` and `beagle datagen` under mpirun on the CPU backend
# (docs/distributed.md). 1 process without mpirun, and mpirun -np 1, 2 and 4 with the same global batch,
# give the same checkpoint (weights, AdamW moments, random streams, every step's losses: all bytes but
# the wall-clock train_seconds line), the same draft file and loss TSV; also when a batch has fewer
# items than ranks, and when a run is resumed with another number of ranks. (That the comparison
# catches a rank-count-dependent reduction is shown by test/unit/test_grad_tree.cpp, which plants one
# through GradTree::local_sum.) A NaN planted in the data stops every rank. datagen over 2 ranks
# writes the one-process shards byte for byte, and a rank's missing shards are regenerated on resume.
# Without mpirun the binary loads no MPI library.
# The CUDA backend (build/beagle-cuda-emu: kernels in the CPU emulator, gradients over the project's
# NCCL stand-in cuda/emu/nccl.cpp): 2 and 4 ranks = 1 process bit for bit.
set -u
M=$BEAGLE_ROOT/data/models
B=$BEAGLE_BIN
command -v mpirun > /dev/null || { echo "skip: mpirun missing (scripts/sysdeps.sh test installs openmpi-bin)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
# Under ASan (make test-asan) the ranks run without LeakSanitizer: Open MPI's plugins leak at MPI_Finalize
# from dlopen'ed modules already unloaded at exit, which no suppression can name; memory errors are still
# checked in every rank, and leaks in the 1-process runs of the same code.
mpi() {
  local np=$1; shift
  if [ -n "${ASAN_OPTIONS:-}" ]; then
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" mpirun --oversubscribe --allow-run-as-root --bind-to none -x ASAN_OPTIONS -np "$np" "$@"
  else
    mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" "$@"
  fi
}
# two checkpoints equal in every byte but the text header's train_seconds line (and the CRC over it)
same_ckpt() { python3 "$BEAGLE_ROOT/test/tools/same_ckpt.py" "$1" "$2"; }
same_run() { same_ckpt "$1.ckpt" "$2.ckpt" && cmp -s "$1" "$2" && cmp -s "$1.loss.tsv" "$2.loss.tsv"; }
T=(-m "$M/stories260K.bin" -z "$M/tok512.bin")

# ---- datagen: 2 ranks = 1 process, byte for byte; a rank's missing part is regenerated
"$B" datagen "${T[@]}" --sample 16 -n 64 --shard-seqs 4 -o "$tmp/d1" -t 1 2> /dev/null || bad "datagen, 1 process"
mpi 2 "$B" datagen "${T[@]}" --sample 16 -n 64 --shard-seqs 4 -o "$tmp/d2" -t 1 2> "$tmp/d2.log" || { bad "datagen, 2 ranks"; cat "$tmp/d2.log"; }
diff -r "$tmp/d1" "$tmp/d2" > /dev/null && ok "datagen on 2 ranks: $(ls "$tmp/d2" | grep -c shard) shards identical to 1 process" ||
  bad "datagen on 2 ranks differs from 1 process"
rm "$tmp/d2/shard-00001.bin" "$tmp/d2/shard-00003.bin"  # what a rank killed before writing its shards leaves
mpi 2 "$B" datagen "${T[@]}" --sample 16 -n 64 --shard-seqs 4 -o "$tmp/d2" -t 1 2> /dev/null || bad "datagen resume"
diff -r "$tmp/d1" "$tmp/d2" > /dev/null && ok "rank 1's missing shards regenerated identically" || bad "resumed datagen differs"

# ---- train: 1 process vs 1, 2, 4 ranks, global batch 8 (stage 1 and stage 2)
C=(--data "$tmp/d1" --seq-len 32 --window 2 --sim-steps 2 --stage1-epochs 2 --stage2-epochs 1 -t 1 -q)
"$B" train "${T[@]}" "${C[@]}" --batch 8 -o "$tmp/s.bin" > /dev/null 2> "$tmp/s.log" || { bad "train, 1 process"; cat "$tmp/s.log"; }
for np in 1 2 4; do
  mpi $np "$B" train "${T[@]}" "${C[@]}" --batch 8 -o "$tmp/p$np.bin" > /dev/null 2> "$tmp/p$np.log" || { bad "train, $np ranks"; cat "$tmp/p$np.log"; }
  same_run "$tmp/s.bin" "$tmp/p$np.bin" && ok "$np rank(s), batch 8: weights, moments, losses identical to 1 process ($(($(wc -l < "$tmp/s.bin.loss.tsv") - 1)) steps)" ||
    bad "$np rank(s), batch 8 differ from 1 process"
done
# a global batch of 3 over 4 ranks: one rank has no item in a batch
"$B" train "${T[@]}" "${C[@]}" --batch 3 -o "$tmp/s3.bin" > /dev/null 2>&1 || bad "train batch 3"
mpi 4 "$B" train "${T[@]}" "${C[@]}" --batch 3 -o "$tmp/p3.bin" > /dev/null 2> "$tmp/p3.log" || { bad "train batch 3, 4 ranks"; cat "$tmp/p3.log"; }
same_run "$tmp/s3.bin" "$tmp/p3.bin" && ok "4 ranks, batch 3 (a rank idle in each batch): identical to 1 process" || bad "4 ranks, batch 3 differ"

# ---- resume with another number of ranks: 4 ranks stop at step 3, 1 process goes on; 1 process stops, 2 ranks go on
mpi 4 "$B" train "${T[@]}" "${C[@]}" --batch 8 --max-steps 3 -o "$tmp/r.bin" > /dev/null 2>&1 || bad "train 4 ranks to step 3"
"$B" train "${T[@]}" "${C[@]}" --batch 8 --resume "$tmp/r.bin.ckpt" -o "$tmp/r.bin" > /dev/null 2>&1 || bad "resume on 1 process"
same_run "$tmp/s.bin" "$tmp/r.bin" && ok "4 ranks to step 3, resumed by 1 process: identical to the straight run" || bad "4 -> 1 resume differs"
"$B" train "${T[@]}" "${C[@]}" --batch 8 --max-steps 2 -o "$tmp/q.bin" > /dev/null 2>&1 || bad "train 1 process to step 2"
mpi 2 "$B" train "${T[@]}" "${C[@]}" --batch 8 --resume "$tmp/q.bin.ckpt" -o "$tmp/q.bin" > /dev/null 2>&1 || bad "resume on 2 ranks"
same_run "$tmp/s.bin" "$tmp/q.bin" && ok "1 process to step 2, resumed by 2 ranks: identical to the straight run" || bad "1 -> 2 resume differs"

# ---- the CUDA backend in the emulator: gradients exchanged with ncclSend/ncclRecv (the stand-in)
E=${BEAGLE_CUDA_EMU_BIN:-$(dirname "$B")/beagle-cuda-emu}  # make test-asan: the -O2 build (the emulator is not built with ASan)
if [ -x "$E" ]; then
  CE=(--data "$tmp/d1" --seq-len 32 --window 2 --sim-steps 2 --stage1-epochs 1 --stage2-epochs 1 --max-steps 4 --batch 4 -t 1)
  "$E" train "${T[@]}" "${CE[@]}" -q -o "$tmp/es.bin" > /dev/null 2> "$tmp/es.log" || { bad "emulator train, 1 process"; cat "$tmp/es.log"; }
  for np in 2 4; do
    mpi $np "$E" train "${T[@]}" "${CE[@]}" -o "$tmp/e$np.bin" > /dev/null 2> "$tmp/e$np.log" || { bad "emulator train, $np ranks"; cat "$tmp/e$np.log"; }
    grep -q "gradients over nccl" "$tmp/e$np.log" && same_run "$tmp/es.bin" "$tmp/e$np.bin" &&
      ok "CUDA backend (emulator), $np ranks over the NCCL stand-in: identical to 1 process" || bad "CUDA backend (emulator), $np ranks differ"
  done
else
  bad "$E missing (make cuda-emu; make tests builds it)"
fi

# ---- without mpirun no MPI library is loaded (the binary needs none); under mpirun libmpi is initialized
n=$(LD_DEBUG=libs "$B" train "${T[@]}" "${C[@]}" --batch 8 --max-steps 1 -o "$tmp/l.bin" 2>&1 | grep -c "libmpi")
[ "$n" = 0 ] && ok "1 process without mpirun: libmpi never loaded" || bad "libmpi loaded without mpirun ($n lines)"
n=$(LD_DEBUG=libs mpi 1 "$B" train "${T[@]}" "${C[@]}" --batch 8 --max-steps 1 -o "$tmp/l.bin" 2>&1 | grep -c "calling init: .*libmpi.so")
[ "$n" -ge 1 ] && ok "under mpirun: libmpi loaded at run time" || bad "libmpi not loaded under mpirun"

# ---- a power-of-two number of ranks only; a failing rank stops every rank (no hang)
mpi 3 "$B" train "${T[@]}" "${C[@]}" --batch 8 -o "$tmp/x.bin" > /dev/null 2> "$tmp/x.log"
[ $? -ne 0 ] && grep -q "power-of-two number of ranks" "$tmp/x.log" && ok "3 ranks refused: $(grep -m1 power "$tmp/x.log")" || { bad "3 ranks"; cat "$tmp/x.log"; }
# (the NaN is planted in stored states: the same data with --keep-states, 1 is tokens only)
"$B" datagen "${T[@]}" --sample 16 -n 64 --shard-seqs 4 --keep-states -o "$tmp/dn" -t 1 2> /dev/null &&
  python3 "$BEAGLE_ROOT/test/tools/poison_shard.py" "$tmp/dn/shard-00000.bin" 0 || bad "poison_shard"
CN=(--data "$tmp/dn" --seq-len 32 --window 2 --sim-steps 2 --stage1-epochs 2 --stage2-epochs 1 -t 1 -q)  # C on the poisoned copy
mpi 2 "$B" train "${T[@]}" "${CN[@]}" --batch 8 -o "$tmp/n.bin" > /dev/null 2> "$tmp/n.log"
[ $? -ne 0 ] && grep -q "the loss is nan at step" "$tmp/n.log" && ok "a NaN in the data stops both ranks with the error: $(grep -o "the loss is nan at step [0-9]*" "$tmp/n.log" | head -1)" || { bad "NaN on 2 ranks"; cat "$tmp/n.log"; }
echo "$fails failures"
[ $fails -eq 0 ]
