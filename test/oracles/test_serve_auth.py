#!/usr/bin/env python3
# test_serve_auth.py: access to `beagle serve` on SmolLM2 (greedy, short): --api-key (401 with the error object
# without the right "Authorization: Bearer KEY", /health open, the official `openai` client with the right and a
# wrong key, a kept-alive connection still in step after a 401), --api-key-file, HTTPS with a self-signed
# certificate (--ssl-key-file, --ssl-cert-file), and the start-up errors of bad flags and files (exit 1, no
# crash). The HTTPS part needs the openssl command (SKIP without it).
import json, os, shutil, socket, ssl, subprocess, tempfile

import openai

from checks import check, finish
from serve_util import BIN, SMOL, Server, generate

KEY = "sk-beagle-test-0123456789"
PROMPT, N = "The capital of France is", 8

if not os.path.exists(SMOL):
    print(f"SKIP: {SMOL} missing (make model)")
    raise SystemExit(77)
skipped = []
want, want_n = generate(["-m", SMOL], PROMPT, N)
MODEL_ARGS = ["-m", SMOL, "-t", "2", "-c", "256"]


def auth(key):
    return {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}


def check_401(srv, method, path, headers, label):
    body = {"prompt": PROMPT, "max_tokens": N, "temperature": 0} if method == "POST" else None
    st, hdrs, data = srv.request(method, path, body=body, headers=headers)
    try:
        err = json.loads(data)["error"]
    except (ValueError, KeyError, TypeError):
        err = {}
    check(st == 401, f"{label}: status {st} (want 401): {data[:200]!r}")
    check(err.get("type") == "authentication_error" and err.get("code") == 401 and isinstance(err.get("message"), str),
          f"{label}: the error object {data[:200]!r}")
    check(hdrs.get("WWW-Authenticate") == "Bearer", f"{label}: WWW-Authenticate {hdrs.get('WWW-Authenticate')!r}")
    return hdrs


def read_response(sock):
    """One HTTP/1.1 response (with Content-Length) from sock: (status, body), or (None, what came)."""
    data = b""
    while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + content_length(data):
        try:
            d = sock.recv(65536)
        except socket.timeout:
            return None, data
        if not d:
            return None, data
        data += d
    return int(data.split()[1]), data[data.index(b"\r\n\r\n") + 4:]


def content_length(data):
    head = data.split(b"\r\n\r\n")[0].lower()
    return int(head.split(b"content-length:")[1].split(b"\r\n")[0]) if b"content-length:" in head else 0


