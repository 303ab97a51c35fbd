#!/usr/bin/env python3
# bench_types.py: `beagle bench` of one model in each weight type (make bench-types). The F16 rewrite of -m
# is quantized by `beagle quantize` to each type; each file is benched on every ISA path, the whole list twice
# (forward, then in reverse, so a slow minute of a shared machine does not fall on one type), best kept.
# Writes one JSON: per type, per path, decode and prefill speed, the roofline fraction, and decode as a
# fraction of the reference type's (default Q4_1: -m itself) in weight bytes streamed per second, a ratio
# in which the machine's bandwidth (measured anew by each bench, noisy) cancels.
# Usage: python3 scripts/bench_types.py --beagle build/beagle -m MODEL --f16 F16_FILE [--types T,T] [-o OUT]
#        [--prompt-tokens N] [--gen-tokens N] (passed to beagle bench: shorter runs for a large model)
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run_bench(beagle, model, threads, reps, extra):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        p = subprocess.run([beagle, "bench", "-m", model, "-t", str(threads), "--reps", str(reps), "-o", out] + extra,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            sys.exit(f"bench_types: beagle bench -m {model} failed (exit {p.returncode}): {p.stderr.strip()[-400:]}")
        return json.load(open(out))
    finally:
        os.unlink(out)


def main():
    ap = argparse.ArgumentParser(description="beagle bench of one model in each weight type")
    ap.add_argument("--beagle", default="build/beagle")
    ap.add_argument("-m", "--model", required=True, help="the reference model file (its type is the reference)")
    ap.add_argument("--f16", required=True, help="the F16 rewrite of -m (scripts/make_kquant_model.py f16)")
    ap.add_argument("--types", default="F16,Q8_0,Q4_0,Q4_1,Q4_K_M,Q5_K_M,Q6_K",
                    help="types to bench (F16: the --f16 file; the reference type: -m itself)")
    ap.add_argument("--reference", default="Q4_1", help="the type of -m")
    ap.add_argument("--dir", default="build/models", help="where the quantized files go (kept, reused)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=0, help="beagle bench --prompt-tokens (0: its default)")
    ap.add_argument("--gen-tokens", type=int, default=0, help="beagle bench --gen-tokens (0: its default)")
    ap.add_argument("-o", "--output", default="build/bench-types.json")
    a = ap.parse_args()
    types = [t for t in a.types.split(",") if t]
    if a.reference not in types:
        types.insert(0, a.reference)
    os.makedirs(a.dir, exist_ok=True)
    files = {}
    stem = os.path.splitext(os.path.basename(a.model))[0].rsplit(".", 1)[0]
    for t in types:
        if t == a.reference:
            files[t] = a.model
        elif t == "F16":
            files[t] = a.f16
        else:
            path = os.path.join(a.dir, f"{stem}.{t}.gguf")
            if not os.path.exists(path):
                print(f"bench_types: beagle quantize {a.f16} -> {path} ({t})", file=sys.stderr)
                p = subprocess.run([a.beagle, "quantize", a.f16, path, t, str(a.threads)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if p.returncode != 0:
                    sys.exit(f"bench_types: beagle quantize to {t} failed: {p.stderr.strip()[-400:]}")
            files[t] = path
    extra = (["--prompt-tokens", str(a.prompt_tokens)] if a.prompt_tokens else []) + \
            (["--gen-tokens", str(a.gen_tokens)] if a.gen_tokens else [])
    best = {}
    order = types + types[::-1]
    for i, t in enumerate(order):
        print(f"bench_types: [{i + 1}/{len(order)}] {t}: {files[t]}", file=sys.stderr)
        j = run_bench(a.beagle, files[t], a.threads, a.reps, extra)
        b = best.setdefault(t, {"type": t, "file": os.path.basename(files[t]),
                                "weight_bytes_per_token": j["weight_bytes_per_token"], "bandwidth_gb_s": [], "paths": {}})
        b["bandwidth_gb_s"].append(j["bandwidth_gb_s"])
        for p in j["paths"]:
            cur = b["paths"].get(p["isa"])
            if cur is None or p["decode_tok_s"] > cur["decode_tok_s"]:
                cur = dict(cur or {}, isa=p["isa"], decode_tok_s=p["decode_tok_s"], roofline_fraction=p["roofline_fraction"])
            cur["prefill_tok_s"] = max(cur.get("prefill_tok_s", 0.0), p["prefill_tok_s"])
            b["paths"][p["isa"]] = cur
    ref = best[a.reference]
    for t in types:
        b = best[t]
        for isa, p in b["paths"].items():
            r = ref["paths"].get(isa)
            if r:  # decode x bytes per token: the weight bytes streamed per second, relative to the reference's
                p["of_reference"] = round(p["decode_tok_s"] * b["weight_bytes_per_token"] /
                                          (r["decode_tok_s"] * ref["weight_bytes_per_token"]), 4)
    out = [dict(best[t], paths=list(best[t]["paths"].values())) for t in types]
    cpu = "-"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    res = {"bench_types": out, "reference": a.reference, "model": os.path.basename(a.model), "threads": a.threads,
           "reps": a.reps, "cpu": cpu}
    if extra:
        res["bench_args"] = " ".join(extra)
    tmp = a.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1)
    os.replace(tmp, a.output)
    for b in out:
        for p in b["paths"]:
            print(f"bench_types: {b['type']:7s} {p['isa']:6s} decode {p['decode_tok_s']:7.1f} tok/s, roofline "
                  f"{p['roofline_fraction']:.2f}, {p.get('of_reference', float('nan')):.2f} of {a.reference}'s, prefill "
                  f"{p['prefill_tok_s']:.0f} tok/s")
    print(f"bench_types: {a.output}")


if __name__ == "__main__":
    main()
