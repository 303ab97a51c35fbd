#!/usr/bin/env python3
"""ref_llama.py: an independent NumPy reference of the Llama forward for GGUF models, used as a
test oracle. Weights are dequantised by the `gguf` package's own dequantiser (not ours); math in
float64. Not on any product path.

    python3 scripts/ref_llama.py MODEL.gguf --ids 1,2,3 [--greedy N]
"""
import argparse
import sys

import numpy as np
import gguf
from gguf.quants import dequantize


def field(r, key):
    f = r.fields[key]
    v = f.parts[f.data[0]]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode()
    return v[0].item()


class RefLlama:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        self.dim = field(r, "llama.embedding_length")
        self.n_layers = field(r, "llama.block_count")
        self.n_heads = field(r, "llama.attention.head_count")
        self.n_kv = field(r, "llama.attention.head_count_kv")
        self.eps = field(r, "llama.attention.layer_norm_rms_epsilon")
        self.theta = field(r, "llama.rope.freq_base") if "llama.rope.freq_base" in r.fields else 10000.0
        self.hd = self.dim // self.n_heads
        self.w = {}
        for t in r.tensors:
            a = dequantize(t.data, t.tensor_type)
            shape = tuple(int(x) for x in reversed(t.shape.tolist()))
            self.w[t.name] = np.asarray(a, dtype=np.float64).reshape(shape)
        self.lm_head = self.w.get("output.weight", self.w["token_embd.weight"])

    def rmsnorm(self, x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * g

    def rope(self, x, pos):  # x: T x H x hd, adjacent pairs rotate (GGUF convention)
        hd = self.hd
        freq = 1.0 / self.theta ** (np.arange(0, hd, 2) / hd)
        ang = np.asarray(pos)[:, None] * freq[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def residuals(self, ids, keep=()):
        """The residual stream after the last layer (the true states, T x dim) and a dict of it after
        each layer listed in `keep`, causal over all positions."""
        T = len(ids)
        x = self.w["token_embd.weight"][ids]
        pos = np.arange(T)
        mask = np.triu(np.full((T, T), -np.inf), 1)
        g = self.n_heads // self.n_kv
        kept = {}
        for l in range(self.n_layers):
            p = "blk.%d." % l
            h = self.rmsnorm(x, self.w[p + "attn_norm.weight"])
            q = (h @ self.w[p + "attn_q.weight"].T).reshape(T, self.n_heads, self.hd)
            k = (h @ self.w[p + "attn_k.weight"].T).reshape(T, self.n_kv, self.hd)
            v = (h @ self.w[p + "attn_v.weight"].T).reshape(T, self.n_kv, self.hd)
            q, k = self.rope(q, pos), self.rope(k, pos)
            att = np.empty((T, self.n_heads, self.hd))
            for hh in range(self.n_heads):
                s = q[:, hh] @ k[:, hh // g].T / np.sqrt(self.hd) + mask
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, hh] = s @ v[:, hh // g]
            x = x + att.reshape(T, -1) @ self.w[p + "attn_output.weight"].T
            h = self.rmsnorm(x, self.w[p + "ffn_norm.weight"])
            a = h @ self.w[p + "ffn_gate.weight"].T
            b = h @ self.w[p + "ffn_up.weight"].T
            x = x + (a / (1 + np.exp(-a)) * b) @ self.w[p + "ffn_down.weight"].T
            if l in keep:
                kept[l] = x
        return x, kept

    def forward(self, ids):
        """logits (T x V) and true states (T x dim) for all positions, causal."""
        states, _ = self.residuals(ids)
        logits = self.rmsnorm(states, self.w["output_norm.weight"]) @ self.lm_head.T
        return logits, states

    def greedy(self, ids, n):
        ids = list(ids)
        out = []
        for _ in range(n):
            logits, _ = self.forward(ids)
            t = int(np.argmax(logits[-1]))
            out.append(t)
            ids.append(t)
        return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--greedy", type=int, default=0)
    a = ap.parse_args()
    m = RefLlama(a.model)
    ids = [int(x) for x in a.ids.split(",")]
    if a.greedy:
        print(",".join(map(str, m.greedy(ids, a.greedy))))
    else:
        logits, _ = m.forward(ids)
        np.savetxt(sys.stdout, logits[-1:], fmt="%.6f")
