#!/usr/bin/env python3
# test_serve_hostile.py: `beagle serve` under bad and hostile input, on 127.0.0.1 only (stories260K,
# 2 slots, a queue of 6, 64 KiB bodies, 2 s socket timeout). Each bad request gets its HTTP status
# and an OpenAI error object naming the problem: malformed JSON, wrong types, out-of-range values,
# invalid UTF-8, a prompt longer than the context, a body over the limit (413), an unknown path (404).
# A client that stalls mid-request is dropped after the timeout while others are served; a client
# that disconnects mid-stream frees its slot (SmolLM2, slow enough to see it); more requests than slots + queue get 503 with
# Retry-After. Then a bounded load test: 2000 requests from 8 threads, a quarter of them bad, every
# good response equal to `beagle generate` for its prompt, every bad one its 400; no crash, RSS at
# the end within 20% (+ 16 MiB) of the RSS after a warm-up, and a clean exit on SIGTERM.
import concurrent.futures, json, os, random, socket, tempfile, time

from checks import check, finish
from serve_util import Server, generate, STORIES, SMOL

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went", "One day"]
N = 16


def err_of(status, body, want_status, want_code=None, want_param=None):
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return f"status {status}, no error object: {body[:200]!r}"
    if status != want_status:
        return f"status {status} != {want_status}: {e}"
    if not isinstance(e.get("message"), str) or not e["message"] or "type" not in e or "param" not in e or "code" not in e:
        return f"error object lacks fields: {e}"
    if want_code and e["code"] != want_code:
        return f"code {e['code']} != {want_code}: {e}"
    if want_param and e["param"] != want_param:
        return f"param {e['param']} != {want_param}: {e}"
    return None


BAD = [  # (body bytes, status, code, param)
    (b'{"prompt": "a", ', 400, "invalid_json", None),
    (b'{"prompt": 12}', 400, "invalid_type", "prompt"),
    (b'{"prompt": "a", "max_tokens": 0}', 400, "invalid_value", "max_tokens"),
    (b'{"prompt": "a", "max_tokens": -5}', 400, "invalid_value", "max_tokens"),
    (b'{"prompt": "a", "max_tokens": 1000000000000}', 400, "invalid_value", "max_tokens"),
    (b'{"prompt": "a", "max_tokens": 1e309}', 400, "invalid_json", None),  # past double: nlohmann out_of_range (fuzz_openai)
    (b'{"prompt": "a", "temperature": "hot"}', 400, "invalid_type", "temperature"),
    (b'{"prompt": "a", "stream": "yes"}', 400, "invalid_type", "stream"),
    (b'{"prompt": "\xc3\x28 bad utf-8"}', 400, "invalid_json", None),
    (b'{"prompt": "' + b"word " * 400 + b'"}', 400, "context_length_exceeded", "prompt"),
    (b"[]", 400, "invalid_type", None),
    (b"", 400, "invalid_json", None),
]


