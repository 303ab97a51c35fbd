#!/usr/bin/env python3
# test_gpu_bytes.py: scripts/gpu_bytes.py (the byte model of docs/gpu-kernels.md) reads its tiling constants
# from cuda/, never counts a kernel below its compulsory bytes, and the doc's tables are its output. A
# self-check first plants changed constants and launches in scratch copies: the checks must fail.
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = "scripts/gpu_bytes.py"
DOC = "docs/gpu-kernels.md"
BLOCK = re.compile(r"<!-- gpu_bytes\.py (\w+): generated, edit the script -->\n(.*?)\n<!-- end gpu_bytes\.py \1 -->",
                   re.S)


def run(root, *args):
    return subprocess.run([sys.executable, os.path.join(root, SCRIPT), *args], capture_output=True, text=True)


def problems(root):
    """Everything wrong with the model and the doc in the tree at root (empty: all fine)."""
    out = []
    r = run(root, "--json")
    if r.returncode != 0:
        return [f"gpu_bytes.py --json exits {r.returncode}: {r.stderr.strip()}"]
    m = json.loads(r.stdout)
    # (a) the constants are the ones in cuda/kernels.cuh and cuda/attn_split.h (a plain per-name search)
    hdr = "".join(open(os.path.join(root, f)).read() for f in ("cuda/kernels.cuh", "cuda/attn_split.h"))
    for name, v in m["constants"].items():
        found = re.findall(r"\b%s\s*=\s*(\d+)" % name, hdr)
        if found != [str(v)]:
            out.append(f"constant {name}: script {v}, cuda/kernels.cuh + attn_split.h {found}")
    # (b) must <= does for every kernel row (and the totals) at both T, and in the cross-attention table
    for shape in ("smollm2", "7b"):
        for row in m["model_MB"][shape]:
            for T in (1, 64):
                must, does = row[f"must_T{T}"], row[f"does_T{T}"]
                if must > does * (1 + 1e-12) or must < 0:
                    out.append(f"{shape} {row['kernel']} T={T}: must {must} > does {does}")
        if not any(row["must_T1"] > 0 for row in m["model_MB"][shape]):
            out.append(f"{shape}: no bytes at all")
    for shape, rows in m["model_MB"]["xattn"].items():
        for row in rows:
            if row["must"] > row["does"] * (1 + 1e-12) or row["must"] <= 0:
                out.append(f"xattn {shape} {row['kernel']}: must {row['must']} > does {row['does']}")
    # (c) the doc's generated blocks are the script's output, block for block
    r = run(root)
    if r.returncode != 0:
        return out + [f"gpu_bytes.py exits {r.returncode}: {r.stderr.strip()}"]
    want = dict(BLOCK.findall(r.stdout))
    have = dict(BLOCK.findall(open(os.path.join(root, DOC)).read()))
    if sorted(want) != sorted(have) or not want:
        out.append(f"{DOC}: blocks {sorted(have)}, the script prints {sorted(want)}")
    for name in want:
        if name in have and have[name] != want[name]:
            diff = [f"  doc:    {a}\n  script: {b}" for a, b in zip(have[name].splitlines(), want[name].splitlines())
                    if a != b]
            out.append(f"{DOC}: table '{name}' is stale (python3 {SCRIPT} --update-doc):\n" + "\n".join(diff[:4]))
    return out


def scratch_copy(tmp):
    for rel in ["cuda", "src/model", "src/backend", "scripts", "docs"]:
        shutil.copytree(os.path.join(ROOT, rel), os.path.join(tmp, rel),
                        ignore=shutil.ignore_patterns("emu", "dev", "__pycache__"))
    return tmp


def plant(root, path, old, new):
    p = os.path.join(root, path)
    text = open(p).read()
    assert old in text, f"self-check: `{old}` not in {path}"
    open(p, "w").write(text.replace(old, new, 1))


def main():
    # self-check: the checks fail on planted changes in scratch copies: a changed constant makes the doc
    # stale, a changed launch rule stops the script
    plants = [("cuda/kernels.cuh", "QMMA_ROWS = 16", "QMMA_ROWS = 32", "stale", "a changed QMMA_ROWS"),
              ("cuda/attention.cu", "a.n_kv_heads, split ? n_slices : 1)", "a.n_kv_heads, split ? a.T : 1)", "exits",
               "a changed split-KV grid"),
              ("cuda/gemm_quant.cu", "dim3 grid(cdiv(max_rows, QMMA_ROWS), cdiv(T, QMMA_TOKENS), n);",
               "dim3 grid(cdiv(max_rows, QMMA_ROWS), cdiv(T, QMMA_ROWS), n);", "exits", "a changed tensor-core grid"),
              ("cuda/kernels.cuh", "QGEMM_FILL_BLOCKS = 264", "QGEMM_FILL_BLOCKS = 100", "stale",
               "a changed QGEMM_FILL_BLOCKS"),
              ("cuda/gemm_quant.cu", ">= QGEMM_FILL_BLOCKS) return R;", "> QGEMM_FILL_BLOCKS) return R;", "exits",
               "a changed dp4a row rule")]
    for path, old, new, want, what in plants:
        with tempfile.TemporaryDirectory() as tmp:
            root = scratch_copy(tmp)
            plant(root, path, old, new)
            got = problems(root)
            caught = any("is stale" in p for p in got) if want == "stale" else bool(got) and "exits" in got[0]
            if not caught:
                sys.exit(f"test_gpu_bytes: self-check: {what} did not {'make the doc stale' if want == 'stale' else 'stop the script'}: {got}")
    print("self-check: a changed QMMA_ROWS or QGEMM_FILL_BLOCKS makes the doc stale, a changed split-KV grid, "
          "tensor-core grid or dp4a row rule stops the script")
    got = problems(ROOT)
    for p in got:
        print("FAIL", p)
    if got:
        sys.exit(1)
    print("gpu_bytes.py: constants from cuda/kernels.cuh, must <= does in every row, docs/gpu-kernels.md tables current")


if __name__ == "__main__":
    main()
