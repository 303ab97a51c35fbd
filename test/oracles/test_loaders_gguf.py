#!/usr/bin/env python3
# test_loaders_gguf.py: our GGUF reader against the `gguf` package (GGUFReader + gguf.quants):
# for stories260K.gguf, the SmolLM2 Q4_1 GGUF and a synthetic GGUF written by gguf.GGUFWriter
# (every tensor type we support, every metadata value type, nested arrays), `beagle info` must
# list the same tensors (names in order, dtypes, shapes, byte sizes), the same metadata keys and
# scalar values, the same tokenizer facts, and `beagle info --dump-tensor all` must equal
# gguf.quants.dequantize bit for bit (exact: F32/F16/BF16 are widened exactly, and Q8_0/Q4_0/Q4_1
# values are a half-precision scale times a small integer (plus a half offset, rounded once), the
# same float32 operations in numpy and in our scalar code).
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

import gguf
from gguf.quants import dequantize, quantize
from checks import check, counts
from gguf_llama import add_llama_tensors_and_close, add_toy_vocab, new_llama_writer

ROOT = os.environ.get("BEAGLE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("BEAGLE_BIN", os.path.join(ROOT, "build", "beagle"))
DATA = os.path.join(ROOT, "data")
MODEL = os.environ.get("BEAGLE_MODEL", os.path.join(ROOT, "weights", "SmolLM2-135M-Instruct.Q4_1.gguf"))



def run_info(*args):
    p = subprocess.run([BIN, "info", *args], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        sys.exit(f"beagle info {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p.stdout


def parse_info(text):
    out = {"tensors": [], "metadata": {}, "config": {}, "tokenizer": {}}
    section = None
    for line in text.splitlines():
        if not line.startswith("  "):
            section = line.split(" ")[0].rstrip(":")
            continue
        s = line[2:]
        if section == "tensors":
            m = re.match(r"^(\S+)\s+(\S+)\s+\[([0-9, ]*)\]\s+(\d+)$", s)
            assert m, line
            shape = tuple(int(x) for x in m.group(3).split(",")) if m.group(3) else ()
            out["tensors"].append((m.group(1), m.group(2), shape, int(m.group(4))))
        elif section == "metadata":
            k, v = s.split(" = ", 1)
            out["metadata"][k] = v
        elif section in ("config", "tokenizer"):
            k, _, v = s.partition(" ")
            out[section][k] = v.strip()
    return out


def escape(s):
    # the C++ side's printable string (gguf.cpp escape())
    r = []
    for ch in s:
        o = ord(ch)
        if ch == "\n": r.append("\\n")
        elif ch == "\t": r.append("\\t")
        elif ch == "\r": r.append("\\r")
        elif ch == '"': r.append('\\"')
        elif ch == "\\": r.append("\\\\")
        elif o < 0x20 or o == 0x7F: r.append("\\x%02x" % o)
        else: r.append(ch)
    return '"' + "".join(r) + '"'


def field_value(f):
    t = f.types[0]
    if t == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0]


def check_file(path, tmp):
    name = os.path.basename(path)
    r = gguf.GGUFReader(path)
    info = parse_info(run_info("-m", path))

    # tensors: names (file order), dtype, shape (GGUF innermost-first reversed), bytes
    ours = info["tensors"]
    check(len(ours) == len(r.tensors), f"{name}: {len(ours)} tensors, gguf has {len(r.tensors)}")
    for (n, dt, shape, nbytes), t in zip(ours, r.tensors):
        want_shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        ok = n == t.name and dt == t.tensor_type.name and shape == want_shape and nbytes == int(t.n_bytes)
        check(ok, f"{name}: tensor {n} {dt} {shape} {nbytes} vs gguf {t.name} {t.tensor_type.name} {want_shape} {t.n_bytes}")

    # metadata: same keys; scalars equal; arrays same type and length
    fields = {k: f for k, f in r.fields.items() if k not in ("GGUF.tensor_count", "GGUF.kv_count")}
    check(set(fields) == set(info["metadata"]), f"{name}: metadata keys differ: "
          f"{sorted(set(fields) ^ set(info['metadata']))}")
    vt = gguf.GGUFValueType
    tname = {vt.UINT8: "u8", vt.INT8: "i8", vt.UINT16: "u16", vt.INT16: "i16", vt.UINT32: "u32", vt.INT32: "i32",
             vt.FLOAT32: "f32", vt.BOOL: "bool", vt.STRING: "string", vt.ARRAY: "array", vt.UINT64: "u64",
             vt.INT64: "i64", vt.FLOAT64: "f64"}
    for k, f in fields.items():
        got = info["metadata"].get(k)
        if got is None:
            continue
        t = f.types[0]
        if t == vt.ARRAY:
            # parts: key length, key, value type, element type, element count, ... (f.data lists the
            # leaves, which differs from the count for nested arrays)
            want = f"array[{tname[f.types[1]]}; {int(f.parts[4][0])}]"
            check(got.startswith(want), f"{name}: {k} = {got[:60]}, want prefix {want}")
        elif t == vt.STRING:
            s = field_value(f)
            if len(s.encode()) <= 400:
                check(got == escape(s), f"{name}: {k} = {got}, want {escape(s)}")
        elif t == vt.BOOL:
            check(got == ("true" if field_value(f) else "false"), f"{name}: {k} = {got}")
        elif t in (vt.FLOAT32, vt.FLOAT64):
            v = field_value(f)
            check(np.array(float(got), dtype=v.dtype) == v, f"{name}: {k} = {got}, want {v!r}")
        else:
            check(int(got) == int(field_value(f)), f"{name}: {k} = {got}, want {field_value(f)}")

    # tokenizer facts
    tok = info["tokenizer"]
    if "tokenizer.ggml.tokens" in r.fields:
        check(int(tok["vocab_size"]) == len(r.fields["tokenizer.ggml.tokens"].data), f"{name}: vocab size")
        for key, fk in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id")):
            f = r.fields.get("tokenizer.ggml." + fk)
            if f is not None:
                check(int(tok[key].split()[0]) == int(field_value(f)), f"{name}: {key} {tok[key]}")
        merges = r.fields.get("tokenizer.ggml.merges")
        check(int(tok["merges"]) == (len(merges.data) if merges else 0), f"{name}: merges {tok['merges']}")
        model = field_value(r.fields["tokenizer.ggml.model"])
        check(tok["kind"] == {"gpt2": "bpe_bytelevel", "llama": "spm"}[model], f"{name}: kind {tok['kind']}")

    # values: our dequantize_row (through --dump-tensor all) against gguf.quants.dequantize
    proc = subprocess.Popen([BIN, "info", "-m", path, "--dump-tensor", "all", "--out", "-"], stdout=subprocess.PIPE)
    bad, seen = 0, set()
    for t in r.tensors:
        ref = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1)
        raw = proc.stdout.read(4 * ref.size)
        ours = np.frombuffer(raw, dtype="<f4")
        seen.add(t.tensor_type.name)
        if ours.size != ref.size or not np.array_equal(ours.view(np.uint32), ref.view(np.uint32)):
            bad += 1
            if bad <= 5:
                diff = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32)) if ours.size == ref.size else []
                print(f"  {name}: {t.name} ({t.tensor_type.name}) differs at {len(diff)} elements", file=sys.stderr)
    rest = proc.stdout.read()
    rc = proc.wait(timeout=60)
    check(rc == 0, f"{name}: --dump-tensor exited {rc}")
    check(bad == 0, f"{name}: {bad} tensors differ from gguf.quants.dequantize")
    check(len(rest) == 0, f"{name}: dump has {len(rest)} bytes more than the gguf tensors")
    print(f"{name}: {len(r.tensors)} tensors ({', '.join(sorted(seen))}), {len(fields)} metadata keys match gguf")
    return seen


