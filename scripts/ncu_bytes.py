#!/usr/bin/env python3
"""ncu_bytes.py: ncu's DRAM bytes of one target forward beside scripts/gpu_bytes.py's model of it, row by row
(the rows of docs/gpu-kernels.md: quantized GEMMs, LM head, quantize, attention, norms, ...). gpu_check.sh
(step dram_bytes) runs `ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum` over a `beagle-cuda
generate` whose prompt has exactly T tokens and hands this script the CSV, the forward to read (0: the
prefill of T tokens, 1: the first decode step) and `gpu_bytes.py --bytes` for the same shape.
ncu replays each kernel with the caches flushed (its default --cache-control all), so a kernel's DRAM bytes are
what it must fetch itself: they should sit near the model's "must" column (its compulsory bytes) and below
"does" (what the kernel requests, re-reads served by L2 included). Prints JSON: per row, the bytes (ncu
read + write, must, does) and ncu / must; the kernels the model has no row for (argmax, sampling) apart.
Usage: ncu_bytes.py NCU.csv FORWARD MODEL.json"""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_kernels import read_ncu, split_forwards  # noqa: E402

# kernel name prefix -> model row (gpu_bytes.py Table keys); a GEMM after the forward's second rmsnorm_fwd_kernel
# (the LM head's norm) is the LM head
ROWS = [("gemm_", "gemm"), ("quantize_q8_kernel", "quantize"), ("attn_", "attn"), ("rmsnorm_fwd_kernel", "rmsnorm"),
        ("add_rmsnorm_kernel", "add_rmsnorm"), ("add_kernel", "add"), ("swiglu_fwd_kernel", "swiglu"),
        ("rope_kernel", "rope"), ("rows_scatter_kernel", "scatter"), ("embed_kernel", "embed")]
METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum")


def row_of(name, norms_seen):
    for prefix, row in ROWS:
        if name.startswith(prefix):
            return "head" if row == "gemm" and norms_seen >= 2 else row
    return None


def compare(launches, model):
    rows = {k: {"label": v["label"], "ncu_dram": 0.0, "must": v["must"], "does": v["does"], "launches": 0}
            for k, v in model.items()}
    other, norms = {}, 0
    for name, _, m in launches:
        missing = [x for x in METRICS if x not in m]
        if missing:
            sys.exit("ncu_bytes.py: %s has no %s (ncu --metrics %s)" % (name, ", ".join(missing), ",".join(METRICS)))
        b = sum(m[x] for x in METRICS)
        row = row_of(name, norms)
        norms += name == "rmsnorm_fwd_kernel"
        if row is None or row not in rows:
            o = other.setdefault(name, {"launches": 0, "ncu_dram": 0.0})
            o["launches"] += 1
            o["ncu_dram"] += b
            continue
        rows[row]["ncu_dram"] += b
        rows[row]["launches"] += 1
    for r in rows.values():
        r["ncu_over_must"] = round(r["ncu_dram"] / r["must"], 3) if r["must"] else None
    tot = {k: sum(r[k] for r in rows.values()) for k in ("ncu_dram", "must", "does")}
    tot["ncu_over_must"] = round(tot["ncu_dram"] / tot["must"], 3)
    return {"rows": rows, "total": tot, "not_modelled": other,
            "modelled_without_launches": [k for k, r in rows.items() if r["launches"] == 0]}


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    forwards = split_forwards(read_ncu(sys.argv[1]))
    k = int(sys.argv[2])
    if k >= len(forwards):
        sys.exit("ncu_bytes.py: forward %d asked, the CSV holds %d" % (k, len(forwards)))
    json.dump(compare(forwards[k], json.load(open(sys.argv[3]))), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
