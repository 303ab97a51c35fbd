#!/usr/bin/env python3
# test_train_outputs.py: `beagle train` end to end through the CLI on tiny stories260K data: the
# files it promises next to the draft (DRAFT, .ckpt, .loss.png, .accept.png, .loss.tsv, .json) exist;
# the PNGs are valid, checked independently of stb with Python's zlib (signature, every chunk's CRC,
# IHDR 8-bit RGB, the IDAT stream inflates to height x (1 + 3 x width) bytes with valid filter
# bytes) and are not blank; the JSON summary parses and holds the promised fields (tau >= 1,
# acceptance rates in [0, 1]); the loss TSV has one row per step. CLI errors: a missing flag, a
# NaN run (exit code 1, message naming the step), S > w.
import glob, json, os, re, shutil, subprocess, sys, tempfile

from checks import check, finish
from pngcheck import png_pixels

BIN = os.environ.get("BEAGLE_BIN", "build/beagle")
DATA = os.path.join(os.environ.get("BEAGLE_ROOT", "."), "data")
MODEL = f"{DATA}/models/stories260K.bin"
TOK = f"{DATA}/models/tok512.bin"
ROOT = os.environ.get("BEAGLE_ROOT", ".")
def run(args, env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    return subprocess.run([BIN] + args, capture_output=True, text=True, env=e)


with tempfile.TemporaryDirectory() as tmp:
    data = f"{tmp}/data"
    r = run(["datagen", "-m", MODEL, "-z", TOK, "--sample", "4", "-n", "32", "--keep-states", "-o", data, "-t", "1"])
    check(r.returncode == 0, f"datagen failed: {r.stderr[-500:]}")
    draft = f"{tmp}/d.bin"
    prompts = f"{ROOT}/test/data/stories_prompts.txt"
    r = run(["train", "-m", MODEL, "-z", TOK, "--data", data, "-o", draft, "--stage1-epochs", "2", "--stage2-epochs", "1",
             "--batch", "2", "--seq-len", "16", "--eval-prompts", prompts, "--eval-n", "2", "--eval-tokens", "16", "-t", "1"])
    check(r.returncode == 0, f"train failed ({r.returncode}): {r.stderr[-800:]}")
    print(r.stdout)
    for suf in ["", ".ckpt", ".loss.png", ".accept.png", ".loss.tsv", ".json"]:
        check(os.path.isfile(draft + suf), f"missing {draft + suf}")
    for suf in [".loss.png", ".accept.png"]:
        try:
            w, h, raw = png_pixels(draft + suf)
            # filter bytes removed is not needed for "not blank": any non-0xff, non-0x00 data byte
            dark = sum(1 for x in raw[1:20000] if x < 128)
            print(f"{suf}: {w} x {h}, {len(raw)} raw bytes")
            check(w >= 400 and h >= 300, f"{suf}: tiny image {w}x{h}")
            check(dark > 50, f"{suf}: looks blank")
        except AssertionError as e:
            check(False, f"{suf}: invalid PNG: {e}")
    js = json.load(open(draft + ".json"))
    for k in ["config", "data_tokens", "epochs", "steps", "train_seconds", "final_loss", "tau_chain", "tau_tree", "accept_by_depth"]:
        check(k in js, f"JSON lacks {k}")
    check(js["tau_chain"] >= 1 and js["tau_tree"] >= 1, "tau < 1")
    for mode in ["chain", "tree"]:
        acc = js["accept_by_depth"][mode]
        check(len(acc) >= 1 and all(0 <= a <= 1 for a in acc), f"{mode} acceptance {acc}")
    check(js["config"]["window"] == 3 and js["epochs"] == [2, 1], "config in JSON")
    rows = open(draft + ".loss.tsv").read().strip().split("\n")
    check(len(rows) == 1 + js["steps"], f"loss.tsv has {len(rows) - 1} rows for {js['steps']} steps")
    check("tau chain" in r.stdout, "stdout reports tau")

    # CLI errors
    r = run(["train", "--data", data, "-o", f"{tmp}/e.bin"])
    check(r.returncode == 1 and "-m MODEL is required" in r.stderr, f"missing -m: {r.returncode} {r.stderr}")
    r = run(["train", "-m", MODEL, "-z", TOK, "--data", data, "-o", f"{tmp}/e.bin", "--window", "2", "--sim-steps", "3"])
    check(r.returncode == 1 and "--sim-steps <= --window" in r.stderr, f"S > w: {r.stderr}")
    # a NaN planted in the data (a copy with sequence 3's states poisoned: step 3 reads it first, seed 1):
    # the run stops at the step that reads it, naming that step and the checkpoint of the step before
    shutil.copytree(data, f"{tmp}/nan")
    shard = sorted(glob.glob(f"{tmp}/nan/shard-*.bin"))[0]
    subprocess.run([sys.executable, f"{ROOT}/test/tools/poison_shard.py", shard, "3"], check=True)
    r = run(["train", "-m", MODEL, "-z", TOK, "--data", f"{tmp}/nan", "-o", f"{tmp}/n.bin", "--batch", "2", "--seq-len", "16",
             "--ckpt-every", "1", "-q"])
    m = re.search(r"the loss is nan at step (\d+)", r.stderr)
    step = int(m.group(1)) if m else 0
    check(r.returncode == 1 and step >= 2 and f"(step {step - 1})" in r.stderr, f"NaN run: {r.returncode} {r.stderr}")
    check(not os.path.exists(f"{tmp}/n.bin"), "NaN run wrote a draft")
    check(os.path.exists(f"{tmp}/n.bin.ckpt"), "NaN run lost its last good checkpoint")

finish("test_train_outputs")
