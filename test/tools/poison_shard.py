#!/usr/bin/env python3
# poison_shard.py: writes NaN into the true states of one sequence of a `beagle datagen` shard (the first
# element of each of its state rows, f16 0x7e00) and fixes the shard's CRC, in place. The training tests
# use it to plant a NaN in the data: `beagle train` must stop at the step that reads it. Layout: dataset.h.
# Usage: poison_shard.py SHARD SEQ (SEQ: the sequence's index in this shard)
import struct
import sys
import zlib

path, seq = sys.argv[1], int(sys.argv[2])
b = bytearray(open(path, "rb").read())
magic = bytes(b[:8])
assert magic in (b"BEAGLEDS", b"BEAGLEDX"), f"{path}: not a datagen shard"
dim, _vocab, n_seqs, n_tokens = struct.unpack_from("<IIIQ", b, 12)
table = 48 if magic == b"BEAGLEDS" else 96
assert 0 <= seq < n_seqs, f"{path}: sequence {seq} of {n_seqs}"
first, length, _n_prompt = struct.unpack_from("<QII", b, table + 16 * seq)
align = lambda x: (x + 63) // 64 * 64
states = align(align(table + 16 * n_seqs) + 4 * n_tokens)
for t in range(first, first + length):
    struct.pack_into("<H", b, states + 2 * t * dim, 0x7E00)
struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])) & 0xFFFFFFFF)
open(path, "wb").write(bytes(b))
