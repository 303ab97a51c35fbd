#!/usr/bin/env python3
# test_ncu_kernels.py: scripts/ncu_kernels.py (gpu_check's kernel table) on a synthetic ncu CSV written
# here (no GPU): forwards split at embed_kernel (prefill, then decode steps; a last forward cut by
# --launch-count dropped), ns / us units, thousands separators, per-kernel sums and shares.
import json, os, subprocess, tempfile

from checks import check, finish

ROOT = os.environ.get("BEAGLE_ROOT", ".")
HDR = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size", "Grid Size",
       "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]
launches = [("embed_kernel(int)", "(1, 1, 1)", "ns", "2,000"), ("gemm_k(QGemmArgs)", "(9, 1, 1)", "ns", "40,000"),
            ("attn_k(AttnArgs)", "(1, 3, 1)", "us", "10.5")]  # prefill
for step in range(3):  # 3 decode forwards, the last cut after its embed
    launches += [("embed_kernel(int)", "(1, 1, 1)", "ns", "1,000")]
    if step < 2:
        launches += [("gemm_k(QGemmArgs)", "(144, 1, 3)", "ns", "5,000"), ("attn_k(AttnArgs)", "(1, 3, 1)", "ns", "3,000")]
with tempfile.TemporaryDirectory() as tmp:
    p = os.path.join(tmp, "ncu.csv")
    with open(p, "w") as f:
        f.write("==PROF== Connected to process 1\n")
        f.write(",".join('"%s"' % h for h in HDR) + "\n")
        for i, (k, g, u, v) in enumerate(launches):
            row = [str(i), "1", "beagle-cuda", "h", k, "1", "13", "(128, 1, 1)", g, "0", "9.0", "m", "gpu__time_duration.sum", u, v]
            f.write(",".join('"%s"' % c for c in row) + "\n")
    r = subprocess.run(["python3", os.path.join(ROOT, "scripts/ncu_kernels.py"), p], capture_output=True, text=True)
    check(r.returncode == 0, "ncu_kernels.py failed: " + r.stderr[-400:])
    if r.returncode == 0:
        d = json.loads(r.stdout)
        pf, dc = d["prefill"], d["decode"]
        check(pf["forwards"] == 1 and abs(pf["us_per_forward"] - 52.5) < 1e-6, f"prefill {pf['forwards']} {pf['us_per_forward']}")
        check(dc["forwards"] == 2 and abs(dc["us_per_forward"] - 9.0) < 1e-6, f"decode {dc['forwards']} {dc['us_per_forward']}")
        g = dc["kernels"].get("gemm_k", {})
        check(g.get("launches") == 2 and abs(g.get("us_per_launch", 0) - 5.0) < 1e-6 and abs(g.get("share", 0) - 10 / 18) < 1e-3,
              f"decode gemm_k {g}")
        check(list(dc["kernels"])[0] == "gemm_k" and pf["kernels"]["attn_k"]["us_total"] == 10.5, "ordering and us units")
finish("test_ncu_kernels")