def keep_alive_after_401(port):
    """A POST with a body and no key, then GET /health on the same connection: 401, then 200 (the refused
    request's body, larger than httplib's read buffer, was read, not taken for the start of the next request)."""
    body = json.dumps({"prompt": PROMPT + " x" * 100000, "max_tokens": N}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        first = read_response(s)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        second = read_response(s)
    ok = first[0] == 401 and second[0] == 200 and b'"ok"' in second[1]
    if not ok:
        print(f"keep-alive answers: {first!r}, {second!r}")
    return ok


def completion_ok(c, label):
    """The openai client's greedy completion equals `beagle generate`."""
    r = c.completions.create(model="x", prompt=PROMPT, max_tokens=N, temperature=0)
    check(r.choices[0].text == want and r.usage.completion_tokens == want_n,
          f"{label}: {r.choices[0].text!r} ({r.usage.completion_tokens} tokens) vs generate {want!r} ({want_n})")


def auth_fails(c, label):
    """The openai client with a wrong key gets AuthenticationError (401, authentication_error)."""
    try:
        c.completions.create(model="x", prompt=PROMPT, max_tokens=N, temperature=0)
        check(False, f"{label}: a wrong key must fail")
    except openai.AuthenticationError as e:
        check(e.status_code == 401 and e.type == "authentication_error", f"{label}: {e.status_code} {e.type} {e}")


def expect_start_error(args, needle, label):
    """`beagle serve ARGS` exits 1 at start-up (no crash) with needle in its stderr."""
    r = subprocess.run([BIN, "serve", "--port", "0"] + args, capture_output=True, text=True, timeout=120)
    check(r.returncode == 1 and needle in r.stderr and "terminate" not in r.stderr,
          f"{label}: exit {r.returncode}, stderr {r.stderr[-400:]!r} (want exit 1 and {needle!r})")


with tempfile.TemporaryDirectory() as tmp:
    # ---- --api-key over HTTP
    srv = Server(MODEL_ARGS + ["--api-key", KEY], f"{tmp}/key.log")
    try:
        check_401(srv, "POST", "/v1/completions", {"Content-Type": "application/json"}, "no key")
        check_401(srv, "POST", "/v1/completions", auth("sk-wrong"), "wrong key")
        check_401(srv, "POST", "/v1/completions", auth(KEY[:-1]), "the key less its last byte")
        check_401(srv, "POST", "/v1/completions", auth(KEY + "0"), "the key and one more byte")
        check_401(srv, "POST", "/v1/completions", {"Authorization": f"Basic {KEY}"}, "the key in another scheme")
        check_401(srv, "POST", "/v1/chat/completions", {}, "chat, no key")
        check_401(srv, "GET", "/v1/models", {}, "models, no key")
        check_401(srv, "GET", "/metrics", {}, "metrics, no key")
        check_401(srv, "POST", "/beagle/v1/remote/start", {}, "remote drafting, no key")
        check_401(srv, "GET", "/no/such/path", {}, "an unknown path, no key")
        st, _, body = srv.request("GET", "/health", headers={})
        check(st == 200 and json.loads(body).get("status") == "ok", f"/health without a key: {st} {body!r}")
        # a 401 to a request with a body leaves the connection in step: the next request on it is answered
        check(keep_alive_after_401(srv.port), "a POST refused with 401, then /health on the same connection")
        st, _, body = srv.request("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": N, "temperature": 0}, auth(KEY))
        check(st == 200 and json.loads(body)["choices"][0]["text"] == want, f"right key: {st} {body[:300]!r} vs {want!r}")
        st, _, body = srv.request("GET", "/no/such/path", headers=auth(KEY))
        check(st == 404, f"an unknown path with the key: {st} (want 404)")
        # the official client, unmodified
        c = openai.OpenAI(base_url=srv.base, api_key=KEY, max_retries=0)
        completion_ok(c, "openai client, right key")
        parts = [ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=N, temperature=0, stream=True)]
        check(len(parts) >= 2 and "".join(parts), f"openai client, streamed chat with the key: {parts}")
        check([m.id for m in c.models.list().data] == [os.path.basename(SMOL)], "openai client, models with the key")
        auth_fails(openai.OpenAI(base_url=srv.base, api_key="sk-wrong", max_retries=0), "openai client, wrong key")
        m = srv.metrics(auth(KEY))
        counted = sorted((k, v) for k, v in m.items() if 'status="401"' in k)
        check(m.get('beagle_requests_total{endpoint="/v1/completions",status="401"}', 0) == 7
              and m.get('beagle_requests_total{endpoint="other",status="401"}', 0) == 1
              and m.get('beagle_requests_total{endpoint="/v1/completions",status="200"}', 0) == 2,
              f"metrics count the 401s by endpoint (7 completions, 1 unknown path): {counted}")
    finally:
        check(srv.stop() == 0, f"key server exits 0 on SIGTERM: {open(f'{tmp}/key.log').read()[-600:]}")

    # ---- start-up errors: exit 1 with a message naming the flag and file, before the model loads
    keyfile = f"{tmp}/keys.txt"
    with open(keyfile, "w") as f:
        f.write("sk-first\r\n\n  \nsk-second\n")
    with open(f"{tmp}/blank.txt", "w") as f:
        f.write("\n\r\n")
    expect_start_error(MODEL_ARGS + ["--api-key-file", f"{tmp}/none.txt"], "--api-key-file: cannot open", "missing key file")
    expect_start_error(MODEL_ARGS + ["--api-key-file", tmp], "--api-key-file: error reading", "key file a directory")
    expect_start_error(MODEL_ARGS + ["--api-key-file", f"{tmp}/blank.txt"], "expected one API key per line, found none",
                       "key file without keys")
    expect_start_error(MODEL_ARGS + ["--api-key", "a,,b"], "--api-key: expected KEY or KEY1,KEY2,..., found an empty key",
                       "an empty key in --api-key")
    expect_start_error(MODEL_ARGS + ["--ssl-key-file", keyfile], "needs both --ssl-key-file and --ssl-cert-file",
                       "--ssl-key-file alone")
    expect_start_error(MODEL_ARGS + ["--ssl-cert-file", keyfile], "needs both --ssl-key-file and --ssl-cert-file",
                       "--ssl-cert-file alone")
    expect_start_error(MODEL_ARGS + ["--ssl-cert-file", f"{tmp}/none.pem", "--ssl-key-file", keyfile],
                       "--ssl-cert-file: cannot open", "missing certificate file")
    expect_start_error(MODEL_ARGS + ["--ssl-cert-file", keyfile, "--ssl-key-file", keyfile],
                       "expected a PEM certificate", "a certificate file that is no PEM")

    # ---- HTTPS: a self-signed certificate for 127.0.0.1, the key file's keys (and --api-key's) over TLS
    if shutil.which("openssl") is None:
        print("SKIP: the HTTPS part needs the openssl command (apt-get install openssl, or bash scripts/sysdeps.sh test)")
        skipped.append("https")
    else:
        cert, key = f"{tmp}/cert.pem", f"{tmp}/key.pem"

        def openssl(*args):
            r = subprocess.run(["openssl"] + list(args), capture_output=True, text=True, timeout=60)
            check(r.returncode == 0, f"openssl {' '.join(args[:2])}: {r.stderr[-300:]}")

        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
                "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1")
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", f"{tmp}/other.pem")
        openssl("pkey", "-in", key, "-aes256", "-passout", "pass:secret", "-out", f"{tmp}/encrypted.pem")
        with open(f"{tmp}/bad_cert.pem", "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
        tls_args = lambda k, c: MODEL_ARGS + ["--ssl-key-file", k, "--ssl-cert-file", c]
        expect_start_error(tls_args(key, f"{tmp}/bad_cert.pem"), "OpenSSL cannot read it", "a certificate OpenSSL cannot read")
        expect_start_error(tls_args(cert, key), "found a private key (the two flags swapped?)", "swapped TLS files")
        expect_start_error(tls_args(f"{tmp}/other.pem", cert), "is not the private key of the certificate", "a key of another certificate")
        expect_start_error(tls_args(f"{tmp}/encrypted.pem", cert), "encrypted with a passphrase", "an encrypted key")
        expect_start_error(tls_args(f"{tmp}/none.pem", cert), "--ssl-key-file: cannot open", "missing key file")

        trust = ssl.create_default_context(cafile=cert)
        srv = Server(tls_args(key, cert) + ["--api-key-file", keyfile, "--api-key", KEY], f"{tmp}/tls.log", ssl_context=trust)
        try:
            check(srv.base.startswith("https://"), f"the server says https: {srv.base}")
            st, _, body = srv.request("GET", "/health", headers={})
            check(st == 200, f"https /health without a key: {st} {body!r}")
            check_401(srv, "POST", "/v1/completions", {}, "https, no key")
            for k in ("sk-first", "sk-second", KEY):  # the file's keys (its CRLF and blank lines dropped) and --api-key's
                c = openai.OpenAI(base_url=srv.base, api_key=k, max_retries=0,
                                  http_client=openai.DefaultHttpxClient(verify=trust))
                completion_ok(c, f"openai client over https, key {k}")
            auth_fails(openai.OpenAI(base_url=srv.base, api_key="sk-firs", max_retries=0,
                                     http_client=openai.DefaultHttpxClient(verify=trust)), "openai client over https, wrong key")
            # a client that does not trust the certificate, and one speaking plain HTTP, get no answer
            try:
                openai.OpenAI(base_url=srv.base, api_key=KEY, max_retries=0).models.list()
                check(False, "a client without the certificate must not connect")
            except openai.APIConnectionError:
                pass
            try:
                openai.OpenAI(base_url=srv.base.replace("https:", "http:"), api_key=KEY, max_retries=0, timeout=10).models.list()
                check(False, "plain HTTP to the HTTPS port must not be answered")
            except (openai.APIConnectionError, openai.APIStatusError):
                pass
        finally:
            check(srv.stop() == 0, f"https server exits 0 on SIGTERM: {open(f'{tmp}/tls.log').read()[-600:]}")

checks_done, fails = __import__("checks").counts()
if fails == 0 and skipped:
    print(f"test_serve_auth: {checks_done} checks OK; SKIP: {', '.join(skipped)}")
    raise SystemExit(77)
finish("test_serve_auth")
