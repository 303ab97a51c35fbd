#!/usr/bin/env python3
# draft_scaling.py: the SmolLM2 draft's tau against the self-distilled data it trained on and the compute
# spent (docs/training/smollm2-draft-scaling.json, the shipped draft's phases), a fit of
# tau = a + b ln(tokens) through the best tau at each data size, and what reaching the targets would cost:
# the tokens the target must write, datagen hours and training hours at the rates in the JSON.
"""Prints the block of docs/training.md ("How tau grows with the data"); --update-doc rewrites it there,
--png FILE draws the chart (build/test/tool_line_chart), --measure-datagen records datagen's rate here."""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DATA = "docs/training/smollm2-draft-scaling.json"
DOC = "docs/training.md"
BEGIN, END = "<!-- draft_scaling.py: generated, edit the JSON or the script -->", "<!-- end draft_scaling.py -->"
SERIES = [("heldout_tree60", "held-out 10 turns, tree-60"), ("mtbench40_tree60", "MT-Bench 40 turns, tree-60")]


def points(j):
    """Per phase: distinct tokens seen, cumulative steps and tokens trained, and the tau of each series."""
    out, steps, trained = [], 0, 0
    for p in j["phases"]:
        steps += p["steps"]
        trained += p["steps"] * p["tokens_per_step"]
        seen = sum(j["data_sets"][d] for d in p["seen"])
        out.append(dict(p, tokens=seen, cum_steps=steps, cum_trained=trained))
    return out


