#!/usr/bin/env bash
# test_train_init.sh: `beagle train --init DRAFT` (continued training) starts from that draft's
# weights: with lr 1e-12 and no noise its first-step CE is near the CE the training run ended at
# (within 1.5x; the last training step had noise) and far below a random init's (< 0.8x), and a
# draft of another shape, or a missing file, is refused by name. A reduced vocabulary is kept from the init
# draft; with --new-vocab it is chosen from the run's data (the d2t of a fresh run on that data) while the
# trained tensors carry over (first-step CE < 0.8x a random init's on the same vocabulary).
set -u
M=$BEAGLE_ROOT/data/models
B=$BEAGLE_BIN
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
T=(-m "$M/stories260K.bin" -z "$M/tok512.bin")
"$B" datagen "${T[@]}" --sample 8 -n 64 --shard-seqs 8 -o "$tmp/data" -t 1 2> /dev/null || bad "datagen"
common=(--data "$tmp/data" --batch 8 --seq-len 64 --window 2 --sim-steps 2 --stage1-epochs 1 --stage2-epochs 0 -t 1 -q)
# 40 steps of training (8 sequences, batch 8: one step per epoch, so 40 epochs)
"$B" train "${T[@]}" "${common[@]}" --stage1-epochs 40 --lr 3e-3 -o "$tmp/a.bin" 2> "$tmp/a.log" || { bad "train a"; cat "$tmp/a.log"; }
# the trained draft evaluated with lr 1e-12 and no noise, from its own weights vs from a random init
"$B" train "${T[@]}" "${common[@]}" --lr 1e-12 --noise 0 --init "$tmp/a.bin" -o "$tmp/b.bin" 2> "$tmp/b.log" || { bad "train --init"; cat "$tmp/b.log"; }
"$B" train "${T[@]}" "${common[@]}" --lr 1e-12 --noise 0 -o "$tmp/c.bin" 2> "$tmp/c.log" || { bad "train fresh"; cat "$tmp/c.log"; }
lb=$(awk 'NR==2 {print $4}' "$tmp/b.bin.loss.tsv")
lc=$(awk 'NR==2 {print $4}' "$tmp/c.bin.loss.tsv")
la=$(awk 'END {print $4}' "$tmp/a.bin.loss.tsv")
if awk -v b="$lb" -v c="$lc" -v a="$la" 'BEGIN { exit !(b < 0.8 * c && b < 1.5 * a) }'; then
  ok "warm start: first-step ce $lb (trained run ended at $la, random init $lc)"
else
  bad "warm start did not start from the trained weights: ce $lb, trained $la, random $lc"
fi
# a draft of another shape is refused, naming the mismatch
if "$B" train "${T[@]}" "${common[@]}" --ffn 32 --init "$tmp/a.bin" -o "$tmp/d.bin" 2> "$tmp/d.log"; then
  bad "mismatched --init accepted"
else
  grep -q "does not match this run's" "$tmp/d.log" && grep -q "ffn 32" "$tmp/d.log" && ok "mismatched --init refused: $(cat "$tmp/d.log")" ||
    { bad "unclear message"; cat "$tmp/d.log"; }
fi
# a reduced draft vocabulary is kept from the init draft, also on other data (whose own most frequent
# tokens differ); another --draft-vocab size is refused
"$B" datagen "${T[@]}" --sample 8 -n 64 --shard-seqs 8 -s 99 -o "$tmp/data2" -t 1 2> /dev/null || bad "datagen 2"
"$B" train "${T[@]}" "${common[@]}" --draft-vocab 64 -o "$tmp/v.bin" 2> "$tmp/v.log" || { bad "train v"; cat "$tmp/v.log"; }
"$B" train "${T[@]}" --data "$tmp/data2" --batch 8 --seq-len 64 --window 2 --sim-steps 2 --stage1-epochs 1 --stage2-epochs 0 \
    -t 1 --draft-vocab 64 --init "$tmp/v.bin" -o "$tmp/w.bin" > /dev/null 2> "$tmp/w.log" &&
  grep -q "the --init draft's 64 tokens cover" "$tmp/w.log" && ok "reduced vocabulary kept on other data: $(grep "tokens cover" "$tmp/w.log")" ||
  { bad "--init with a reduced vocabulary on other data"; cat "$tmp/w.log"; }
