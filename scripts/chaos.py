#!/usr/bin/env python3
# chaos.py (`make chaos`): fault injection on the small stories260K target, bounded (a few minutes).
#   datagen_kill: `beagle datagen` killed (SIGKILL) KILLS times at seeded random moments and restarted
#     each time; after every kill each shard on disk must equal the uninterrupted run's shard byte for
#     byte (a partly written file under a final name would not) and `beagle train` must refuse the
#     unfinished directory; the finished directory equals the uninterrupted one.
#   train_kill: `beagle train --ckpt-every 1` killed KILLS times, resumed from its checkpoint each time;
#     after every kill the checkpoint on disk must be whole (size field, CRC); the final draft file and
#     loss TSV equal the uninterrupted run's byte for byte, the final checkpoint too except its
#     train_seconds (wall-clock bookkeeping).
#   bench_sd_kill: `beagle bench-sd -o FILE` (50 prompts) killed KILLS times and rerun; after every kill
#     FILE.partial is whole (each line ends and parses); rerun until the report is there and FILE.partial
#     gone, the report equals the uninterrupted run's less timings.
#   disk_full_ckpt / disk_full_shards: the checkpoint or the shards go to a small tmpfs (or, where mount
#     is not permitted, a file-size limit: ulimit -f, SIGXFSZ ignored); the write must fail with a clear
#     error, exit 1, keep the previous good file and leave no temp file.
#   serve_kill: `beagle serve` killed mid-request, restarted on the same port: it answers again, the
#     same text as before the kill (greedy).
# One JSON line per scenario (stdout and OUT/chaos.jsonl); exit 1 if any scenario failed.
# Usage: scripts/chaos.py [--bin build/beagle] [--seed 1] [--kills 20] [--out build/chaos]
import argparse
import filecmp
import glob
import http.client
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import zlib

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="build/beagle")
ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--kills", type=int, default=20)
ap.add_argument("--out", default="build/chaos")
args = ap.parse_args()
B = os.path.abspath(args.bin)
M = os.path.join(args.data, "models/stories260K.bin")
Z = os.path.join(args.data, "models/tok512.bin")
W = os.path.abspath(args.out)
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)
rng = random.Random(args.seed)
results = []


def report(name, ok, **kv):
    rec = {"scenario": name, "ok": bool(ok), **kv}
    results.append(rec)
    line = json.dumps(rec)
    print(line, flush=True)
    with open(os.path.join(W, "chaos.jsonl"), "a") as f:
        f.write(line + "\n")


def temps(d):
    return sorted(n for n in os.listdir(d) if ".tmp." in n) if os.path.isdir(d) else []


def whole_container(path):
    """The container's own completeness checks (src/io/container.h): u64 file size at byte 16 for the
    checkpoint, CRC-32 of every byte before the last four."""
    b = open(path, "rb").read()
    return len(b) >= 28 and struct.unpack_from("<Q", b, 16)[0] == len(b) and \
        zlib.crc32(b[:-4]) == struct.unpack_from("<I", b, len(b) - 4)[0]


def ckpt_without_clock(path):
    """A checkpoint's bytes less its train_seconds line (wall-clock bookkeeping) and the fields that
    depend on that line's length (file size, text length, CRC)."""
    b = open(path, "rb").read()
    n = struct.unpack_from("<I", b, 12)[0]
    text = b[24:24 + n].decode()
    kept = "".join(l for l in text.splitlines(True) if not l.startswith("train_seconds "))
    return kept.encode() + b[24 + n:-4]


