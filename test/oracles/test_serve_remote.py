#!/usr/bin/env python3
# test_serve_remote.py: client-server speculative decoding (docs/serve.md): `beagle generate
# --server URL -d DRAFT` drafts locally and verifies on `beagle serve` (127.0.0.1). Its text equals
# local greedy decoding (stories260K with its draft, tree and chain; SmolLM2 chat with the shipped
# draft), with tau > 1 (the server accepted draft tokens); two clients at once on one server; the
# protocol's bad input: an unknown session (404), a tree whose root is not the committed token (400),
# parents out of order (400); a remote session and a chat request served side by side. The states on
# the wire: q8 (the client's default: a f32 scale per row, int8 values) decoded here independently is
# within half a step of the f32 answer for the same prompt, the zlib start answer inflates to the q8
# bytes; with q8 the text still equals local greedy (the target verifies) and tau is within 10% of tau
# with f32 states (8-bit rounding, <= 0.4% of a row's largest value, flips only near-tied draft
# candidates: a few rounds of ~40), verify answers less than half the bytes. Remote plain decoding
# (no draft): one call per token, local greedy's text.
import base64, json, os, struct, subprocess, tempfile, threading, zlib

from checks import check, finish
from serve_util import BIN, Server, generate, remote, STORIES, STORIES_DRAFT, SMOL, SMOL_DRAFT


