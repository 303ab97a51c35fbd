#!/usr/bin/env python3
# test_serve_state_layers.py: remote drafting with a draft that fuses target layers (state layers,
# docs/paper-comparison.md). `beagle serve --state-layers 1,4` keeps the residual stream after layers 1
# and 4 of stories260K; a client whose draft fuses layer 1 asks for it at start and gets rows [f; h_1]:
#   - `generate --server` with that draft (tree and chain) gives local greedy decoding's text, tau > 1;
#   - a draft without state layers on the same server gets last-layer rows only (as before the option);
#   - the start answer's width is dim x (1 + layers asked for); layer 4 is the last layer of the
#     5-layer target, so its block equals the state f bit for bit, and layer 1's does not;
#   - a layer the server does not keep, an unordered list, a non-array: 400 with param state_layers;
#   - a server with a state-layer draft of its own: its completions and both kinds of remote clients;
#   - serve refuses --state-layers that differ from the served draft's layers.
import base64, json, os, struct, subprocess, tempfile

from checks import check, finish
from serve_util import BIN, Server, generate, remote, STORIES, STORIES_DRAFT


def run(args):
    r = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, f"{' '.join(args[:2])}: exit {r.returncode}: {r.stderr[-600:]}")


with tempfile.TemporaryDirectory() as tmp:
    # a draft that fuses layer 1 (the data keeps layers 1 and 4), trained as test_state_layers.sh trains it
    run(["datagen"] + STORIES + ["--sample", "24", "-n", "100", "--shard-seqs", "12", "-o", f"{tmp}/x",
                                 "--keep-states", "--state-layers", "1,4", "-t", "1"])
    run(["train"] + STORIES + ["--data", f"{tmp}/x", "--stage1-epochs", "2", "--stage2-epochs", "2", "--batch", "4",
                               "--seq-len", "128", "-t", "1", "-q", "-o", f"{tmp}/d.bin", "--state-layers", "1"])
    DL = STORIES + ["-d", f"{tmp}/d.bin"]
    srv = Server(STORIES + ["-t", "1", "-c", "256", "--state-layers", "1,4"], f"{tmp}/serve.log")
    try:
        for prompt, n, spec in [("Once upon a time", 80, "tree"), ("The little dog", 60, "chain")]:
            want, want_n = generate(STORIES, prompt, n)
            local, _ = generate(DL, prompt, n, ["--spec", spec])
            check(local == want, f"local {spec} with the state-layer draft: {local!r} vs {want!r}")
            got, st, err = remote(srv, DL, prompt, n, ["--spec", spec, "--total-tokens", "12"])
            check(got == want, f"remote {spec}, state-layer draft {prompt!r}: {got!r} vs {want!r} {err}")
            check(st is not None and st["tokens"] == want_n and st["tau"] > 1.0, f"remote {spec} stats: {st}")
            got, st, err = remote(srv, STORIES + ["-d", STORIES_DRAFT], prompt, n, ["--spec", spec, "--total-tokens", "12"])
            check(got == want and st is not None and st["tau"] > 1.0, f"remote {spec}, plain draft: {got!r} {st} {err}")
            if st:
                print(f"{spec}: remote tau with the state-layer draft and the shipped one: ok ({st['tau']:.2f} shipped)")
        # the start answer: widths, and the last layer's block is the state itself
        rows = {}
        for ask in [None, [1], [4], [1, 4]]:
            body = {"prompt": [1, 400, 20], "states": "f32"}
            if ask is not None:
                body["state_layers"] = ask
            st, _, data = srv.request("POST", "/beagle/v1/remote/start", body)
            a = json.loads(data)
            width = 64 * (1 + len(ask or []))
            check(st == 200 and a["dim"] == width, f"start asking {ask}: {st}, dim {a.get('dim')} (want {width})")
            raw = base64.b64decode(a["states"])
            check(len(raw) == 3 * width * 4, f"start asking {ask}: {len(raw)} bytes of states")
            rows[str(ask)] = [struct.unpack_from("<%df" % width, raw, r * width * 4) for r in range(3)]
            srv.request("POST", "/beagle/v1/remote/end", {"session": a["session"]})
        f = rows["None"]
        check(all(rows["[4]"][r][64:] == f[r] for r in range(3)), "layer 4 (the last) block == the state f")
        check(all(rows["[1]"][r][:64] == f[r] and rows["[1]"][r][64:] != f[r] for r in range(3)), "layer 1: f, then h_1 != f")
        check(all(rows["[1, 4]"][r] == rows["[1]"][r] + rows["[4]"][r][64:] for r in range(3)), "[1, 4]: f, h_1, h_4")
        for bad in [[2], [4, 1], [1, 1], "1", [1.5]]:
            st, _, data = srv.request("POST", "/beagle/v1/remote/start", {"prompt": [1, 2], "state_layers": bad})
            err = json.loads(data).get("error", {})
            check(st == 400 and err.get("param") == "state_layers", f"state_layers {bad!r}: {st} {data[:200]!r}")
            if bad == [2]:
                check("keeps the target layers [1,4]" in err.get("message", ""), f"message: {err}")
    finally:
        check(srv.stop() == 0, "server exits 0")
    # a server whose own draft fuses layer 1 (its speculative completions) keeps that layer for remote
    # clients too: a completion, a remote client with the same draft and one with the shipped draft
    srv = Server(DL + ["-t", "1", "-c", "256", "--parallel", "2"], f"{tmp}/serve2.log")
    try:
        want, _ = generate(STORIES, "One day", 40)
        st, _, body = srv.request("POST", "/v1/completions", {"prompt": "One day", "max_tokens": 40, "temperature": 0})
        check(st == 200 and json.loads(body)["choices"][0]["text"] == want, f"completion, served state-layer draft: {body[:300]!r}")
        for d in [f"{tmp}/d.bin", STORIES_DRAFT]:
            got, stats, err = remote(srv, STORIES + ["-d", d], "One day", 40, ["--total-tokens", "12"])
            check(got == want and stats is not None and stats["tau"] > 1.0, f"remote {d} on the served draft's server: {got!r} {err}")
    finally:
        check(srv.stop() == 0, "second server exits 0")
    # a served draft fixes the layers: other ones are refused at start
    r = subprocess.run([BIN, "serve"] + DL + ["--port", "0", "--state-layers", "1,4"], capture_output=True, text=True,
                       timeout=120)
    check(r.returncode != 0 and "fuses layers 1" in r.stderr, f"serve -d (layer 1) --state-layers 1,4: {r.returncode} {r.stderr[-300:]}")
    r = subprocess.run([BIN, "serve"] + STORIES + ["-d", STORIES_DRAFT, "--port", "0", "--state-layers", "1"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode != 0 and "fuses no layers" in r.stderr, f"serve -d (none) --state-layers 1: {r.returncode} {r.stderr[-300:]}")

finish("test_serve_state_layers")
