#!/usr/bin/env python3
# test_remote_server_lost.py: `beagle generate --server URL -d DRAFT` whose server is killed mid-generation
# (SIGKILL once the client has streamed some text; the client waits a simulated 25 ms per call so the
# generation is still running) finishes with its draft alone (docs/serve.md): exit 0, the full token
# count (or fewer only if the draft chose end-of-text), "server lost at token L; M tokens drafted alone"
# in the stats and server_lost_at / alone_tokens in --json with tokens = L + M; the text before the loss
# equals local greedy decoding of L tokens (those were verified). Remote plain decoding (no draft) has
# nothing to continue with: it exits 1 naming the lost server. Without a kill, the same client's text
# equals local greedy decoding (also test_serve_remote.py) and reports no loss.
import json, signal, subprocess, tempfile, threading, time

from checks import check, finish
from serve_util import BIN, Server, generate, STORIES, STORIES_DRAFT

N = 200
PROMPT = "Once upon a time"


def client(port, extra, kill_srv=None):
    """Runs generate --server; with kill_srv, kills that server after the client streamed 40 characters."""
    p = subprocess.Popen([BIN, "generate"] + STORIES + ["--server", f"http://127.0.0.1:{port}", "-p", PROMPT, "-n", str(N),
                                                        "--temp", "0", "--json", "-t", "1", "-s", "7",
                                                        "--net-delay", "25,5"] + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = bytearray()
    killed_after = [None]

    def read():
        while True:
            b = p.stdout.read1(4096)
            if not b:
                return
            out.extend(b)
            if kill_srv is not None and killed_after[0] is None and len(out) >= 40:
                killed_after[0] = len(out)
                kill_srv.proc.send_signal(signal.SIGKILL)

    th = threading.Thread(target=read)
    th.start()
    err = p.stderr.read().decode()
    p.wait(300)
    th.join()
    text = out.decode()
    st = None
    try:
        st = json.loads(err.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pass
    return p.returncode, text[:-1] if text.endswith("\n") else text, st, err, killed_after[0]


with tempfile.TemporaryDirectory() as tmp:
    D = ["-d", STORIES_DRAFT]
    # no kill: equal to local greedy, no loss reported
    want, want_n = generate(STORIES, PROMPT, N)
    srv = Server(STORIES + ["-t", "1", "-c", "512"], f"{tmp}/a.log")
    try:
        rc, text, st, err, _ = client(srv.port, D)
        check(rc == 0 and text == want, f"without a kill the text equals local greedy: rc {rc} {text!r} vs {want!r} {err[-500:]}")
        check(st is not None and st["server_lost_at"] is None and st["alone_tokens"] == 0 and "server lost" not in err,
              f"no loss reported: {st}")
    finally:
        srv.stop()

    # kill mid-generation: the draft finishes alone
    srv = Server(STORIES + ["-t", "1", "-c", "512"], f"{tmp}/b.log")
    rc, text, st, err, killed_after = client(srv.port, D, kill_srv=srv)
    srv.proc.wait(30)
    check(killed_after is not None, "the server was killed while the client streamed")
    check(rc == 0, f"the client exits 0 after losing the server: {rc} {err[-800:]}")
    check(st is not None, f"--json stats: {err[-500:]}")
    if st is not None:
        L, M = st["server_lost_at"], st["alone_tokens"]
        check(L is not None and 0 < L < N and M > 0, f"loss reported in --json: lost at {L}, {M} alone")
        eog = "stopped at end-of-generation token" in err
        check(st["tokens"] == N or eog, f"full token count: {st['tokens']} of {N} (eog: {eog})")
        check(st["tokens"] == L + M - (1 if eog else 0), f"tokens {st['tokens']} = lost at {L} + alone {M}")
        check(f"server lost at token {L}; {M} tokens drafted alone" in err, f"stats line: {err[-600:]}")
        if L is not None and L > 0:
            prefix, _ = generate(STORIES, PROMPT, L)
            check(text.startswith(prefix), f"the text before the loss is local greedy's: {text[:200]!r} vs {prefix[:200]!r}")

    # remote plain decoding cannot continue: a clear error, exit 1
    srv = Server(STORIES + ["-t", "1", "-c", "512"], f"{tmp}/c.log")
    rc, text, st, err, killed_after = client(srv.port, [], kill_srv=srv)
    srv.proc.wait(30)
    check(killed_after is not None and rc == 1 and "lost at token" in err and "no draft" in err,
          f"remote plain decoding without its server: rc {rc} {err[-400:]}")

finish("test_remote_server_lost")
