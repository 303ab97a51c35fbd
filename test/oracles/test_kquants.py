#!/usr/bin/env python3
# test_kquants.py: the 5-bit and k-quant tensor types (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) against the `gguf`
# package, an independent reference for their block layouts.
#  1. Dequantization: a tiny llama GGUF (dim 256, written by gguf.GGUFWriter) whose matrices are random
#     blocks of every type (any bytes, with finite half scales); `beagle info --dump-tensor all` must
#     equal gguf.quants.dequantize bit for bit. Exact by construction: every value is the same float32
#     expression in both ((d*sc)*q - dmin*mn, d*(q-16), ...; the products of a half and small integers
#     are exact, the last step rounds once), in the same order.
#  2. Matmul: build/test/test_matmul_gguf --apply (cpu_matmul on the raw bytes, both ISAs) against
#     x @ W^T in float64 with W from gguf.quants.dequantize, within derived bounds (as test_matmul_gguf.py):
#       vs exact x:       sum_i |w_i| (d_x/2 + 3u|x_i|) + R u sum_i |w_i| (|x_i| + d_x/2)
#       vs the quantized model y = sum_i w_i d_x q_i (a bit-exact replica of the int16 activation
#       quantizer): R u [sum_i (|w_i| + |B_b|) |d_x q_i| + sum_b |B_b| |s_b|]
#     with R = nb + ceil(nb/8) + 6 roundings (per block: the scale product and one FMA; the B terms 8
#     blocks per FMA; the horizontal sum; one for the float32 weights) and B_b the block's additive term
#     (Q5_1 m, k-quant dmin*mn). Also: the AVX2 and AVX-512 paths give the same bits, and y of T = 5 tokens
#     equals y of 1, 2, 3 and 4 of them alone (batch invariance, memcmp).
#  3. The same for every type packed in row groups (cpu_pack_weight, the CPU backend's path), with
#     R = 3 nb + 7 (Q6_K 6 nb + 7: per block the scale product, the FMA of I and that of B, Q6_K per half;
#     float(I) of a 32-product sum) and Q5_0's B = -16 d; the two packed paths give the same bits.
import os
import subprocess
import sys
import tempfile

import numpy as np

import gguf
from gguf.quants import dequantize
from checks import check, counts
from gguf_llama import add_llama_tensors_and_close, add_toy_vocab, new_llama_writer

ROOT = os.environ.get("BEAGLE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("BEAGLE_BIN", os.path.join(ROOT, "build", "beagle"))
TOOL = os.path.join(os.path.dirname(BIN), "test", "test_matmul_gguf")
U = 2.0 ** -24
Q = gguf.GGMLQuantizationType
TYPES = [Q.Q5_0, Q.Q5_1, Q.Q4_K, Q.Q5_K, Q.Q6_K]
# byte offsets of the half fields of one block, and block (elements, bytes)
HALVES = {Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208]}



def random_blocks(rng, qt, rows, cols, scale):
    """Random raw bytes of a rows x cols tensor of type qt, with finite half scales ~ N(0, scale)."""
    be, bb = gguf.GGML_QUANT_SIZES[qt]
    nb = cols // be
    raw = rng.integers(0, 256, (rows, nb, bb), dtype=np.uint8)
    for off in HALVES[qt]:
        h = (rng.standard_normal((rows, nb)) * scale).astype(np.float16)
        raw[:, :, off:off + 2] = h.view(np.uint8).reshape(rows, nb, 2)
    return raw.reshape(rows, nb * bb)


