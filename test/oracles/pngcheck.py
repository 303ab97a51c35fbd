# pngcheck.py: an independent PNG reader for the tests (not stb): checks the signature, every chunk's
# CRC, IHDR 8-bit RGB, that the IDAT stream inflates to height x (1 + 3 x width) bytes with valid filter
# bytes; returns (width, height, raw scanlines). Raises AssertionError on any defect.
import struct
import zlib


def png_pixels(path):
    b = open(path, "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n", "PNG signature"
    off, idat, ihdr, names = 8, b"", None, []
    while off < len(b):
        (n,) = struct.unpack(">I", b[off:off + 4])
        typ = b[off + 4:off + 8]
        data = b[off + 8:off + 8 + n]
        (crc,) = struct.unpack(">I", b[off + 8 + n:off + 12 + n])
        assert zlib.crc32(typ + data) & 0xFFFFFFFF == crc, f"CRC of chunk {typ}"
        names.append(typ)
        if typ == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", data)
        elif typ == b"IDAT":
            idat += data
        off += 12 + n
    assert names[0] == b"IHDR" and names[-1] == b"IEND", f"chunk order {names}"
    w, h, depth, ctype = ihdr[:4]
    assert depth == 8 and ctype == 2, f"expected 8-bit RGB, got depth {depth} color type {ctype}"
    raw = zlib.decompress(idat)
    assert len(raw) == h * (1 + 3 * w), f"IDAT inflates to {len(raw)} bytes, want {h * (1 + 3 * w)}"
    assert all(raw[r * (1 + 3 * w)] <= 4 for r in range(h)), "bad filter byte"
    return w, h, raw
