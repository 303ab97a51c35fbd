#!/usr/bin/env python3
# interop.py: `beagle perplexity` next to llama.cpp's llama-perplexity on one model and one ~12 KB English
# text (the first CNN/DailyMail articles of data/eval, concatenated, cut to 12 KB) at the same context,
# threads and batch; writes both estimates, their ratio and whether it is within --tolerance to -o (driven
# by scripts/interop.sh, which builds llama-perplexity). Exit 1 when the two disagree by more than that.
import argparse
import json
import os
import re
import subprocess
import sys
import time

PREFIX = "Summarise the article:\n\n"  # what the summarisation prompts put before each article


def cnn_text(path, max_bytes):
    """The first CNN/DailyMail articles of the prompt file, blank-line separated, cut at the last space
    before max_bytes (UTF-8)."""
    out, size = [], 0
    for line in open(path, encoding="utf-8"):
        if not line.strip():
            continue
        a = json.loads(line)["prompt"]
        out.append((a[len(PREFIX):] if a.startswith(PREFIX) else a).strip())
        size += len(out[-1].encode("utf-8")) + 2
        if size > max_bytes:
            break
    text = "\n\n".join(out).encode("utf-8")[:max_bytes].decode("utf-8", "ignore")
    return text[:text.rfind(" ")] + "\n"


def run(cmd, log):
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    log.write(out[-4000:] + "\n" + err[-8000:] + "\n[%.1f s, exit %d]\n" % (time.time() - t0, p.returncode))
    if p.returncode != 0:
        sys.exit("interop: %s failed with exit %d (log: %s):\n%s" % (cmd[0], p.returncode, log.name, err[-2000:]))
    return out, err, time.time() - t0


def final_estimate(text, who):
    """PPL and its +/- from the "Final estimate: PPL = X +/- Y" line, and the running estimates."""
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", text)
    if not m:
        sys.exit("interop: no 'Final estimate' line in %s's output" % who)
    return float(m.group(1)), float(m.group(2)), [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", text)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--beagle", required=True)
    ap.add_argument("--llama-bin", required=True, help="directory with llama-perplexity")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--cnn", required=True, help="CNN/DailyMail prompts (jsonl, field 'prompt')")
    ap.add_argument("--bytes", type=int, default=12000, help="text size in bytes (cut at a space)")
    ap.add_argument("-c", "--ctx", type=int, default=256)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.02, help="largest accepted |ratio - 1|")
    ap.add_argument("--work", default="build/interop")
    ap.add_argument("-o", "--out", default="build/interop.json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    text = os.path.join(a.work, "cnn_dailymail.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write(cnn_text(a.cnn, a.bytes))
    log = open(os.path.join(a.work, "interop.log"), "w")
    common = ["-m", a.model, "-f", text, "-c", str(a.ctx), "-b", str(a.ctx), "-t", str(a.threads)]

    out, err, llama_s = run([os.path.join(a.llama_bin, "llama-perplexity")] + common, log)
    l_ppl, l_err, l_run = final_estimate(out + err, "llama-perplexity")
    m = re.search(r"calculating perplexity over (\d+) chunks", err)
    l_chunks = int(m.group(1)) if m else None

    out, err, beagle_s = run([a.beagle, "perplexity"] + common + ["--json"], log)
    b = json.loads(out.strip().split("\n")[-1])
    b_run = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", err)]

    ratio = b["ppl"] / l_ppl
    res = {
        "model": os.path.basename(a.model),
        "text": {"source": os.path.basename(a.cnn), "bytes": os.path.getsize(text), "beagle_tokens": b["tokens"]},
        "n_ctx": a.ctx, "threads": a.threads,
        "llama_perplexity": {"ppl": l_ppl, "stderr": l_err, "chunks": l_chunks, "running": l_run,
                             "wall_s": round(llama_s, 2)},
        "beagle": {"ppl": b["ppl"], "stderr": b["stderr"], "chunks": b["chunks"], "tokens_scored": b["tokens_scored"],
                   "running": b_run, "tok_s": b["tok_s"], "wall_s": round(beagle_s, 2)},
        "ratio": round(ratio, 6),
        "tolerance": a.tolerance,
        "agree": abs(ratio - 1) <= a.tolerance and l_chunks in (None, b["chunks"]),
    }
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    print("interop: llama-perplexity PPL %.4f +/- %.4f, beagle PPL %.4f +/- %.4f, ratio %.4f (%s; %s)"
          % (l_ppl, l_err, b["ppl"], b["stderr"], ratio, "agree" if res["agree"] else "DISAGREE", a.out))
    sys.exit(0 if res["agree"] else 1)


if __name__ == "__main__":
    main()
