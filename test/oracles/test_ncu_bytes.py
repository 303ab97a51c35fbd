#!/usr/bin/env python3
# test_ncu_bytes.py: scripts/ncu_bytes.py (gpu_check's step dram_bytes: ncu's DRAM bytes beside the byte model)
# on a synthetic ncu CSV written here (no GPU): one row per (launch, metric) in base units, forwards split at
# embed_kernel, the GEMM after the second rmsnorm_fwd_kernel counted as the LM head, read + write summed per
# model row, kernels the model has no row for kept apart, model rows without a launch listed; a CSV without
# the DRAM metrics is refused. And every row the script maps kernels to is a row `gpu_bytes.py --bytes` gives
# (decode and a 64-token pass, whose GEMMs add quantize launches), so the two scripts agree on names.
import json, os, subprocess, tempfile

from checks import check, finish

ROOT = os.environ.get("BEAGLE_ROOT", ".")
HDR = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size", "Grid Size",
       "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
# (kernel, DRAM read, DRAM write) of a prefill (forward 0) and a decode step (forward 1)
prefill = [("embed_kernel", 100, 50), ("rmsnorm_fwd_kernel", 10, 10), ("gemm_q4_1_kernel", 1000, 20),
           ("attn_fwd_tiled_kernel", 300, 5), ("attn_combine_kernel", 7, 3), ("add_kernel", 4, 2),
           ("rmsnorm_fwd_kernel", 10, 10), ("gemm_q4_1_kernel", 5000, 8), ("argmax_kernel", 1, 1)]
decode = [("embed_kernel", 1, 1), ("rmsnorm_fwd_kernel", 1, 1)]
MODEL = {k: {"label": k, "must": 1000, "does": 2000} for k in ("gemm", "head", "attn", "rmsnorm", "add", "embed", "swiglu")}


def write_csv(path, launches, metrics=("dram__bytes_read.sum", "dram__bytes_write.sum")):
    with open(path, "w") as f:
        f.write("==PROF== Connected to process 1\n")
        f.write(",".join('"%s"' % h for h in HDR) + "\n")
        for i, (k, rd, wr) in enumerate(launches):
            for m in metrics:
                v = {"dram__bytes_read.sum": rd, "dram__bytes_write.sum": wr}[m]
                row = [str(i), "1", "beagle-cuda", "h", k + "(Args)", "1", "13", "(128, 1, 1)", "(9, 1, 1)", "0", "9.0",
                       "s", m, "byte", "{:,}".format(v)]
                f.write(",".join('"%s"' % c for c in row) + "\n")
            row = [str(i), "1", "beagle-cuda", "h", k + "(Args)", "1", "13", "(128, 1, 1)", "(9, 1, 1)", "0", "9.0", "s",
                   "gpu__time_duration.sum", "nsecond", "1,500"]
            f.write(",".join('"%s"' % c for c in row) + "\n")


def run(csv, forward, model):
    return subprocess.run(["python3", os.path.join(ROOT, "scripts/ncu_bytes.py"), csv, str(forward), model],
                          capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    csv, model = os.path.join(tmp, "ncu.csv"), os.path.join(tmp, "model.json")
    json.dump(MODEL, open(model, "w"))
    write_csv(csv, prefill + decode)
    r = run(csv, 0, model)
    check(r.returncode == 0, "ncu_bytes.py failed: " + r.stderr[-400:])
    if r.returncode == 0:
        d = json.loads(r.stdout)
        rows = d["rows"]
        check(rows["gemm"]["ncu_dram"] == 1020 and rows["gemm"]["launches"] == 1, f"layer GEMM {rows['gemm']}")
        check(rows["head"]["ncu_dram"] == 5008 and rows["head"]["ncu_over_must"] == 5.008, f"LM head {rows['head']}")
        check(rows["attn"]["ncu_dram"] == 315 and rows["attn"]["launches"] == 2, f"attention {rows['attn']}")
        check(rows["rmsnorm"]["ncu_dram"] == 40, f"norms {rows['rmsnorm']}")
        check(d["not_modelled"] == {"argmax_kernel": {"launches": 1, "ncu_dram": 2.0}}, f"not modelled {d['not_modelled']}")
        check(d["modelled_without_launches"] == ["swiglu"], f"rows without launches {d['modelled_without_launches']}")
        check(d["total"]["ncu_dram"] == 150 + 1020 + 315 + 40 + 6 + 5008 and d["total"]["must"] == 7000,
              f"total {d['total']}")
    r = run(csv, 1, model)
    check(r.returncode == 0 and json.loads(r.stdout)["rows"]["embed"]["ncu_dram"] == 2, "forward 1 (the decode step)")
    r = run(csv, 2, model)
    check(r.returncode != 0 and "forward 2 asked, the CSV holds 2" in r.stderr, "a forward past the CSV: " + r.stderr[-200:])
    write_csv(csv, prefill, metrics=("dram__bytes_read.sum",))
    r = run(csv, 0, model)
    check(r.returncode != 0 and "has no dram__bytes_write.sum" in r.stderr, "a CSV without the write metric: " + r.stderr[-200:])
    # the rows ncu_bytes.py maps kernels to are the model's rows, and back
    import sys
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from ncu_bytes import ROWS  # noqa: E402
    mapped = {row for _, row in ROWS} | {"head"}
    for spec in ("smollm2,cache=4:1", "7b,L=2,cache=0:64:1"):
        r = subprocess.run(["python3", os.path.join(ROOT, "scripts/gpu_bytes.py"), "--bytes", spec], capture_output=True,
                           text=True)
        check(r.returncode == 0, "gpu_bytes.py --bytes %s: %s" % (spec, r.stderr[-300:]))
        if r.returncode == 0:
            keys = set(json.loads(r.stdout))
            check(keys <= mapped, "%s: model rows no kernel maps to: %s" % (spec, sorted(keys - mapped)))
            check("gemm" in keys and "head" in keys and "attn" in keys, "%s: rows %s" % (spec, sorted(keys)))
finish("test_ncu_bytes")
