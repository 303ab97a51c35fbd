#!/usr/bin/env bash
# test_corpus.sh: the SmolLM2 corpus committed under data/corpus/ (scripts/corpus.sh). `unpack` restores every
# committed shard, each equal to the SHA-256 its part lists (checked again here with Python's hashlib), and a
# shard changed after unpacking is caught; `train` reads exactly the sequences it unpacked of the parts asked
# (TRAIN_PARTS) and writes a draft from them alone, a MoA draft for one optimizer step here (MAX_STEPS=1). `ingest` (in a
# copy of the corpus) adds a part's shards packed elsewhere, as a GPU run brings them back, and refuses a damaged
# shard, another recipe's meta.txt, a shard unlike the committed one of its name and a name that is no part.
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

# train from the corpus alone: one step, on exactly the committed sequences of two small parts (TRAIN_PARTS;
# the whole corpus is every part's, and its vocabulary choice would read them all), a MoA draft (ARCH=moa: the
# target's layers 22 and 27 computed in the loop too)
TRAIN_PARTS="d-selfinstruct-greedy d-v3-greedy" ARCH=moa MAX_STEPS=1 EVAL=0 THREADS=2 \
  bash "$R/scripts/corpus.sh" train "$tmp/t/d.bin" > "$tmp/log" 2>&1 || { bad "corpus.sh train"; tail -5 "$tmp/log"; }
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
assert sorted(os.path.basename(p) for p in parts) == ["d-selfinstruct-greedy", "d-v3-greedy"], parts
assert j["config"].get("arch") == "moa" and j["config"].get("state_layers") == "22,27", j["config"]
print(f"{seqs} sequences")
PY
# ingest, in a copy of the corpus: d-selfinstruct-greedy as if its last shard came back from another machine
P=d-selfinstruct-greedy
mkdir -p "$tmp/r/scripts" "$tmp/r/data" "$tmp/dev"
cp "$R/scripts/corpus.sh" "$R/scripts/merge_data.sh" "$tmp/r/scripts/" && cp -r "$R/data/corpus" "$R/data/SHA256SUMS" "$tmp/r/data/"
cp -r "$tmp/r/data/corpus/smollm2/$P" "$tmp/dev/$P"
rm "$tmp/r/data/corpus/smollm2/$P/shard-00002.bin.xz"
grep -v shard-00002 "$tmp/r/data/corpus/smollm2/$P/SHA256SUMS" > "$tmp/s" && mv "$tmp/s" "$tmp/r/data/corpus/smollm2/$P/SHA256SUMS"
grep -v "$P/shard-00002" "$tmp/r/data/SHA256SUMS" > "$tmp/s" && mv "$tmp/s" "$tmp/r/data/SHA256SUMS"
ingest() { bash "$tmp/r/scripts/corpus.sh" ingest "$1" > "$tmp/log" 2>&1; }
if ingest "$tmp/dev" && cmp -s "$R/data/corpus/smollm2/$P/SHA256SUMS" "$tmp/r/data/corpus/smollm2/$P/SHA256SUMS" &&
   cmp -s "$R/data/corpus/smollm2/$P/shard-00002.bin.xz" "$tmp/r/data/corpus/smollm2/$P/shard-00002.bin.xz" &&
   grep -q "$P/shard-00002.bin.xz" "$tmp/r/data/SHA256SUMS" &&
   (cd "$tmp/r/data" && grep "$P/" SHA256SUMS | sha256sum -c --quiet); then ok "ingest: the part's missing shard added and listed ($(tail -1 "$tmp/log"))"
else bad "ingest"; cat "$tmp/log"; fi
refused() {  # what, pattern: ingest of $tmp/bad must fail with the pattern
  if ingest "$tmp/bad"; then bad "ingest accepted $1"
  elif grep -q "$2" "$tmp/log"; then ok "ingest refuses $1: $(head -c 150 "$tmp/log")"
  else bad "ingest: $1: unclear error"; cat "$tmp/log"; fi
}
rm -rf "$tmp/bad" && mkdir "$tmp/bad" && cp -r "$tmp/dev/$P" "$tmp/bad/"
xz -dc "$tmp/bad/$P/shard-00001.bin.xz" | python3 -c "import sys; b = bytearray(sys.stdin.buffer.read()); b[300] ^= 1; sys.stdout.buffer.write(b)" | xz > "$tmp/x" && mv "$tmp/x" "$tmp/bad/$P/shard-00001.bin.xz"
refused "a damaged shard" "differ from its SHA256SUMS"
rm -rf "$tmp/bad" && mkdir "$tmp/bad" && cp -r "$tmp/dev/$P" "$tmp/bad/" && sed -i 's/^backend .*/backend cuda/; t; $a backend cuda' "$tmp/bad/$P/meta.txt"
refused "another meta.txt" "meta.txt differs"
rm -rf "$tmp/bad" && mkdir "$tmp/bad" && cp -r "$tmp/dev/$P" "$tmp/bad/"
cp "$tmp/bad/$P/shard-00000.bin.xz" "$tmp/bad/$P/shard-00001.bin.xz"
(cd "$tmp/bad/$P" && for z in shard-*.bin.xz; do echo "$(xz -dc "$z" | sha256sum | cut -d' ' -f1)  ${z%.xz}"; done > SHA256SUMS)
refused "a shard unlike the committed one" "other than the committed"
rm -rf "$tmp/bad" && mkdir "$tmp/bad" && cp -r "$tmp/dev/$P" "$tmp/bad/x-nopart"
refused "a folder that is no part" "is not a part"

exit $((fails > 0))
