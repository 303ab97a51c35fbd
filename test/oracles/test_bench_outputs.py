#!/usr/bin/env python3
# test_bench_outputs.py: `beagle bench` and `beagle bench-sd` end to end through the CLI on stories260K:
# bench's JSON holds one object per matmul ISA path (avx2 always, avx512 where the CPU has it), each with
# the verify cost curve (T = 1..16 each, cost of T = 1 is 1, times > 0, max_speedup = T / cost), and at the
# top level the default path's fields; --isa with an unknown path is an error; --backend cuda in the CPU
# build fails (the CUDA backend's JSON: test_bench_cuda_backend.py);
# bench-sd's JSON holds every category and mode with the promised fields, no output differs from plain
# greedy decoding, every mode produced the same number of tokens as plain decoding (same outputs), the
# totals add up, the "mt_bench" aggregate covers exactly the MT-Bench categories, and both PNGs are valid
# (read by test/oracles/pngcheck.py, not stb). CLI errors: an unknown mode, chain without a draft.
import json, os, subprocess, tempfile

from checks import check, finish
from pngcheck import png_pixels

BIN = os.environ.get("BEAGLE_BIN", "build/beagle")
DATA = os.path.join(os.environ.get("BEAGLE_ROOT", "."), "data")
ROOT = os.environ.get("BEAGLE_ROOT", ".")
M = ["-m", f"{DATA}/models/stories260K.bin", "-z", f"{DATA}/models/tok512.bin"]
DRAFT = f"{ROOT}/weights/beagle-stories260K.bin"
def run(args):
    return subprocess.run([BIN] + args, capture_output=True, text=True, timeout=300)


