#!/usr/bin/env python3
"""test_quantize.py: `beagle quantize` against llama.cpp and the `gguf` package.
  - llama-quantize's bytes: for both models of quantize_fixture.py and all 13 types, the output's
    tensors (names, types, shapes, data, in file order) have the digest llama-quantize's output has
    (test/data/llama-quantize.json, written by scripts/quantize_golden.py from llama.cpp's own build;
    `make interop` compares the two programs' files byte for byte again);
  - the gguf package: it reads every output; the legacy types' blocks equal gguf.quants.quantize of the
    input; each k-quant reconstructs the input better than the legacy type of its bits (Q4_K than Q4_1,
    Q5_K than Q5_1; Q6_K better than half of Q5_1's error), through the gguf package's dequantizer;
  - metadata: the input's entries in order, then general.quantization_version 2 and general.file_type;
  - it runs here: tool_logits on quantized outputs against scripts/ref_llama.py's float64 forward of the
    same file, within TOL = 1e-3 of the logit range (as test_archs.py: the int16 activation rounding is
    ~3e-5 of a product);
  - HF safetensors input (Llama with Llama-3 rope scaling, untied; Qwen2 with biases, tied): the F32 and
    Q8_0 GGUFs written from it give the logits of the reference run on the HF directory itself (F32:
    within TOL; Q8_0: against the reference of the Q8_0 file), and llama.cpp's q/k row order (GGUF llama:
    permuted; qwen2: as HF stores it) is what the reference of the written GGUF reads;
  - errors: an unknown type, a quantized input without --allow-requantize, a llama2.c file, IN = OUT
    all exit non-zero with a message naming the fix; no output or temp file is left behind."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import gguf
from gguf.quants import dequantize, quantize

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
root = os.environ.get("BEAGLE_ROOT", os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(root, "scripts"))
import quantize_fixture  # noqa: E402
import test_archs as ta  # noqa: E402
from checks import check, finish  # noqa: E402
from quantize_golden import TYPES, quantize_digest  # noqa: E402
from ref_llama import RefLlama  # noqa: E402

BIN = os.environ.get("BEAGLE_BIN", os.path.join(root, "build", "beagle"))
GOLDEN = json.load(open(os.path.join(root, "test", "data", "llama-quantize.json")))
Q = gguf.GGMLQuantizationType
LEGACY = {Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0}
FTYPE = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q8_0": 7, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
         "Q5_K_M": 17, "Q6_K": 18, "F16": 1, "BF16": 32, "F32": 0}


def run(*args):
    p = subprocess.run([BIN, *args], capture_output=True, timeout=300)
    p.stdout, p.stderr = (x.decode("utf-8", "replace") for x in (p.stdout, p.stderr))
    return p


def quantize_ok(src, out, qtype, *flags):
    p = run("quantize", *flags, src, out, qtype, "2")
    return check(p.returncode == 0, f"beagle quantize {src} {qtype}: exit {p.returncode}: {p.stderr[-800:]}")


def rel_rmse(x, y):
    return float(np.sqrt(np.mean((x - y) ** 2) / np.mean(x ** 2)))


def fields(path):
    r = gguf.GGUFReader(path)
    return [(k, f.contents()) for k, f in r.fields.items() if not k.startswith("GGUF.")]


def check_metadata(src, out, qtype):
    want = [kv for kv in fields(src) if kv[0] not in ("general.file_type", "general.quantization_version")]
    want += [("general.quantization_version", 2), ("general.file_type", FTYPE[qtype])]
    got = fields(out)
    check(got == want, f"{os.path.basename(out)}: metadata {[k for k, _ in got]} differs from the input's "
          f"entries followed by quantization_version and file_type")


def check_against_gguf(src, out, qtype, errs):
    """Legacy blocks equal gguf.quants.quantize; every quantized tensor's error, per type, into errs."""
    inp = {t.name: t for t in gguf.GGUFReader(src).tensors}
    for t in gguf.GGUFReader(out).tensors:
        if t.tensor_type in (Q.F32, Q.F16, Q.BF16):
            continue
        s = inp[t.name]
        x = dequantize(s.data, s.tensor_type).astype(np.float32).reshape(-1, int(s.shape[0]))
        if t.tensor_type in LEGACY:
            want = quantize(x, t.tensor_type)
            got = np.asarray(t.data).reshape(want.shape)
            check(np.array_equal(got, want), f"{os.path.basename(out)} {t.name}: {t.tensor_type.name} blocks differ "
                  f"from gguf.quants.quantize in {int((got != want).any(axis=1).sum())} of {want.shape[0]} rows")
        y = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(x.shape)
        errs.setdefault(t.tensor_type.name, []).append(rel_rmse(x.astype(np.float64), y))


