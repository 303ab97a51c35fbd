#!/usr/bin/env python3
# test_serve_chunked_prefill.py: `beagle serve -b N` prefills a long prompt N tokens per round, between
# the other slots' decoding rounds. Request A streams a long greedy completion; once it is under way,
# request B arrives with a ~450-token prompt. With -b 32 A keeps receiving tokens while B prefills
# (at least 5 of A's tokens arrive between B's submission and B's first token: B's prefill takes ~14
# rounds, one A token each); and both greedy outputs equal `beagle generate` of the prompt alone (the kernels
# are batch-invariant, so prefilling in pieces changes no bit). The check is shown to catch the stall:
# the same run with -b 4096 (the whole prompt in one round) must see fewer than 5 of A's tokens in that
# window. SmolLM2-135M (a decode step is ~20 ms here, so the window is wide).
import http.client, json, os, tempfile, threading, time

from checks import check, finish
from serve_util import Server, generate, SMOL

A_PROMPT = "1, 2, 3, 4, 5, 6, 7, 8,"
B_PROMPT = "The quick brown fox jumps over the lazy dog. " * 45
A_TOKENS, B_TOKENS = 60, 8


def stream(port, prompt, n, arrivals, text):
    """Streams a greedy completion: the arrival time and text of every piece."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True}
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for ch in json.loads(line[6:]).get("choices", []):
            if ch.get("text"):
                arrivals.append(time.perf_counter())
                text.append(ch["text"])
    c.close()


def run(batch, tmp):
    """Returns A's text, B's text, A's pieces that arrived between B's submission and B's first piece, A's pieces."""
    srv = Server(["-m", SMOL, "-t", "2", "-c", "1024", "--parallel", "2", "-b", str(batch)], f"{tmp}/b{batch}.log")
    try:
        arrivals, a_text = [], []
        th = threading.Thread(target=stream, args=(srv.port, A_PROMPT, A_TOKENS, arrivals, a_text))
        th.start()
        while len(arrivals) < 10 and th.is_alive():
            time.sleep(0.005)
        b_arrivals, b_text = [], []
        t0 = time.perf_counter()
        stream(srv.port, B_PROMPT, B_TOKENS, b_arrivals, b_text)
        th.join()
        check(len(b_arrivals) > 0, f"-b {batch}: B answered")
        t1 = b_arrivals[0] if b_arrivals else t0
        during = sum(1 for t in arrivals if t0 < t < t1)
        return "".join(a_text), "".join(b_text), during, len(arrivals)
    finally:
        check(srv.stop() == 0, f"-b {batch}: server exits 0")


if not os.path.exists(SMOL):
    print(f"SKIP: {SMOL} missing")
    raise SystemExit(77)
with tempfile.TemporaryDirectory() as tmp:
    want_a, _ = generate(["-m", SMOL], A_PROMPT, A_TOKENS)
    want_b, _ = generate(["-m", SMOL], B_PROMPT, B_TOKENS)
    a, b, during, n_a = run(32, tmp)
    print(f"-b 32: {during} of A's {n_a} pieces arrived between B's submission and its first token")
    check(a == want_a, f"A equals generate alone: {a!r} vs {want_a!r}")
    check(b == want_b, f"B (prefilled in pieces) equals generate alone: {b!r} vs {want_b!r}")
    check(during >= 5, f"A kept decoding while B prefilled: {during} tokens")
    a, b, during, n_a = run(4096, tmp)
    print(f"-b 4096: {during} of A's {n_a} pieces arrived between B's submission and its first token")
    check(a == want_a and b == want_b, "-b 4096: outputs equal generate alone too")
    check(during < 5, f"the check catches the stall of a prefill in one round: {during} tokens (want < 5)")

finish("test_serve_chunked_prefill")
