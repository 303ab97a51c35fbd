#!/usr/bin/env python3
# kill_when.py: runs a command and kills it with SIGKILL (as kill -9, no cleanup) once the files it
# writes show it got far enough: --files GLOB N (N files match) or --lines FILE N (FILE has N lines).
# The resume tests use it to stop `beagle datagen` / `beagle bench-sd` from outside mid-run.
# Exit status: the command's, as a shell reports it (137 when this killed it).
# Usage: kill_when.py (--files GLOB N | --lines FILE N) [--timeout S] -- CMD ARGS...
import argparse
import glob
import os
import signal
import subprocess
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--files", nargs=2, metavar=("GLOB", "N"))
ap.add_argument("--lines", nargs=2, metavar=("FILE", "N"))
ap.add_argument("--timeout", type=float, default=300)
ap.add_argument("cmd", nargs=argparse.REMAINDER)
a = ap.parse_args()
cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
if not cmd or (a.files is None) == (a.lines is None):
    ap.error("one of --files / --lines, then -- CMD")


def far_enough():
    if a.files:
        return len(glob.glob(a.files[0])) >= int(a.files[1])
    try:
        with open(a.lines[0], "rb") as f:
            return f.read().count(b"\n") >= int(a.lines[1])
    except OSError:
        return False


p = subprocess.Popen(cmd)
t_end = time.monotonic() + a.timeout
while p.poll() is None:
    if far_enough() or time.monotonic() > t_end:
        p.send_signal(signal.SIGKILL)
        p.wait()
        break
    time.sleep(0.001)
rc = p.returncode
sys.exit(128 - rc if rc < 0 else rc)