with tempfile.TemporaryDirectory() as tmp:
    # beagle bench: the verify cost curve
    r = run(["bench"] + M + ["--prompt-tokens", "16", "--gen-tokens", "8", "--reps", "1", "-t", "1", "-o", f"{tmp}/b.json"])
    check(r.returncode == 0, f"bench failed ({r.returncode}): {r.stderr[-600:]}")
    if r.returncode == 0:
        b = json.load(open(f"{tmp}/b.json"))
        paths = b.get("paths", [])
        names = [p.get("isa") for p in paths]
        has512 = "avx512_vnni" in open("/proc/cpuinfo").read()
        check(names == (["avx2", "avx512"] if has512 else ["avx2"]), f"bench paths {names} (avx512 vnni: {has512})")
        check(b.get("isa") in names and b.get("verify_cost") == paths[names.index(b["isa"])]["verify_cost"]
              if b.get("isa") in names else False, f"top-level isa {b.get('isa')} repeats its path's fields")
        for p in paths:
            vc = p.get("verify_cost", [])
            Ts = [v["T"] for v in vc]
            check(Ts[:16] == list(range(1, 17)) and Ts == sorted(set(Ts)), f"{p['isa']}: verify_cost T values {Ts}")
            check(all(v["ms"] > 0 for v in vc), f"{p['isa']}: verify times > 0")
            check(abs(vc[0]["cost"] - 1) < 1e-6, f"{p['isa']}: cost of T = 1 is 1")
            for v in vc:
                check(abs(v["max_speedup"] - v["T"] / v["cost"]) < 1e-2 * v["max_speedup"],
                      f"{p['isa']}: max_speedup of T {v['T']}")
            check(p["decode_tok_s"] > 0 and p["prefill_tok_s"] > 0 and p["roofline_fraction"] > 0,
                  f"{p['isa']}: bench speeds > 0")
    r = run(["bench"] + M + ["--backend", "cuda", "--reps", "1"])
    check(r.returncode != 0 and "without CUDA" in r.stderr, f"CPU build, bench --backend cuda: exit {r.returncode}, {r.stderr[-300:]}")
    r = run(["bench"] + M + ["--isa", "sse2", "--reps", "1"])
    check(r.returncode != 0 and "expected 'auto', 'avx2' or 'avx512'" in r.stderr and "sse2" in r.stderr,
          f"bench --isa sse2: exit {r.returncode}, {r.stderr[-300:]}")

    # beagle bench-sd: two categories, one of them an MT-Bench category
    prompts = f"{tmp}/p.jsonl"
    with open(prompts, "w") as f:
        for i, (cat, text) in enumerate([("writing", "Once upon a time"), ("writing", "The little dog"),
                                         ("rag", "Lily and Tom went to the park"), ("rag", "One day, a bird")]):
            f.write(json.dumps({"question_id": i, "category": cat, "turns": [text]}) + "\n")
    out = f"{tmp}/s.json"
    r = run(["bench-sd"] + M + ["-d", DRAFT, "--prompts", prompts, "--per-category", "2", "-n", "24", "-t", "1",
                                "--no-chat", "--modes", "none,lookup,chain,tree,hybrid", "--ngram", "4", "-o", out])
    check(r.returncode == 0, f"bench-sd failed ({r.returncode}): {r.stderr[-600:]}")
    if r.returncode == 0:
        s = json.load(open(out))
        check(set(s["categories"]) == {"writing", "rag"}, f"categories {list(s['categories'])}")
        modes = ["none", "lookup", "chain", "tree", "hybrid"]
        for name, c in list(s["categories"].items()) + [("mt_bench", s["mt_bench"]), ("overall", s["overall"])]:
            check(list(c) == modes, f"{name}: modes {list(c)}")
            for m in modes:
                x = c[m]
                check(x["mismatches"] == 0, f"{name}/{m}: {x['mismatches']} outputs differ from plain greedy")
                check(x["tokens"] == c["none"]["tokens"], f"{name}/{m}: {x['tokens']} tokens vs plain {c['none']['tokens']}")
                check(x["tau"] >= 1 and x["tok_s"] > 0, f"{name}/{m}: tau {x['tau']} tok/s {x['tok_s']}")
                check(all(0 <= a <= 1 for a in x["accept_by_depth"]), f"{name}/{m}: accept_by_depth {x['accept_by_depth']}")
                check(x["target_passes"] <= x["tokens"], f"{name}/{m}: more target passes than tokens")
                check(0 <= x["draft_ms_per_pass"] < x["ms_per_pass"], f"{name}/{m}: ms per pass {x['ms_per_pass']}, "
                      f"of which drafting {x['draft_ms_per_pass']}")
                check((x["draft_ms_per_pass"] > 0) == (m != "none"), f"{name}/{m}: draft time {x['draft_ms_per_pass']} "
                      "(every speculative mode spends some, plain decoding none)")
            check(abs(c["none"]["speedup"] - 1) < 1e-6, f"{name}: plain speedup {c['none']['speedup']}")
        check(s["mt_bench"]["none"]["tokens"] == s["categories"]["writing"]["none"]["tokens"], "mt_bench = writing only")
        check(s["overall"]["tree"]["tokens"] == sum(c["tree"]["tokens"] for c in s["categories"].values()),
              "overall tokens = sum of the categories")
        check(s["overall"]["none"]["prompts"] == 4, "4 prompts in all")
        check(s["peak_rss_bytes"] > 0, "peak RSS reported")
        check(s["ngram"] == 4 and s["gamma"] == 5, f"settings recorded: ngram {s.get('ngram')} gamma {s.get('gamma')}")
        vc = s.get("verify_cost", [])  # tree, hybrid and lookup are cost-aware here: their start-up table
        check(len(vc) >= 2 and vc[0] == 1.0 and all(b >= a for a, b in zip(vc, vc[1:])),
              f"verify_cost: the start-up table, cost(1) = 1 and non-decreasing: {vc[:8]}")
        for suf in [".speedup.png", ".accept.png"]:
            try:
                w, h, raw = png_pixels(out[:-5] + suf)
                check(len(set(raw)) > 3, f"{suf} is blank")
            except (AssertionError, OSError) as e:
                check(False, f"{suf}: {e}")

    # CLI errors
    r = run(["bench-sd"] + M + ["--prompts", prompts, "--modes", "none,fast"])
    check(r.returncode == 1 and "unknown mode 'fast'" in r.stderr, f"unknown mode: {r.returncode} {r.stderr}")
    r = run(["bench-sd"] + M + ["--prompts", prompts, "--modes", "none,chain"])
    check(r.returncode == 1 and "needs -d DRAFT" in r.stderr, f"chain without draft: {r.returncode} {r.stderr}")
    r = run(["bench-sd"] + M + ["--prompts", prompts, "--modes", "none,lookup", "--ngram", "0"])
    check(r.returncode == 1 and "--ngram must be >= 1" in r.stderr, f"--ngram 0: {r.returncode} {r.stderr}")

finish("test_bench_outputs")