with tempfile.TemporaryDirectory() as tmp:
    srv = Server(STORIES + ["-t", "1", "-c", "256", "--parallel", "3"], f"{tmp}/stories.log")
    try:
        D = STORIES + ["-d", STORIES_DRAFT]
        for prompt, n, spec in [("Once upon a time", 120, "tree"), ("The little dog", 80, "chain")]:
            want, want_n = generate(STORIES, prompt, n)
            got, st, err = remote(srv, D, prompt, n, ["--spec", spec])  # tree: cost-aware (the round trip measured)
            check(got == want, f"remote {spec} {prompt!r}: {got!r} vs {want!r} {err}")
            check(st is not None and st["tokens"] == want_n and st["tau"] > 1.0, f"remote {spec} stats: {st}")
            # q8 vs f32 states with a fixed tree size (auto sizes follow timings): same rounds but for the rounding
            got, st, err = remote(srv, D, prompt, n, ["--spec", spec, "--total-tokens", "16"])
            check(got == want, f"remote {spec} q8 states {prompt!r}: {got!r} vs {want!r} {err}")
            got32, st32, err = remote(srv, D, prompt, n, ["--spec", spec, "--total-tokens", "16", "--server-states", "f32"])
            check(got32 == want, f"remote {spec} f32 states {prompt!r}: {got32!r} vs {want!r} {err}")
            if st and st32:
                check(abs(st["tau"] - st32["tau"]) <= 0.1 * st32["tau"], f"tau q8 {st['tau']} vs f32 {st32['tau']}")
                check(st["bytes_per_verify"] < st32["bytes_per_verify"] / 2,
                      f"q8 verify answers {st['bytes_per_verify']} B vs f32 {st32['bytes_per_verify']} B")
                print(f"{spec}: tau q8 {st['tau']} f32 {st32['tau']}; bytes per verify q8 {st['bytes_per_verify']} "
                      f"f32 {st32['bytes_per_verify']}; prompt states q8+zlib {st['prompt_states_bytes']} f32 "
                      f"{st32['prompt_states_bytes']}")
        # remote plain decoding: one call per token (start answers the first, end is one more)
        want, want_n = generate(STORIES, "Once upon a time", 40)
        got, st, err = remote(srv, STORIES, "Once upon a time", 40)
        check(got == want and st is not None and st["server_calls"] == want_n + 1 and st["tau"] == 1,
              f"remote plain: {got!r} vs {want!r}, {st} {err}")
        # two clients at once: their trees share the server's rounds
        outs = {}
        def client(p):
            outs[p] = remote(srv, D, p, 100)[0]
        ths = [threading.Thread(target=client, args=(p,)) for p in ["Lily and Ben went", "One day"]]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        for p, got in outs.items():
            check(got == generate(STORIES, p, 100)[0], f"concurrent remote {p!r}: {got!r}")
        # protocol errors
        st, _, body = srv.request("POST", "/beagle/v1/remote/verify", {"session": "nope", "tokens": [1], "parents": [-1]})
        check(st == 404 and json.loads(body)["error"]["code"] == "session_not_found", f"unknown session: {st} {body!r}")
        st, _, body = srv.request("POST", "/beagle/v1/remote/start", {"prompt": [1, 400, 20]})
        check(st == 200, f"start: {st} {body!r}")
        a = json.loads(body)
        check(a["dim"] == 64 and a["ctx"] == 256 and len(a["states"]) == (3 * 64 * 4 + 2) // 3 * 4, f"start answer {list(a)}")
        sid, root = a["session"], a["token"]
        st, _, body = srv.request("POST", "/beagle/v1/remote/verify", {"session": sid, "tokens": [root + 1], "parents": [-1]})
        check(st == 400 and json.loads(body)["error"]["param"] == "tokens", f"wrong root: {st} {body!r}")
        st, _, body = srv.request("POST", "/beagle/v1/remote/verify", {"session": sid, "tokens": [root, 5, 6], "parents": [-1, 0, 2]})
        check(st == 400 and json.loads(body)["error"]["param"] == "parents", f"parent after its child: {st} {body!r}")
        st, _, body = srv.request("POST", "/beagle/v1/remote/verify", {"session": sid, "tokens": [root, 5, 6], "parents": [-1, 0, 0]})
        v = json.loads(body)
        check(st == 200 and v["path"][0] == 0 and len(v["tokens"]) == len(v["path"]), f"verify: {st} {body!r}")
        st, _, body = srv.request("POST", "/beagle/v1/remote/end", {"session": sid})
        check(st == 200, f"end: {st}")
        # the wire encodings of the same prompt's states: q8 within half a step of f32; zlib inflates to q8
        answers = {}
        for enc, z in [("f32", False), ("q8", False), ("q8", True)]:
            st, _, body = srv.request("POST", "/beagle/v1/remote/start", {"prompt": [1, 400, 20, 33], "states": enc, "zlib": z})
            b = json.loads(body)
            check(st == 200 and b["encoding"] == enc and b["zlib"] == z, f"start {enc} zlib {z}: {st} {body[:200]!r}")
            raw = base64.b64decode(b["states"])
            answers[(enc, z)] = zlib.decompress(raw) if z else raw
            srv.request("POST", "/beagle/v1/remote/end", {"session": b["session"]})
        x = struct.unpack("<%df" % (4 * 64), answers[("f32", False)])
        q = answers[("q8", False)]
        check(len(q) == 4 * (4 + 64) and answers[("q8", True)] == q, f"q8 bytes {len(q)}; zlib inflates to them")
        worst = 0.0
        for r in range(4):
            scale = struct.unpack("<f", q[r * 68:r * 68 + 4])[0]
            row = x[r * 64:(r + 1) * 64]
            check(abs(scale - max(abs(v) for v in row) / 127) <= 1e-6 * scale, f"row {r} scale {scale}")
            for i in range(64):
                v = struct.unpack("b", q[r * 68 + 4 + i:r * 68 + 5 + i])[0]
                worst = max(worst, abs(row[i] - scale * v) / scale)
        check(worst <= 0.5 + 1e-4, f"q8 error {worst} steps (<= 1/2)")
        for bad_field in [{"states": "f16"}, {"states": 8}, {"zlib": "yes"}]:
            st, _, body = srv.request("POST", "/beagle/v1/remote/start", dict({"prompt": [1, 2]}, **bad_field))
            check(st == 400 and json.loads(body)["error"]["param"] == list(bad_field)[0], f"bad {bad_field}: {st} {body!r}")
        st, _, body = srv.request("POST", "/beagle/v1/remote/verify", {"session": sid, "tokens": [1], "parents": [-1]})
        check(st == 404, f"verify after end: {st}")
        # a plain completion beside a remote session
        st, _, body = srv.request("POST", "/v1/completions", {"prompt": "One day", "max_tokens": 30, "temperature": 0})
        check(st == 200 and json.loads(body)["choices"][0]["text"] == generate(STORIES, "One day", 30)[0], "completion beside")
    finally:
        check(srv.stop() == 0, "stories server exits 0")

    if os.path.exists(SMOL) and os.path.exists(SMOL_DRAFT):
        srv = Server(["-m", SMOL, "-t", "2", "-c", "512"], f"{tmp}/smol.log")
        try:
            q = "What is the capital of France?"
            want, _ = generate(["-m", SMOL], q, 40, ["--chat"])
            # a fixed tree (not 'auto', which sizes it from timings: on a slow machine, e.g. under ASan, it may
            # draft nothing and tau is 1.0), so the tau check does not depend on the machine
            got, st, err = remote(srv, ["-m", SMOL, "-d", SMOL_DRAFT], q, 40, ["--chat", "-t", "2", "--total-tokens", "24"])
            check(got == want, f"smol remote chat: {got!r} vs {want!r} {err}")
            check(st is not None and st["tau"] > 1.0, f"smol remote tau: {st}")
        finally:
            check(srv.stop() == 0, "smol server exits 0")
    else:
        check(False, f"missing {SMOL} or {SMOL_DRAFT}")

finish("test_serve_remote")
