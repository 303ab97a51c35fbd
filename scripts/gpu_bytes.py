#!/usr/bin/env python3
# gpu_bytes.py: a byte MODEL (not a measurement) of one target forward pass per CUDA kernel, and of the
# draft's training cross-attention: "must" (every operand once) vs "does" (what the kernels request from
# L2), with the tiling constants read from cuda/ and the launch sequence checked against the sources.
"""Prints the tables of docs/gpu-kernels.md (python3 scripts/gpu_bytes.py); --update-doc rewrites them in
place, --json prints the numbers, --old prints the tables as first published (b0d577d's kernels)."""
import argparse
import json
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DOC = "docs/gpu-kernels.md"

# Bytes per 32 weights of the GGUF block types the shapes use (cuda/gemm_quant.cu QBlock).
BLOCK_BYTES = {"Q8_0": 34, "Q4_1": 20}
F = 4  # fp32 activations and KV cache
GRAPH_TOKENS = 64  # src/model/llama.h kGraphTokens: forwards up to this many tokens are CUDA graphs
INT8_ACT = 1 + 8 / 32  # int8 x plus d and s (2 floats) per 32-block: bytes per column and token

SHAPES = {
    "smollm2": dict(title="SmolLM2-135M", L=30, D=576, H=9, Hk=3, hd=64, Fd=1536, V=49152, layer_dt="Q4_1",
                    head_dt="Q8_0", embd_dt="Q8_0", cache=1024, seq=512, digits=1),
    "7b": dict(title="7B shape", L=32, D=4096, H=32, Hk=8, hd=128, Fd=14336, V=32000, layer_dt="Q4_1",
               head_dt="Q8_0", embd_dt="Q8_0", cache=4096, seq=2048, digits=0),
}
TS = (1, 64)  # a decode step, a 64-token tree verify

# b0d577d's tiling (cuda/kernels.cuh at that commit): the dp4a GEMM covered 4 rows (one per warp) x 4 tokens
# per block, the tensor-core GEMM 64 rows x 64 tokens. Only --old and the "before" column use them.
OLD = dict(QGEMM_ROWS=4, QGEMM_TOKENS=4, QMMA_ROWS=64, QMMA_TOKENS=64)


def fail(msg):
    sys.exit(f"gpu_bytes.py: {msg}")


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def need(path, text, snippet, why):
    """The model assumes `snippet` is in `path`: fail loudly if the code changed under it."""
    if " ".join(snippet.split()) not in " ".join(text.split()):
        fail(f"{path} no longer contains `{snippet}` ({why}); update the model in scripts/gpu_bytes.py")


CONSTS = ["QGEMM_ROWS", "QGEMM_ROWS_MIN", "QGEMM_FILL_BLOCKS", "QGEMM_TOKENS", "QGEMM_BLOCK_TOKENS", "QGEMM_DP4A_MAX_T", "QGEMM_MATS", "QMMA_ROWS",
          "QMMA_TOKENS", "ATTN_BK", "ATTN_SPLIT",
          "ATTN_SPLIT_MAX_T", "ATTN_QT_WARPS", "ATTN_QT_TPW", "XATTN_BKEYS"]


