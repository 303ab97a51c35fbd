#!/usr/bin/env bash
# bench_compare.sh: `beagle bench` of two builds side by side, interleaved, for before/after claims on a
# noisy machine: this tree's build/beagle (B) against OTHER's (A), ROUNDS rounds each (default 6), same
# model and threads, the ISA path BEAGLE_ISA names (else the CPU's default; a build that measures every
# path reports the one it ran by default); prints the median prefill / decode tok/s and verify cost
# T = 2/4/8/16 with ranges.
# Usage: scripts/bench_compare.sh OTHER_TREE [ROUNDS]   e.g. a `git worktree add /tmp/base <commit>`
#        built with `make -C /tmp/base build/beagle`.
set -euo pipefail
cd "$(dirname "$0")/.."
OTHER=${1:?usage: scripts/bench_compare.sh OTHER_TREE [ROUNDS]}
ROUNDS=${2:-6}
MODEL=$PWD/weights/SmolLM2-135M-Instruct.Q4_1.gguf
[ -x "$OTHER/build/beagle" ] || { echo "bench_compare: expected a built $OTHER/build/beagle, found none" >&2; exit 1; }
[ -x build/beagle ] || { echo "bench_compare: expected build/beagle here (make), found none" >&2; exit 1; }
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
for i in $(seq "$ROUNDS"); do
  for side in A B; do
    dir=$PWD; [ $side = A ] && dir=$OTHER
    isa=()  # a build whose bench measures every path (--isa) measures only this one
    "$dir/build/beagle" bench --help 2>&1 | grep -q -- --isa && isa=(--isa "${BEAGLE_ISA:-auto}")
    (cd "$dir" && build/beagle bench -m "$MODEL" -t 2 "${isa[@]}" -o "$out/$side.$i.json" > "$out/$side.$i.log" 2>&1)
  done
done
python3 - "$out" "$ROUNDS" "$OTHER" <<'PY'
import json, statistics, sys
d, n, other = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for side, name in (("A", other), ("B", "this tree")):
    runs = [json.load(open(f"{d}/{side}.{i}.json")) for i in range(1, n + 1)]
    pf = [r["prefill_tok_s"] for r in runs]; dc = [r["decode_tok_s"] for r in runs]
    cost = {T: [v["cost"] for r in runs for v in r["verify_cost"] if v["T"] == T] for T in (2, 4, 8, 16)}
    isa = runs[0].get("isa", "?")
    print(f"{side} ({name}, {isa}): prefill median {statistics.median(pf):.0f} tok/s (range {min(pf):.0f}-{max(pf):.0f}), "
          f"decode median {statistics.median(dc):.0f} (range {min(dc):.0f}-{max(dc):.0f}), verify cost T=2/4/8/16 "
          + "/".join(f"{statistics.median(c):.2f}" if c else "-" for c in cost.values()) + " steps (medians; ranges "
          + ", ".join(f"{min(c):.2f}-{max(c):.2f}" for c in cost.values() if c) + ")")
PY
