#!/usr/bin/env python3
# bench_sd_table.py: turns the JSON of `make bench-sd` (beagle bench-sd -o FILE) into Markdown tables:
# tok/s, tau and speedup per category and mode, acceptance by depth, mismatches and peak RSS.
# Usage: python3 scripts/bench_sd_table.py build/bench-sd.json > table.md
import json
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench_sd_table.py BENCH.json")
    try:
        with open(sys.argv[1]) as f:
            b = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"bench_sd_table.py: cannot read {sys.argv[1]}: {e}")
    cats = b["categories"]
    modes = list(next(iter(cats.values())).keys())
    print(f"Model `{b['model']}`, draft `{b['draft']}`, {b['threads']} threads, {b['n_predict']} tokens per prompt, "
          f"tree size {b['tree_total_tokens']}"
          + (f" (mean {b['overall']['tree']['nodes_per_verify']:.2f} tokens per verify)"
             if 'tree' in b['overall'] and 'nodes_per_verify' in b['overall']['tree'] else "")
          + f", peak RSS {b['peak_rss_bytes'] / 2**20:.0f} MiB.\n")
    print("| category | prompts | " + " | ".join(f"{m} tok/s (tau, speedup)" for m in modes) + " |")
    print("|---|---|" + "---|" * len(modes))
    rows = list(cats.items())
    if "mt_bench" in b:
        rows.append(("**mt_bench (all 8)**", b["mt_bench"]))
    rows.append(("**overall**", b["overall"]))
    for name, r in rows:
        cells = []
        for m in modes:
            x = r[m]
            cells.append(f"{x['tok_s']:.1f}" if m == "none" else f"{x['tok_s']:.1f} ({x['tau']:.2f}, {x['speedup']:.2f}x)")
        print(f"| {name} | {r[modes[0]]['prompts']} | " + " | ".join(cells) + " |")
    print()
    for name, r in [("mt_bench", b.get("mt_bench")), ("overall", b["overall"])]:
        if r is None:
            continue
        print(f"Acceptance by depth ({name}):\n")
        print("| mode | " + " | ".join(f"d{k + 1}" for k in range(6)) + " |")
        print("|---|" + "---|" * 6)
        for m in modes:
            if m == "none":
                continue
            acc = r[m]["accept_by_depth"][:6]
            print(f"| {m} | " + " | ".join(f"{a:.2f}" for a in acc) + " |" * (6 - len(acc) + 1 if len(acc) < 6 else 1))
        print()
    mism = sum(r[m]["mismatches"] for r in cats.values() for m in modes)
    print(f"Outputs differing from plain greedy decoding: {mism}.")


if __name__ == "__main__":
    main()
