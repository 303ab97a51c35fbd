#!/usr/bin/env python3
# bench_peer.py: Beagle next to llama.cpp on the same machine, model, threads and prompts (`make bench-peer`,
# driven by scripts/bench_peer.sh, which builds llama.cpp). Runs llama-bench (tg, pp 1/2/4/8/128) and
# `beagle bench`; then greedy plain and speculative decoding of the MT-Bench first turns with both
# (llama-completion and llama-lookup; `beagle bench-sd` modes none, lookup and auto, the default of
# `generate -d`); counts the outputs where a system's speculative output differs from its own plain
# greedy output. Writes one JSON object (-o, default build/bench-peer.json); docs/benchmarks/peer.md is made
# from it by scripts/bench_pages.py once the JSON is copied to docs/benchmarks/data/.
import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"  # the template's default


def chat_prompt(user):
    # ChatML exactly as Beagle's apply_chat_template (src/tokenizer/tokenizer.cpp) writes it
    return "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n" % (SYSTEM, user)


def run(cmd, log, **kw):
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    log.write(p.stderr.decode("utf-8", "replace")[-4000:] + "\n[%.1f s, exit %d]\n" % (time.time() - t0, p.returncode))
    if p.returncode != 0:
        sys.exit("bench_peer: %s failed with exit %d (log: %s):\n%s" % (cmd[0], p.returncode, log.name,
                                                                         p.stderr.decode("utf-8", "replace")[-2000:]))
    return p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def select_turns(path, per_cat):
    # the first per_cat questions of each MT-Bench category in file order, as `beagle bench-sd --per-category`
    by_cat, order = {}, []
    for line in open(path, encoding="utf-8"):
        if not line.strip():
            continue
        q = json.loads(line)
        c = q.get("category", "all")
        if c not in by_cat:
            by_cat[c] = []
            order.append(c)
        if len(by_cat[c]) < per_cat:
            by_cat[c].append(q["turns"][0])
    return [t for c in order for t in by_cat[c]]


def find_key(obj, key):
    # the first value of `key` in a JSON tree (beagle bench may nest its numbers per ISA path)
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            r = find_key(v, key)
            if r is not None:
                return r
    if isinstance(obj, list):
        for v in obj:
            r = find_key(v, key)
            if r is not None:
                return r
    return None


def generated_text(stdout, prompt):
    # llama-completion (--no-display-prompt) prints the answer; llama-lookup echoes the prompt first.
    # Both may print the end-of-generation token's text; the comparison ignores it and outer whitespace.
    i = stdout.rfind("<|im_start|>assistant\n")
    text = stdout[i + len("<|im_start|>assistant\n"):] if i >= 0 else stdout
    for eog in ("<|im_end|>", "<|endoftext|>", "[end of text]"):
        j = text.find(eog)
        if j >= 0:
            text = text[:j]
    return text.strip()


def same_output(a, b):
    # llama-lookup decodes one token more than -n; equal means one text is a prefix of the other
    return a.startswith(b) or b.startswith(a)


def llama_plain(bin_dir, model, prompt, n, threads, ctx, log):
    out, err = run([os.path.join(bin_dir, "llama-completion"), "-m", model, "-p", prompt, "-n", str(n), "--temp", "0",
                    "-t", str(threads), "-c", str(ctx), "-no-cnv", "--no-display-prompt", "--no-warmup", "-s", "1"], log,
                   stdin=subprocess.DEVNULL)
    ev = re.search(r"\beval time =\s*([\d.]+) ms /\s*(\d+) runs", err)
    pe = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", err)
    if not ev or not pe:
        sys.exit("bench_peer: no timings in llama-completion's output (log: %s)" % log.name)
    return generated_text(out, prompt), float(ev.group(1)) / 1e3, int(ev.group(2)), float(pe.group(1)) / 1e3, int(pe.group(2))


