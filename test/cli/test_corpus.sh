#!/usr/bin/env bash
# test_corpus.sh: the SmolLM2 corpus committed under data/corpus/ (scripts/corpus.sh). `unpack` restores every
# committed shard, each equal to the SHA-256 its part lists (checked again here with Python's hashlib), and a
# shard changed after unpacking is caught; `train` reads exactly the sequences it unpacked (64 per full shard) and
# writes a draft from them alone, one optimizer step here (MAX_STEPS=1) so the test stays short.
set -u
R=$BEAGLE_ROOT
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fails=$((fails+1)); }
command -v xz > /dev/null || { echo "SKIP: xz not found (apt-get install xz-utils)"; exit 77; }
[ -f "$BEAGLE_MODEL" ] || { echo "SKIP: $BEAGLE_MODEL not found (make model)"; exit 77; }

bash "$R/scripts/corpus.sh" unpack "$tmp/u" > "$tmp/log" 2>&1 || { bad "unpack"; cat "$tmp/log"; }
python3 - "$R/data/corpus/smollm2" "$tmp/u" <<'PY' && ok "unpack: every committed shard, equal to its part's SHA256SUMS (hashlib)" || bad "unpacked shards"
import glob, hashlib, os, sys
src, dst = sys.argv[1:]
n = 0
for part in sorted(os.listdir(src)):
    sums = os.path.join(src, part, "SHA256SUMS")
    if not os.path.isfile(sums):
        continue
    listed = dict(reversed(line.split()) for line in open(sums) if line.strip())
    packed = sorted(os.path.basename(z)[:-3] for z in glob.glob(os.path.join(src, part, "shard-*.bin.xz")))
    assert packed == sorted(listed), f"{part}: packed shards and SHA256SUMS differ"
    for name, digest in listed.items():
        got = hashlib.sha256(open(os.path.join(dst, part, name), "rb").read()).hexdigest()
        assert got == digest, f"{part}/{name}: {got} != {digest}"
        n += 1
assert n > 0, "no shards"
assert len(glob.glob(os.path.join(dst, "all", "shard-*.bin"))) == n, "all/ does not merge every shard"
print(f"{n} shards")
PY

# planted: one byte of an unpacked shard changed; unpacking again must refuse it and name the part
shard=$(ls "$tmp"/u/*/shard-*.bin | head -1)
python3 -c "import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[200] ^= 1; open(p, 'wb').write(b)" "$shard"
if bash "$R/scripts/corpus.sh" unpack "$tmp/u" > "$tmp/log" 2>&1; then bad "a changed shard was not caught"
elif grep -q "shards differ" "$tmp/log"; then ok "a changed shard is refused: $(head -c 160 "$tmp/log")"
else bad "a changed shard: unexpected error"; cat "$tmp/log"; fi

# train from the corpus alone: one step, on exactly the committed sequences
MAX_STEPS=1 EVAL=0 THREADS=2 bash "$R/scripts/corpus.sh" train "$tmp/t/d.bin" > "$tmp/log" 2>&1 || { bad "corpus.sh train"; tail -5 "$tmp/log"; }
# (counted in the copy train unpacked, beside its output: a background corpus.sh generate may add shards meanwhile)
python3 - "$tmp/t/d.bin.json" "$tmp/t/corpus" <<'PY' && ok "train: a draft from the committed sequences" || { bad "train's data"; tail -5 "$tmp/log"; }
import glob, json, os, struct, sys
summary, unpacked = sys.argv[1:]
j = json.load(open(summary))
parts = [d for d in glob.glob(os.path.join(unpacked, "*")) if os.path.basename(d) != "all"]
seqs = 0
for part in parts:  # every shard unpacked (and checked against SHA256SUMS) for the run
    for f in glob.glob(os.path.join(part, "shard-*.bin")):
        seqs += struct.unpack_from("<I", open(f, "rb").read(32), 20)[0]  # the shard header's sequence count
assert parts and seqs > 0 and len(glob.glob(os.path.join(unpacked, "all", "shard-*.bin"))) == sum(
    len(glob.glob(os.path.join(p, "shard-*.bin"))) for p in parts), "all/ does not hold every unpacked shard"
assert j["data_seqs"] == seqs, f"trained on {j['data_seqs']} sequences, the unpacked corpus holds {seqs}"
assert j["steps"] == 1 and os.path.getsize(summary[:-5]) > 0
print(f"{seqs} sequences")
PY
exit $((fails > 0))