def write_synthetic(path):
    # tiny llama: dim 64, 2 layers, 4/2 heads, ffn 96, vocab 40; matrices cycle through the types
    rng = np.random.default_rng(7)
    dim, L, H, KV, F, V = 64, 2, 4, 2, 96, 40
    hd = dim // H
    w = new_llama_writer(path, 128, dim, L, H, KV, F)
    # one key of every value type, and arrays, nested arrays
    w.add_uint8("test.u8", 250)
    w.add_int8("test.i8", -120)
    w.add_uint16("test.u16", 65000)
    w.add_int16("test.i16", -32000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 3.25)
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 1.0 / 3.0)
    w.add_bool("test.bool", True)
    w.add_string("test.str", 'multi\nline "quoted" \\ tab\t')
    w.add_array("test.arr_i", [1, -2, 3])
    w.add_array("test.arr_f", [0.5, 1.5])
    w.add_array("test.arr_s", ["a", "bb", ""])
    w.add_array("test.arr_b", [True, False])
    w.add_array("test.nested", [[1, 2], [3]])
    add_toy_vocab(w, V)
    types = [gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16, gguf.GGMLQuantizationType.Q8_0,
             gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.F32]
    k = 0

    def mat(name, rows, cols):
        nonlocal k
        qt = types[k % len(types)]
        k += 1
        a = rng.standard_normal((rows, cols)).astype(np.float32)
        if qt == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, a)
        elif qt == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, quantize(a, qt), raw_dtype=qt)

    def vec(name, n):
        w.add_tensor(name, rng.standard_normal(n).astype(np.float32))

    add_llama_tensors_and_close(w, mat, vec, L, V, dim, H, KV, hd, F)


def main():
    if not os.path.exists(BIN):
        sys.exit(f"{BIN} not built")
    with tempfile.TemporaryDirectory(prefix="beagle_gguf_") as tmp:
        seen = set()
        seen |= check_file(os.path.join(DATA, "models", "stories260K.gguf"), tmp)
        if os.path.exists(MODEL):
            seen |= check_file(MODEL, tmp)
        else:
            check(False, f"SmolLM2 model missing at {MODEL} (make model)")
        synth = os.path.join(tmp, "synthetic.gguf")
        write_synthetic(synth)
        seen |= check_file(synth, tmp)
        info = parse_info(run_info("-m", synth))["metadata"]
        check(info.get("test.nested") == "array[array; 2] [array[i32; 2] [1, 2], array[i32; 1] [3]]",
              f"nested array printed as {info.get('test.nested')}")
        check(seen >= {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"}, f"tensor types covered: {sorted(seen)}")
    checks, failures = counts()
    print(f"test_loaders_gguf: {checks} checks, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
