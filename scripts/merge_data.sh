#!/usr/bin/env bash
# merge_data.sh OUT DIR...: one training-data directory (beagle datagen format) from several, by
# symbolic links to their shards, renumbered in the order given; meta.txt from the first, with the
# sources listed. All inputs must come from the same target (beagle train checks each shard's header).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: merge_data.sh OUT DIR..." >&2; exit 2; }
out=$1; shift
for d in "$@"; do
    [ -f "$d/meta.txt" ] || { echo "merge_data.sh: $d/meta.txt not found (not a beagle datagen directory)" >&2; exit 1; }
done
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
i=0
for d in "$@"; do
    for f in "$d"/shard-*.bin; do
        [ -e "$f" ] || continue
        ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$out.tmp/$(printf 'shard-%05d.bin' $i)"
        i=$((i + 1))
    done
done
[ $i -gt 0 ] || { echo "merge_data.sh: no shards in $*" >&2; exit 1; }
{ grep -v '^source\|^skip\|^limit\|^items' "$1/meta.txt"; echo "source merged: $*"; } > "$out.tmp/meta.txt"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "merge_data.sh: $i shards from $# directories -> $out"
