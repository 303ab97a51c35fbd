#!/usr/bin/env python3
# test_self_contained.py: a clone alone is the whole project. No tracked file (binaries included: a draft
# records the paths of its training run) points outside the repository (a path into a sibling folder of
# the checkout), and data/ holds what it says: every file listed in data/SHA256SUMS with that hash, every
# data file listed, a licence in each folder. A self-check first shows the checker failing on a planted
# outside path and a planted bad hash.
import hashlib
import os
import subprocess
import sys
import tempfile

# What a path outside the clone looks like in this project's history: the sibling folder the data and the
# method text came from, and the environment variable that once pointed there.
OUTSIDE = ["../" + "shared", "/work/" + "shared", "BEAGLE_" + "SHARED"]
ALLOWED = {"test/static/test_self_contained.py"}
DATA_META = ("README.md", "SHA256SUMS")


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
        return [p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x not in (".git", "build")]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def outside_refs(root, files):
    bad = []
    for rel in files:
        if rel in ALLOWED:
            continue
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", "replace")  # binaries too: a shipped draft records its paths
        for n, line in enumerate(text.splitlines(), 1):
            for pat in OUTSIDE:
                if pat in line:
                    bad.append(f"{rel}:{n}: '{pat}' (expected a path inside the repository, e.g. data/...)")
    return bad


def data_problems(data):
    probs = []
    sums = os.path.join(data, "SHA256SUMS")
    if not os.path.isfile(sums):
        return [f"{sums}: missing"]
    listed = {}
    with open(sums) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if len(parts) != 2:
                probs.append(f"{sums}:{n}: expected '<sha256>  <path>', found {line.strip()!r}")
                continue
            listed[parts[1].lstrip("*")] = parts[0]
    for rel, want in sorted(listed.items()):
        p = os.path.join(data, rel)
        if not os.path.isfile(p):
            probs.append(f"data/{rel}: listed in SHA256SUMS but missing")
            continue
        with open(p, "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
        if got != want:
            probs.append(f"data/{rel}: sha256 {got}, SHA256SUMS says {want}")
    for d, _, names in os.walk(data):
        sub = os.path.relpath(d, data)
        if sub == ".":
            continue
        if not any(n.startswith("LICENSE") for n in names):
            probs.append(f"data/{sub}: no LICENSE* file beside its data")
        for n in names:
            rel = os.path.join(sub, n)
            if n.startswith("LICENSE") or n.startswith("README") or n in DATA_META:
                continue
            if rel not in listed:
                probs.append(f"data/{rel}: not listed in data/SHA256SUMS")
    return probs


def self_check():
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "scripts"))
        os.makedirs(os.path.join(t, "data", "eval"))
        with open(os.path.join(t, "scripts", "x.sh"), "w") as f:
            f.write("M=" + OUTSIDE[0] + "/data/models\n")
        with open(os.path.join(t, "data", "eval", "q.jsonl"), "w") as f:
            f.write("{}\n")
        with open(os.path.join(t, "data", "eval", "LICENSE"), "w") as f:
            f.write("MIT\n")
        with open(os.path.join(t, "data", "SHA256SUMS"), "w") as f:
            f.write("0" * 64 + "  eval/q.jsonl\n")
        refs = outside_refs(t, ["scripts/x.sh"])
        probs = data_problems(os.path.join(t, "data"))
        ok = len(refs) == 1 and "scripts/x.sh:1" in refs[0] and any("sha256" in p for p in probs)
        print(f"self-check: planted outside path -> {refs}; planted bad hash -> {probs}")
        return ok


def main():
    root = os.environ.get("BEAGLE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    if not self_check():
        print("FAIL: the checker missed a planted problem")
        return 1
    files = tracked_files(root)
    bad = outside_refs(root, files) + data_problems(os.path.join(root, "data"))
    for b in bad:
        print("FAIL", b)
    n_data = sum(1 for f in files if f.startswith("data/"))
    print(f"test_self_contained: {len(files)} tracked files scanned, {n_data} under data/, {len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
