#!/usr/bin/env bash
# test_train_from_tokens.sh: tokens-only training data. `beagle datagen` (default) writes the prompts and the
# target's answers as token ids ("BEAGLETK" shards) with the same sequences as --keep-states writes beside
# their states; meta.txt names the target by its SHA-256 (checked against Python's hashlib), the template
# and the settings. `beagle train` on tokens computes the states with the target (one prefill a sequence)
# and writes the same draft, checkpoint and losses, byte for byte, as on the stored states: plain and with
# --state-layers. Planted: states from another target give another draft (the comparison can fail).
# Mixed shard kinds and --state-layers without --keep-states are refused.
set -u
M=$BEAGLE_ROOT/data/models
B=$BEAGLE_BIN
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
T=(-m "$M/stories260K.bin" -z "$M/tok512.bin")
G=(--sample 24 -n 100 --shard-seqs 8 -t 1)
"$B" datagen "${T[@]}" "${G[@]}" --keep-states -o "$tmp/s" 2> "$tmp/log" || { bad "datagen --keep-states"; cat "$tmp/log"; }
"$B" datagen "${T[@]}" "${G[@]}" -o "$tmp/t" 2> "$tmp/log" || { bad "datagen (tokens)"; cat "$tmp/log"; }
"$B" datagen "${T[@]}" "${G[@]}" --keep-states --state-layers 1,3 -o "$tmp/sx" 2> "$tmp/log" || { bad "datagen --state-layers"; cat "$tmp/log"; }

# the shards: the same sequences (tokens, prompt lengths); token shards hold no states; meta.txt
python3 - "$tmp/s" "$tmp/t" "$M/stories260K.bin" <<'PY' && ok "token shards: the stored-state shards' sequences, no states; meta names the target's SHA-256" || bad "token shards"
import glob, hashlib, os, struct, sys
sdir, tdir, model = sys.argv[1:]
def seqs(path):
    b = open(path, "rb").read()
    magic = b[:8]
    dim, vocab, n, nt = struct.unpack_from("<IIIQ", b, 12)
    table = 96 if magic == b"BEAGLEDX" else 48
    tok0 = (table + 16 * n + 63) // 64 * 64
    toks = struct.unpack_from(f"<{nt}i", b, tok0)
    out = []
    for i in range(n):
        first, ln, npr = struct.unpack_from("<QII", b, table + 16 * i)
        out.append((npr, toks[first:first + ln]))
    return magic, len(b), tok0 + 4 * nt + 4, out
S = sorted(glob.glob(sdir + "/shard-*.bin")); Tk = sorted(glob.glob(tdir + "/shard-*.bin"))
assert len(S) == len(Tk) == 3, (S, Tk)
for a, b in zip(S, Tk):
    ma, _, _, sa = seqs(a); mb, size, want, sb = seqs(b)
    assert ma == b"BEAGLEDS" and mb == b"BEAGLETK", (ma, mb)
    assert sa == sb, f"{b}: sequences differ from {a}"
    assert size == want, f"{b}: {size} bytes, tokens only would be {want}"
meta = dict(l.split(" ", 1) for l in open(tdir + "/meta.txt").read().splitlines())
sha = hashlib.sha256(open(model, "rb").read()).hexdigest()
assert meta["target_sha256"] == sha, (meta["target_sha256"], sha)
assert meta["states"] == "none" and meta["template"] == "none", meta
smeta = dict(l.split(" ", 1) for l in open(sdir + "/meta.txt").read().splitlines())
assert smeta["states"] == "kept", smeta
PY

