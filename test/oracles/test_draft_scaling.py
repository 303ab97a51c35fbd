#!/usr/bin/env python3
# test_draft_scaling.py: scripts/draft_scaling.py (docs/training.md "How tau grows with the data"). Its fit of
# tau = a + b ln(tokens) equals numpy's least squares (polyfit) through the same frontier points within 1e-9;
# the frontier keeps the best tau per data size; the block in docs/training.md is the script's output for the
# committed JSON; and a JSON with one tau changed makes that block stale (the check can fail).
import importlib.util
import json
import os
import re
import sys

ROOT = os.environ.get("BEAGLE_ROOT") or os.path.normpath(os.path.join(os.path.dirname(__file__), "../.."))
spec = importlib.util.spec_from_file_location("draft_scaling", os.path.join(ROOT, "scripts/draft_scaling.py"))
ds = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ds)
try:
    import numpy as np
except ImportError:
    print("SKIP: numpy missing (make pydeps)")
    sys.exit(77)

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok


j = json.load(open(os.path.join(ROOT, ds.DATA)))
pts = ds.points(j)
for key, label in ds.SERIES:
    a, b, front = ds.fit(pts, key)
    sizes = {p["tokens"] for p in pts if p.get(key) is not None}
    check(len(front) == len(sizes) and all(v == max(p[key] for p in pts if p["tokens"] == t and p.get(key) is not None)
                                            for t, v in front), f"{label}: the frontier is the best tau per data size")
    nb, na = np.polyfit(np.log([t for t, _ in front]), [v for _, v in front], 1)
    check(abs(na - a) < 1e-9 and abs(nb - b) < 1e-9, f"{label}: a {a:.6f}, b {b:.6f} = numpy polyfit ({na:.6f}, {nb:.6f})")
    check(abs(a + b * np.log(ds.tokens_for(a, b, 3.0)) - 3.0) < 1e-9, f"{label}: tokens_for inverts the fit")


def doc_block():
    text = open(os.path.join(ROOT, ds.DOC)).read()
    m = re.search(re.escape(ds.BEGIN) + r"\n(.*?)\n" + re.escape(ds.END), text, re.S)
    return m.group(1) if m else None


block = doc_block()
check(block is not None and block == ds.report(j), f"{ds.DOC}: the generated block is current (python3 scripts/draft_scaling.py --update-doc)")
planted = json.loads(json.dumps(j))
planted["phases"][-1]["mtbench40_tree60"] += 0.05
check(block != ds.report(planted), "planted: one tau changed in the JSON makes the block stale")
sys.exit(1 if fails else 0)
