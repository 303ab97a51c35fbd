#!/usr/bin/env python3
"""ncu_kernels.py: the per-kernel time table of one `ncu --csv --metrics gpu__time_duration.sum` run of
`beagle-cuda generate` (scripts/gpu_check.sh, step kernel_profile). Forwards are split at embed_kernel
launches (each target forward starts with one): the first is the prefill, the rest are decode steps.
Prints JSON: per phase, per kernel: launches, total and mean microseconds, share of the phase, grids."""
import collections, csv, json, sys

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) >= 15 and r[0] != "ID"]
hdr = None
for r in csv.reader(open(sys.argv[1])):
    if r and r[0] == "ID":
        hdr = r
        break
if hdr is None or not rows:
    sys.exit("ncu_kernels.py: no ncu CSV rows in %s" % sys.argv[1])
col = {k: hdr.index(k) for k in ("Kernel Name", "Grid Size", "Metric Unit", "Metric Value")}
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
phases, cur = [], None
for r in rows:
    name = r[col["Kernel Name"]].split("(")[0]
    if name == "embed_kernel" or cur is None:
        cur = []
        phases.append(cur)
    us = float(r[col["Metric Value"]].replace(",", "")) * scale[r[col["Metric Unit"]]]
    cur.append((name, us, r[col["Grid Size"]]))

def table(launches, steps):
    agg = collections.OrderedDict()
    for name, us, grid in launches:
        a = agg.setdefault(name, {"launches": 0, "us": 0.0, "grids": set()})
        a["launches"] += 1
        a["us"] += us
        a["grids"].add(grid)
    total = sum(a["us"] for a in agg.values())
    out = {"forwards": steps, "us_per_forward": round(total / max(steps, 1), 1), "kernels": {}}
    for name, a in sorted(agg.items(), key=lambda kv: -kv[1]["us"]):
        out["kernels"][name] = {"launches": a["launches"], "us_total": round(a["us"], 1),
                                "us_per_launch": round(a["us"] / a["launches"], 2),
                                "share": round(a["us"] / total, 4), "grids": sorted(a["grids"])[:6]}
    return out

decode = [k for p in phases[1:] if len(p) > 0 for k in p]
res = {"prefill": table(phases[0], 1)}
if len(phases) > 1:
    # the last forward may be cut by --launch-count: count whole ones only
    whole = phases[1:-1] if len(phases) > 2 else phases[1:]
    res["decode"] = table([k for p in whole for k in p], len(whole))
json.dump(res, sys.stdout, indent=1)
print()
