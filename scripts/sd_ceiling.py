#!/usr/bin/env python3
"""sd_ceiling.py: what speculative decoding can gain on this machine for a target and its draft, from
offline data instead of timed runs (so the numbers do not move with machine noise).

Inputs (made by scripts/sd_ceiling.sh): DATA, a `beagle datagen` directory of plain greedy answers
(the target's own outputs: every prediction below is scored against them); TOPK, the draft's
teacher-forced depth-1 predictions (test/tools/draft_topk.cpp); BENCH, `beagle bench` JSON with the verify
cost table (a target forward of T tokens in decode steps, measured on this machine).

Prints
1. depth-1 accuracy at every generated position: the draft's top-1/2/5, prompt lookup (latest
   earlier occurrence of the context's last n-gram, n <= 3), and their union;
2. the draft's calibration (accuracy by its top-1 probability);
3. modelled speedup = tokens committed / (sum over rounds of cost(T) + draft forwards x DRAFT_COST)
   for simple drafting policies replayed over the same answers. A drafted chain is scored against the
   true continuation; draft predictions past depth 1 use the teacher-forced prediction at that
   position (the true state instead of the draft's own: optimistic for the draft).
"""
import argparse
import glob
import json
import os
import struct
import sys
from collections import defaultdict


def read_tokens(d):
    seqs = []
    for f in sorted(glob.glob(os.path.join(d, "shard-*.bin"))):
        b = open(f, "rb").read()
        if b[:8] not in (b"BEAGLEDS", b"BEAGLETK"):
            sys.exit("%s: not a beagle datagen shard" % f)
        n, ntok = struct.unpack_from("<IQ", b, 20)
        tab = [struct.unpack_from("<QII", b, 48 + 16 * i) for i in range(n)]
        off = (48 + 16 * n + 63) // 64 * 64
        toks = struct.unpack_from("<%di" % ntok, b, off)
        seqs += [(list(toks[first:first + ln]), npr) for first, ln, npr in tab]
    return seqs


