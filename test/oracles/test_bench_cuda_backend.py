#!/usr/bin/env python3
# test_bench_cuda_backend.py: `beagle bench` on the CUDA backend (build/beagle-cuda-emu, the emulated CUDA
# build; on a GPU scripts/gpu_check.sh runs build/beagle-cuda the same way): one path named "cuda", the
# device's decode / prefill speed and verify cost T = 1..16+, no host roofline or CPU-time curve (they
# would describe the host, not the device). stories260K, so the emulator takes seconds.
import json, os, subprocess, tempfile

from checks import check, finish

BIN = os.environ.get("BEAGLE_BIN", "build/beagle")
DATA = os.path.join(os.environ.get("BEAGLE_ROOT", "."), "data")
M = ["-m", f"{DATA}/models/stories260K.bin", "-z", f"{DATA}/models/tok512.bin"]

with tempfile.TemporaryDirectory() as tmp:
    # the CUDA backend (the emulated CUDA build): one path named "cuda", no CPU roofline or CPU-time curve
    emu = os.path.join(os.path.dirname(BIN), "beagle-cuda-emu")
    r = subprocess.run([emu, "bench"] + M + ["--prompt-tokens", "8", "--gen-tokens", "4", "--reps", "1", "-o", f"{tmp}/c.json"],
                       capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, f"{emu} bench failed ({r.returncode}): {r.stderr[-600:]}")
    if r.returncode == 0:
        c = json.load(open(f"{tmp}/c.json"))
        paths = c.get("paths", [])
        check(c.get("backend") == "cuda" and [p.get("isa") for p in paths] == ["cuda"] and c.get("isa") == "cuda",
              f"cuda bench: backend {c.get('backend')}, paths {[p.get('isa') for p in paths]}")
        check(all(k not in c and (not paths or k not in paths[0])
                  for k in ("roofline_fraction", "bandwidth_gb_s", "verify_cost_1t_cpu", "decode_tok_s_1t")),
              f"cuda bench: no host roofline / CPU-time fields ({sorted(c)})")
        vc = c.get("verify_cost", [])
        check([v["T"] for v in vc][:16] == list(range(1, 17)) and vc[0]["cost"] == 1 and c.get("decode_tok_s", 0) > 0,
              f"cuda bench: verify_cost {[v['T'] for v in vc]}, decode {c.get('decode_tok_s')}")
finish("test_bench_cuda_backend")
