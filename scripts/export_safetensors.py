#!/usr/bin/env python3
# export_safetensors.py: writes a Hugging Face Llama checkpoint directory (config.json +
# model.safetensors, or sharded model-0000k-of-0000N.safetensors + model.safetensors.index.json)
# from a llama2.c run.c checkpoint (.bin), with numpy only. q/k rows are permuted into HF's
# rotate-half order as llama2.c's export.py does, so loading it back tests our un-permutation.
# Used by test/unit/test_loaders.cpp and the lead's generation tests.
#
#   python3 scripts/export_safetensors.py data/models/stories260K.bin OUT_DIR [--shards N] [--dtype f32|bf16|f16]
import argparse
import json
import os
import sys

import numpy as np


def read_llama2c(path):
    raw = np.fromfile(path, dtype=np.uint8)
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = (int(x) for x in raw[:28].view("<i4"))
    shared = vocab > 0
    vocab = abs(vocab)
    hd = dim // n_heads
    f = raw[28:].view("<f4")
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        if pos + n > f.size:
            sys.exit(f"{path}: truncated (need {pos + n} floats after the header, have {f.size})")
        a = f[pos:pos + n].reshape(shape)
        pos += n
        return a

    w = {}
    w["embed"] = take(vocab, dim)
    w["rms_att"] = take(n_layers, dim)
    w["wq"] = take(n_layers, n_heads * hd, dim)
    w["wk"] = take(n_layers, n_kv * hd, dim)
    w["wv"] = take(n_layers, n_kv * hd, dim)
    w["wo"] = take(n_layers, dim, n_heads * hd)
    w["rms_ffn"] = take(n_layers, dim)
    w["w1"] = take(n_layers, hidden, dim)
    w["w2"] = take(n_layers, dim, hidden)
    w["w3"] = take(n_layers, hidden, dim)
    w["rms_final"] = take(dim)
    take(seq_len, hd // 2)  # freq_cis_real
    take(seq_len, hd // 2)  # freq_cis_imag
    if not shared:
        w["wcls"] = take(vocab, dim)
    if pos != f.size:
        sys.exit(f"{path}: {f.size - pos} unexpected trailing floats")
    cfg = dict(dim=dim, hidden=hidden, n_layers=n_layers, n_heads=n_heads, n_kv=n_kv, vocab=vocab,
               seq_len=seq_len, shared=shared)
    return cfg, w


def to_rotate_half(w, n_heads):
    # interleaved pairs (rows 2i, 2i+1 of each head) -> HF rotate-half (rows i, i + hd/2)
    rows, cols = w.shape
    hd = rows // n_heads
    return w.reshape(n_heads, hd // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def convert(a, dtype):
    a = np.ascontiguousarray(a, dtype="<f4")
    if dtype == "f32":
        return a, "F32"
    if dtype == "f16":
        return a.astype("<f2"), "F16"
    u = a.view("<u4").astype(np.uint64)  # bf16: round to nearest even
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2"), "BF16"


def write_safetensors(path, tensors):
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, (arr, dt) in tensors:
        b = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fp:
        fp.write(len(h).to_bytes(8, "little"))
        fp.write(h)
        for b in blobs:
            fp.write(b)
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("bin", help="llama2.c checkpoint (.bin)")
    ap.add_argument("out", help="output directory (created)")
    ap.add_argument("--shards", type=int, default=1, help="number of shard files (1: single model.safetensors)")
    ap.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    args = ap.parse_args()
    cfg, w = read_llama2c(args.bin)
    L = cfg["n_layers"]

    named = [("model.embed_tokens.weight", w["embed"])]
    for l in range(L):
        p = f"model.layers.{l}."
        named += [
            (p + "input_layernorm.weight", w["rms_att"][l]),
            (p + "self_attn.q_proj.weight", to_rotate_half(w["wq"][l], cfg["n_heads"])),
            (p + "self_attn.k_proj.weight", to_rotate_half(w["wk"][l], cfg["n_kv"])),
            (p + "self_attn.v_proj.weight", w["wv"][l]),
            (p + "self_attn.o_proj.weight", w["wo"][l]),
            (p + "post_attention_layernorm.weight", w["rms_ffn"][l]),
            (p + "mlp.gate_proj.weight", w["w1"][l]),
            (p + "mlp.down_proj.weight", w["w2"][l]),
            (p + "mlp.up_proj.weight", w["w3"][l]),
        ]
    named.append(("model.norm.weight", w["rms_final"]))
    if not cfg["shared"]:
        named.append(("lm_head.weight", w["wcls"]))
    tensors = [(n, convert(a, args.dtype)) for n, a in named]

    os.makedirs(args.out, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": cfg["dim"],
        "intermediate_size": cfg["hidden"],
        "num_hidden_layers": L,
        "num_attention_heads": cfg["n_heads"],
        "num_key_value_heads": cfg["n_kv"],
        "vocab_size": cfg["vocab"],
        "max_position_embeddings": cfg["seq_len"],
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": cfg["shared"],
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[args.dtype],
    }
    with open(os.path.join(args.out, "config.json"), "w") as fp:
        json.dump(config, fp, indent=2)

    n = max(1, args.shards)
    if n == 1:
        write_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
        return
    # split in file order into n shards of about equal bytes
    total = sum(a.nbytes for _, (a, _) in tensors)
    shards, cur, acc = [[] for _ in range(n)], 0, 0
    for t in tensors:
        if cur < n - 1 and acc >= total * (cur + 1) / n:
            cur += 1
        shards[cur].append(t)
        acc += t[1][0].nbytes
    weight_map = {}
    for k, part in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        write_safetensors(os.path.join(args.out, fname), part)
        for name, _ in part:
            weight_map[name] = fname
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as fp:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, fp, indent=2)


if __name__ == "__main__":
    main()
