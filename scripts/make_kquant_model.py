#!/usr/bin/env python3
# make_kquant_model.py: rewrites a GGUF llama with the tensor types llama-quantize's Q4_K_M, Q5_K_M or
# Q6_K would pick (the k-quant where a row is a multiple of 256, else its fallback Q5_0 / Q5_1 / Q8_0),
# from the source file's weights dequantized by the gguf package. A test and benchmark fixture: the
# values are requantized (not llama.cpp's search for the best scales), so quality is close to, not equal to,
# llama.cpp's file. Mix f16: every matrix in F16 instead (the dequantized weights rounded to F16, the
# same model to about 1e-3 relative; a memory-bound target for drafting benchmarks).
# Usage: make_kquant_model.py SRC.gguf OUT.gguf [q4_k_m|q5_k_m|q6_k|f16]
import sys

import numpy as np

import gguf
from gguf.quants import dequantize, quantize

Q = gguf.GGMLQuantizationType
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}


def f16(a):
    return np.asarray(a, dtype=np.float32).astype(np.float16)


def pack_scale_min(sc, mn):
    """8 six-bit scales and mins per super-block (n, 8) -> the 12 bytes of Q4_K/Q5_K (dtype.h)."""
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
    return out


def quantize_kq(x, bits):
    """Q4_K (bits 4) or Q5_K (5) blocks of x (n, 256): per sub-block of 32, x ~ (d sc) q - dmin mn."""
    n, qmax = x.shape[0], (1 << bits) - 1
    xs = x.reshape(n, 8, 32)
    lo = np.minimum(xs.min(axis=2), 0.0)
    scale = (xs.max(axis=2) - lo) / qmax                       # (n, 8) float scales, >= 0
    d = f16(scale.max(axis=1) / 63).astype(np.float32)
    dmin = f16((-lo).max(axis=1) / 63).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d[:, None] > 0, np.rint(scale / d[:, None]), 0).clip(0, 63)
        mn = np.where(dmin[:, None] > 0, np.rint(-lo / dmin[:, None]), 0).clip(0, 63)
        a = d[:, None] * sc
        q = np.where(a[:, :, None] > 0, np.rint((xs + (dmin[:, None] * mn)[:, :, None]) / a[:, :, None]), 0)
    q = q.clip(0, qmax).astype(np.uint8)                       # (n, 8, 32)
    qs = (q[:, 0::2] & 15) | ((q[:, 1::2] & 15) << 4)          # pairs of sub-blocks: (n, 4, 32)
    parts = [f16(d).view(np.uint8).reshape(n, 2), f16(dmin).view(np.uint8).reshape(n, 2), pack_scale_min(sc, mn)]
    if bits == 5:
        qh = np.zeros((n, 32), dtype=np.uint8)
        for j in range(8):
            qh |= ((q[:, j] >> 4) & 1) << j
        parts.append(qh)
    parts.append(qs.reshape(n, 128))
    return np.concatenate(parts, axis=1)


def quantize_q6k(x):
    """Q6_K blocks of x (n, 256): per sub-block of 16, x ~ (d sc) (q - 32), sc int8."""
    n = x.shape[0]
    xs = x.reshape(n, 16, 16)
    amax_i = np.abs(xs).argmax(axis=2)
    vmax = np.take_along_axis(xs, amax_i[:, :, None], axis=2)[:, :, 0]
    scale = vmax / -32.0                                       # q - 32 = -32 at the largest magnitude
    d = f16(np.abs(scale).max(axis=1) / 127).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d[:, None] > 0, np.rint(scale / d[:, None]), 0).clip(-128, 127)
        a = d[:, None] * sc
        q = np.where(a[:, :, None] != 0, np.rint(xs / a[:, :, None]), 0)
    q = (q.clip(-32, 31) + 32).astype(np.uint8).reshape(n, 2, 128)
    ql = np.zeros((n, 2, 64), dtype=np.uint8)
    qh = np.zeros((n, 2, 32), dtype=np.uint8)
    for k in range(4):
        part = q[:, :, 32 * k:32 * k + 32]
        ql[:, :, 32 * (k & 1):32 * (k & 1) + 32] |= (part & 15) << (4 * (k >> 1))
        qh |= (part >> 4) << (2 * k)
    return np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc.astype(np.int8).view(np.uint8),
                           f16(d).view(np.uint8).reshape(n, 2)], axis=1)


def quantize_any(w, qt):
    rows, cols = w.shape
    if qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        x = w.reshape(-1, 256).astype(np.float32)
        b = quantize_q6k(x) if qt == Q.Q6_K else quantize_kq(x, 4 if qt == Q.Q4_K else 5)
        return b.reshape(rows, -1)
    return quantize(w, qt)


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def choose(name, cols, n_layers, mix):
    """llama-quantize's choice for this tensor (before the fallback)."""
    if mix == "f16":
        return Q.F16
    base = {"q4_k_m": Q.Q4_K, "q5_k_m": Q.Q5_K, "q6_k": Q.Q6_K}[mix]
    qt = base
    if mix != "q6_k":
        if name == "output.weight":
            qt = Q.Q6_K
        elif name.endswith("attn_v.weight") or name.endswith("ffn_down.weight"):
            layer = int(name.split(".")[1])
            if use_more_bits(layer, n_layers):
                qt = Q.Q6_K
    if cols % 256 != 0:
        qt = FALLBACK[qt]
    return qt


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: make_kquant_model.py SRC.gguf OUT.gguf [q4_k_m|q5_k_m|q6_k|f16]")
    src, out = sys.argv[1], sys.argv[2]
    mix = sys.argv[3] if len(sys.argv) == 4 else "q4_k_m"
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    n_layers = int(r.fields[f"{arch}.block_count"].contents())
    w = gguf.GGUFWriter(out, arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        v = f.contents()
        if k == "general.file_type":
            v = {"q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "f16": 1}[mix]
        sub = f.types[1] if f.types[0] == gguf.GGUFValueType.ARRAY and len(f.types) > 1 else None
        w.add_key_value(k, v, f.types[0], sub)
    counts = {}
    for t in r.tensors:
        if t.tensor_type == Q.F32 or len(t.shape) == 1:
            w.add_tensor(t.name, np.asarray(t.data, dtype=np.float32))
            qt = Q.F32
        else:
            cols = int(t.shape[0])
            wf = dequantize(t.data, t.tensor_type).reshape(-1, cols).astype(np.float32)
            qt = choose(t.name, cols, n_layers, mix)
            if qt == Q.F16:
                w.add_tensor(t.name, wf.astype(np.float16))
            else:
                w.add_tensor(t.name, quantize_any(wf, qt), raw_dtype=qt)
        counts[qt.name] = counts.get(qt.name, 0) + 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{out}: {mix}, tensors by type: {', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}")


if __name__ == "__main__":
    main()
