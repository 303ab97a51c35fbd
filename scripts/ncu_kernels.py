#!/usr/bin/env python3
"""ncu_kernels.py: the per-kernel time table of one `ncu --csv --metrics gpu__time_duration.sum` run of
`beagle-cuda generate` (scripts/gpu_check.sh, step kernel_profile). Forwards are split at embed_kernel
launches (each target forward starts with one): the first is the prefill, the rest are decode steps.
Prints JSON: per phase, per kernel: launches, total and mean microseconds, share of the phase, grids.
read_ncu and split_forwards are also scripts/ncu_bytes.py's reader."""
import collections, csv, json, sys

# ncu's units (it scales them unless --print-units base), to microseconds and to bytes
UNIT = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
        "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def read_ncu(path):
    """The launches of an ncu CSV in order: [(kernel name, grid, {metric: value in us or bytes})]; one CSV row
    per (launch, metric), launches told apart by their ID."""
    rows = list(csv.reader(open(path)))
    hdr = next((r for r in rows if r and r[0] == "ID"), None)
    if hdr is None:
        sys.exit("ncu: no ncu CSV header in %s" % path)
    col = {k: hdr.index(k) for k in ("ID", "Kernel Name", "Grid Size", "Metric Name", "Metric Unit", "Metric Value")}
    launches, by_id = [], {}
    for r in rows:
        if len(r) < len(hdr) or r[0] == "ID" or not r[0].isdigit():
            continue
        unit = r[col["Metric Unit"]]
        if unit not in UNIT:
            sys.exit("ncu: unit %r of %s not known (expected one of %s)" % (unit, r[col["Metric Name"]], ", ".join(UNIT)))
        if r[col["ID"]] not in by_id:
            by_id[r[col["ID"]]] = len(launches)
            launches.append((r[col["Kernel Name"]].split("(")[0], r[col["Grid Size"]], {}))
        value = float(r[col["Metric Value"]].replace(",", "")) * UNIT[unit]
        launches[by_id[r[col["ID"]]]][2][r[col["Metric Name"]]] = value
    if not launches:
        sys.exit("ncu: no ncu CSV rows in %s" % path)
    return launches


def split_forwards(launches):
    """The launches grouped into target forwards: a new one at every embed_kernel."""
    forwards = []
    for launch in launches:
        if launch[0] == "embed_kernel" or not forwards:
            forwards.append([])
        forwards[-1].append(launch)
    return forwards


def table(launches, steps):
    agg = collections.OrderedDict()
    for name, grid, m in launches:
        a = agg.setdefault(name, {"launches": 0, "us": 0.0, "grids": set()})
        a["launches"] += 1
        a["us"] += m["gpu__time_duration.sum"]
        a["grids"].add(grid)
    total = sum(a["us"] for a in agg.values())
    out = {"forwards": steps, "us_per_forward": round(total / max(steps, 1), 1), "kernels": {}}
    for name, a in sorted(agg.items(), key=lambda kv: -kv[1]["us"]):
        out["kernels"][name] = {"launches": a["launches"], "us_total": round(a["us"], 1),
                                "us_per_launch": round(a["us"] / a["launches"], 2),
                                "share": round(a["us"] / total, 4), "grids": sorted(a["grids"])[:6]}
    return out


def main():
    phases = split_forwards(read_ncu(sys.argv[1]))
    res = {"prefill": table(phases[0], 1)}
    if len(phases) > 1:
        # the last forward may be cut by --launch-count: count whole ones only
        whole = phases[1:-1] if len(phases) > 2 else phases[1:]
        res["decode"] = table([k for p in whole for k in p], len(whole))
    json.dump(res, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
