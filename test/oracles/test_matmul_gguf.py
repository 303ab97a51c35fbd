#!/usr/bin/env python3
# test_matmul_gguf.py: cpu_matmul on real SmolLM2-135M tensors vs numpy with weights dequantized by the
# gguf package (gguf.quants.dequantize): an independent reference for the Q4_1 and Q8_0 block layouts.
# The raw tensor bytes and x go to a temp dir; build/test/test_matmul_gguf --apply computes y (both ISAs,
# 16-bit activations (the default) and 8-bit ones, chosen by env BEAGLE_ACT_BITS).
#
# Tolerance, per output y[t, o] (u = 2^-24), derived not tuned: the kernel quantizes x per block of 32 to
# d_x * q with |x_i - d_x q_i| <= d_x/2 + 3u|x_i| (d_x = max|x_block| / QMAX, QMAX = 32767 or 127), so
#   |y - sum_i w_i x_i| <= sum_i |w_i| (d_x/2 + 3u|x_i|)  +  R u sum_i |w_i| (|x_i| + d_x/2)
# where the second term bounds the float rounding of the scales, block sums and accumulation
# (R = nb + ceil(nb/8) + 5, derived in test_matmul.cpp, nb = cols / 32) plus 1 for the reference's own
# float32 weights.
# That bound is loose (a dropped block could hide under it), so a second, tight check replicates the
# quantizer bit for bit in numpy float32 (d = f32(amax / QMAX), q = rint(x * f32(1 / d))) and compares
# with the model y_model = sum_i w_i d_x q_i (gguf weights, in float64):
#   |y - y_model| <= (R + 1) u [ sum_i (|w_i| + |m_b|) |d_x q_i| + sum_b |m_b| |s_b| ]
# (|m_b| = Q4_1 block min, 0 for Q8_0; s_b = d_x sum q), i.e. only float rounding is allowed.
import os, subprocess, sys, tempfile
import numpy as np
import gguf

