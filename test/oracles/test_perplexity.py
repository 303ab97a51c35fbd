#!/usr/bin/env python3
"""test_perplexity.py: `beagle perplexity --json` on stories260K (F32 GGUF) against an independent float64
recomputation of llama-perplexity's method: the text's ids with BOS (the SentencePiece vocabulary wants
one), chunks of n_ctx with BOS in place of each chunk's first id, each chunk through scripts/ref_llama.py
(weights dequantised by the `gguf` package, float64 math) from position 0, NLL of the tokens at
positions n_ctx/2 + 1 .. n_ctx - 1 from float64 log-softmax, PPL = exp(mean NLL) and llama-perplexity's
standard error. Also the plain output's format ("[1]x,[2]y,..." and "Final estimate: PPL = X +/- Y").

Tolerance. stories260K's matmuls are f32, so Beagle's logits differ from float64 by f32 rounding only
(test_state_layers.py measures the states within 3e-7 of max |h|); the mean NLL (= log PPL) then differs
by about 1e-7 (measured 1.3e-8 .. 9.8e-8 over the cases below). We require |mean NLL - reference| <= 2e-5,
i.e. PPL within 2e-5 relative: 200x the measured error, and far below what a wrong method moves it by
(scoring the whole chunk instead of its second half: 0.2 .. 0.4; no BOS in place of each chunk's first
token: 0.02 .. 0.08).
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

root = os.environ.get("BEAGLE_ROOT", ".")
sys.path.insert(0, os.path.join(root, "scripts"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_llama import RefLlama, field  # noqa: E402
from checks import check, finish  # noqa: E402
import gguf  # noqa: E402

BIN = os.environ.get("BEAGLE_BIN", os.path.join(root, "build/beagle"))
MODEL = os.path.join(root, "data/models/stories260K.gguf")
NLL_TOL = 2e-5


def story_text():
    """The two sample stories of the model card (data/models/stories260K.md): text in the model's domain."""
    md = open(os.path.join(root, "data/models/stories260K.md"), encoding="utf-8").read()
    blocks = re.findall(r"```\n\$ \./run[^\n]*\n(.*?)```", md, re.S)
    assert len(blocks) == 2, "expected two ./run samples in stories260K.md"
    return "\n".join(b.strip() for b in blocks) + "\n"


def ref_perplexity(ref, ids, n_ctx, max_chunks, bos):
    first = n_ctx // 2
    n_chunk = len(ids) // n_ctx
    if max_chunks > 0:
        n_chunk = min(n_chunk, max_chunks)
    nll = []
    for c in range(n_chunk):
        chunk = list(ids[c * n_ctx:(c + 1) * n_ctx])
        target = chunk[:]
        chunk[0] = bos
        logits, _ = ref.forward(chunk)
        for p in range(first, n_ctx - 1):
            row = logits[p]
            mx = row.max()
            lse = mx + math.log(np.exp(row - mx).sum())
            nll.append(lse - row[target[p + 1]])
    nll = np.array(nll)
    mean = nll.mean()
    ppl = math.exp(mean)
    var = (nll * nll).mean() - mean * mean
    return {"ppl": ppl, "nll": mean, "stderr": math.sqrt(var / (len(nll) - 1)) * ppl, "chunks": n_chunk,
            "tokens_scored": len(nll)}


def run(args):
    return subprocess.run([BIN, "perplexity", "-m", MODEL, "-t", "2"] + args, capture_output=True, text=True)


def main():
    r = gguf.GGUFReader(MODEL)
    bos = field(r, "tokenizer.ggml.bos_token_id")
    ref = RefLlama(MODEL)
    with tempfile.TemporaryDirectory() as d:
        text = os.path.join(d, "stories.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write(story_text())
        tok = subprocess.run([BIN, "tokenize", "-m", MODEL, "-f", text, "--ids", "--no-bos", "--no-special"], capture_output=True,
                             text=True, check=True)
        ids = [bos] + [int(x) for x in tok.stdout.split()]  # the vocabulary adds BOS (SentencePiece "llama")
        print(f"text: {len(ids)} tokens with BOS")
        # (n_ctx, batch, chunks): one forward per chunk; forwards that straddle n_ctx/2; a chunk limit
        for n_ctx, batch, chunks in [(64, 64, -1), (64, 24, -1), (48, 7, 2), (100, 100, -1)]:
            what = f"-c {n_ctx} -b {batch} --chunks {chunks}"
            out = run(["-f", text, "-c", str(n_ctx), "-b", str(batch), "--chunks", str(chunks), "--json"])
            if not check(out.returncode == 0, f"{what}: exit {out.returncode}: {out.stderr[-400:]}"):
                continue
            got = json.loads(out.stdout)
            want = ref_perplexity(ref, ids, n_ctx, chunks, bos)
            dn = abs(got["nll"] - want["nll"])
            print(f"{what}: ppl {got['ppl']:.6f} vs reference {want['ppl']:.6f} (mean NLL diff {dn:.2e}); "
                  f"stderr {got['stderr']:.6f} vs {want['stderr']:.6f}; chunks {got['chunks']}, scored {got['tokens_scored']}")
            check(got["tokens"] == len(ids), f"{what}: {got['tokens']} tokens, reference {len(ids)}")
            check(got["chunks"] == want["chunks"], f"{what}: {got['chunks']} chunks, reference {want['chunks']}")
            check(got["tokens_scored"] == want["tokens_scored"],
                  f"{what}: {got['tokens_scored']} scored, reference {want['tokens_scored']}")
            check(got["bos_per_chunk"] is True, f"{what}: bos_per_chunk {got['bos_per_chunk']}")
            check(dn <= NLL_TOL, f"{what}: mean NLL {got['nll']:.9f} vs reference {want['nll']:.9f} (diff {dn:.2e} > {NLL_TOL})")
            check(abs(got["ppl"] - want["ppl"]) <= NLL_TOL * want["ppl"] + 1e-6, f"{what}: ppl {got['ppl']} vs {want['ppl']}")
            check(abs(got["stderr"] - want["stderr"]) <= 1e-3 * want["stderr"] + 1e-6,
                  f"{what}: stderr {got['stderr']} vs {want['stderr']}")
            check(got["n_ctx"] == n_ctx and got["tok_s"] > 0, f"{what}: n_ctx {got['n_ctx']}, tok_s {got['tok_s']}")

        # plain output: a running estimate per chunk, then llama-perplexity's final line
        out = run(["-f", text, "-c", "64"])
        want = ref_perplexity(ref, ids, 64, -1, bos)
        lines = out.stdout.strip().split("\n")
        check(out.returncode == 0 and len(lines) == 2, f"plain output: exit {out.returncode}, stdout {out.stdout!r}")
        est = re.findall(r"\[(\d+)\](\d+\.\d{4}),", lines[0])
        check([int(i) for i, _ in est] == list(range(1, want["chunks"] + 1)), f"running estimates: {lines[0]!r}")
        m = re.fullmatch(r"Final estimate: PPL = (\d+\.\d{4}) \+/- (\d+\.\d{5})", lines[-1])
        if check(m is not None, f"final line: {lines[-1]!r}"):
            check(abs(float(m.group(1)) - want["ppl"]) <= 1e-4 + NLL_TOL * want["ppl"],
                  f"final PPL {m.group(1)} vs reference {want['ppl']:.6f}")
            check(est and est[-1][1] == m.group(1), f"last running estimate {est[-1][1] if est else None} vs final {m.group(1)}")
    finish("test_perplexity")


if __name__ == "__main__":
    main()