grep -q "the 64 most frequent of this data would cover .*--new-vocab chooses them" "$tmp/w.log" \
    && ok "... with the hint: $(grep "would cover" "$tmp/w.log")" || bad "no --new-vocab hint for a kept vocabulary that covers less"
if "$B" train "${T[@]}" "${common[@]}" --draft-vocab 32 --init "$tmp/v.bin" -o "$tmp/x.bin" 2> "$tmp/x.log"; then
  bad "--init with another --draft-vocab accepted"
else
  grep -q "draft_vocab 64) does not match" "$tmp/x.log" && ok "another --draft-vocab refused" || { bad "unclear message"; cat "$tmp/x.log"; }
fi
grep -q "add --new-vocab" "$tmp/x.log" && ok "... and the message says --new-vocab" || bad "no --new-vocab hint: $(cat "$tmp/x.log")"
# --new-vocab: a (full vocabulary, 40 steps) continued on data2 with 64 tokens chosen from data2
c2=(--data "$tmp/data2" --batch 8 --seq-len 64 --window 2 --sim-steps 2 --stage1-epochs 1 --stage2-epochs 0 -t 1 --draft-vocab 64
    --lr 1e-12 --noise 0)
"$B" train "${T[@]}" "${c2[@]}" -o "$tmp/f.bin" > /dev/null 2> "$tmp/f.log" || { bad "train fresh, data2"; cat "$tmp/f.log"; }
"$B" train "${T[@]}" "${c2[@]}" --init "$tmp/a.bin" --new-vocab -o "$tmp/n.bin" > /dev/null 2> "$tmp/n.log" ||
  { bad "train --init --new-vocab"; cat "$tmp/n.log"; }
"$B" train "${T[@]}" "${c2[@]}" --init "$tmp/v.bin" --new-vocab -o "$tmp/n2.bin" > /dev/null 2> "$tmp/n2.log" ||
  { bad "train --init (64 tokens) --new-vocab"; cat "$tmp/n2.log"; }
python3 - "$tmp" <<'PY' && ok "--new-vocab (from 0 or the same 64): d2t = a fresh run's on the same data, not the init's" || bad "--new-vocab d2t"
import struct, sys
def d2t(path):  # the draft file's tensor table entry: u32 name_len, name, u32 ndim, u64 shape[2], u64 offset, u64 nbytes
    b = open(path, "rb").read()
    i = b.find(struct.pack("<I", 3) + b"d2t")
    if i < 0: return None
    ndim, s0, s1, off, nb = struct.unpack_from("<IQQQQ", b, i + 7)
    return list(struct.unpack_from("<%di" % (nb // 4), b, off))
t = sys.argv[1]
n, n2, f, v = d2t(t + "/n.bin"), d2t(t + "/n2.bin"), d2t(t + "/f.bin"), d2t(t + "/v.bin")
print("d2t: new-vocab", n and n[:6], "fresh on data2", f and f[:6], "v (data)", v and v[:6])
sys.exit(0 if n is not None and len(n) == 64 and n == f and n2 == f and n != v else 1)
PY
ln=$(awk 'NR==2 {print $4}' "$tmp/n.bin.loss.tsv"); lf=$(awk 'NR==2 {print $4}' "$tmp/f.bin.loss.tsv")
awk -v n="$ln" -v f="$lf" 'BEGIN { exit !(n < 0.8 * f) }' && ok "--new-vocab keeps the trained tensors: first-step ce $ln vs random init $lf" ||
  bad "--new-vocab did not start from a's weights: ce $ln vs random $lf"
"$B" train "${T[@]}" "${c2[@]}" --new-vocab -o "$tmp/y.bin" 2> "$tmp/y.log"
[ $? -eq 1 ] && grep -q "add --init DRAFT" "$tmp/y.log" && ok "--new-vocab without --init refused" || { bad "--new-vocab alone"; cat "$tmp/y.log"; }
"$B" train "${T[@]}" "${common[@]}" --init "$tmp/missing.bin" -o "$tmp/e.bin" 2> "$tmp/e.log"
[ $? -eq 1 ] && grep -q "missing.bin" "$tmp/e.log" && ok "missing --init file: $(cat "$tmp/e.log")" || { bad "missing --init"; cat "$tmp/e.log"; }
echo "$fails failures"
[ $fails -eq 0 ]