# two checkpoints equal in every byte but the text header's train_seconds line (and the CRC over it)
same_ckpt() { python3 "$BEAGLE_ROOT/test/tools/same_ckpt.py" "$1" "$2"; }
# train with the data at one path ($tmp/d: the draft file names it), the result moved to $tmp/$2*
C=(--seq-len 40 --window 2 --sim-steps 2 --stage1-epochs 1 --stage2-epochs 1 --batch 4 -t 1)
train_on() {  # DATA OUT [model] [flags...]
  local data=$1 out=$2 model=$3; shift 3
  rm -rf "$tmp/d" && cp -r "$data" "$tmp/d"
  "$B" train -m "$model" -z "$M/tok512.bin" --data "$tmp/d" "${C[@]}" "$@" -o "$tmp/r.bin" > /dev/null 2> "$tmp/$out.log" ||
    { bad "train on $data"; cat "$tmp/$out.log"; return 1; }
  mv "$tmp/r.bin" "$tmp/$out.bin" && mv "$tmp/r.bin.ckpt" "$tmp/$out.ckpt" && mv "$tmp/r.bin.loss.tsv" "$tmp/$out.tsv" && mv "$tmp/r.bin.json" "$tmp/$out.json"
}
same() { cmp -s "$tmp/$1.bin" "$tmp/$2.bin" && same_ckpt "$tmp/$1.ckpt" "$tmp/$2.ckpt" && cmp -s "$tmp/$1.tsv" "$tmp/$2.tsv"; }
train_on "$tmp/s" s "$M/stories260K.bin" && train_on "$tmp/t" t "$M/stories260K.bin"
same s t && ok "trained from tokens = trained from stored states: draft, checkpoint, losses ($(($(wc -l < "$tmp/t.tsv") - 1)) steps)" || bad "trained from tokens differs"
grep -q '"states": "computed"' "$tmp/t.json" && grep -q '"states": "stored"' "$tmp/s.json" && grep -q "positions prefilled" "$tmp/t.log" &&
  ok "the report says where the states came from: $(grep -o 'the target.s states:.*' "$tmp/t.log")" || { bad "report of computed states"; cat "$tmp/t.log"; }
train_on "$tmp/sx" sx "$M/stories260K.bin" --state-layers 3 && train_on "$tmp/t" tx "$M/stories260K.bin" --state-layers 3
same sx tx && ok "--state-layers 3: trained from tokens = from the stored layer rows" || bad "--state-layers from tokens differs"
cmp -s "$tmp/s.bin" "$tmp/sx.bin" && bad "--state-layers did not change the draft" || ok "--state-layers trains another draft"
# planted: states of another target (weights perturbed) train another draft, and the run says the target differs
python3 - "$M/stories260K.bin" "$tmp/other.bin" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
for i in range(4096, len(b), 997): b[i] ^= 1  # low mantissa bits of the float32 weights (past the 28-byte header)
open(sys.argv[2], "wb").write(bytes(b))
PY
train_on "$tmp/t" o "$tmp/other.bin"
same t o && bad "states of another target gave the same draft" || ok "planted: states from another target: another draft"
grep -q "were written by a target of SHA-256" "$tmp/o.log" && ok "another target is named: $(grep -o 'note:.*' "$tmp/o.log" | cut -c1-110)..." || { bad "no note on another target"; cat "$tmp/o.log"; }

# refusals
cp -r "$tmp/s" "$tmp/mix" && cp "$tmp/t/shard-00001.bin" "$tmp/mix/shard-00001.bin"
"$B" train "${T[@]}" --data "$tmp/mix" -o "$tmp/m.bin" -q 2> "$tmp/e.log" && bad "mixed shards accepted" ||
  { grep -q "all tokens-only or all keep states" "$tmp/e.log" && ok "mixed shards refused: $(cat "$tmp/e.log")" || { bad "mixed shards: unclear"; cat "$tmp/e.log"; }; }
"$B" datagen "${T[@]}" "${G[@]}" --state-layers 1 -o "$tmp/y" 2> "$tmp/e.log"; rc=$?
[ $rc -eq 1 ] && grep -q "add --keep-states" "$tmp/e.log" && ok "--state-layers without --keep-states refused: $(cat "$tmp/e.log")" || { bad "--state-layers alone: exit $rc"; cat "$tmp/e.log"; }
"$B" datagen "${T[@]}" "${G[@]}" --keep-states -o "$tmp/t" 2> "$tmp/e.log"; rc=$?
[ $rc -eq 1 ] && grep -q "states" "$tmp/e.log" && ok "a tokens-only directory refuses --keep-states: $(cat "$tmp/e.log")" || { bad "resume with other states setting: exit $rc"; cat "$tmp/e.log"; }
echo "$fails failures"
[ $fails -eq 0 ]
