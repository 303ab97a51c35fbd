#!/usr/bin/env python3
# same_ckpt.py A B: exit 0 when two training checkpoints are equal in every byte but the text header's
# train_seconds line (wall-clock) and the CRC over it. Layout: src/train/checkpoint.cpp (header 24 bytes, the
# text header's length at 12). The training tests compare runs that must repeat each other's arithmetic.
import struct
import sys


def parts(path):
    b = open(path, "rb").read()
    n = struct.unpack_from("<I", b, 12)[0]
    text = [l for l in b[24:24 + n].decode().split("\n") if not l.startswith("train_seconds ")]
    return text, b[24 + n:-4]


sys.exit(0 if parts(sys.argv[1]) == parts(sys.argv[2]) else 1)
