#!/usr/bin/env python3
# bench_serve.py: `make bench-serve`: `beagle serve` under 1, 2, 4, 8 concurrent clients on 127.0.0.1,
# plain decoding vs speculative (the shipped draft), greedy chat requests (MT-Bench first turns),
# streamed. Per level: summed tokens/s (all completion tokens / wall time), time to first token and
# per-token latency (p50, p99 over requests: (last chunk - first chunk) / (tokens - 1)), and the number
# of responses that differ from the same prompt served alone (level 1): batching must not change a
# greedy token. "batched_4_vs_serial": tokens/s at 4 clients / at 1 client (the same requests one
# after another). Both servers run from the start (an idle one takes no CPU) and every level is measured
# on one and then the other, the order alternating, --rounds times (tokens and wall times summed over the
# rounds): the ratio of the two modes comes from measurements seconds apart, not minutes.
# JSON to -o; build/test/tool_plot_bench_serve draws the PNG from it.
import argparse, json, re, subprocess, sys, threading, time, http.client

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/beagle")
ap.add_argument("-m", "--model", required=True)
ap.add_argument("-d", "--draft", required=True)
ap.add_argument("--spec", default="auto", help="speculative mode of the second server")
ap.add_argument("--prompts", required=True, help="MT-Bench JSONL (first turns are used)")
ap.add_argument("--requests", type=int, default=16, help="requests per concurrency level")
ap.add_argument("--max-tokens", type=int, default=128)
ap.add_argument("--clients", default="1,2,4,8")
ap.add_argument("--rounds", type=int, default=1, help="times every level runs on each server, alternated")
ap.add_argument("-t", "--threads", type=int, default=2)
ap.add_argument("-o", "--out", default="build/bench-serve.json")
a = ap.parse_args()
levels = [int(x) for x in a.clients.split(",")]
prompts = [json.loads(l)["turns"][0] for l in open(a.prompts) if l.strip()][: a.requests]


def start(args):
    p = subprocess.Popen([a.bin, "serve", "--host", "127.0.0.1", "--port", "0", "-t", str(a.threads), "-c", "1024",
                          "--parallel", str(max(levels))] + args, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        sys.stderr.write(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()  # keep draining
            return p, int(m.group(1))
    raise SystemExit(f"server did not start (exit {p.wait()})")


def one(port, prompt):
    """Streams one greedy chat request: (text, tokens, t_first - t0, t_last - t_first)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": a.max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {r.read()[:300]!r}")
    text, tokens, t_first, t_last = "", 0, None, None
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ch = json.loads(line[6:])
        if ch.get("usage"):
            tokens = ch["usage"]["completion_tokens"]
        for choice in ch.get("choices", []):
            piece = choice["delta"].get("content") or ""
            if piece:
                now = time.perf_counter()
                t_first = t_first if t_first is not None else now
                t_last = now
                text += piece
    c.close()
    return text, tokens, (t_first or t0) - t0, (t_last or t0) - (t_first or t0)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))] if xs else 0.0


def run_level(port, n_clients):
    results = [None] * len(prompts)
    nxt = [0]
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(prompts):
                return
            results[i] = one(port, prompts[i])

    t0 = time.perf_counter()
    ths = [threading.Thread(target=client) for _ in range(n_clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r[1] for r in results)
    per_tok = [r[3] / (r[1] - 1) for r in results if r[1] > 1]
    return results, {"clients": n_clients, "requests": len(prompts), "tokens": tokens, "wall_s": round(wall, 3),
                     "tok_s": round(tokens / wall, 2),
                     "ttft_ms_p50": round(1e3 * pct([r[2] for r in results], 50), 2),
                     "ttft_ms_p99": round(1e3 * pct([r[2] for r in results], 99), 2),
                     "token_ms_p50": round(1e3 * pct(per_tok, 50), 3), "token_ms_p99": round(1e3 * pct(per_tok, 99), 3)}


def summed(rows):
    """One level's rows over the rounds as one row: tokens and wall times summed, latencies of the first."""
    row = dict(rows[0])
    row["tokens"] = sum(r["tokens"] for r in rows)
    row["wall_s"] = round(sum(r["wall_s"] for r in rows), 3)
    row["tok_s"] = round(row["tokens"] / row["wall_s"], 2)
    row["requests"] = sum(r["requests"] for r in rows)
    if len(rows) > 1:
        row["tok_s_rounds"] = [r["tok_s"] for r in rows]
    return row


out = {"model": a.model, "draft": a.draft, "max_tokens": a.max_tokens, "threads": a.threads, "rounds": a.rounds,
       "modes": {}}
modes = [("plain", ["-m", a.model, "--spec", "none"]), (a.spec, ["-m", a.model, "-d", a.draft, "--spec", a.spec])]
servers = {}
try:
    for mode, args in modes:
        servers[mode] = start(args)
        one(servers[mode][1], prompts[0])  # warm-up
    rows = {mode: {n: [] for n in levels} for mode, _ in modes}
    alone = {}  # mode -> the texts served at 1 client in the first round
    for r in range(a.rounds):
        for i, n in enumerate(levels):
            order = modes if (r + i) % 2 == 0 else modes[::-1]
            for mode, _ in order:
                res, row = run_level(servers[mode][1], n)
                alone.setdefault(mode, [x[0] for x in res])
                row["mismatches"] = sum(1 for x, w in zip(res, alone[mode]) if x[0] != w)
                rows[mode][n].append(row)
                print(f"{mode:6s} {n} clients (round {r + 1}): {row['tok_s']:7.1f} tok/s, TTFT p50 "
                      f"{row['ttft_ms_p50']:.0f} ms, token p50/p99 {row['token_ms_p50']:.1f}/{row['token_ms_p99']:.1f} ms, "
                      f"{row['mismatches']} mismatches", flush=True)
    for mode, _ in modes:
        lv = [summed(rows[mode][n]) for n in levels]
        for n, row in zip(levels, lv):
            row["mismatches"] = sum(x["mismatches"] for x in rows[mode][n])
        by = {x["clients"]: x for x in lv}
        entry = {"levels": lv}
        if 1 in by and 4 in by:
            entry["batched_4_vs_serial"] = round(by[4]["tok_s"] / by[1]["tok_s"], 3)
        out["modes"][mode] = entry
    out["modes"][a.spec]["mismatches_vs_plain"] = sum(1 for x, y in zip(alone[a.spec], alone["plain"]) if x != y)
finally:
    for proc, _ in servers.values():
        proc.terminate()
        proc.wait(30)
if "plain" in out["modes"] and a.spec in out["modes"]:  # speculative serving over plain, per level
    pl = {r["clients"]: r["tok_s"] for r in out["modes"]["plain"]["levels"]}
    out["speedup_vs_plain"] = {str(r["clients"]): round(r["tok_s"] / pl[r["clients"]], 3)
                               for r in out["modes"][a.spec]["levels"] if pl.get(r["clients"])}
    print("speculative / plain tok/s by clients:", out["speedup_vs_plain"])
with open(a.out, "w") as f:
    json.dump(out, f, indent=1)
print(f"wrote {a.out}")
for mode, e in out["modes"].items():
    print(f"{mode}: 4 clients batched vs one after another: {e.get('batched_4_vs_serial')}x")
bad = sum(r["mismatches"] for e in out["modes"].values() for r in e["levels"]) + \
    sum(e.get("mismatches_vs_plain", 0) for e in out["modes"].values())
sys.exit(1 if bad else 0)
