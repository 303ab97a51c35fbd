#!/usr/bin/env python3
"""ref_llama.py: an independent NumPy reference of the Llama-family forward (Llama-2/3, Mistral, Qwen2),
used as a test oracle. It reads a GGUF file with the `gguf` package (weights dequantised by its own
dequantiser, not ours) or an HF checkpoint directory (config.json + model.safetensors, read with the
`safetensors` package); math in float64. Each file is run in its own convention, never converted to
Beagle's: GGUF llama rotates adjacent pairs, GGUF qwen2 (llama.cpp's NEOX rope) and HF rotate halves;
Llama-3 rope scaling comes from rope_freqs.weight (GGUF) or config.json's rope_scaling (HF, computed
as transformers' llama3 rule); Qwen2 adds its q/k/v biases. Not on any product path.

    python3 scripts/ref_llama.py MODEL.gguf|HF_DIR --ids 1,2,3 [--greedy N]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import gguf
from gguf.quants import dequantize
from safetensors.numpy import load_file


def field(r, key):
    f = r.fields[key]
    v = f.parts[f.data[0]]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode()
    return v[0].item()


# HF parameter names -> the GGUF names this reference keys its weights by
HF_NAMES = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
            "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
            "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
            "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
            "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
            "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def hf_llama3_inv_freq(inv_freq, rs):
    """transformers' _compute_llama3_parameters: wavelength bands divided by factor, kept, or blended."""
    factor, low, high = rs["factor"], rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    orig = rs.get("original_max_position_embeddings", 8192)
    wavelen = 2 * math.pi / inv_freq
    low_wl, high_wl = orig / low, orig / high
    out = np.where(wavelen > low_wl, inv_freq / factor, inv_freq)
    smooth = (orig / wavelen - low) / (high - low)
    blended = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
    return np.where(medium, blended, out)


class RefLlama:
    def __init__(self, path, drop_bias=False):
        """drop_bias: ignore the q/k/v biases (a planted bug, to show a test can tell)."""
        self.w = {}
        if os.path.isdir(path):
            self._load_hf(path)
        else:
            self._load_gguf(path)
        if drop_bias:
            self.w = {k: v for k, v in self.w.items() if not k.endswith(".bias")}
        self.lm_head = self.w.get("output.weight", self.w["token_embd.weight"])

    def _load_gguf(self, path):
        r = gguf.GGUFReader(path)
        a = field(r, "general.architecture")
        self.arch = a
        self.dim = field(r, a + ".embedding_length")
        self.n_layers = field(r, a + ".block_count")
        self.n_heads = field(r, a + ".attention.head_count")
        self.n_kv = field(r, a + ".attention.head_count_kv")
        self.eps = field(r, a + ".attention.layer_norm_rms_epsilon")
        self.theta = field(r, a + ".rope.freq_base") if a + ".rope.freq_base" in r.fields else 10000.0
        self.hd = self.dim // self.n_heads
        self.neox = a == "qwen2"  # llama.cpp's rope type of the arch: NEOX (rotate-half) for qwen2
        for t in r.tensors:
            x = dequantize(t.data, t.tensor_type)
            shape = tuple(int(v) for v in reversed(t.shape.tolist()))
            self.w[t.name] = np.asarray(x, dtype=np.float64).reshape(shape)
        self.inv_freq = 1.0 / self.theta ** (np.arange(0, self.hd, 2) / self.hd)
        if "rope_freqs.weight" in self.w:  # llama.cpp divides each pair's frequency by its factor
            self.inv_freq = self.inv_freq / self.w.pop("rope_freqs.weight").reshape(-1)

    def _load_hf(self, path):
        with open(os.path.join(path, "config.json")) as f:
            c = json.load(f)
        self.arch = c["model_type"]
        self.dim, self.n_layers = c["hidden_size"], c["num_hidden_layers"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv = c.get("num_key_value_heads", self.n_heads)
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.theta = c.get("rope_theta", 10000.0)
        self.hd = c.get("head_dim", self.dim // self.n_heads)
        self.neox = True
        for k, v in load_file(os.path.join(path, "model.safetensors")).items():
            v = np.asarray(v, dtype=np.float64)
            if k == "model.embed_tokens.weight":
                self.w["token_embd.weight"] = v
            elif k == "model.norm.weight":
                self.w["output_norm.weight"] = v
            elif k == "lm_head.weight":
                self.w["output.weight"] = v
            else:
                layer, rest = k[len("model.layers."):].split(".", 1)
                self.w["blk.%s.%s" % (layer, HF_NAMES[rest])] = v
        if c.get("tie_word_embeddings", False):
            self.w.pop("output.weight", None)
        self.inv_freq = 1.0 / self.theta ** (np.arange(0, self.hd, 2) / self.hd)
        rs = c.get("rope_scaling")
        if rs and rs.get("rope_type", rs.get("type")) == "llama3":
            self.inv_freq = hf_llama3_inv_freq(self.inv_freq, rs)

    def rmsnorm(self, x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * g

    def rope(self, x, pos):  # x: T x H x hd; pair i is (2i, 2i+1) (GGUF llama) or (i, i + hd/2) (neox, HF)
        ang = np.asarray(pos)[:, None] * self.inv_freq[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        h = self.hd // 2
        x0, x1 = (x[..., :h], x[..., h:]) if self.neox else (x[..., 0::2], x[..., 1::2])
        out = np.empty_like(x)
        if self.neox:
            out[..., :h], out[..., h:] = x0 * c - x1 * s, x0 * s + x1 * c
        else:
            out[..., 0::2], out[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
        return out

    def proj(self, h, name):  # h W^T (+ b where the file has a bias)
        y = h @ self.w[name + ".weight"].T
        b = self.w.get(name + ".bias")
        return y if b is None else y + b

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
            q = self.proj(h, p + "attn_q").reshape(T, self.n_heads, self.hd)
            k = self.proj(h, p + "attn_k").reshape(T, self.n_kv, self.hd)
            v = self.proj(h, p + "attn_v").reshape(T, self.n_kv, self.hd)
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
