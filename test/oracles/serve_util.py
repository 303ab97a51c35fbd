# serve_util.py: start `beagle serve` on a free loopback port for a test (the server picks the port,
# --port 0, and prints it), raw HTTP(S) requests to it, and `beagle generate` for reference outputs.
# Traffic goes to 127.0.0.1 only.
import http.client, json, os, re, subprocess, time

BIN = os.environ.get("BEAGLE_BIN", "build/beagle")
DATA = os.path.join(os.environ.get("BEAGLE_ROOT", "."), "data")
ROOT = os.environ.get("BEAGLE_ROOT", ".")
STORIES = ["-m", f"{DATA}/models/stories260K.bin", "-z", f"{DATA}/models/tok512.bin"]
STORIES_DRAFT = f"{ROOT}/weights/beagle-stories260K.bin"
SMOL = os.environ.get("BEAGLE_MODEL", f"{ROOT}/weights/SmolLM2-135M-Instruct.Q4_1.gguf")
SMOL_DRAFT = f"{ROOT}/weights/beagle-smollm2-135m.bin"


class Server:
    # ssl_context: the client side of a server started with --ssl-cert-file (request() then speaks HTTPS)
    def __init__(self, args, log_path, ssl_context=None):
        self.ssl_context, self.scheme = ssl_context, "http"
        self.log = open(log_path, "w+")
        self.proc = subprocess.Popen([BIN, "serve", "--host", "127.0.0.1", "--port", "0"] + args,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        self.port = None
        while time.time() < deadline and self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}): {open(log_path).read()[-2000:]}")
            m = re.search(r"listening on (https?)://127\.0\.0\.1:(\d+)", open(log_path).read())
            if m:
                self.scheme, self.port = m.group(1), int(m.group(2))
            else:
                time.sleep(0.1)
        if self.port is None:
            self.stop()
            raise RuntimeError("server did not start in 120 s")
        self.base = f"{self.scheme}://127.0.0.1:{self.port}/v1"

    def request(self, method, path, body=None, headers=None, timeout=120):
        """Returns (status, headers dict, body bytes)."""
        if self.scheme == "https":
            c = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=self.ssl_context)
        else:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def metrics(self, headers=None):
        st, _, data = self.request("GET", "/metrics", headers=headers)
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def rss_kb(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def generate(model_args, prompt, n, extra=()):
    """`beagle generate` text (no trailing newline) and its token count, greedy unless extra says otherwise."""
    r = subprocess.run([BIN, "generate"] + model_args + ["-p", prompt, "-n", str(n), "--temp", "0", "--no-stream",
                                                         "--json", "-t", "1"] + list(extra),
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"generate failed: {r.stderr[-1000:]}")
    stats = json.loads(r.stderr.strip().splitlines()[-1])
    assert r.stdout.endswith("\n")
    return r.stdout[:-1], stats["tokens"]


def remote(srv, model_args, prompt, n, extra=()):
    """`beagle generate --server` against srv (greedy): (text, --json stats, "") or (None, None, stderr's end)."""
    r = subprocess.run([BIN, "generate"] + model_args + ["--server", f"http://127.0.0.1:{srv.port}", "-p", prompt,
                                                         "-n", str(n), "--temp", "0", "--no-stream", "--json", "-t", "1"]
                       + list(extra), capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return None, None, r.stderr[-800:]
    return r.stdout[:-1], json.loads(r.stderr.strip().splitlines()[-1]), ""
