#!/usr/bin/env python3
"""quantize_fixture.py: two small random-weight GGUF llamas for `beagle quantize`'s tests, the same bytes
on every machine: the weights come from integer hashing only (splitmix64; no libm, no NumPy RNG), so
llama-quantize's output on them can be kept as a golden (test/data/llama-quantize.json).
  k         dim 256, ffn 512, 4 heads (2 KV), 8 layers, untied output, F16 matrices: every matrix fits the
            k-quants' 256-blocks
  fallback  dim 160, ffn 512, 5 heads (1 KV), 8 layers, tied embeddings, F32 matrices: rows of 160 take
            llama-quantize's fallbacks (Q5_0 / Q5_1 / Q8_0, F16 where 32 does not divide)
Usage: quantize_fixture.py k|fallback OUT.gguf"""
import sys

import numpy as np

from gguf_llama import add_llama_tensors_and_close, add_toy_vocab, new_llama_writer

FIXTURES = {
    "k": dict(dim=256, ffn=512, heads=4, kv=2, layers=8, vocab=256, tied=False, dtype=np.float16),
    "fallback": dict(dim=160, ffn=512, heads=5, kv=1, layers=8, vocab=256, tied=True, dtype=np.float32),
}


def hashed(n, seed):
    """n splitmix64 outputs (uint64) of counter seed * 2^32 + i."""
    with np.errstate(over="ignore"):
        z = (np.uint64(seed) << np.uint64(32)) + np.arange(n, dtype=np.uint64)
        z = z * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def weights(rows, cols, seed, scale_log2):
    """Bell-shaped values: the sum of four 16-bit pieces of each hash, centred, times 2^(scale_log2 - 17 +
    e) with e in 0..3 per row (rows of different scale, as trained matrices have). Exact in float32."""
    z = hashed(rows * cols, seed).reshape(rows, cols)
    m = np.uint64(0xFFFF)
    s = sum(((z >> np.uint64(16 * k)) & m).astype(np.int64) for k in range(4)) - 2 * 65535
    e = (hashed(rows, seed + 7919) & np.uint64(3)).astype(np.int64)
    return np.ldexp(s.astype(np.float64), (scale_log2 - 17 + e)[:, None]).astype(np.float32)


def write(kind, path):
    c = FIXTURES[kind]
    d, f, h, kv, L, V = c["dim"], c["ffn"], c["heads"], c["kv"], c["layers"], c["vocab"]
    g = new_llama_writer(path, 256, d, L, h, kv, f)
    g.add_name(f"quantize-fixture-{kind}")
    g.add_file_type(1 if c["dtype"] == np.float16 else 0)
    add_toy_vocab(g, V)
    seed = [100 * (1 + list(FIXTURES).index(kind))]

    def mat(name, rows, cols):
        seed[0] += 1
        g.add_tensor(name, weights(rows, cols, seed[0], 0 if name == "token_embd.weight" else -3).astype(c["dtype"]))

    def vec(name, n):
        seed[0] += 1
        g.add_tensor(name, 1 + weights(1, n, seed[0], -5)[0])

    add_llama_tensors_and_close(g, mat, vec, L, V, d, h, kv, d // h, f, tied=c["tied"])


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in FIXTURES:
        sys.exit(__doc__)
    write(sys.argv[1], sys.argv[2])
