#!/usr/bin/env python3
"""probe_state_layers.py: which of the target's layers carry what a draft needs (EAGLE-3
fuses a low, a middle and a high layer). For datagen sequences (the target's own answers), the residual
stream after each listed layer comes from the NumPy reference model (scripts/ref_llama.py, weights
dequantised by the `gguf` package; float32 weights here, for speed); then a linear readout of [states at i; E(t_{i+1})] is
trained to predict t_{i+2} through the target's frozen final norm and tied LM head, restricted to the
8192 most frequent tokens (as the draft's reduced vocabulary), and scored on held-out sequences. It is the
draft's first step with its attention taken away: a probe of the information in a state, not a draft.

    python3 scripts/probe_state_layers.py DATA_DIR [--seqs 384] [--configs "29;2,15,29;29,29-1,29-2;22,27,29"]

DATA_DIR: a `beagle datagen` directory (only its tokens are read). A config lists layers, `L-k` meaning
layer L at position i - k. Not on any product path.
"""
import argparse
import glob
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_llama import RefLlama  # noqa: E402


def read_shard(path):
    """The token sequences of one datagen shard (layout: src/data/dataset.h)."""
    b = open(path, "rb").read()
    if b[:8] not in (b"BEAGLEDS", b"BEAGLETK"):
        sys.exit("%s: not a datagen shard (expected magic BEAGLEDS or BEAGLETK)" % path)
    n_seqs = struct.unpack_from("<I", b, 20)[0]
    n_tok = struct.unpack_from("<Q", b, 24)[0]
    table = [struct.unpack_from("<QII", b, 48 + 16 * i) for i in range(n_seqs)]
    off = (48 + 16 * n_seqs + 63) // 64 * 64
    toks = np.frombuffer(b, dtype=np.int32, count=n_tok, offset=off)
    return [toks[f:f + n].copy() for f, n, _ in table]


def rms(x):
    x = x.astype(np.float32)
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--model", default="weights/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--seqs", type=int, default=384)
    ap.add_argument("--configs", default="29;2,15,29;29,29-1,29-2;22,27,29")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--cache", default="", help="npz file to keep the states in between runs")
    a = ap.parse_args()
    configs = [[(int(t.split("-")[0]), int(t.split("-")[1]) if "-" in t else 0) for t in c.split(",")]
               for c in a.configs.split(";")]
    layers = sorted({l for c in configs for l, _ in c})
    m = RefLlama(a.model)
    for k in m.w:
        m.w[k] = m.w[k].astype(np.float32)
    E = m.w["token_embd.weight"]
    head_full = m.lm_head.astype(np.float32) * m.w["output_norm.weight"].astype(np.float32)[None, :]
    seqs = [t for f in sorted(glob.glob(os.path.join(a.data, "shard-*.bin"))) for t in read_shard(f)][:a.seqs]
    if not seqs:
        sys.exit("%s: no shard-*.bin" % a.data)
    if a.cache and os.path.exists(a.cache):
        z = np.load(a.cache)
        H = {l: z["l%d" % l] for l in layers}
    else:
        H = {l: [] for l in layers}
        for i, t in enumerate(seqs):
            _, r = m.residuals(t, layers)
            for l in layers:
                H[l].append(r[l].astype(np.float16))
            print("states: %d/%d sequences" % (i + 1, len(seqs)), file=sys.stderr, flush=True)
        H = {l: np.concatenate(H[l]) for l in layers}
        if a.cache:
            np.savez(a.cache, **{"l%d" % l: H[l] for l in layers})
    V = 8192
    freq = np.bincount(np.concatenate(seqs), minlength=E.shape[0])
    d2t = np.argsort(-freq, kind="stable")[:V]
    t2d = np.full(E.shape[0], -1)
    t2d[d2t] = np.arange(V)
    head = head_full[d2t]
    starts = np.cumsum([0] + [len(t) for t in seqs])
    n_train = int(len(seqs) * 0.8)

    def build(cfg, idx):
        X, Y = [], []
        for s in idx:
            t, b = seqs[s], starts[s]
            i = np.arange(2, len(t) - 2)
            y = t2d[t[i + 2]]
            keep = y >= 0
            i, y = i[keep], y[keep]
            X.append(np.concatenate([rms(H[l][b + i - back]) for l, back in cfg] + [rms(E[t[i + 1]])], 1))
            Y.append(y)
        return np.concatenate(X), np.concatenate(Y)

    print("| states at i (layer-k: position i - k) | seed | held-out top-1 | top-5 | train / held-out positions |")
    print("|---|---|---|---|---|")
    for cfg in configs:
        Xtr, Ytr = build(cfg, range(n_train))
        Xte, Yte = build(cfg, range(n_train, len(seqs)))
        for seed in [int(s) for s in a.seeds.split(",")]:
            rng = np.random.default_rng(seed)
            W = rng.normal(0, 0.1 / np.sqrt(Xtr.shape[1]), (Xtr.shape[1], head.shape[1])).astype(np.float32)
            bias = np.zeros(head.shape[1], np.float32)
            mom = [np.zeros_like(W), np.zeros_like(bias)]
            var = [np.zeros_like(W), np.zeros_like(bias)]
            step, steps = 0, a.epochs * ((len(Ytr) + 511) // 512)
            for ep in range(a.epochs):
                perm = rng.permutation(len(Ytr))
                for k in range(0, len(perm), 512):
                    j = perm[k:k + 512]
                    X, y, B = Xtr[j], Ytr[j], len(j)
                    f = X @ W + bias  # the readout's predicted state, then the frozen final norm and head
                    r = np.sqrt((f ** 2).mean(-1, keepdims=True) + 1e-5)
                    n = f / r
                    lg = n @ head.T
                    lg -= lg.max(1, keepdims=True)
                    p = np.exp(lg)
                    p /= p.sum(1, keepdims=True)
                    p[np.arange(B), y] -= 1
                    gn = (p / B) @ head
                    gf = (gn - n * (gn * n).mean(-1, keepdims=True)) / r
                    lr = 1e-3 * 0.5 * (1 + np.cos(np.pi * step / steps))  # cosine to 0: the last epoch settles
                    step += 1
                    for q, (w, gr) in enumerate(((W, X.T @ gf), (bias, gf.sum(0)))):
                        mom[q] = 0.9 * mom[q] + 0.1 * gr
                        var[q] = 0.999 * var[q] + 0.001 * gr * gr
                        w -= lr * (mom[q] / (1 - 0.9 ** step)) / (np.sqrt(var[q] / (1 - 0.999 ** step)) + 1e-8)
            t1 = t5 = 0
            for k in range(0, len(Yte), 2048):
                f = Xte[k:k + 2048] @ W + bias
                lg = f @ head.T  # the norm's positive scale per row changes no ranking
                y = Yte[k:k + 2048]
                t1 += (lg.argmax(1) == y).sum()
                t5 += (np.argpartition(-lg, 5, axis=1)[:, :5] == y[:, None]).any(1).sum()
            name = ",".join("%d-%d" % (l, k) if k else str(l) for l, k in cfg)
            print("| %s | %d | %.4f | %.4f | %d / %d |" % (name, seed, t1 / len(Yte), t5 / len(Yte), len(Ytr), len(Yte)),
                  flush=True)


if __name__ == "__main__":
    main()