def stream_request(prompt, n, chat=False):
    body = {"max_tokens": n, "stream": True, "temperature": 0}
    body.update({"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt})
    body = json.dumps(body).encode()
    path = b"/v1/chat/completions" if chat else b"/v1/completions"
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


def one_bad(srv, i):
    body, st, code, param = BAD[i % len(BAD)]
    status, _, data = srv.request("POST", "/v1/completions", body)
    return err_of(status, data, st, code, param)


with tempfile.TemporaryDirectory() as tmp:
    want = {p: generate(STORIES, p, N)[0] for p in PROMPTS}
    srv = Server(STORIES + ["-t", "1", "-c", "128", "--parallel", "2", "--queue", "6", "--max-body-kb", "64",
                            "--timeout", "2"], f"{tmp}/serve.log")
    try:
        for i in range(len(BAD)):
            r = one_bad(srv, i)
            check(r is None, f"bad request {BAD[i][0][:40]!r}: {r}")
        st, _, data = srv.request("POST", "/v1/completions", b'{"prompt": "' + b"a" * 70000 + b'"}')
        check(err_of(st, data, 413, "request_too_large") is None, f"body over the limit: {st} {data[:200]!r}")
        st, _, data = srv.request("GET", "/v1/nothing")
        check(err_of(st, data, 404, "not_found") is None, f"unknown path: {st} {data[:200]!r}")
        st, _, data = srv.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]})
        check(err_of(st, data, 400, "invalid_type", "messages[0].content") is None, f"chat content type: {data[:200]!r}")

        # a stalled client (half a request) is dropped after --timeout; others are served meanwhile
        slow = socket.create_connection(("127.0.0.1", srv.port))
        slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
        st, _, data = srv.request("POST", "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": N, "temperature": 0})
        check(st == 200 and json.loads(data)["choices"][0]["text"] == want[PROMPTS[0]], "served beside a stalled client")
        slow.settimeout(10)
        t0 = time.time()
        try:
            got = slow.recv(4096)  # the server answers (408/400) or closes: either ends the stall
        except OSError:
            got = b""
        check(time.time() - t0 < 8, f"stalled client dropped after {time.time() - t0:.1f} s (timeout 2 s)")
        slow.close()

        # a client that disconnects mid-stream: the next request is served (stories260K may finish before
        # the server notices; the cancellation itself is checked on SmolLM2 below)
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(stream_request(PROMPTS[1], 120))
        s.recv(100)
        s.close()
        st, _, data = srv.request("POST", "/v1/completions", {"prompt": PROMPTS[2], "max_tokens": N, "temperature": 0})
        check(st == 200 and json.loads(data)["choices"][0]["text"] == want[PROMPTS[2]], "served after a disconnect")

        # more requests than slots + queue: the overflow gets 503 + Retry-After, the rest their text
        def long_req(i):
            return srv.request("POST", "/v1/completions", {"prompt": PROMPTS[i % 4], "max_tokens": 100, "temperature": 0})
        with concurrent.futures.ThreadPoolExecutor(24) as ex:
            res = list(ex.map(long_req, range(24)))
        n503 = sum(1 for st, h, d in res if st == 503)
        check(n503 > 0, "some of 24 simultaneous requests overflow 2 slots + a queue of 6")
        for st, h, d in res:
            if st == 503:
                check(err_of(st, d, 503, "server_overloaded") is None and h.get("Retry-After") == "1", f"503: {h} {d[:200]!r}")
            else:
                check(st == 200, f"overflow test: status {st} {d[:200]!r}")
        ok_texts = [json.loads(d)["choices"][0]["text"] for st, h, d in res if st == 200]
        check(len(ok_texts) >= 8, f"at least slots + queue requests served ({len(ok_texts)})")

        # bounded load test: 2000 requests, 8 threads, a quarter bad
        def load(i):
            rnd = random.Random(i)
            if rnd.random() < 0.25:
                return one_bad(srv, rnd.randrange(len(BAD)))
            p = PROMPTS[rnd.randrange(4)]
            stream = rnd.random() < 0.3
            st, _, data = srv.request("POST", "/v1/completions", {"prompt": p, "max_tokens": N, "temperature": 0, "stream": stream})
            if st == 503:
                n503[0] += 1
                return None  # queue full: allowed, answered properly (checked above)
            if st != 200:
                return f"status {st}: {data[:200]!r}"
            if stream:
                events = [e for e in data.decode().split("\n\n") if e]
                if events[-1] != "data: [DONE]":
                    return f"stream does not end with [DONE]: {events[-2:]}"
                text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
            else:
                text = json.loads(data)["choices"][0]["text"]
            return None if text == want[p] else f"{p!r}: {text!r} != {want[p]!r}"

        n503 = [0]
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            errs = [e for e in ex.map(load, range(200)) if e]  # warm-up
            rss0 = srv.rss_kb()
            t0 = time.time()
            errs += [e for e in ex.map(load, range(200, 2000)) if e]
        secs = time.time() - t0
        rss1 = srv.rss_kb()
        check(not errs, f"{len(errs)} wrong responses of 2000, first: {errs[:3]}")
        check(rss1 <= rss0 * 1.2 + 16384, f"RSS {rss0} kB after warm-up -> {rss1} kB after 1800 more requests")
        print(f"load: 1800 requests in {secs:.1f} s ({n503[0]} of 2000 got 503), RSS {rss0} -> {rss1} kB")
        check(n503[0] == 0, f"{n503[0]} of 2000 load requests got 503 (8 clients fit 2 slots + a queue of 6)")
        m = srv.metrics()
        check(m.get("beagle_slots_active", 1) == 0 and m.get("beagle_queue_length", 1) == 0, "idle after the load")
        check(srv.proc.poll() is None, "server alive after the load test")
    finally:
        rc = srv.stop()
        check(rc == 0, f"server exits 0 on SIGTERM (got {rc})")

    # a client that leaves mid-stream frees its slot within a few tokens (SmolLM2: ~100 tokens/s here)
    if os.path.exists(SMOL):
        srv = Server(["-m", SMOL, "-t", "2", "-c", "512"], f"{tmp}/smol.log")
        try:
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(stream_request("Write a long story about a dragon.", 400, chat=True))
            s.recv(200)
            s.close()
            t0 = time.time()
            while time.time() - t0 < 20 and srv.metrics().get('beagle_jobs_finished_total{reason="cancelled"}', 0) < 1:
                time.sleep(0.05)
            m = srv.metrics()
            check(m.get('beagle_jobs_finished_total{reason="cancelled"}', 0) == 1, f"disconnect cancels the job: {m}")
            check(m.get("beagle_generated_tokens_total", 400) < 200, f"stopped early: {m.get('beagle_generated_tokens_total')} tokens")
            check(m.get("beagle_slots_active", 1) == 0, "slot free")
        finally:
            check(srv.stop() == 0, "smol server exits 0")
    else:
        check(False, f"missing {SMOL}")

finish("test_serve_hostile")