def parse_sources():
    """The tiling constants (cuda/kernels.cuh, cuda/attn_split.h) and the launches that use them, checked in the
    sources."""
    hdr = read("cuda/kernels.cuh") + "\n" + read("cuda/attn_split.h")
    c = {}
    for decl in re.findall(r"^\s*constexpr\s+int\s+([^;]+);", hdr, re.M):
        for part in decl.split(","):
            m = re.fullmatch(r"\s*([A-Z_0-9]+)\s*=\s*(\d+)\s*", part)
            if not m:
                fail(f"cuda/kernels.cuh: cannot parse `constexpr int {decl}` (part `{part.strip()}`)")
            c[m.group(1)] = int(m.group(2))
    for name in CONSTS:
        if name not in c:
            fail(f"cuda/kernels.cuh: constant {name} not found")
    # the grids the GEMM formulas assume (x re-read per row block, W per token block)
    gq = read("cuda/gemm_quant.cu")
    need("cuda/kernels.cuh", hdr, "int dp4a_max_t = QGEMM_DP4A_MAX_T;", "the dp4a kernels for T <= QGEMM_DP4A_MAX_T by default")
    need("cuda/kernels.cuh", hdr, "int dp4a_rows = 0;", "dp4a rows per block by the grid rule by default")
    need("cuda/gemm_quant.cu", gq, "if (T <= c.dp4a_max_t) { // the kernel quantizes x itself",
         "T <= QGEMM_DP4A_MAX_T: the dp4a kernel reads f32 x, no quantize launch")
    need("cuda/kernels.cuh", hdr, "int dp4a_tokens = 0;", "16 tokens per dp4a block above 4 by default")
    need("cuda/gemm_quant.cu", gq, "const int bt = T > QGEMM_TOKENS && c.dp4a_tokens != QGEMM_TOKENS ? QGEMM_BLOCK_TOKENS : "
         "QGEMM_TOKENS;", "dp4a tokens per block: 4 at T <= 4 (one token block either way), else 16")
    need("cuda/gemm_quant.cu", gq, "const int R = c.dp4a_rows ? c.dp4a_rows : qgemm_dp4a_rows(max_rows, n, T, bt);",
         "dp4a rows per block")
    need("cuda/gemm_quant.cu", gq, "for (int R = QGEMM_ROWS; R > QGEMM_ROWS_MIN; R /= 2) if ((long long)cdiv(max_rows, R) "
         "* n * cdiv(T, block_tokens) >= QGEMM_FILL_BLOCKS) return R; return QGEMM_ROWS_MIN;",
         "qgemm_dp4a_rows: the most rows whose grid has QGEMM_FILL_BLOCKS blocks, else QGEMM_ROWS_MIN (dp4a_rows below)")
    need("cuda/gemm_quant.cu", gq, "dim3 grid(cdiv(max_rows, R), cdiv(T, bt), n);", "dp4a grid")
    need("cuda/gemm_quant.cu", gq, "if (bt == QGEMM_TOKENS) KRUN_DP4A(); // one group of tokens a block: a round of "
         "pairs at a time else KRUN_DP4A(_t16);", "the _t16 kernels above 4 tokens")
    need("cuda/gemm_quant.cu", gq, "KRUN(kr, cdiv(T * nb, 8), 256, 0, quantize_q8_kernel, x, xq, xd, xs, T, cols);",
         "one quantize launch per matmul launch above QGEMM_TOKENS")
    need("cuda/gemm_quant.cu", gq, "dim3 grid(cdiv(max_rows, QMMA_ROWS), cdiv(T, QMMA_TOKENS), n);", "tensor-core grid")
    # attention: attn_tiling's rule (re-implemented in attn_tiling below) and the two launches
    need("cuda/kernels.cuh", hdr, "int nq = max_tasks / group < T ? max_tasks / group : T;", "attn_tiling: nq start")
    need("cuda/kernels.cuh", hdr, "L.warps = nq * group < ATTN_QT_WARPS ? nq * group : ATTN_QT_WARPS;", "attn_tiling")
    need("cuda/kernels.cuh", hdr, "L.smem = (size_t)(2 * ATTN_BK * (head_dim + 1) + nq * group * head_dim + "
         "L.warps * ATTN_BK) * sizeof(float);", "attn_tiling: shared memory")
    need("cuda/kernels.cuh", hdr, "if (L.smem <= 48 * 1024 || nq == 1) return L;", "attn_tiling: the 48 KiB limit")
    need("cuda/kernels.cuh", hdr, "return (n_past + T + attn_split() - 1) / attn_split();", "attn_slices")
    at = read("cuda/attention.cu")
    need("cuda/attention.cu", at, "g_attn_split_max_t = env_positive(\"BEAGLE_CUDA_ATTN_SPLIT_MAX_T\", ATTN_SPLIT_MAX_T);",
         "attn_split_max_t() is ATTN_SPLIT_MAX_T unless BEAGLE_CUDA_ATTN_SPLIT_MAX_T is set")
    need("cuda/attention.cu", at, "g_attn_split = v >= ATTN_BK && v % ATTN_BK == 0 ? v : ATTN_SPLIT;",
         "attn_split() is ATTN_SPLIT unless BEAGLE_CUDA_ATTN_SPLIT is set")
    need("cuda/attention.cu", at, "const bool split = a.partial && !a.kv_start && a.T <= attn_split_max_t() && "
         "n_slices > 1;", "split-KV for small T")
    need("cuda/attention.cu", at, "dim3(cdiv(a.T, L.nq), a.n_kv_heads, split ? n_slices : 1), 32 * L.warps, L.smem, "
         "attn_fwd_tiled_kernel", "query tiles x key slices grid")
    need("cuda/attention.cu", at, "if (split) KRUN(kr, dim3(a.T, a.n_heads), 32, 0, attn_combine_kernel, a, n_slices);",
         "the combine after a split launch")
    need("cuda/attention.cu", at, "return attn_partials_bytes(T, n_heads, head_dim, n_past, attn_split());",
         "split partials: attn_split.h's formula at the process's slice length")
    need("cuda/attn_split.h", read("cuda/attn_split.h"),
         "return (size_t)T * n_heads * slices * (head_dim + 3) * sizeof(float);",
         "split partials: hd + 3 floats per (query, head, slice)")
    xa = read("cuda/xattn.cu")
    need("cuda/xattn.cu", xa, "dim3(cdiv(a.n_q, L.nq), a.n_kv_heads), 32 * L.warps, L.smem, xattn_fwd_kernel",
         "query-tiled cross-attention forward")
    need("cuda/xattn.cu", xa, "dim3(a.n_q, a.n_kv_heads), 32 * warps, smem, xattn_bwd_dq_kernel", "dq: block per query")
    need("cuda/xattn.cu", xa, "a.tiles0 = set0 ? cdiv(a.n0, XATTN_BKEYS) : 0;", "dk/dv: XATTN_BKEYS keys per block")
    # the op sequence of a target forward (src/model/llama.cpp Llama::run and Llama::head)
    ll = read("src/model/llama.cpp")
    expect = {
        # the three adds are Qwen2's Q/K/V biases (`if (c.qkv_bias)`); the Llama shapes modelled here have none
        "run": ["embed", "rmsnorm", "matmul_n", "add", "add", "add", "rope_qk", "scatter_rows", "scatter_rows", "attention", "matmul",
                "add_rmsnorm", "matmul_n", "swiglu_matmul", "add_rmsnorm", "add"],
        "head": ["rmsnorm", "matmul"],
    }
    for fn, ops in expect.items():
        m = re.search(r"^void Llama::%s\(.*?^}" % fn, ll, re.M | re.S)
        if not m:
            fail(f"src/model/llama.cpp: Llama::{fn} not found")
        got = re.findall(r"ops_\.(\w+)\(", m.group(0))
        if got != ops:
            fail(f"src/model/llama.cpp Llama::{fn} calls {got}, the model counts {ops}: update scripts/gpu_bytes.py")
    need("src/model/llama.cpp", ll, "ops_.matmul_n(3, qkv, xb_, wqkv, T);", "Q/K/V in one launch")
    need("src/model/llama.cpp", ll, "ops_.matmul_n(3, qkv, xb_, wqkv, T);\n        if (c.qkv_bias) {",
         "Q/K/V biases only where the model has them")
    need("src/model/llama.cpp", ll, "ops_.matmul_n(2, gate_up, xb_, wgu, T);", "gate/up in one launch")
    # swiglu_matmul is counted as its ops.h default, a swiglu launch then a matmul (the CUDA backend keeps it)
    need("src/backend/ops.h", read("src/backend/ops.h"),
         "swiglu(h, gate, up, (size_t)T * W.cols);\n        matmul(y, h, W, T);", "swiglu_matmul = swiglu, then matmul")
    if "swiglu_matmul" in read("src/backend/gpu/cuda_ops.h"):
        fail("src/backend/gpu/cuda_ops.h overrides swiglu_matmul: the model counts a swiglu and a matmul launch")
    need("src/model/llama.cpp", ll, "if (T <= kGraphTokens && words <= kGraphMaskWords && cur_ < kGraphSeqs && state_layers_.empty() &&",
         "T <= kGraphTokens: the graph-captured forward (new K/V rows scattered)")
    need("src/model/llama.h", read("src/model/llama.h"), "static constexpr int kGraphTokens = 64,",
         "forwards of up to 64 tokens are graphs")
    return {k: c[k] for k in CONSTS}