def lookup(ctx, ngram=3):
    """find_ngram of src/decode/speculative.cpp: (n, continuation) of the latest earlier match."""
    L = len(ctx)
    for n in range(min(ngram, L - 1), 0, -1):
        tail = ctx[L - n:]
        for s in range(L - n - 1, -1, -1):
            if ctx[s:s + n] == tail:
                return n, ctx[s + n:s + n + 8]
    return 0, []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("topk")
    ap.add_argument("bench")
    ap.add_argument("--draft-cost", type=float, default=0.1, help="one draft forward in decode steps")
    a = ap.parse_args()
    seqs = read_tokens(a.data)
    pred = {}
    for line in open(a.topk):
        f = line.split()
        if line.startswith("#"):  # draft_topk's closing count
            continue
        pred[(int(f[0]), int(f[1]))] = ([int(x) for x in f[3:8]], float(f[8]))
    vc = json.load(open(a.bench))["verify_cost"]
    grid = sorted((v["T"], v["cost"]) for v in vc)
    cost = {}
    for T in range(1, grid[-1][0] + 1):  # linear between measured grid points, like measure_verify_cost
        for (t0, c0), (t1, c1) in zip(grid, grid[1:]):
            if t0 <= T <= t1:
                cost[T] = c0 + (c1 - c0) * (T - t0) / (t1 - t0)
                break
    print("verify cost (decode steps): " + ", ".join("T=%d %.2f" % (T, cost[T]) for T in (2, 3, 4, 6, 8) if T in cost))

    # 1-2. depth-1 accuracy and calibration
    c = defaultdict(int)
    bins = defaultdict(lambda: [0, 0])
    for s, (t, npr) in enumerate(seqs):
        for i in range(npr, len(t) - 1):
            top, p1 = pred[(s, i)]
            nxt = t[i + 1]
            n, cont = lookup(t[:i + 1])
            lk = n > 0 and cont[0] == nxt
            c["n"] += 1
            c["top1"] += top[0] == nxt
            c["top2"] += nxt in top[:2]
            c["top5"] += nxt in top
            c["lookup"] += lk
            c["lookup_cov"] += n > 0
            c["union"] += lk or top[0] == nxt
            b = bins[min(9, int(p1 * 10))]
            b[0] += 1
            b[1] += top[0] == nxt
    N = c["n"]
    print("\n%d positions (%d answers); depth-1 accuracy (the target's next greedy token predicted):" % (N, len(seqs)))
    print("  draft top-1 %.3f, top-2 %.3f, top-5 %.3f" % (c["top1"] / N, c["top2"] / N, c["top5"] / N))
    print("  prompt lookup %.3f (a match at %.3f of positions), lookup or draft top-1 %.3f"
          % (c["lookup"] / N, c["lookup_cov"] / N, c["union"] / N))
    print("  draft calibration, top-1 probability -> accuracy: " +
          ", ".join("%.1f-%.1f: %.2f (%d)" % (k / 10, k / 10 + 0.1, v[1] / v[0], v[0]) for k, v in sorted(bins.items())))

    # 3. policies replayed over the answers
    def draft_chain(s, t, i, K, thr):
        ch = []
        for j in range(K):
            if i + j >= len(t) - 1:
                break
            top, p = pred[(s, i + j)]
            if j > 0 and p < thr:
                break
            ch.append(top[0])
            if top[0] != t[i + j + 1]:
                break  # later predictions would follow the wrong token: unknown, stop
        return ch

    def simulate(policy):
        tok = rounds = 0
        spent = 0.0
        for s, (t, npr) in enumerate(seqs):
            i = npr  # t[i] is the root (the target's token), candidates predict t[i+1] ...
            while i < len(t) - 1:
                chains, fwd = policy(s, t, i)
                nodes = {tuple(ch[:k]) for ch in chains for k in range(1, len(ch) + 1)}
                acc = max([len(nd) for nd in nodes if list(nd) == t[i + 1:i + 1 + len(nd)]], default=0)
                spent += cost[min(1 + len(nodes), max(cost))] + a.draft_cost * fwd
                rounds += 1
                tok += acc + 1
                i += acc + 1
        return tok / rounds, tok / spent

    def p_lookup(L):
        def f(s, t, i):
            n, cont = lookup(t[:i + 1])
            return ([cont[:L]] if n else []), 0
        return f

    def p_draft(K, thr):
        def f(s, t, i):
            if pred[(s, i)][1] < thr:
                return [], 1
            ch = draft_chain(s, t, i, K, thr)
            return [ch], len(ch)
        return f

    def p_hybrid(L, K, thr):
        def f(s, t, i):
            n, cont = lookup(t[:i + 1])
            if n >= 2:  # a confident match goes alone, without a draft forward
                return [cont[:L]], 0
            chains = [cont[:L]] if n else []
            if pred[(s, i)][1] >= thr:
                ch = draft_chain(s, t, i, K, thr)
                return chains + [ch], len(ch)
            return chains, 1
        return f

    def p_oracle(k):
        return lambda s, t, i: ([t[i + 1:i + 1 + k]], k)

    print("\nmodelled speedup over plain decoding (tau, speedup); draft forward = %.2f decode steps:" % a.draft_cost)
    rows = [("prompt lookup, chain of %d" % L, p_lookup(L)) for L in (1, 2, 3)]
    rows += [("draft chain of %d, sent when p1 >= %.1f" % (K, thr), p_draft(K, thr)) for K in (1, 2, 3) for thr in (0.3, 0.6)]
    rows += [("hybrid: lookup chain %d + draft chain %d (p1 >= %.1f)" % (L, K, thr), p_hybrid(L, K, thr))
             for L in (2, 3) for K in (1, 2) for thr in (0.3, 0.6)]
    rows += [("perfect draft, chain of %d (the cost curve's ceiling)" % k, p_oracle(k)) for k in (1, 2, 3, 5)]
    for name, pol in rows:
        tau, sp = simulate(pol)
        print("  %-58s tau %.3f  speedup %.3f" % (name, tau, sp))

    # what 1.5x needs: a chain of k candidates, each accepted with probability a given its parent
    print("\nacceptance per depth a chain needs for 1.5x (every round sends k candidates):")
    for k in (1, 2, 3, 4, 5):
        def speedup(acc):
            return sum(acc ** j for j in range(k + 1)) / (cost[k + 1] + a.draft_cost * k)
        lo, hi = 0.0, 1.0
        for _ in range(50):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if speedup(mid) < 1.5 else (lo, mid)
        print("  k = %d: %s" % (k, "a >= %.3f" % hi if speedup(1.0) >= 1.5 else "unreachable (%.2fx with a = 1)" % speedup(1.0)))


if __name__ == "__main__":
    main()