def compare_with(name, model, V, ref_path):
    """tool_logits of model against the float64 reference of another file (the HF directory it came from)."""
    ids = [int(x) for x in ta.rng.integers(0, V, 12)]
    ours, _ = ta.beagle_logits(model, ids, V, 1)
    if ours is None:
        return
    want, _ = RefLlama(ref_path).forward(ids)
    err = ta.rel_err(ours, want)
    check(err <= ta.TOL, f"{name}: max |logit - ref({os.path.basename(ref_path)})| = {err:.2e} of the range > {ta.TOL}")
    print(f"{name}: max rel logit err against {os.path.basename(ref_path)}: {err:.1e}")


def expect_error(what, args, *needles):
    p = run(*args)
    ok = p.returncode != 0 and all(n in p.stderr for n in needles)
    check(ok, f"{what}: exit {p.returncode}, stderr {p.stderr.strip()!r}, expected non-zero and {needles}")
    if ok:
        print(f"{what}: {p.stderr.strip().splitlines()[0]}")


def main():
    for f in (BIN, ta.TOOL):
        if not os.path.exists(f):
            print(f"FAIL: {f} missing (make tests)")
            sys.exit(1)
    tmp = tempfile.mkdtemp(prefix="beagle_quantize_")
    P = lambda n: os.path.join(tmp, n)  # noqa: E731

    # llama-quantize's bytes, the gguf package's blocks, the metadata
    errs = {}
    for kind, fx in quantize_fixture.FIXTURES.items():
        src = P(f"{kind}.gguf")
        quantize_fixture.write(kind, src)
        g = GOLDEN["fixtures"][kind]
        if not check(quantize_digest(src)[0] == g["input"],
                     f"fixture {kind}: its tensors are not those the golden was made from (regenerate with "
                     "scripts/quantize_golden.py ... --write after a change to quantize_fixture.py)"):
            continue
        same = 0
        for t in TYPES:
            out = P(f"{kind}-{t}.gguf")
            if not quantize_ok(src, out, t):
                continue
            digest, types = quantize_digest(out)
            same += digest == g["types"][t]["sha256"]
            check(digest == g["types"][t]["sha256"],
                  f"{kind} {t}: tensors differ from llama-quantize's (types here {types}, llama-quantize "
                  f"{g['types'][t]['tensor_types']})")
            check_metadata(src, out, t)
            check_against_gguf(src, out, t, errs)
        print(f"{kind}: {same} of {len(TYPES)} types have llama-quantize's tensor bytes")
    e = {k: max(v) for k, v in errs.items()}
    print("worst relative RMS error per type: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(e.items())))
    if all(k in e for k in ("Q4_K", "Q4_1", "Q5_K", "Q5_1", "Q6_K")):
        check(e["Q4_K"] < e["Q4_1"], f"Q4_K error {e['Q4_K']:.4f} is not below Q4_1's {e['Q4_1']:.4f}")
        check(e["Q5_K"] < e["Q5_1"], f"Q5_K error {e['Q5_K']:.4f} is not below Q5_1's {e['Q5_1']:.4f}")
        check(e["Q6_K"] < 0.5 * e["Q5_1"], f"Q6_K error {e['Q6_K']:.4f} is not below half of Q5_1's {e['Q5_1']:.4f}")
    else:
        check(False, f"quantized types seen: {sorted(e)}")

    # it runs here: our logits on quantized files against the float64 reference of each file, on 2-layer
    # versions of the fixtures (8 random layers amplify the activations' int16 rounding, ~1.5e-5 of a
    # block's largest value, to ~7e-4 of the logit range; 2 layers keep it near 1e-4, under TOL with margin)
    V = quantize_fixture.FIXTURES["k"]["vocab"]
    for kind in list(quantize_fixture.FIXTURES):
        quantize_fixture.FIXTURES[kind + "2"] = dict(quantize_fixture.FIXTURES[kind], layers=2)
        quantize_fixture.write(kind + "2", P(f"{kind}2.gguf"))
        for t in ("Q4_K_M", "Q5_K_M", "Q6_K", "Q5_1", "F16"):
            if quantize_ok(P(f"{kind}2.gguf"), P(f"{kind}2-{t}.gguf"), t):
                ta.compare(f"{kind} (2 layers) {t}", P(f"{kind}2-{t}.gguf"), V)

    # HF safetensors input: Llama-3.1-style rope scaling (low 1, high 4, as GGUF's rope_freqs carries it) and
    # an untied output; Qwen2 with q/k/v biases and tied embeddings
    V = 96
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64}
    ta.write_hf(P("llama31-hf"), "LlamaForCausalLM", "llama", ta.random_weights(V, 4, 2, 16, True, False), 4, 2, V,
                500000.0, 1e-5, rope_scaling=rope)
    ta.write_hf(P("qwen2-hf"), "Qwen2ForCausalLM", "qwen2", ta.random_weights(V, 4, 2, 16, False, True), 4, 2, V,
                1e6, 1e-6, dtype=np.float16, use_sliding_window=False)
    for hf, arch in (("llama31-hf", "llama"), ("qwen2-hf", "qwen2")):
        for t in ("F32", "Q8_0"):
            out = P(f"{hf}-{t}.gguf")
            if not quantize_ok(P(hf), out, t):
                continue
            r = gguf.GGUFReader(out)
            check(r.fields["general.architecture"].contents() == arch, f"{hf} {t}: architecture is not {arch}")
            names = {x.name for x in r.tensors}
            check(("rope_freqs.weight" in names) == (hf == "llama31-hf"), f"{hf} {t}: rope_freqs.weight presence")
            check(("attn_q.bias" in " ".join(names)) == (arch == "qwen2"), f"{hf} {t}: q/k/v bias presence")
            if t == "F32":
                compare_with(f"{hf} -> GGUF {t}", out, V, P(hf))  # the written GGUF is the HF model
            else:
                ta.compare(f"{hf} -> GGUF {t}", out, V)

    # errors
    src = P("k.gguf")
    expect_error("unknown type", ["quantize", src, P("x.gguf"), "Q3_XYZ"], "unknown type 'Q3_XYZ'", "Q4_K_M")
    expect_error("quantized input", ["quantize", P("k-Q4_K_M.gguf"), P("x.gguf"), "Q8_0"], "--allow-requantize",
                 "is already")
    expect_error("llama2.c input", ["quantize", os.path.join(root, "data/models/stories260K.bin"), P("x.gguf"),
                                    "Q8_0"], "llama2.c")
    expect_error("IN = OUT", ["quantize", src, src, "Q8_0"], "same path")
    expect_error("missing TYPE", ["quantize", src, P("x.gguf")], "IN OUT TYPE")
    check(not glob.glob(P("x.gguf*")), f"a refused run left {glob.glob(P('x.gguf*'))}")
    if quantize_ok(P("k-Q4_K_M.gguf"), P("requant.gguf"), "Q8_0", "--allow-requantize"):
        check(gguf.GGUFReader(P("requant.gguf")).fields["general.file_type"].contents() == 7,
              "--allow-requantize: file_type is not Q8_0's 7")
    p = run("quantize", "--help")
    check(p.returncode == 0 and "Q4_K_M" in p.stdout, f"quantize --help: exit {p.returncode}")
    shutil.rmtree(tmp, ignore_errors=True)
    finish("test_quantize")


if __name__ == "__main__":
    main()
