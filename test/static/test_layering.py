#!/usr/bin/env python3
# test_layering.py: the include layering of src/ and cuda/ (docs/README.md, "Layers"): a file may
# include headers of its own layer or of a lower one, never of a higher one. A self-check first shows
# the checker failing on a planted upward include in a scratch tree, then the real tree is checked.
import os
import re
import sys
import tempfile

# Lowest first. cuda/ (kernels and the emulator) is the device half of the backend: the backend may
# include it, and it includes nothing from src/.
LAYERS = ["core", "tokenizer", "io", "backend", "model", "decode", "data", "train", "serve", "cli"]
RANK = {name: i for i, name in enumerate(LAYERS)}
RANK["cuda"] = RANK["backend"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    parts = path.split("/")
    if parts[0] == "cuda":
        return "cuda"
    if parts[0] == "src" and len(parts) > 2:
        if parts[1] not in RANK:
            raise SystemExit(f"test_layering: {path}: folder src/{parts[1]} is in no layer; add it to LAYERS")
        return parts[1]
    return None


def resolve(root, includer, name):
    # The compiler's search order for "...": the includer's folder, then -Icuda, then -Isrc.
    for base in (os.path.dirname(includer), "cuda", "src"):
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def violations(root):
    found = []
    for top in ("src", "cuda"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for fn in sorted(files):
                if not fn.endswith((".h", ".cpp", ".cu", ".cuh")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, fn), root)
                mine = layer_of(rel)
                with open(os.path.join(root, rel), errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = resolve(root, rel, m.group(1))
                        if target is None:
                            found.append(f"{rel}:{lineno}: include \"{m.group(1)}\" not found (expected a file "
                                         f"beside it, in cuda/ or in src/)")
                            continue
                        theirs = layer_of(target)
                        if theirs is None:
                            found.append(f"{rel}:{lineno}: includes {target}, outside src/ and cuda/")
                        elif mine == "cuda" and theirs != "cuda":
                            found.append(f"{rel}:{lineno}: kernel file includes {target} (cuda/ includes only cuda/)")
                        elif RANK[theirs] > RANK[mine]:
                            found.append(f"{rel}:{lineno}: layer {mine} includes {target} of higher layer {theirs} "
                                         f"(order: {' < '.join(LAYERS)})")
    return found


def self_check():
    # A scratch tree with one legal and one planted upward include: the checker must report exactly
    # the planted one.
    with tempfile.TemporaryDirectory() as d:
        for rel, text in {
            "src/core/a.h": "#pragma once\n",
            "src/train/t.h": '#include "../core/a.h"\n',
            "src/model/m.cpp": '#include "../core/a.h"\n#include "../train/t.h"\n',
        }.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        v = violations(d)
        ok = len(v) == 1 and v[0].startswith("src/model/m.cpp:2: layer model includes src/train/t.h")
        print(f"self-check (planted model -> train include): {'caught' if ok else 'NOT caught'}: {v}")
        return ok


def main():
    root = os.environ.get("BEAGLE_ROOT", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    while not os.path.isdir(os.path.join(root, "src")):  # test/ may be nested (test/<role>/)
        root = os.path.join(root, "..")
    if not self_check():
        return 1
    v = violations(os.path.normpath(root))
    for line in v:
        print("FAIL", line)
    n = sum(1 for top in ("src", "cuda") for _, _, fs in os.walk(os.path.join(root, top)) for f in fs
            if f.endswith((".h", ".cpp", ".cu", ".cuh")))
    print(f"{n} files checked, {len(v)} layering violations (order: {' < '.join(LAYERS)}; cuda/ = backend's kernels)")
    return 1 if v else 0


if __name__ == "__main__":
    sys.exit(main())