def llama_lookup(bin_dir, model, prompt, n, threads, ctx, log):
    out, err = run([os.path.join(bin_dir, "llama-lookup"), "-m", model, "-p", prompt, "-n", str(n), "--temp", "0",
                    "-t", str(threads), "-c", str(ctx), "-s", "1"], log, stdin=subprocess.DEVNULL)
    m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", err + out)
    if not m:
        sys.exit("bench_peer: no timings in llama-lookup's output (log: %s)" % log.name)
    acc = re.search(r"accept\s*=\s*([\d.]+)%", err + out)
    return generated_text(out, prompt), float(m.group(2)), int(m.group(1)), float(acc.group(1)) if acc else None


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--beagle", default="build/beagle")
    ap.add_argument("--llama-bin", default="build/peer/llama-build/bin")
    ap.add_argument("--model", default="weights/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--draft", default="weights/beagle-smollm2-135m.bin")
    ap.add_argument("--prompts", default="data/eval/mt_bench_question.jsonl")
    ap.add_argument("--per-category", type=int, default=10, help="first turns per MT-Bench category (8 categories)")
    ap.add_argument("-n", type=int, default=128, help="tokens generated per turn")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx", type=int, default=2048)
    ap.add_argument("-o", "--out", default="build/bench-peer.json")
    ap.add_argument("--llama-isa", default="best", choices=["best", "avx2"],
                    help="how llama.cpp was built: best (GGML_NATIVE=ON) or avx2 (GGML_NATIVE=OFF: AVX2, no AVX-512)")
    a = ap.parse_args()
    for f in (a.beagle, a.model, a.draft, a.prompts, os.path.join(a.llama_bin, "llama-bench")):
        if not os.path.exists(f):
            sys.exit("bench_peer: %s not found" % f)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    log = open(os.path.splitext(a.out)[0] + ".log", "w")
    turns = select_turns(a.prompts, a.per_category)
    say = lambda s: print("bench_peer: " + s, file=sys.stderr, flush=True)
    res = {"model": a.model, "draft": a.draft, "threads": a.threads, "n_predict": a.n, "turns": len(turns),
           "prompts": a.prompts, "per_category": a.per_category, "beagle_isa": os.environ.get("BEAGLE_ISA", "best"),
           "llama_isa": a.llama_isa,
           "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cpu": cpu_name(), "commit": git_commit(),
           "load_average_at_start": os.getloadavg()[0]}

    # 1. kernels: llama-bench and beagle bench
    say("llama-bench (tg 128; pp 1, 2, 4, 8, 128; -t %d)" % a.threads)
    out, _ = run([os.path.join(a.llama_bin, "llama-bench"), "-m", a.model, "-t", str(a.threads), "-p", "1,2,4,8,128",
                  "-n", "128", "-r", "3", "-o", "json"], log)
    lb = json.loads(out)
    tg = next(r["avg_ts"] for r in lb if r["n_gen"] > 0 and r["n_prompt"] == 0)
    pp = {r["n_prompt"]: r["avg_ts"] for r in lb if r["n_prompt"] > 0 and r["n_gen"] == 0}
    res["llama_bench"] = {"tg128_tok_s": round(tg, 3), "pp_tok_s": {str(k): round(v, 3) for k, v in sorted(pp.items())},
                          # a forward of T tokens (T / pp_T seconds) over one decode step (1 / tg seconds)
                          "pp_cost_steps": {str(k): round(k * tg / v, 3) for k, v in sorted(pp.items())}}
    say("beagle bench (-t %d)" % a.threads)
    bj_path = os.path.splitext(a.out)[0] + "-beagle-bench.json"
    run([a.beagle, "bench", "-m", a.model, "-t", str(a.threads), "-o", bj_path], log)
    bj = json.load(open(bj_path))
    vc = {str(v["T"]): v["cost"] for v in (find_key(bj, "verify_cost") or [])}
    res["beagle_bench"] = {"decode_tok_s": find_key(bj, "decode_tok_s"), "prefill_tok_s": find_key(bj, "prefill_tok_s"),
                           "prefill_tokens": find_key(bj, "prompt_tokens"), "verify_cost_steps": vc}

    # 2. MT-Bench first turns: llama.cpp plain greedy and lookup, per turn
    say("llama.cpp on %d MT-Bench first turns x %d tokens (llama-completion, llama-lookup)" % (len(turns), a.n))
    lp = {"seconds": 0.0, "tokens": 0, "prefill_s": 0.0, "prompt_tokens": 0}
    lk = {"seconds": 0.0, "tokens": 0, "differs": 0, "accept_pct": []}
    for i, q in enumerate(turns):
        prompt = chat_prompt(q)
        ptext, s, k, ps, pk = llama_plain(a.llama_bin, a.model, prompt, a.n, a.threads, a.ctx, log)
        lp["seconds"] += s
        lp["tokens"] += k
        lp["prefill_s"] += ps
        lp["prompt_tokens"] += pk
        ltext, s, k, acc = llama_lookup(a.llama_bin, a.model, prompt, a.n, a.threads, a.ctx, log)
        lk["seconds"] += s
        lk["tokens"] += k
        if acc is not None:
            lk["accept_pct"].append(acc)
        if not same_output(ptext, ltext):
            lk["differs"] += 1
            log.write("DIFFERS turn %d:\n--- plain\n%s\n--- lookup\n%s\n" % (i, ptext, ltext))
        if (i + 1) % 8 == 0:
            say("  %d/%d turns: plain %.1f tok/s, lookup %.1f tok/s, %d lookup outputs differ" %
                (i + 1, len(turns), lp["tokens"] / lp["seconds"], lk["tokens"] / lk["seconds"], lk["differs"]))
    res["llama_mt_bench"] = {
        "plain_tok_s": round(lp["tokens"] / lp["seconds"], 3), "plain_tokens": lp["tokens"],
        "prefill_tok_s": round(lp["prompt_tokens"] / lp["prefill_s"], 3),
        "lookup_tok_s": round(lk["tokens"] / lk["seconds"], 3), "lookup_tokens": lk["tokens"],
        "lookup_speedup": ratio(lk["tokens"] / lk["seconds"], lp["tokens"] / lp["seconds"]),
        "lookup_mean_accept_pct": round(sum(lk["accept_pct"]) / len(lk["accept_pct"]), 2) if lk["accept_pct"] else None,
        "lookup_outputs_differing_from_plain": lk["differs"]}

    # 3. the same turns with beagle bench-sd: plain, lookup, auto (the default of generate -d)
    say("beagle bench-sd on the same turns (modes none, lookup, auto)")
    sd_path = os.path.splitext(a.out)[0] + "-beagle-sd.json"
    run([a.beagle, "bench-sd", "-m", a.model, "-d", a.draft, "-t", str(a.threads), "-c", str(a.ctx), "--prompts", a.prompts,
         "--per-category", str(a.per_category), "--modes", "none,lookup,auto", "-n", str(a.n), "-o", sd_path], log)
    sd = json.load(open(sd_path))
    mt = sd.get("mt_bench") or sd["overall"]
    res["beagle_mt_bench"] = {m: {k: mt[m].get(k) for k in ("tok_s", "speedup", "tau", "mismatches", "rounds_by_mode")}
                              for m in ("none", "lookup", "auto")}

    # 4. the comparison and the targets
    b, l = res["beagle_bench"], res["llama_bench"]
    bm, lm = res["beagle_mt_bench"], res["llama_mt_bench"]
    rows = []

    def row(name, beagle, llama, target=None, note=""):
        r = ratio(beagle, llama) if isinstance(beagle, (int, float)) and isinstance(llama, (int, float)) else None
        met = None if target is None or r is None else r >= target
        rows.append({"metric": name, "beagle": beagle, "llama_cpp": llama, "ratio": r, "target": target, "met": met,
                     "note": note})

    row("decode tok/s (beagle bench / llama-bench tg128)", b["decode_tok_s"], l["tg128_tok_s"], 1.3)
    row("prefill tok/s (beagle bench %s tokens / llama-bench pp128)" % b["prefill_tokens"], b["prefill_tok_s"],
        l["pp_tok_s"].get("128"), 1.5)
    for T in ("2", "4", "8"):
        row("cost of a forward of %s tokens, decode steps (verify / pp%s)" % (T, T), b["verify_cost_steps"].get(T),
            l["pp_cost_steps"].get(T), note="lower is better; no target")
    row("MT-Bench plain greedy tok/s", bm["none"]["tok_s"], lm["plain_tok_s"], 1.3)
    row("MT-Bench speculative tok/s (beagle auto / llama-lookup)", bm["auto"]["tok_s"], lm["lookup_tok_s"])
    row("MT-Bench beagle default speculative (auto) / llama.cpp plain tok/s", bm["auto"]["tok_s"], lm["plain_tok_s"], 1.8)
    row("MT-Bench speculative speedup over own plain (auto / llama-lookup)", bm["auto"]["speedup"], lm["lookup_speedup"])
    res["comparison"] = rows
    res["outputs_differing_from_own_plain"] = {"beagle_auto": bm["auto"]["mismatches"],
                                               "beagle_lookup": bm["lookup"]["mismatches"],
                                               "llama_lookup": lm["lookup_outputs_differing_from_plain"],
                                               "target": "beagle 0"}
    res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    res["load_average_at_end"] = os.getloadavg()[0]
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=2)
        f.write("\n")
    os.replace(tmp, a.out)
    say("wrote %s (log %s)" % (a.out, log.name))
    say("to publish it: cp %s docs/benchmarks/data/bench-peer-MACHINE.json, name the machine in "
        "docs/benchmarks/data/runs.json, then python3 scripts/bench_pages.py (writes docs/benchmarks/peer.md)" % a.out)


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def git_commit():
    # the commit of the tree that ran (docs/benchmarks/ shows it); "unknown" outside a git checkout
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
