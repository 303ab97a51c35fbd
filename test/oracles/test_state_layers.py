#!/usr/bin/env python3
"""test_state_layers.py: the wide state rows of Llama::set_state_layers (the last layer's output, then the
residual stream after each chosen layer: what an EAGLE-3-style draft fuses) from Beagle's CPU backend
against an independent NumPy forward
(scripts/ref_llama.py: weights dequantised by the `gguf` package, float64 math), on stories260K (F32
GGUF) and SmolLM2-135M-Instruct (Q4_1); and bad layer lists are refused.

Tolerances. stories260K's matmuls are f32: the states differ from float64 by f32 rounding only, measured
max |diff| <= 3e-7 of max |h|; we require 1e-5. SmolLM2's quantized matmuls quantize each activation
row to int16 (see test_smollm2_reference.py), measured rms |diff| / rms |h| <= 3.5e-4 at layers 2, 22, 27
and 29; we require 1e-3 per layer. A layer or block swapped by the extras' layout is off by O(1).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

root = os.environ.get("BEAGLE_ROOT", ".")
sys.path.insert(0, os.path.join(root, "scripts"))
from ref_llama import RefLlama  # noqa: E402

BIN = os.environ.get("BEAGLE_BIN", os.path.join(root, "build/beagle"))
TOOL = os.path.join(os.path.dirname(BIN), "test", "tool_logits")
DATA = os.path.join(root, "data")
CASES = [
    # model, ids, layers, (max |diff| / max |h|) bound or None, (rms diff / rms h) bound or None
    (os.path.join(DATA, "models/stories260K.gguf"), [1, 403, 407, 261, 378, 100, 45, 300, 12, 99] * 7,
     [0, 2, 4], 1e-5, None),
    (os.path.join(root, "weights/SmolLM2-135M-Instruct.Q4_1.gguf"),
     [1, 9690, 314, 253, 1345, 2914, 28, 416, 260, 1456, 30, 2, 198, 1, 520, 9531, 198], [2, 22, 27, 29], None, 1e-3),
]


def run_tool(model, ids, layers):
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([TOOL, model, ",".join(map(str, ids)), os.path.join(d, "logits"), "--states",
                              ",".join(map(str, layers)), os.path.join(d, "states")], capture_output=True, text=True)
        if out.returncode != 0:
            return out, None
        return out, np.fromfile(os.path.join(d, "states"), dtype=np.float32)


def main():
    failures = checks = 0
    for model, ids, layers, max_bound, rms_bound in CASES:
        if not os.path.exists(model):
            sys.exit("model missing: %s (run make model)" % model)
        ref = RefLlama(model)
        _, got = run_tool(model, ids, layers)
        if got is None:
            print("FAIL %s: tool_logits --states failed" % model)
            failures += 1
            continue
        got = got.reshape(len(ids), 1 + len(layers), ref.dim).astype(np.float64)
        last, want = ref.residuals(ids, layers)
        want["last"] = last
        for k, l in enumerate(["last"] + layers):
            d = got[:, k] - want[l]
            checks += 1
            if max_bound is not None:
                r = np.abs(d).max() / np.abs(want[l]).max()
                ok, what, bound = r <= max_bound, "max |diff| / max |h|", max_bound
            else:
                r = np.sqrt((d ** 2).mean() / (want[l] ** 2).mean())
                ok, what, bound = r <= rms_bound, "rms diff / rms h", rms_bound
            print("%s %s layer %s: %s %.3g (bound %g)" % ("ok  " if ok else "FAIL", os.path.basename(model), l, what, r, bound))
            failures += not ok
    # bad lists: not increasing, out of range; a clear error and a non-zero exit
    model = CASES[0][0]
    for bad, words in (([2, 1], "expected increasing layers"), ([5], "expected increasing layers of the target in [0, 5)")):
        out, _ = run_tool(model, [1, 2, 3], bad)
        checks += 1
        ok = out.returncode != 0 and words in out.stderr
        print("%s layers %s refused: exit %d, %s" % ("ok  " if ok else "FAIL", bad, out.returncode, out.stderr.strip()))
        failures += not ok
    print("%d checks, %d failed" % (checks, failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
