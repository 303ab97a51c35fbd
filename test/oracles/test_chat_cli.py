#!/usr/bin/env python3
# test_chat_cli.py: `beagle chat` driven through a pseudo-terminal (the pty module; input echo off). Two or
# three greedy turns must print exactly what `beagle generate --parse-special` prints for the conversation so
# far rendered independently (SmolLM2: its GGUF's own chat template read with the gguf package and rendered
# by jinja2 as HF apply_chat_template does; stories260K: ChatML written out here), plain, with a Beagle
# draft (-d) and with a draft model (-md); turn 2 must take the conversation's tokens from the cache
# (--verbose's count). Ctrl-C during a long reply stops it and the prompt comes back, the conversation goes
# on; Ctrl-C at the prompt, a second Ctrl-C during a reply and end of input (Ctrl-D) exit promptly.
import fcntl
import os
import re
import select
import subprocess
import sys
import tempfile
import termios
import time

from checks import check, counts

ROOT = os.environ.get("BEAGLE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("BEAGLE_BIN", os.path.join(ROOT, "build", "beagle"))
SMOL = os.environ.get("BEAGLE_MODEL", os.path.join(ROOT, "weights", "SmolLM2-135M-Instruct.Q4_1.gguf"))
MODELS = os.path.join(ROOT, "data", "models")
STORIES = ["-m", os.path.join(MODELS, "stories260K.bin"), "-z", os.path.join(MODELS, "tok512.bin")]
PROMPT = b"\n> "  # what ends a reply: its newline, then the next prompt


def _controlling_tty():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # fd 0 is the pty: Ctrl-C written to it becomes SIGINT here


class Chat:
    """`beagle chat ARGS` on a pseudo-terminal: stdin and stdout on it (echo off), stderr to a file."""

    def __init__(self, args):
        master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO  # the output is then the program's stdout alone
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen([BIN, "chat"] + args, stdin=slave, stdout=slave, stderr=self.err,
                                  preexec_fn=_controlling_tty, close_fds=True)
        os.close(slave)
        self.fd, self.out, self.at = master, b"", 0

    def read_until(self, marker, timeout):
        """Reads until `marker` appears after the last read point; returns the text before it (None on a
        timeout or the end of output) and moves past it."""
        end = time.time() + timeout
        while True:
            i = self.out.find(marker, self.at)
            if i >= 0:
                text, self.at = self.out[self.at:i], i + len(marker)
                return text.decode("utf-8", "replace")
            left = end - time.time()
            if left <= 0:
                return None
            r, _, _ = select.select([self.fd], [], [], left)
            if not r:
                continue
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # EIO: the program closed the terminal
                return None
            if not data:
                return None
            self.out += data.replace(b"\r\n", b"\n")

    def send(self, data):
        os.write(self.fd, data)

    def wait(self, timeout):
        """Exit status (None if still running after timeout); reads the rest of the output meanwhile."""
        end = time.time() + timeout
        while time.time() < end:
            rc = self.p.poll()
            if rc is not None:
                return rc
            self.read_until(b"\x00never\x00", 0.1)
        return self.p.poll()

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode("utf-8", "replace")

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        os.close(self.fd)


def chatml(messages):
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def smol_renderer():
    import gguf
    import jinja2
    r = gguf.GGUFReader(SMOL)
    f = r.fields["tokenizer.chat_template"]
    tmpl = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(bytes(f.parts[f.data[0]]).decode())
    return lambda messages: tmpl.render(messages=messages, add_generation_prompt=True, bos_token="<|im_start|>",
                                        eos_token="<|im_end|>")


def generate(model_args, text, n):
    p = subprocess.run([BIN, "generate"] + model_args + ["--temp", "0", "-n", str(n), "--parse-special", "-p", text],
                       capture_output=True, timeout=300)
    check(p.returncode == 0, f"generate exited {p.returncode}: {p.stderr.decode()[-500:]}")
    out = p.stdout.decode("utf-8", "replace")
    return out[:-1] if out.endswith("\n") else out


def conversation(name, model_args, extra, render, users, n, system=None):
    """The chat's replies to `users`, each against generate on the conversation so far."""
    fails_before = counts()[1]
    c = Chat(model_args + extra + ["--temp", "0", "-n", str(n), "--verbose"] + (["-sys", system] if system else []))
    try:
        if not check(c.read_until(b"> ", 120) == "", f"{name}: no first prompt; stderr: {c.stderr()[-800:]}"):
            return
        messages = [{"role": "system", "content": system}] if system else []
        for k, u in enumerate(users):
            messages.append({"role": "user", "content": u})
            c.send(u.encode() + b"\n")
            reply = c.read_until(PROMPT, 120)
            if not check(reply is not None, f"{name}: turn {k + 1}: no reply; stderr: {c.stderr()[-800:]}"):
                return
            want = generate(model_args, render(messages), n)
            check(reply == want, f"{name}: turn {k + 1}:\n  chat     {reply!r}\n  generate {want!r}")
            check(len(reply) > 0, f"{name}: turn {k + 1}: empty reply")
            messages.append({"role": "assistant", "content": reply})
        c.send(b"\x04")  # end of input at the prompt
        rc = c.wait(20)
        check(rc == 0, f"{name}: Ctrl-D at the prompt: exit {rc}")
        stats = [(int(a), int(b)) for a, b in re.findall(r"prompt (\d+) tokens, (\d+) from the cache", c.stderr())]
        check(len(stats) == len(users) and stats[0][1] == 0 and all(s[1] >= stats[k][0] for k, s in enumerate(stats[1:])),
              f"{name}: (prompt tokens, from the cache) per turn {stats}: each turn should reuse the whole last prompt")
        if counts()[1] == fails_before:
            print(f"ok   {name}: {len(users)} turns as generate; (prompt tokens, cached) {stats}")
    finally:
        c.close()


def interrupts(model_args):
    long_ask = b"Write the numbers from 1 to 500, separated by commas.\n"  # greedy: over 1500 tokens, a minute here
    args = model_args + ["--temp", "0", "-n", "3000", "-c", "4096", "--verbose"]
    c = Chat(args)
    try:
        check(c.read_until(b"> ", 120) == "", f"no first prompt: {c.stderr()[-500:]}")
        c.send(long_ask)
        check(c.read_until(b"1", 60) is not None, "the long reply did not start")
        time.sleep(0.5)
        t0 = time.time()
        c.send(b"\x03")
        partial = c.read_until(PROMPT, 10)
        dt = time.time() - t0
        ok = check(partial is not None and dt < 10 and c.p.poll() is None,
                   f"Ctrl-C during a reply: prompt back after {dt:.1f} s, running {c.p.poll() is None}")
        ok &= check("stopped by Ctrl-C" in c.stderr(), f"the reply was not the one stopped: {c.stderr()[-500:]}")
        if ok:
            print(f"ok   Ctrl-C stopped the reply after {len(partial)} characters; prompt back in {dt:.2f} s")
        c.send(b"Say hi.\n")
        check(c.read_until(PROMPT, 120) is not None, "no reply after an interrupted one")
        t0 = time.time()
        c.send(b"\x03")  # at the prompt
        rc = c.wait(10)
        if check(rc in (0, 130), f"Ctrl-C at the prompt: exit {rc} after {time.time() - t0:.1f} s"):
            print(f"ok   Ctrl-C at the prompt: exit {rc} in {time.time() - t0:.2f} s")
    finally:
        c.close()
    c = Chat(args)
    try:
        check(c.read_until(b"> ", 120) == "", "no first prompt")
        c.send(long_ask)
        check(c.read_until(b"1", 60) is not None, "the long reply did not start")
        t0 = time.time()
        c.send(b"\x03")
        time.sleep(0.05)  # two signals at once would merge into one
        c.send(b"\x03")
        rc = c.wait(10)
        if check(rc in (0, 130), f"two Ctrl-C during a reply: exit {rc} after {time.time() - t0:.1f} s"):
            print(f"ok   a second Ctrl-C during a reply: exit {rc} in {time.time() - t0:.2f} s")
    finally:
        c.close()


def main():
    skipped = []
    users = ["Once upon a time there was a little dog.", "What did the dog find?", "And then?"]
    conversation("stories260K plain", STORIES, ["--chat-template", "chatml"], chatml, users, 48)
    conversation("stories260K -d", STORIES, ["--chat-template", "chatml", "-d", os.path.join(ROOT, "weights", "beagle-stories260K.bin")],
                 chatml, users, 48, system="You tell stories.")
    conversation("stories260K -md", STORIES, ["--chat-template", "chatml", "-md", os.path.join(MODELS, "stories260K.bin")],
                 chatml, users[:2], 48)
    if os.path.exists(SMOL):
        try:
            render = smol_renderer()
        except ImportError as e:
            render = None
            skipped.append(f"SmolLM2 conversations: {e} (make pydeps)")
        if render:
            asks = ["What is the capital of France?", "And of Italy? Answer in one sentence."]
            conversation("SmolLM2 plain", ["-m", SMOL], [], render, asks, 40)
            conversation("SmolLM2 -d", ["-m", SMOL], ["-d", os.path.join(ROOT, "weights", "beagle-smollm2-135m.bin")], render,
                         asks, 40, system="You are terse.")
        interrupts(["-m", SMOL])
    else:
        skipped.append(f"SmolLM2 conversations and Ctrl-C: no model at {SMOL} (make model)")
    for s in skipped:
        print("SKIP:", s)
    checks, failures = counts()
    print(f"test_chat_cli: {checks} checks, {failures} failed")
    return 1 if failures else 77 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
