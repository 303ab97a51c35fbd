#!/usr/bin/env python3
# bench_remote.py: `make bench-remote`: client-server drafting (docs/serve.md) against remote plain
# decoding (one server call per token, what an API client does), on 127.0.0.1 under the network
# profiles of the Mixture of Attentions paper: none (loopback), 5g (10 +- 10 ms per call), 4g (21 +- 19
# ms per call, 20 Mbit/s). The kernel here has no netem (tc reports the qdisc kind unknown), so the delay is drawn in the client
# (`beagle generate --net-delay`, seeded, one draw per call as netem on one side of the link).
# Modes per profile: plain (no draft), tree (the shipped draft, --total-tokens auto: the tree pays for
# its verify cost plus the measured round trip; q8 states, zlib first message: the default wire). Per
# profile and mode: tokens/s (all tokens / all decode time), server calls per token, tau, bytes per
# verify answer, bytes of the prompt's states. The wire, without delay and with a fixed tree of 16 (so
# that every encoding sees the same rounds): q8 + zlib, q8, f32: tau and bytes. Every text compared
# with remote plain decoding's (greedy: must be equal). JSON to -o.
import argparse, json, re, subprocess, sys, threading

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/beagle")
ap.add_argument("-m", "--model", required=True)
ap.add_argument("-d", "--draft", required=True)
ap.add_argument("--prompts", required=True, help="MT-Bench JSONL (first turns are used)")
ap.add_argument("--n-prompts", type=int, default=4)
ap.add_argument("-n", "--max-tokens", type=int, default=64)
ap.add_argument("--profiles", default="none,5g,4g")
ap.add_argument("-t", "--threads", type=int, default=1, help="threads of the server and of the client each")
ap.add_argument("-o", "--out", default="build/bench-remote.json")
a = ap.parse_args()
prompts = [json.loads(l)["turns"][0] for l in open(a.prompts) if l.strip()][: a.n_prompts]
MODES = [("plain", ["--spec", "none"]), ("tree", ["-d", a.draft, "--spec", "tree"])]
TREE16 = ["-d", a.draft, "--spec", "tree", "--total-tokens", "16"]
WIRES = [("q8+zlib", TREE16), ("q8", TREE16 + ["--server-no-zlib"]), ("f32", TREE16 + ["--server-states", "f32", "--server-no-zlib"])]


def start_server():
    p = subprocess.Popen([a.bin, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0", "-t", str(a.threads),
                          "-c", "1024", "--parallel", "1"], stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()  # keep draining
            return p, int(m.group(1))
    raise SystemExit(f"server did not start (exit {p.wait()})")


def client(port, prompt, mode_args, profile, seed):
    net = [] if profile == "none" else ["--net-delay", profile]
    r = subprocess.run([a.bin, "generate", "-m", a.model, "--server", f"http://127.0.0.1:{port}", "--chat", "-p", prompt,
                        "-n", str(a.max_tokens), "--temp", "0", "-s", str(seed), "-t", str(a.threads), "--no-stream",
                        "--json"] + mode_args + net, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"generate failed: {r.stderr[-1500:]}")
    return r.stdout, json.loads(r.stderr.strip().splitlines()[-1])


def measure(port, args, profile, texts):
    """Runs every prompt; sums -> one row. Counts texts differing from texts[i] (filled by the first run)."""
    global bad
    tok = dec = calls = after = vbytes = vcalls = sbytes = sent = 0
    for i, p in enumerate(prompts):
        text, st = client(port, p, args, profile, 1000 + i)
        texts.setdefault(i, text)
        bad += text != texts[i]
        verifies = st["server_calls"] - 2  # start and end
        tok += st["tokens"]
        dec += st["decode_ms"] / 1e3
        calls += st["server_calls"]
        vbytes += st["bytes_per_verify"] * verifies
        vcalls += verifies
        after += st["tau"] * verifies
        sbytes += st["prompt_states_bytes"]
        sent += st["bytes_sent"]
    return {"tokens": tok, "tok_s": round(tok / dec, 2), "calls_per_token": round(calls / tok, 4),
            "tau": round(after / max(vcalls, 1), 3), "bytes_per_verify": round(vbytes / max(vcalls, 1), 1),
            "prompt_states_bytes": round(sbytes / len(prompts), 1), "sent_bytes_per_call": round(sent / calls, 1)}


def show(name, r):
    print(f"{name:16s} {r['tok_s']:7.1f} tok/s, {r['calls_per_token']:.3f} calls/token, tau {r['tau']:.2f}, "
          f"{r['bytes_per_verify']:.0f} B per verify, prompt states {r['prompt_states_bytes']:.0f} B", flush=True)


bad = 0
texts = {}
proc, port = start_server()
out = {"model": a.model, "draft": a.draft, "max_tokens": a.max_tokens, "prompts": len(prompts), "threads": a.threads,
       "delay": "client-side (no netem in this kernel): one N(mean, sd) draw per server call, at least 0", "profiles": {}}
try:
    client(port, prompts[0], MODES[0][1], "none", 1)  # warm-up
    for profile in a.profiles.split(","):
        rows = {}
        for mode, args in MODES:
            rows[mode] = measure(port, args, profile, texts)
            show(f"{profile} {mode}", rows[mode])
        rows["tree_vs_plain_tok_s"] = round(rows["tree"]["tok_s"] / rows["plain"]["tok_s"], 3)
        rows["plain_vs_tree_calls"] = round(rows["plain"]["calls_per_token"] / rows["tree"]["calls_per_token"], 3)
        out["profiles"][profile] = rows
    out["wire_tree16"] = {}
    for wire, args in WIRES:
        out["wire_tree16"][wire] = measure(port, args, "none", texts)
        show(f"tree16 {wire}", out["wire_tree16"][wire])
finally:
    proc.terminate()
    proc.wait(30)
out["mismatches"] = bad
with open(a.out, "w") as f:
    json.dump(out, f, indent=1)
print(f"wrote {a.out}; texts differing from remote plain decoding: {bad}")
sys.exit(1 if bad else 0)
