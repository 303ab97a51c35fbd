#!/usr/bin/env python3
# topk_stats.py: teacher-forced top-1 / top-5 of a draft's first step from the output of
# build/test/draft_topk (test/tools/draft_topk.cpp: per position "seq pos next top1..top5 ..."; other lines
# skipped). Used by the comparison scripts (compare_stories260k.sh, compare_smollm2.sh,
# finetune_state_layers.sh); run alone: python3 scripts/topk_stats.py FILE... prints each file's figures.
import sys


def topk(path):
    """(top-1, top-5, positions) of one draft_topk output file."""
    n = t1 = t5 = 0
    for line in open(path):
        f = line.split()
        if len(f) < 9 or not f[0].isdigit():
            continue
        nxt, top = f[2], f[3:8]
        n += 1
        t1 += top[0] == nxt
        t5 += nxt in top
    if n == 0:
        raise SystemExit(f"topk_stats: no positions in {path}")
    return t1 / n, t5 / n, n


def in_vocab(path):
    """The fraction of positions whose next token is in the draft's vocabulary (draft_topk's last line), or
    None for an output written before draft_topk printed it."""
    for line in open(path):
        if line.startswith("# in draft vocabulary:"):
            x, n = line.split(":")[1].split(" of ")
            return int(x) / max(1, int(n))
    return None


if __name__ == "__main__":
    for p in sys.argv[1:]:
        a, b, n = topk(p)
        print(f"{p}: top-1 {a:.3f} top-5 {b:.3f} ({n} positions)")
