#!/usr/bin/env python3
"""golden.py: prints one golden output block of data/models/stories260K.md (karpathy's
run.c outputs, an independent reference): the block that follows the command line containing ARG."""
import os, sys

md = os.path.join(os.environ.get("BEAGLE_ROOT", "."), "data/models/stories260K.md")
needle = sys.argv[1]
lines = open(md, encoding="utf-8").read().split("\n")
for i, l in enumerate(lines):
    if l.startswith("$ ./run") and needle in l:
        out = []
        for m in lines[i + 1:]:
            if m.startswith("```"):
                break
            out.append(m)
        sys.stdout.write("\n".join(out) + "\n")
        sys.exit(0)
sys.exit("golden.py: no run.c command containing %r in %s" % (needle, md))