root = os.environ.get("BEAGLE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
model = os.environ.get("BEAGLE_MODEL", os.path.join(root, "weights/SmolLM2-135M-Instruct.Q4_1.gguf"))
bin_dir = os.path.dirname(os.environ["BEAGLE_BIN"]) if "BEAGLE_BIN" in os.environ else os.path.join(root, "build")
tool = os.path.join(bin_dir, "test", "test_matmul_gguf")
U = 2.0 ** -24

def check_q8_0_quantizer(tool):
    """quantize_row_q8_0 (the draft's Q8_0 inference copy) against the gguf package's Q8_0 quantizer,
    byte for byte: Gaussian blocks at several scales, an all-zero block, a block with exact .5 ties
    (round half away from zero) and one with a single nonzero value."""
    rng = np.random.default_rng(11)
    blocks = [rng.normal(0, s, (64, 32)) for s in (1e-3, 0.05, 1.0, 300.0)]
    ties = np.zeros((1, 32)); ties[0, 0] = 127.0; ties[0, 1:8] = [0.5, -0.5, 1.5, -2.5, 62.5, -100.5, 3.0]
    one = np.zeros((1, 32)); one[0, 5] = -7.25
    x = np.concatenate(blocks + [np.zeros((1, 32)), ties, one]).astype(np.float32).reshape(-1)
    want = gguf.quants.quantize(x.reshape(1, -1), gguf.GGMLQuantizationType.Q8_0).reshape(-1)
    with tempfile.TemporaryDirectory() as tmp:
        xf, yf = os.path.join(tmp, "x.bin"), os.path.join(tmp, "y.bin")
        x.tofile(xf)
        p = subprocess.run([tool, "--quantize-q8_0", xf, yf], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"FAIL: q8_0 quantizer: tool failed: {p.stderr.strip()}"); return 1
        got = np.fromfile(yf, dtype=np.uint8)
    if got.shape != want.shape or not np.array_equal(got, want):
        bad = int((got != want).sum()) if got.shape == want.shape else -1
        print(f"FAIL: q8_0 quantizer differs from gguf.quants.quantize: {bad} of {want.size} bytes"); return 1
    print(f"ok   q8_0 quantizer: {x.size // 32} blocks byte-identical to gguf.quants.quantize")
    return 0

def main():
    if not os.path.exists(model):
        print(f"FAIL: model {model} not found (make model)"); return 1
    if not os.path.exists(tool):
        print(f"FAIL: {tool} not built (make tests)"); return 1
    reader = gguf.GGUFReader(model)
    tensors = {t.name: t for t in reader.tensors}
    isas = ["avx2", "avx2-packed", "avx512", "avx512-packed"]  # -packed: the row-group copy (cpu_pack_weight)
    widths = [(16, 32767.0), (8, 127.0)]  # activation bits, QMAX
    rng = np.random.default_rng(11)
    failures = 0
    cases = [("blk.0.attn_q.weight", "Q4_1", None), ("blk.3.ffn_up.weight", "Q4_1", None),
             ("blk.0.ffn_down.weight", "Q4_1", None), ("token_embd.weight", "Q8_0", 8192)]
    with tempfile.TemporaryDirectory() as tmp:
        for name, want, max_rows in cases:
            t = tensors[name]
            qtype = t.tensor_type.name
            if qtype != want:
                print(f"FAIL: {name} is {qtype}, expected {want}"); failures += 1; continue
            raw = np.ascontiguousarray(t.data)              # (rows, bytes per row) uint8
            if max_rows: raw = raw[:max_rows]
            rows, cols = raw.shape[0], int(t.shape[0])
            W = gguf.quants.dequantize(raw, t.tensor_type).astype(np.float64)   # (rows, cols)
            assert W.shape == (rows, cols), W.shape
            T = 4
            x = (rng.standard_normal((T, cols)) * 1.5).astype(np.float32)
            x[1, 40] = 250.0                                # an outlier block
            x[2, 64:96] = 0.0                               # an all-zero block
            xd = x.astype(np.float64)
            ref = xd @ W.T                                  # (T, rows)
            absW = np.abs(W)
            nb = cols // 32
            nround = nb + (nb + 7) // 8 + 6                 # kernel roundings (see test_matmul.cpp) + f32 weights
            if qtype == "Q4_1":
                mabs = np.abs(raw.reshape(rows, nb, 20)[:, :, 2:4].copy().view(np.float16)[:, :, 0].astype(np.float64))
            else:
                mabs = np.zeros((rows, nb))
            wfile, xfile, yfile = (os.path.join(tmp, f) for f in ("w.bin", "x.bin", "y.bin"))
            raw.tofile(wfile); x.tofile(xfile)
            for bits, qmax in widths:
                dx = np.abs(xd.reshape(T, -1, 32)).max(axis=2) / qmax           # (T, nb)
                half = np.repeat(dx / 2, 32, axis=1)        # (T, cols): d_x / 2 per element
                tol = (half + 3 * U * np.abs(xd)) @ absW.T + nround * U * ((np.abs(xd) + half) @ absW.T)
                # bit-exact replica of the activation quantizer (float32 arithmetic, round half to even)
                xb = x.reshape(T, nb, 32)
                d = (np.abs(xb).max(axis=2) / np.float32(qmax)).astype(np.float32)
                inv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, np.float32(1.0)), np.float32(0.0)).astype(np.float32)
                q = np.rint((xb * inv[:, :, None]).astype(np.float32))
                assert np.abs(q).max() <= qmax
                xq = (q * d[:, :, None].astype(np.float64)).reshape(T, cols)     # d_x q, exact in float64
                sb = np.abs((d * q.sum(axis=2).astype(np.float32)).astype(np.float64))  # |s_b|, (T, nb)
                model_y = xq @ W.T
                tol_model = nround * U * (np.abs(xq) @ (absW + np.repeat(mabs, 32, axis=1)).T + sb @ mabs.T)
                # the row-group kernel adds <= 2 nb terms in sequence, each with <= 2 roundings (matmul_ref.h)
                nround_p = 2 * nb + 3
                tol_p = tol + (nround_p - nround) * U * ((np.abs(xd) + half) @ absW.T)
                tol_model_p = tol_model * (nround_p / nround)
                for isa in isas:
                    if isa.endswith("-packed") and bits != 16:
                        continue  # 8-bit activations never use the packed copy
                    tol_i, tol_model_i = (tol_p, tol_model_p) if isa.endswith("-packed") else (tol, tol_model)
                    p = subprocess.run([tool, "--apply", qtype, str(rows), str(cols), str(T), wfile, xfile, yfile, isa],
                                       capture_output=True, text=True, env=dict(os.environ, BEAGLE_ACT_BITS=str(bits)))
                    if p.returncode != 0:
                        if isa.startswith("avx512") and "lacks" in p.stderr:
                            print(f"note: {isa} not available on this CPU"); continue
                        print(f"FAIL: {name} {isa}: tool failed: {p.stderr.strip()}"); failures += 1; continue
                    if f"act_bits {bits}" not in p.stdout:
                        print(f"FAIL: {name} {isa}: tool did not use {bits}-bit activations: {p.stdout.strip()}")
                        failures += 1; continue
                    y = np.fromfile(yfile, dtype=np.float32).reshape(T, rows).astype(np.float64)
                    err = np.abs(y - ref)
                    ratio = float((err / tol_i).max())
                    rel = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
                    err_m = np.abs(y - model_y)
                    ratio_m = float((err_m / tol_model_i).max())
                    ok = bool((err <= tol_i).all()) and bool((err_m <= tol_model_i).all())
                    print(f"{'ok  ' if ok else 'FAIL'} {isa:13s} int{bits:<2d} {name:22s} {qtype} {rows}x{cols} T={T}: "
                          f"vs exact x: max err/tol {ratio:.3f} (rel L2 {rel:.1e}); vs quantized model: max err/tol "
                          f"{ratio_m:.3f} (max |err| {err_m.max():.2g})")
                    if not ok:
                        i = np.unravel_index(np.argmax(err_m / tol_model_i), err.shape)
                        print(f"     worst at {i}: got {y[i]:.9g} model {model_y[i]:.9g} tol {tol_model_i[i]:.3g}")
                        failures += 1
    failures += check_q8_0_quantizer(tool)
    print(f"test_matmul_gguf.py: {failures} failed")
    return 1 if failures else 0

if __name__ == "__main__":
    sys.exit(main())