def additive_terms(raw, qt, cols, packed=False):
    """|B| per block of 32 (rows, cols / 32): Q5_1 m, k-quant dmin * mn (unpacked by the gguf package);
    packed: Q5_0's m = -16 d too (the row-group kernel's offset)."""
    rows = raw.shape[0]
    be, bb = gguf.GGML_QUANT_SIZES[qt]
    blk = raw.reshape(rows, cols // be, bb)
    if qt == Q.Q5_0 and packed:
        return 16 * np.abs(blk[:, :, 0:2].copy().view(np.float16)[:, :, 0].astype(np.float64))
    if qt == Q.Q5_1:
        return np.abs(blk[:, :, 2:4].copy().view(np.float16)[:, :, 0].astype(np.float64))
    if qt in (Q.Q4_K, Q.Q5_K):
        dmin = blk[:, :, 2:4].copy().view(np.float16)[:, :, 0].astype(np.float64)   # (rows, nsb)
        _, mn = gguf.quants.Q4_K.get_scale_min(blk[:, :, 4:16].reshape(-1, 12).copy())
        mn = mn.reshape(rows, cols // be, 8).astype(np.float64)
        return np.abs(dmin[:, :, None] * mn).reshape(rows, cols // 32)
    return np.zeros((rows, cols // 32))


def write_model(path, rng):
    dim, L, H, KV, F, V = 256, 1, 4, 2, 512, 40
    hd = dim // H
    w = new_llama_writer(path, 64, dim, L, H, KV, F)
    add_toy_vocab(w, V)
    k = 0

    def mat(name, rows, cols):
        nonlocal k
        qt = TYPES[k % len(TYPES)]
        k += 1
        w.add_tensor(name, random_blocks(rng, qt, rows, cols, 0.05), raw_dtype=qt)

    def vec(name, n):
        w.add_tensor(name, rng.standard_normal(n).astype(np.float32))

    add_llama_tensors_and_close(w, mat, vec, L, V, dim, H, KV, hd, F)


def check_dequant(tmp, rng):
    path = os.path.join(tmp, "kquants.gguf")
    write_model(path, rng)
    r = gguf.GGUFReader(path)
    p = subprocess.run([BIN, "info", "-m", path, "--dump-tensor", "all", "--out", "-"], capture_output=True, timeout=120)
    if not check(p.returncode == 0, f"beagle info --dump-tensor: {p.stderr.decode()[-400:]}"):
        return
    ours = np.frombuffer(p.stdout, dtype="<f4")
    at, seen = 0, {}
    for t in r.tensors:
        ref = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1)
        got = ours[at:at + ref.size]
        at += ref.size
        same = got.size == ref.size and np.array_equal(got.view(np.uint32), ref.view(np.uint32))
        n = int((got.view(np.uint32) != ref.view(np.uint32)).sum()) if got.size == ref.size else -1
        check(same, f"{t.name} ({t.tensor_type.name}): {n} of {ref.size} values differ from gguf.quants.dequantize")
        seen[t.tensor_type.name] = seen.get(t.tensor_type.name, 0) + ref.size
    check(at == ours.size, f"dump has {ours.size - at} values more than the tensors")
    print(f"dequantize: {len(r.tensors)} tensors bit-identical to gguf.quants.dequantize "
          f"({', '.join(f'{k} {v}' for k, v in sorted(seen.items()))} values)")
    missing = {q.name for q in TYPES} - set(seen)
    check(not missing, f"types not covered: {missing}")


def run_tool(qt, rows, cols, T, wfile, xfile, yfile, isa):
    p = subprocess.run([TOOL, "--apply", qt.name, str(rows), str(cols), str(T), wfile, xfile, yfile, isa],
                       capture_output=True, text=True)
    if p.returncode != 0:
        if isa.startswith("avx512") and "lacks" in p.stderr:
            return None
        check(False, f"{qt.name} {isa}: tool failed: {p.stderr.strip()}")
        return None
    return np.fromfile(yfile, dtype=np.float32).reshape(T, rows)


def check_matmul(tmp, rng):
    T = 5
    for qt in TYPES:
        for rows, cols in ((37, 256), (20, 768), (9, 1280)):  # Q5 triples: 8, 24, 40 blocks (last triple 2, 3, 1)
            raw = random_blocks(rng, qt, rows, cols, 0.02)
            W = dequantize(raw, qt).astype(np.float64).reshape(rows, cols)
            x = (rng.standard_normal((T, cols)) * 1.5).astype(np.float32)
            x[1, 40] = 250.0      # an outlier block
            x[2, 64:96] = 0.0     # an all-zero block
            xd = x.astype(np.float64)
            ref = xd @ W.T
            absW, nb = np.abs(W), cols // 32
            dx = np.abs(xd.reshape(T, -1, 32)).max(axis=2) / 32767.0
            halfdx = np.repeat(dx / 2, 32, axis=1)
            xb = x.reshape(T, nb, 32)
            d = (np.abs(xb).max(axis=2) / np.float32(32767.0)).astype(np.float32)
            inv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, np.float32(1.0)), np.float32(0.0)).astype(np.float32)
            q = np.rint((xb * inv[:, :, None]).astype(np.float32))
            xq = (q * d[:, :, None].astype(np.float64)).reshape(T, cols)
            sb = np.abs((d * q.sum(axis=2).astype(np.float32)).astype(np.float64))
            model_y = xq @ W.T
            wfile, xfile, yfile = (os.path.join(tmp, f) for f in ("w.bin", "x.bin", "y.bin"))
            raw.tofile(wfile)
            x.tofile(xfile)
            ys = {}
            for isa in ("avx2", "avx512", "avx2-packed", "avx512-packed"):
                # The row-group kernel (-packed) sums a block's products in one int32 lane (one rounding, in
                # float(I)), applies Q5_0's offset as B = -16 d, and takes per block up to 3 roundings (the
                # scale product, the FMA of I, that of B; Q6_K: two of each, one per half block).
                packed = isa.endswith("-packed")
                babs = additive_terms(raw, qt, cols, packed)
                nround = (3 * nb * (2 if qt == Q.Q6_K else 1) + 7) if packed else nb + (nb + 7) // 8 + 6
                absWB = absW + np.repeat(babs, 32, axis=1)
                # vs exact x: the row kernel's partial sums are of the w_i x_i; the row-group kernel's of
                # (w_i - B) x_i and B s (its bound takes the B terms as the quantized model's does)
                tol = (halfdx + 3 * U * np.abs(xd)) @ absW.T + nround * U * ((np.abs(xd) + halfdx) @ (absWB if packed else absW).T)
                if packed:
                    tol += nround * U * (sb @ babs.T)
                tol_m = nround * U * (np.abs(xq) @ absWB.T + sb @ babs.T)
                y = run_tool(qt, rows, cols, T, wfile, xfile, yfile, isa)
                if y is None:
                    continue
                ys[isa] = y
                yd = y.astype(np.float64)
                err, err_m = np.abs(yd - ref), np.abs(yd - model_y)
                ok = bool((err <= tol).all()) and bool((err_m <= tol_m).all())
                check(ok, f"{qt.name} {rows}x{cols} {isa}: outside the bound")
                print(f"{'ok  ' if ok else 'FAIL'} {qt.name} {rows}x{cols} T={T} {isa:13s}: vs exact x max err/tol "
                      f"{float((err / tol).max()):.3f}, vs quantized model max err/tol {float((err_m / tol_m).max()):.3f}")
                # batch invariance: each token alone, and the first 2, 3 and 4 tokens together (up to 4 tokens
                # the row kernel keeps unpacked weights in registers, from 5 in memory; the row-group kernel
                # runs tiles of up to 4 or 8 tokens), give the same bits
                for t, n in ((0, 1), (3, 1), (0, 2), (1, 3), (0, 4)):
                    x[t:t + n].tofile(xfile)
                    y1 = run_tool(qt, rows, cols, n, wfile, xfile, yfile, isa)
                    check(y1 is not None and np.array_equal(y1.view(np.uint32), y[t:t + n].view(np.uint32)),
                          f"{qt.name} {rows}x{cols} {isa}: tokens {t}..{t + n - 1} alone differ from T={T}")
                x.tofile(xfile)
            for a, b in (("avx2", "avx512"), ("avx2-packed", "avx512-packed")):
                if a in ys and b in ys:
                    check(np.array_equal(ys[a].view(np.uint32), ys[b].view(np.uint32)),
                          f"{qt.name} {rows}x{cols}: {a} and {b} differ")


def main():
    for f in (BIN, TOOL):
        if not os.path.exists(f):
            print(f"FAIL: {f} not built (make tests)")
            return 1
    rng = np.random.default_rng(46)
    with tempfile.TemporaryDirectory(prefix="beagle_kquants_") as tmp:
        check_dequant(tmp, rng)
        check_matmul(tmp, rng)
    failures = counts()[1]
    print(f"test_kquants.py: {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