def fit(pts, key):
    """Least squares of tau = a + b ln(tokens) through the best tau at each data size (the frontier: more epochs
    over the same data are not more data). Returns (a, b, the frontier points) or None with fewer than 2 sizes."""
    best = {}
    for p in pts:
        if p.get(key) is not None:
            best[p["tokens"]] = max(best.get(p["tokens"], -1e9), p[key])
    if len(best) < 2:
        return None
    xs = [math.log(t) for t in best]
    ys = list(best.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b, sorted(best.items())


def tokens_for(a, b, tau):
    return math.exp((tau - a) / b)


def report(j):
    pts = points(j)
    lines = ["| phase | data seen | distinct tokens | steps so far | tokens trained so far | held-out tree-60 | MT-Bench 40 tree-60 |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for p in pts:
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            p["phase"], " + ".join(p["seen"]), f"{p['tokens']:,}", f"{p['cum_steps']:,}", f"{p['cum_trained']:,}",
            "%.2f" % p["heldout_tree60"] if p.get("heldout_tree60") is not None else "",
            "%.3f" % p["mtbench40_tree60"] if p.get("mtbench40_tree60") is not None else ""))
    have = pts[-1]["tokens"]
    tr = j["training"]
    train_rate = tr["tokens"] / tr["seconds"]  # tokens trained per second (from stored states)
    gen_rate = (j.get("datagen") or {}).get("tokens_per_s")
    lines += ["", "Fits of tau = a + b ln(distinct tokens) through the best tau at each data size, and what the targets "
              "would take at that rate (training: two passes over all the data, as phases 6 and 7, at %.0f tokens/s "
              "from stored states on %d threads, %.0f%% of that from token shards; datagen: %s):" % (
                  train_rate, tr["threads"], 100 * tr["from_tokens_rate"],
                  "%.0f tokens/s of sequences on 2 threads, prompts and answers as the data sizes count them, measured" % gen_rate if gen_rate else "not measured yet"), "",
              "| series | b (tau per e-fold of data) | target | distinct tokens | x today's | new tokens to write | datagen hours | training hours (from tokens) |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key, label in SERIES:
        f = fit(pts, key)
        if not f:
            continue
        a, b, _ = f
        for tau in j["targets"]:
            need = tokens_for(a, b, tau)
            new = max(0.0, need - have)
            gen_h = "%.0f" % (new / gen_rate / 3600) if gen_rate else "-"
            train_h = 2 * need / (train_rate * tr["from_tokens_rate"]) / 3600
            lines.append("| %s | %.3f | %.1f | %.0fM | %.1f | %.0fM | %s | %.0f |" % (
                label, b, tau, need / 1e6, need / have, new / 1e6, gen_h, train_h))
    return "\n".join(lines)


def chart(j, png):
    pts = points(j)
    colours = ["#1f77b4", "#d62728"]
    series = []
    fits = [(key, label, rgb, fit(pts, key)) for (key, label), rgb in zip(SERIES, colours)]
    fits = [f for f in fits if f[3]]
    # the fitted lines run to where the most optimistic fit reaches the highest target
    top = min(tokens_for(a, b, max(j["targets"])) for _, _, _, (a, b, _) in fits)
    for key, label, rgb, (a, b, front) in fits:
        series.append({"label": label, "x": [t for t, _ in front], "y": [v for _, v in front], "rgb": rgb, "width": 3})
        xs = [front[0][0] * (top / front[0][0]) ** (i / 40) for i in range(41)]
        series.append({"label": label + ": fit", "x": xs, "y": [a + b * math.log(x) for x in xs], "rgb": rgb, "width": 1})
    spec = {"title": "SmolLM2 draft: tau against the self-distilled tokens it trained on",
            "xlabel": "distinct tokens of target answers (log scale)", "ylabel": "tau (greedy, tree of 60)",
            "log_x": True, "legend_bottom": True, "series": series,
            "vlines": [[pts[-1]["tokens"], "shipped draft"]]}
    tool = os.path.join(ROOT, "build/test/tool_line_chart")
    if not os.path.exists(tool):
        sys.exit("draft_scaling.py: build/test/tool_line_chart missing (make build/test/tool_line_chart)")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        subprocess.run([tool, f.name, png], check=True)
    finally:
        os.unlink(f.name)


def measure_datagen(j):
    """beagle datagen of 32 MT-Bench first turns (up to 256 new tokens each, one batch of 32, 2 threads): tokens of the
    sequences (prompt and answer, as the data sets' sizes count them) per second."""
    model = os.path.join(ROOT, "weights/SmolLM2-135M-Instruct.Q4_1.gguf")
    with tempfile.TemporaryDirectory() as d:
        t0 = time.time()
        p = subprocess.run([os.path.join(ROOT, "build/beagle"), "datagen", "-m", model, "--prompts",
                            os.path.join(ROOT, "data/eval/mt_bench_question.jsonl"), "--limit", "32", "-n", "256",
                            "--batch", "32", "-t", "2", "-o", os.path.join(d, "g")], capture_output=True, text=True)
        secs = time.time() - t0
        if p.returncode != 0:
            sys.exit("draft_scaling.py: datagen failed: " + p.stderr[-400:])
        m = re.findall(r"(\d+) tokens", p.stderr)
        if not m:
            sys.exit("draft_scaling.py: no token count in datagen's output")
        new = int(m[-1])
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "-")
    j["datagen"] = {"tokens_per_s": round(new / secs, 1), "tokens": new, "seconds": round(secs, 1), "machine": cpu,
                    "command": "beagle datagen --prompts data/eval/mt_bench_question.jsonl --limit 32 -n 256 --batch 32 -t 2"}
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--update-doc", action="store_true", help="rewrite the block in " + DOC)
    ap.add_argument("--png", help="draw the chart to this file")
    ap.add_argument("--measure-datagen", action="store_true", help="time beagle datagen here and store its rate in " + DATA)
    a = ap.parse_args()
    path = os.path.join(ROOT, DATA)
    j = json.load(open(path))
    if a.measure_datagen:
        j = measure_datagen(j)
        with open(path + ".tmp", "w") as f:
            json.dump(j, f, indent=1)
            f.write("\n")
        os.replace(path + ".tmp", path)
    body = report(j)
    if a.png:
        chart(j, a.png)
    if a.update_doc:
        doc = os.path.join(ROOT, DOC)
        text = open(doc).read()
        pat = re.escape(BEGIN) + r"\n(?:.*?\n)?" + re.escape(END)
        if not re.search(pat, text, re.S):
            sys.exit(f"draft_scaling.py: {DOC} has no block {BEGIN} ... {END}")
        text = re.sub(pat, lambda _: BEGIN + "\n" + body + "\n" + END, text, flags=re.S)
        with open(doc + ".tmp", "w") as f:
            f.write(text)
        os.replace(doc + ".tmp", doc)
        return
    print(BEGIN)
    print(body)
    print(END)


if __name__ == "__main__":
    main()