def cdiv(a, b):
    return -(-a // b)


def attn_tiling(c, T, H, Hk, hd):
    """cuda/kernels.cuh attn_tiling: the largest query tile (<= 32 tasks, <= T queries) in 48 KiB."""
    group, max_tasks = H // Hk, c["ATTN_QT_WARPS"] * c["ATTN_QT_TPW"]
    nq = max(1, min(max_tasks // group, T))
    while True:
        warps = min(nq * group, c["ATTN_QT_WARPS"])
        smem = (2 * c["ATTN_BK"] * (hd + 1) + nq * group * hd + warps * c["ATTN_BK"]) * 4
        if smem <= 48 * 1024 or nq == 1:
            return nq
        nq -= 1


def wbytes(rows, cols, dt):
    return rows * cols // 32 * BLOCK_BYTES[dt]


class Table:
    """Rows of (kernel label, must, does) per T, in MB; `notes` per T for the label."""

    def __init__(self):
        self.rows = {}  # key -> {"label":..., T: (must, does)}
        self.order = []
        self.notes = {}  # key -> {T: a note on how the kernel runs at that T}
        self.launches = []  # (kernel name, blocks per launch or None, launches)
        self.weights = [0.0, 0.0]  # the GEMMs' weight bytes: stored, requested
        self.cache = [0.0, 0.0]  # attention's K/V bytes: stored, requested

    def launch(self, kernel, blocks=None, count=1):
        """count launches of `kernel`, each of `blocks` thread blocks (None: not modelled)."""
        self.launches.append((kernel, blocks, count))

    def add(self, key, label, T, must, does):
        if key not in self.rows:
            self.rows[key] = {"label": label}
            self.order.append(key)
        m, d = self.rows[key].get(T, (0.0, 0.0))
        self.rows[key][T] = (m + must / 1e6, d + does / 1e6)


def dp4a_rows(c, mats, T):
    """Rows per block of the dp4a GEMM (cuda/gemm_quant.cu qgemm_dp4a_rows) for these matrices (one launch)."""
    R = c["QGEMM_ROWS"]
    while R > c["QGEMM_ROWS_MIN"]:
        if cdiv(max(mats), R) * len(mats) * cdiv(T, c["QGEMM_BLOCK_TOKENS"]) >= c["QGEMM_FILL_BLOCKS"]:
            return R
        R //= 2
    return c["QGEMM_ROWS_MIN"]


def mma_rows(c, mats):
    """Rows per block of the tensor-core GEMM launch_matmul_q picks for these matrices (one launch)."""
    return c["QMMA_ROWS"]


def gemm(tab, key, label, T, mats, cols, dt, c):
    """One launch_matmul_q: mats = row counts of its matrices (same x, same cols)."""
    small = T <= c["QGEMM_DP4A_MAX_T"]
    W = sum(wbytes(r, cols, dt) for r in mats)
    y = sum(T * r * F for r in mats)
    xb = T * cols * (F if small else INT8_ACT)  # the input as the launch reads it: f32, or int8 with d, s
    kname = dt.lower()
    if small:
        rb = dp4a_rows(c, mats, T)
        reads = cdiv(T, c["QGEMM_BLOCK_TOKENS"])
        does = reads * W + sum(cdiv(r, rb) for r in mats) * xb + y
        t16 = "_t16" if T > c["QGEMM_TOKENS"] else ""  # 16 tokens a block, the weights held for 4 groups
        tab.launch("gemm_%s%s%s_kernel" % (kname, "" if rb == c["QGEMM_ROWS"] else "_r%d" % rb, t16),
                   cdiv(max(mats), rb) * cdiv(T, c["QGEMM_BLOCK_TOKENS"]) * len(mats))
    else:
        rb = mma_rows(c, mats)
        reads = cdiv(T, c["QMMA_TOKENS"])
        does = reads * W + sum(cdiv(r, rb) for r in mats) * xb + y
        tab.launch("quantize_q8_kernel")
        tab.launch("gemm_%s_mma_kernel" % kname, cdiv(max(mats), rb) * cdiv(T, c["QMMA_TOKENS"]) * len(mats))
    tab.weights[0] += W
    tab.weights[1] += reads * W
    blocks = tab.notes.setdefault(key, {}).setdefault(T, [])
    if rb not in blocks:
        blocks.append(rb)
    tab.add(key, label, T, W + xb + y, does)
    if not small:
        q = T * cols * (F + INT8_ACT)  # quantize_q8_kernel: f32 in, int8 + d, s out
        tab.add("quantize", "`quantize_q8_kernel` (T > %d: one per GEMM launch)" % c["QGEMM_DP4A_MAX_T"], T, q, q)


def forward(s, T, c, head_T=None):
    """Today's kernels of one target forward (Llama::run over T rows, Llama::head over head_T rows: all T in a
    verify pass, the default; 1 in a prefill)."""
    L, D, H, Hk, hd, Fd = s["L"], s["D"], s["H"], s["Hk"], s["hd"], s["Fd"]
    qd, kv = H * hd, Hk * hd
    n = s["cache"] + T  # keys a query of the pass can see, at most
    tab = Table()
    for _ in range(L):
        gemm(tab, "gemm", "quantized GEMMs (%s; 4 launches per layer: Q/K/V, o, gate/up, down)" % s["layer_dt"], T,
             [qd, kv, kv], D, s["layer_dt"], c)
        gemm(tab, "gemm", None, T, [D], qd, s["layer_dt"], c)
        gemm(tab, "gemm", None, T, [Fd, Fd], D, s["layer_dt"], c)
        gemm(tab, "gemm", None, T, [D], Fd, s["layer_dt"], c)
    gemm(tab, "head", "LM head (%s, %d x %d)" % (s["head_dt"], s["V"], D), head_T or T, [s["V"]], D, s["head_dt"], c)
    for key in ("gemm", "head"):  # the row blocks used (dp4a at T <= QGEMM_DP4A_MAX_T, else tensor cores), as notes
        if T in tab.notes.get(key, {}):
            tab.notes[key][T] = "T = %d: %s-row blocks" % (T, " and ".join(map(str, sorted(tab.notes[key][T]))))
    slices = cdiv(n, c["ATTN_SPLIT"])
    kvb, qb = n * kv * F * 2, T * qd * F
    nq = attn_tiling(c, T, H, Hk, hd)
    passes = cdiv(T, nq)  # K/V once per query tile, split or not (a tree's new rows: see the notes above)
    if T <= c["ATTN_SPLIT_MAX_T"] and slices > 1:  # split-KV: q once per slice, partials written and read
        tab.notes["attn"] = {T: "T = %d: split-KV, %d query tiles of %d x %d slices" % (T, passes, nq, slices)}
        does = passes * kvb + qb * slices + 2 * T * H * slices * (hd + 3) * F + qb
        tab.launch("attn_fwd_tiled_kernel", passes * Hk * slices, L)
        tab.launch("attn_combine_kernel", T * H, L)
    else:
        tab.notes["attn"] = {T: "T = %d: %d query tiles of %d" % (T, passes, nq)}
        does = passes * kvb + 2 * qb
        tab.launch("attn_fwd_tiled_kernel", passes * Hk, L)
    tab.cache[0] += L * kvb
    tab.cache[1] += L * passes * kvb
    tab.launch("embed_kernel")
    tab.launch("rmsnorm_fwd_kernel", None, 2)
    tab.launch("rope_kernel", None, L)
    tab.launch("add_rmsnorm_kernel", None, 2 * L - 1)
    tab.launch("add_kernel")
    tab.launch("swiglu_fwd_kernel", None, L)
    if T <= GRAPH_TOKENS:  # the K/V scatters of a graph-captured forward
        tab.launch("rows_scatter_kernel", None, 2 * L)
    tab.add("attn", "attention", T, L * (kvb + 2 * qb), L * does)
    act = T * D * F
    tab.add("rmsnorm", "`rmsnorm_fwd_kernel` (2: layer 0, LM head)", T, 2 * (2 * act + D * F), 2 * 3 * act)
    tab.add("add_rmsnorm", "`add_rmsnorm_kernel` (2 L - 1)", T, (2 * L - 1) * (4 * act + D * F), (2 * L - 1) * 5 * act)
    tab.add("add", "`add_kernel` (1: the last layer)", T, 3 * act, 3 * act)
    sw = L * 3 * T * Fd * F
    tab.add("swiglu", "`swiglu_fwd_kernel`", T, sw, sw)
    rope = L * 2 * T * (qd + kv) * F
    tab.add("rope", "`rope_kernel` (q and k in one launch)", T, rope, rope)
    if T <= GRAPH_TOKENS:  # a graph-captured forward writes the new K/V rows through a staged row list
        sc = L * 2 * 2 * T * kv * F
        tab.add("scatter", "`rows_scatter_kernel` (T <= 64, a graph: new K and V rows)", T, sc, sc)
    emb = T * (wbytes(1, D, s["embd_dt"]) + D * F)
    tab.add("embed", "`embed_kernel` (%s table)" % s["embd_dt"], T, emb, emb)
    return tab


def old_forward(s, T, c, before):
    """The kernels as docs/gpu-kernels.md first counted them (b0d577d): 7 matmuls per layer, each after its own
    quantize launch, 4-row dp4a blocks; before=True: its "before" column (the 4-token GEMM at every T, one
    block per query in attention)."""
    L, D, H, Hk, hd, Fd = s["L"], s["D"], s["H"], s["Hk"], s["hd"], s["Fd"]
    qd, kv = H * hd, Hk * hd
    n = s["cache"] + T
    dp4a = before or T <= OLD["QGEMM_TOKENS"]
    tab = Table()

    def gemm_old(key, label, rows, cols, dt):  # one matmul: W, int8 x, y
        W, xb, y = wbytes(rows, cols, dt), T * cols * INT8_ACT, T * rows * F
        if dp4a:
            does = cdiv(T, OLD["QGEMM_TOKENS"]) * W + cdiv(rows, OLD["QGEMM_ROWS"]) * xb + y
        else:
            does = cdiv(T, OLD["QMMA_TOKENS"]) * W + cdiv(rows, OLD["QMMA_ROWS"]) * xb + y
        tab.add(key, label, T, W + xb + y, does)

    mats = [(qd, D), (kv, D), (kv, D), (D, qd), (Fd, D), (Fd, D), (D, Fd)]
    for _ in range(L):
        for rows, cols in mats:
            gemm_old("gemm", "quantized GEMMs (7 per layer)", rows, cols, s["layer_dt"])
    gemm_old("head", "LM head", s["V"], D, s["head_dt"])
    slices = cdiv(n, c["ATTN_SPLIT"])
    kvb, qb = n * kv * F * 2, T * qd * F
    if before:
        does = T * kvb + 2 * qb
    elif T <= c["ATTN_SPLIT_MAX_T"] and slices > 1:
        does = T * kvb + 2 * qb + 2 * T * H * slices * (hd + 3) * F
    else:
        does = cdiv(T, attn_tiling(c, T, H, Hk, hd)) * kvb + 2 * qb
    tab.add("attn", "attention", T, L * (kvb + 2 * qb), L * does)
    tab.add("quantize", "`quantize_q8_kernel`", T, L * T * (3 * D + Fd) * (F + INT8_ACT),
            L * T * sum(cols for _, cols in mats) * (F + INT8_ACT))
    act = T * D * F
    tab.add("rmsnorm", "`rmsnorm_fwd_kernel`", T, (2 * L + 1) * (2 * act + D * F), (2 * L + 1) * 3 * act)
    tab.add("add", "`add_kernel`", T, 2 * L * 3 * act, 2 * L * 3 * act)
    tab.add("swiglu", "`swiglu_fwd_kernel`", T, L * 3 * T * Fd * F, L * 3 * T * Fd * F)
    tab.add("rope", "`rope_kernel`", T, L * 2 * T * (qd + kv) * F, L * 2 * T * (qd + kv) * F)
    emb = T * (wbytes(1, D, s["embd_dt"]) + D * F)  # in b0d577d's totals, not in its rows
    tab.add("embed", "`embed_kernel`", T, emb, emb)
    return tab


def xattn(s, c):
    """The draft's cross-attention in training: n_q = n = the sequence (one key set, no mask: an upper bound).
    (key, must, does) per kernel."""
    H, Hk, hd = s["H"], s["Hk"], s["hd"]
    nq_, n = s["seq"], s["seq"]
    qb, kvb, lse = nq_ * H * hd * F, n * Hk * hd * F * 2, nq_ * H * F
    tile = attn_tiling(c, nq_, H, Hk, hd)
    dkdv_blocks = cdiv(n, c["XATTN_BKEYS"]) * Hk
    return [  # q, out, lse / q, dout, o, dq, lse, D / q, dout, lse, D staged per block; K, V read, dK, dV read + written
        ("fwd", 2 * qb + lse + kvb, cdiv(nq_, tile) * kvb + 2 * qb + lse),
        ("fwd_before", 2 * qb + lse + kvb, nq_ * kvb + 2 * qb + lse),
        ("dq", 4 * qb + 2 * lse + kvb, nq_ * kvb + 4 * qb + 2 * lse),
        ("dkdv", 2 * qb + 2 * lse + 3 * kvb, dkdv_blocks * nq_ * (H // Hk) * (2 * hd + 2) * F + 3 * kvb),
    ]


def xattn_labels(c):
    tiles = [attn_tiling(c, s["seq"], s["H"], s["Hk"], s["hd"]) for s in SHAPES.values()]
    return {
        "fwd": "`xattn_fwd_kernel`, query-tiled (%s queries x the group per block)" % " / ".join(map(str, tiles)),
        "fwd_before": "`xattn_fwd_kernel`, before (block per query)",
        "dq": "`xattn_bwd_dq_kernel` (block per query: K, V once per query)",
        "dkdv": "`xattn_bwd_dkdv_kernel` (%d keys per block; k, v, dk, dv in registers, query tiles staged)"
                % c["XATTN_BKEYS"],
    }


def shape_forward(spec, c, flag):
    """One forward of a shape given as "NAME[,KEY=VALUE...]:T[:HEAD_T]" (KEY: a SHAPES field; numbers or a
    block type for *_dt): its Table and T."""
    parts = spec.split(":")
    if len(parts) not in (2, 3):
        fail(f"{flag} {spec}: expected SHAPE:T[:HEAD_T]")
    name, *over = parts[0].split(",")
    if name not in SHAPES:
        fail(f"{flag} {spec}: shape {name} is not one of {', '.join(SHAPES)}")
    s = dict(SHAPES[name])
    for kv in over:
        k, _, v = kv.partition("=")
        if k not in s:
            fail(f"{flag} {spec}: {k} is not a field of a shape ({', '.join(s)})")
        s[k] = v if k.endswith("_dt") else int(v)
    T = int(parts[1])
    return forward(s, T, c, int(parts[2]) if len(parts) == 3 else None), T


def launches(spec, c):
    """--launches: {kernel: {"launches": n, "fewest_blocks": b or None}} of one forward (shape_forward)."""
    tab, _ = shape_forward(spec, c, "--launches")
    out = {}
    for k, b, n in tab.launches:
        o = out.setdefault(k, {"launches": 0, "fewest_blocks": b})
        o["launches"] += n
        if b is not None and (o["fewest_blocks"] is None or b < o["fewest_blocks"]):
            o["fewest_blocks"] = b
    return out


def row_bytes(spec, c):
    """--bytes: {row: {"label": ..., "must": bytes, "does": bytes}} of one forward (shape_forward), the rows of
    the tables above (scripts/ncu_bytes.py sets ncu's DRAM bytes beside them)."""
    tab, _ = shape_forward(spec, c, "--bytes")
    out = {}
    for k in tab.order:  # a row's entries by T (the LM head's under HEAD_T)
        md = [v for t, v in tab.rows[k].items() if t != "label"]
        out[k] = {"label": tab.rows[k]["label"], "must": round(sum(m for m, _ in md) * 1e6),
                  "does": round(sum(d for _, d in md) * 1e6)}
    return out


def fmt(v, digits):
    if 0 < v < 0.05:
        return "< 0.1"
    if digits == 0 and v < 10:
        digits = 1
    return f"{v:,.{digits}f}"


ORDER = ["gemm", "head", "quantize", "attn", "rmsnorm", "add_rmsnorm", "add", "swiglu", "rope", "scatter", "embed"]


def model(c):
    out = {}
    for key, s in SHAPES.items():
        now = {T: forward(s, T, c) for T in TS}
        before = old_forward(s, 64, c, True)
        rows = []
        for k in sorted(set(now[1].order) | set(now[64].order), key=ORDER.index):
            r = {"kernel": k, "label": (now[1].rows.get(k) or now[64].rows[k])["label"]}
            notes = [now[T].notes[k][T] for T in TS if k in now[T].notes]
            if notes:
                r["label"] += " (%s)" % "; ".join(notes)
            for T in TS:
                r[f"must_T{T}"], r[f"does_T{T}"] = now[T].rows.get(k, {}).get(T, (0.0, 0.0))
            b = before.rows.get(k)
            r["before_T64"] = b[64][1] if b else None
            rows.append(r)
        tot = {"kernel": "total", "label": "total"}
        for f in ["must_T1", "does_T1", "must_T64", "does_T64"]:
            tot[f] = sum(r[f] for r in rows)
        tot["before_T64"] = sum(v[64][1] for v in before.rows.values())
        rows.append(tot)
        out[key] = rows
    out["constants"] = ", ".join("%s = %d" % (k, c[k]) for k in CONSTS)
    out["xattn"] = {key: [{"kernel": lab, "must": m / 1e6, "does": d / 1e6} for lab, m, d in xattn(s, c)]
                    for key, s in SHAPES.items()}
    return out


TS_REGIME = (1, 2, 4, 8, 16, 32, 64)  # a decode step and the verify passes of chains and trees
SMS = 132  # an H100 SXM's streaming multiprocessors: a grid of fewer blocks leaves SMs idle (under one wave)


def regime(c):
    """Per shape and T: the GEMMs' weight reads (how many times the weights are requested), the pass's requested
    bytes over its compulsory ones, attention's passes over the cache, the kernels launched (the graph-free count;
    sampling not included), the GEMM launches and the fewest thread blocks of any of them in waves of SMS blocks."""
    out = {}
    for key, s in SHAPES.items():
        rows = []
        for T in TS_REGIME:
            tab = forward(s, T, c)
            must = sum(v[T][0] for v in tab.rows.values())
            does = sum(v[T][1] for v in tab.rows.values())
            gemms = [(k, b) for k, b, _ in tab.launches if k.startswith("gemm_")]
            fewest = min(b for _, b in gemms)
            kinds = sorted({k for k, _ in gemms})
            rows.append({"T": T, "gemm_kernels": kinds, "weight_reads": tab.weights[1] / tab.weights[0],
                         "does_over_must": does / must, "cache_reads": tab.cache[1] / tab.cache[0],
                         "kernels": sum(n for _, _, n in tab.launches), "gemm_launches": len(gemms),
                         "gemm_launches_under_a_wave": sum(1 for _, b in gemms if b < SMS),
                         "fewest_gemm_blocks": fewest, "fewest_gemm_waves": fewest / SMS,
                         "launches": {k: sum(n for kk, _, n in tab.launches if kk == k) for k, _, _ in tab.launches}})
        out[key] = rows
    return out


def regime_table(rows):
    lines = ["| T | GEMM kernels | weights read | requested / compulsory | cache reads | kernels per pass | GEMM launches "
             "(under one wave) | fewest blocks in a GEMM launch (waves on %d SMs) |" % SMS, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %d | %s | %.2fx | %.2fx | %.1fx | %d | %d (%d) | %d (%.2f) |" % (
            r["T"], ", ".join("`%s`" % k for k in r["gemm_kernels"]), r["weight_reads"], r["does_over_must"],
            r["cache_reads"], r["kernels"], r["gemm_launches"], r["gemm_launches_under_a_wave"], r["fewest_gemm_blocks"],
            r["fewest_gemm_waves"]))
    return "\n".join(lines)


def regime_targets(reg):
    """The verify-regime targets (docs/gpu-kernels.md), each with its verdict under today's kernels."""
    v64 = [r for r in reg["7b"] if r["T"] == 64][0]
    lines = ["- 7B shape, a verify of 64 tokens reads the weights at most 1.25x: %.2fx, %s." % (
        v64["weight_reads"], "met" if v64["weight_reads"] <= 1.25 else "NOT met")]
    worst = max((r["weight_reads"], r["T"]) for r in reg["7b"])
    lines.append("- 7B shape, every T from 2 to 64 reads the weights once: %s (the most: %.2fx at T = %d)." % (
        "met" if worst[0] <= 1.0 else "NOT met", worst[0], worst[1]))
    for key, s in SHAPES.items():
        d = reg[key][0]
        lines.append("- %s decode step: no GEMM launch under one wave: %d of %d launches are (fewest blocks %d), %s." % (
            s["title"], d["gemm_launches_under_a_wave"], d["gemm_launches"], d["fewest_gemm_blocks"],
            "met" if d["gemm_launches_under_a_wave"] == 0 else "NOT met"))
    return "\n".join(lines)


def tables(c):
    """name -> markdown table (the blocks of docs/gpu-kernels.md between the gpu_bytes.py markers)."""
    m = model(c)
    res = {}
    for key, s in SHAPES.items():
        d = s["digits"]
        lines = ["| kernel | must T=1 | does T=1 | must T=64 | does T=64 | before T=64 |", "|---|---|---|---|---|---|"]
        for r in m[key]:
            cells = [fmt(r[f], d) if r[f] else "-" for f in ["must_T1", "does_T1", "must_T64", "does_T64"]]
            before = fmt(r["before_T64"], d) if r["before_T64"] is not None else "-"
            lines.append("| %s | %s | %s |" % (r["label"], " | ".join(cells), before))
        res[key] = "\n".join(lines)
    lines = ["| kernel | SmolLM2 must | SmolLM2 does | 7B must | 7B does |", "|---|---|---|---|---|"]
    lab = xattn_labels(c)
    for ra, rb in zip(m["xattn"]["smollm2"], m["xattn"]["7b"]):
        lines.append("| %s | %s | %s | %s | %s |" % (lab[ra["kernel"]], fmt(ra["must"], 1), fmt(ra["does"], 1),
                                                     fmt(rb["must"], 0), fmt(rb["does"], 0)))
    res["xattn"] = "\n".join(lines)
    res["constants"] = "Read from `cuda/kernels.cuh`: " + m["constants"] + "."
    reg = regime(c)
    for key in SHAPES:
        res["regime_" + key] = regime_table(reg[key])
    res["targets"] = regime_targets(reg)
    return res


def old_tables(c):
    res = {}
    for key, s in SHAPES.items():
        d = s["digits"]
        t = {T: old_forward(s, T, c, False) for T in TS}
        b = old_forward(s, 64, c, True)
        lines = ["| kernel | must T=1 | does T=1 | must T=64 | does T=64 | before T=64 |", "|---|---|---|---|---|---|"]
        tot = [0.0] * 5
        for k in t[1].order:
            v = [*t[1].rows[k][1], *t[64].rows[k][64], b.rows[k][64][1]]
            tot = [x + y for x, y in zip(tot, v)]
            lines.append("| %s | %s |" % (t[1].rows[k]["label"], " | ".join(fmt(x, d) for x in v)))
        lines.append("| total | %s |" % " | ".join(fmt(x, d) for x in tot))
        res[key] = "\n".join(lines)
    return res


BEGIN, END = "<!-- gpu_bytes.py %s: generated, edit the script -->", "<!-- end gpu_bytes.py %s -->"


def doc_blocks(text):
    got = {}
    for name in ["constants", "smollm2", "7b", "xattn", "regime_smollm2", "regime_7b", "targets"]:
        m = re.search(re.escape(BEGIN % name) + r"\n(.*?)\n" + re.escape(END % name), text, re.S)
        if m:
            got[name] = m.group(1)
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true", help="the numbers (MB) and the parsed constants")
    ap.add_argument("--old", action="store_true", help="the tables as b0d577d counted them (old tiling)")
    ap.add_argument("--update-doc", action="store_true", help="rewrite the tables in " + DOC)
    ap.add_argument("--constants", action="store_true", help="print the constants read from cuda/")
    ap.add_argument("--launches", metavar="SHAPE:T[:HEAD_T]", help="the kernels one forward launches (JSON: per kernel the "
                    "launches and the fewest thread blocks of one) for a shape (smollm2 or 7b, with overrides such as "
                    "smollm2,L=2,V=512,cache=0) over T rows, the LM head over HEAD_T (default T)")
    ap.add_argument("--bytes", metavar="SHAPE:T[:HEAD_T]", help="the bytes one forward must and does request, per "
                    "row of the tables (JSON; the shape as for --launches)")
    a = ap.parse_args()
    c = parse_sources()
    if a.bytes:
        print(json.dumps(row_bytes(a.bytes, c), indent=1))
        return
    if a.launches:
        print(json.dumps(launches(a.launches, c), indent=1, sort_keys=True))
        return
    if a.constants:
        for k in CONSTS:
            print(k, c[k])
        return
    if a.json:
        print(json.dumps({"constants": c, "model_MB": model(c), "regime": regime(c)}, indent=1))
        return
    t = old_tables(c) if a.old else tables(c)
    if a.update_doc and a.old:
        fail("--update-doc writes today's tables, not --old's")
    if a.update_doc:
        path = os.path.join(ROOT, DOC)
        text = open(path).read()
        for name, body in t.items():
            pat = re.escape(BEGIN % name) + r"\n(?:.*?\n)?" + re.escape(END % name)
            if not re.search(pat, text, re.S):
                fail(f"{DOC}: no block {BEGIN % name} ... {END % name}")
            text = re.sub(pat, lambda _: BEGIN % name + "\n" + body + "\n" + END % name, text, flags=re.S)
        open(path, "w").write(text)
        return
    for name, body in t.items():
        print(BEGIN % name)
        print(body)
        print(END % name)
        print()


if __name__ == "__main__":
    main()