def kill_loop(cmd_of, check, span):
    """Runs cmd_of() KILLS times, each killed after a seeded random delay in [0.02, span) s (if it has
    not finished by then); check(k) after each kill returns a list of problems."""
    kills, finished, problems = 0, 0, []
    for k in range(args.kills):
        delay = rng.uniform(0.02, span)
        p = subprocess.Popen(cmd_of(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=delay)
            finished += 1
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            kills += 1
        problems += check(k)
    return kills, finished, problems


# ---- datagen -------------------------------------------------------------------------------------
def datagen(out):
    return [B, "datagen", "-m", M, "-z", Z, "--sample", "64", "-n", "160", "--shard-seqs", "2", "--batch", "2",
            "-t", "1", "-o", out]


ref_data = os.path.join(W, "data-ref")
t0 = time.time()
subprocess.run(datagen(ref_data), check=True, stderr=subprocess.DEVNULL)
t_datagen = time.time() - t0
ref_shards = sorted(os.path.basename(p) for p in glob.glob(ref_data + "/shard-*.bin"))

chaos_data = os.path.join(W, "data-chaos")
landed = []


temps_seen = {"data": 0, "train": 0}  # temp files found after the kills: kills that landed mid-write


def datagen_check(k):
    probs = []
    temps_seen["data"] += len(temps(chaos_data))
    have = sorted(os.path.basename(p) for p in glob.glob(chaos_data + "/shard-*.bin"))
    landed.append(len(have))
    for n in have:
        if not filecmp.cmp(os.path.join(chaos_data, n), os.path.join(ref_data, n), shallow=False):
            probs.append("kill %d: %s differs from the uninterrupted run's (a partial file under its final name?)" % (k, n))
    if len(have) < len(ref_shards) and os.path.exists(chaos_data + "/meta.txt"):
        r = subprocess.run([B, "train", "-m", M, "-z", Z, "--data", chaos_data, "-o", os.path.join(W, "x.bin"), "-q"],
                           capture_output=True, text=True)
        if r.returncode != 1 or not ("incomplete" in r.stderr or "no shard-" in r.stderr):
            probs.append("kill %d: train on an unfinished data dir (%d of %d shards): exit %d, %s" %
                         (k, len(have), len(ref_shards), r.returncode, r.stderr.strip()[:200]))
    return probs


# the delays average about 1.2 / KILLS of the uninterrupted run's time (train: 1.3 / KILLS, its start-up is
# longer): the kills spread over most of the run
kills, fin, probs = kill_loop(lambda: datagen(chaos_data), datagen_check, max(0.1, 2.5 * t_datagen / args.kills))
left_temps = temps(chaos_data)
r = subprocess.run(datagen(chaos_data), capture_output=True, text=True)
if r.returncode != 0:
    probs.append("final resume: exit %d: %s" % (r.returncode, r.stderr.strip()[-300:]))
cmp = filecmp.dircmp(ref_data, chaos_data)
same = not cmp.diff_files and not cmp.left_only and not [n for n in cmp.right_only if ".tmp." not in n] and \
    all(filecmp.cmp(os.path.join(ref_data, n), os.path.join(chaos_data, n), shallow=False) for n in cmp.common_files)
if not same:
    probs.append("resumed data differs from the uninterrupted run: %s %s %s" % (cmp.diff_files, cmp.left_only, cmp.right_only))
report("datagen_kill", not probs and not temps(chaos_data), kills=kills, finished_before_kill=fin,
       shards=len(ref_shards), shards_on_disk_at_each_kill=landed, uninterrupted_s=round(t_datagen, 2),
       identical=same, temps_seen_after_kills=temps_seen["data"], temps_after_kills=len(left_temps), temps_after_resume=len(temps(chaos_data)), problems=probs)


# ---- train ---------------------------------------------------------------------------------------
def train(out, ckpt, resume=False, extra=()):
    cmd = [B, "train", "-m", M, "-z", Z, "--data", ref_data, "-o", out, "--ckpt", ckpt, "--ckpt-every", "1",
           "--stage1-epochs", "2", "--stage2-epochs", "2", "--window", "3", "--sim-steps", "2", "--batch", "4",
           "--seed", "1", "-t", "1", "-q"] + list(extra)
    return cmd + (["--resume", ckpt] if resume and os.path.exists(ckpt) else [])


rd = os.path.join(W, "train-ref")
os.makedirs(rd)
t0 = time.time()
subprocess.run(train(rd + "/d.bin", rd + "/d.ckpt"), check=True)
t_train = time.time() - t0
# the checks themselves, on planted damage: a checkpoint cut in half is not whole, a shard with one
# byte changed differs from the uninterrupted run's
half = os.path.join(W, "half.ckpt")
open(half, "wb").write(open(rd + "/d.ckpt", "rb").read()[: os.path.getsize(rd + "/d.ckpt") // 2])
flip = bytearray(open(os.path.join(ref_data, ref_shards[0]), "rb").read())
flip[len(flip) // 2] ^= 1
open(os.path.join(W, "flip.bin"), "wb").write(flip)
caught = [not whole_container(half), whole_container(rd + "/d.ckpt"),
          not filecmp.cmp(os.path.join(W, "flip.bin"), os.path.join(ref_data, ref_shards[0]), shallow=False)]
report("self_check", all(caught), half_checkpoint_caught=caught[0], whole_checkpoint_passes=caught[1],
       changed_shard_caught=caught[2])
cd = os.path.join(W, "train-chaos")
os.makedirs(cd)
ckpt_steps = []


def train_check(k):
    probs = []
    temps_seen["train"] += len(temps(cd))
    ck = cd + "/d.ckpt"
    if os.path.exists(ck):
        if not whole_container(ck):
            probs.append("kill %d: the checkpoint on disk is not whole (size or CRC)" % k)
        b = open(ck, "rb").read()
        n = struct.unpack_from("<I", b, 12)[0]
        step = [l.split()[1] for l in b[24:24 + n].decode(errors="replace").splitlines() if l.startswith("step ")]
        ckpt_steps.append(int(step[0]) if step else -1)
    else:
        ckpt_steps.append(0)
    if os.path.exists(cd + "/d.bin") and not filecmp.cmp(cd + "/d.bin", rd + "/d.bin", shallow=False):
        probs.append("kill %d: a draft file that differs from the uninterrupted run's is on disk" % k)
    return probs


kills, fin, probs = kill_loop(lambda: train(cd + "/d.bin", cd + "/d.ckpt", True), train_check,
                              max(0.1, 2.6 * t_train / args.kills))
left_temps = temps(cd)
r = subprocess.run(train(cd + "/d.bin", cd + "/d.ckpt", True), capture_output=True, text=True)
if r.returncode != 0:
    probs.append("final resume: exit %d: %s" % (r.returncode, r.stderr.strip()[-300:]))
eq = {
    "draft": filecmp.cmp(rd + "/d.bin", cd + "/d.bin", shallow=False),
    "loss_tsv": filecmp.cmp(rd + "/d.bin.loss.tsv", cd + "/d.bin.loss.tsv", shallow=False),
    "checkpoint_less_train_seconds": ckpt_without_clock(rd + "/d.ckpt") == ckpt_without_clock(cd + "/d.ckpt"),
}
for k, v in eq.items():
    if not v:
        probs.append("%s differs from the uninterrupted run's" % k)
report("train_kill", not probs and not temps(cd), kills=kills, finished_before_kill=fin, uninterrupted_s=round(t_train, 2),
       checkpoint_step_at_each_kill=ckpt_steps, identical=eq, temps_seen_after_kills=temps_seen["train"],
       temps_after_kills=len(left_temps),
       temps_after_resume=len(temps(cd)), problems=probs)


# ---- bench-sd ------------------------------------------------------------------------------------
def bench_sd(out):
    return [B, "bench-sd", "-m", M, "-z", Z, "-d", os.path.abspath("weights/beagle-stories260K.bin"), "--prompts",
            os.path.abspath("test/data/stories_prompts.txt"), "--no-chat", "--per-category", "50", "-n", "48",
            "--modes", "none,chain,tree", "--total-tokens", "12", "-t", "1", "-o", out]


TIMING = {"tok_s", "speedup", "ms_per_pass", "draft_ms_per_pass", "peak_rss_bytes", "draft_threads", "resumed_prompts"}


def untimed(x):
    """A bench-sd report less what depends on the clock (tree at a fixed size: its counts do not)."""
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if k not in TIMING}
    return x


bd = os.path.join(W, "bench-sd")
os.makedirs(bd)
t0 = time.time()
subprocess.run(bench_sd(bd + "/ref.json"), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
t_bench = time.time() - t0
partial_lines = []


def bench_check(k):
    """After a kill: no report yet, and FILE.partial (if any) is whole: every line ends and parses."""
    probs, part = [], bd + "/b.json.partial"
    if os.path.exists(part):
        text = open(part).read()
        lines = text.split("\n")
        if lines[-1] != "":
            probs.append("kill %d: b.json.partial ends mid-line" % k)
        try:
            [json.loads(l) for l in lines[:-1]]
        except ValueError as e:
            probs.append("kill %d: b.json.partial has a line that does not parse: %s" % (k, e))
        partial_lines.append(len(lines) - 2)  # finished prompts (less the identity line)
    else:
        partial_lines.append(0)
    return probs


def bench_done():  # the report written and FILE.partial removed (a kill can land between the two)
    return os.path.exists(bd + "/b.json") and not os.path.exists(bd + "/b.json.partial")


kills, fin, probs = kill_loop(lambda: ["true"] if bench_done() else bench_sd(bd + "/b.json"), bench_check,
                              max(0.1, 2.5 * t_bench / args.kills))
left_temps = temps(bd)
if not bench_done():
    r = subprocess.run(bench_sd(bd + "/b.json"), capture_output=True, text=True)
    if r.returncode != 0:
        probs.append("final resume: exit %d: %s" % (r.returncode, r.stderr.strip()[-300:]))
same = os.path.exists(bd + "/b.json") and untimed(json.load(open(bd + "/ref.json"))) == untimed(json.load(open(bd + "/b.json")))
if not same:
    probs.append("the resumed report differs from the uninterrupted run's (timings aside)")
if os.path.exists(bd + "/b.json.partial"):
    probs.append("b.json.partial left after the finished run")
report("bench_sd_kill", not probs and not temps(bd), kills=kills, finished_before_kill=fin, prompts=50,
       uninterrupted_s=round(t_bench, 2), prompts_kept_at_each_kill=partial_lines, identical=same,
       temps_after_kills=len(left_temps), temps_after_resume=len(temps(bd)), problems=probs)


# ---- full disk ---------------------------------------------------------------------------------------
def small_disk(path, size_kb):
    """A tmpfs of size_kb KiB at path; None if mount is not permitted (then the caller limits file size)."""
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dk" % size_kb, "tmpfs", path], capture_output=True)
    return "tmpfs" if r.returncode == 0 else None


def limited(cmd, kb):  # the fallback: a file-size limit, SIGXFSZ ignored so write() returns EFBIG
    return ["bash", "-c", "trap '' XFSZ; ulimit -f %d; exec \"$@\"" % kb, "limited"] + cmd


ck_size = os.path.getsize(rd + "/d.ckpt")
disk = os.path.join(W, "disk-ckpt")
how = small_disk(disk, (ck_size * 3 // 2) // 1024 + 1)  # room for one checkpoint, not for it and its temp file
probs = []
ok_first = subprocess.run(train(disk + "/d.bin", disk + "/d.ckpt", extra=["--max-steps", "1"]), capture_output=True,
                          text=True)
if ok_first.returncode != 0:
    probs.append("first checkpoint did not fit: %s" % ok_first.stderr.strip()[-200:])
before = open(disk + "/d.ckpt", "rb").read() if os.path.exists(disk + "/d.ckpt") else b""
cmd = train(disk + "/d.bin", disk + "/d.ckpt", resume=True, extra=["--max-steps", "3"])
r = subprocess.run(cmd if how else limited(cmd, ck_size // 1024), capture_output=True, text=True)
after = open(disk + "/d.ckpt", "rb").read() if os.path.exists(disk + "/d.ckpt") else b""
err = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
clear = ("No space left" in err or "File too large" in err) and "d.ckpt'" in err and "previous file is unchanged" in err
if r.returncode != 1 or not clear:
    probs.append("full disk during a checkpoint write: exit %d, message %r" % (r.returncode, err))
if not before or after != before or not whole_container(disk + "/d.ckpt"):
    probs.append("the previous checkpoint was not kept intact")
report("disk_full_ckpt", not probs and not temps(disk), how=how or "ulimit -f", exit=r.returncode, message=err,
       previous_kept=bool(before) and after == before, temps_left=temps(disk), problems=probs)
if how:
    subprocess.run(["umount", disk])

shard = os.path.getsize(os.path.join(ref_data, ref_shards[0]))
disk = os.path.join(W, "disk-shards")
how = small_disk(disk, (shard * 5 // 2) // 1024 + 1)  # about two shards and a half
probs = []
cmd = datagen(disk + "/data")
r = subprocess.run(cmd if how else limited(cmd, shard // 1024), capture_output=True, text=True)
err = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
have = sorted(os.path.basename(p) for p in glob.glob(disk + "/data/shard-*.bin"))
if r.returncode != 1 or not (("No space left" in err or "File too large" in err) and "shard-" in err):
    probs.append("full disk during a shard write: exit %d, message %r" % (r.returncode, err))
for n in have:
    if not filecmp.cmp(os.path.join(disk, "data", n), os.path.join(ref_data, n), shallow=False):
        probs.append("%s differs from the uninterrupted run's" % n)
t = subprocess.run([B, "train", "-m", M, "-z", Z, "--data", disk + "/data", "-o", os.path.join(W, "y.bin"), "-q"],
                   capture_output=True, text=True)
if t.returncode != 1 or "incomplete" not in t.stderr:
    probs.append("training on the cut-off data dir: exit %d %s" % (t.returncode, t.stderr.strip()[:200]))
report("disk_full_shards", not probs and not temps(disk + "/data"), how=how or "ulimit -f", exit=r.returncode,
       message=err, shards_kept=len(have), shards_total=len(ref_shards), temps_left=temps(disk + "/data"),
       train_refuses=t.stderr.strip()[:160], problems=probs)
if how:
    subprocess.run(["umount", disk])


# ---- serve -----------------------------------------------------------------------------------------
def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


port = free_port()
url = "http://127.0.0.1:%d" % port


def serve():
    p = subprocess.Popen([B, "serve", "-m", M, "-z", Z, "--port", str(port), "-t", "1"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return p
        except Exception:
            time.sleep(0.05)
    return p


def complete(n, timeout=60):
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": n, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=timeout).read())["choices"][0]["text"]


probs = []
p = serve()
want = complete(64)
box = {}


def long_req():  # a streamed request: the server is killed once its first tokens have arrived
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps({"prompt": "Once upon a time", "max_tokens": 400,
                                                         "temperature": 0, "stream": True}),
                  {"Content-Type": "application/json"})
        resp = c.getresponse()
        while not resp.readline().startswith(b"data:"):
            pass
        box["streaming"] = True
        box["text"] = resp.read()
    except Exception as e:
        box["error"] = type(e).__name__


th = threading.Thread(target=long_req)
th.start()
for _ in range(400):
    if "streaming" in box or "error" in box:
        break
    time.sleep(0.005)
p.send_signal(signal.SIGKILL)
p.wait()
th.join()
p = serve()
try:
    got = complete(64)
except Exception as e:
    got, probs = None, ["no answer after the restart: %s" % e]
p.send_signal(signal.SIGTERM)
p.wait()
if got is not None and got != want:
    probs.append("the restarted server answered differently")
mid = "streaming" in box and "error" in box  # the client had tokens, then lost the connection
report("serve_kill", not probs and mid, killed_mid_request=mid, client_saw=box.get("error"),
       answers_after_restart=got is not None, same_text=got == want, problems=probs)

bad = [r["scenario"] for r in results if not r["ok"]]
print("chaos: %d scenarios, %d failed%s" % (len(results), len(bad), (": " + ", ".join(bad)) if bad else ""))
sys.exit(1 if bad else 0)
