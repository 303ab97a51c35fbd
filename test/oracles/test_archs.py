#!/usr/bin/env python3
"""test_archs.py: every architecture Beagle loads, from tiny random-weight files written in the real
formats (the `gguf` package's GGUFWriter; config.json + model.safetensors written with the `safetensors`
package, as HF writes them), run by Beagle's CPU backend (build/test/tool_logits) against the float64
NumPy reference of the same file (scripts/ref_llama.py, which runs each file in its own convention):
  - llama2.gguf      GGUF llama, SentencePiece vocabulary, separate output matrix (Llama-2, Mistral GGUF)
  - llama2-hf        LlamaForCausalLM, F16
  - llama31.gguf     GGUF llama with rope_freqs.weight (Llama-3.1 rope scaling), untied output, BPE
                     tokenizer with pre-tokenizer llama-bpe
  - llama31-hf       LlamaForCausalLM with rope_scaling rope_type llama3, untied lm_head, tokenizer.json
  - mistral-hf       MistralForCausalLM (sliding_window null), GQA 4:1, rope_theta 1e6
  - qwen2.gguf       GGUF qwen2: q/k/v biases, Q8_0 matrices (the q/k row permutation of quantized rows),
                     tied output, pre-tokenizer qwen2
  - qwen2-hf         Qwen2ForCausalLM: q/k/v biases, tied embeddings, F16 weights
Checks per model: every position's logits within TOL (below) of the reference, relative to that
position's logit range; the greedy continuation the reference's (teacher-forced: the reference's argmax
after the prompt and our first k tokens is our token k + 1) wherever the reference's top-2 margin is
over 4 TOL of the range (within TOL neither of the two can pass the other); and the checks can fail:
the reference with the biases dropped (Qwen2) or without the rope scaling (Llama-3.1) is farther than
10 TOL from ours. The tokenizers trained here with the Llama-3 and
Qwen2 pre-tokenizers give HF `tokenizers`' ids through both the GGUF and the tokenizer.json route.
Errors: a GGUF of arch gemma, HF model_type phi3 and a config naming only Phi3ForCausalLM exit non-zero
naming the architecture and the supported ones; Mistral's sliding window (16 < max_position_embeddings
64) caps the context at 16 and a longer -c is refused.

Tolerance. The float files (F32, F16 weights) run in float32: each dot product here has K <= 128 terms,
whose rounding error is at most K u ~ 8e-6 of its terms' magnitude (u = 2^-24), and about 10 such
products chain through 2 layers and the head, so logits move by ~1e-4 of their range at most (measured:
below 3e-6). Q8_0 matrices quantize Beagle's activations to int16 per block of 32 (a step of 1/65534 of
the block's largest value), ~3e-5 relative per product. TOL = 1e-3 of the logit range covers both with
a 10x margin; a dropped bias or a missing rope scaling moves logits by over 10 TOL (checked below).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import gguf
from gguf.quants import quantize
from safetensors.numpy import save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
root = os.environ.get("BEAGLE_ROOT", os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(root, "scripts"))
import tokenizer_strings as ts  # noqa: E402
from checks import check, finish  # noqa: E402
from ref_llama import HF_NAMES, RefLlama, hf_llama3_inv_freq  # noqa: E402
from test_tokenizer_hf import LLAMA3, QWEN2  # noqa: E402

BIN = os.environ.get("BEAGLE_BIN", os.path.join(root, "build", "beagle"))
TOOL = os.path.join(os.path.dirname(BIN), "test", "tool_logits")
TOL = 1e-3
DIM, L, F = 64, 2, 128
rng = np.random.default_rng(2024)


def mat(rows, cols, scale=1.0):
    return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)


def norm_vec(n):
    return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)


def bias(n):
    return rng.uniform(-0.5, 0.5, n).astype(np.float32)


def random_weights(V, H, KV, hd, untied, with_bias):
    """One model's weights under GGUF names, as the math uses them (W: out x in)."""
    w = {"token_embd.weight": rng.standard_normal((V, DIM)).astype(np.float32),
         "output_norm.weight": norm_vec(DIM)}
    if untied:
        w["output.weight"] = mat(V, DIM, 3.0)
    for l in range(L):
        b = f"blk.{l}."
        w[b + "attn_norm.weight"] = norm_vec(DIM)
        w[b + "attn_q.weight"] = mat(H * hd, DIM, 2.0)
        w[b + "attn_k.weight"] = mat(KV * hd, DIM, 2.0)
        w[b + "attn_v.weight"] = mat(KV * hd, DIM)
        if with_bias:
            w[b + "attn_q.bias"], w[b + "attn_k.bias"], w[b + "attn_v.bias"] = bias(H * hd), bias(KV * hd), bias(KV * hd)
        w[b + "attn_output.weight"] = mat(DIM, H * hd)
        w[b + "ffn_norm.weight"] = norm_vec(DIM)
        w[b + "ffn_gate.weight"] = mat(F, DIM)
        w[b + "ffn_up.weight"] = mat(F, DIM)
        w[b + "ffn_down.weight"] = mat(DIM, F)
    return w


# ---- tokenizers: byte-level BPE trained with the Llama-3 / Qwen2 pre-tokenizer --------------------

def train_bpe(regex, ignore_merges, strings):
    pt = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
                                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pt
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(strings * 3, tr)
    js = json.loads(tk.to_str())
    vocab, merges = js["model"]["vocab"], js["model"]["merges"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]
    # the final tokenizer as the model's tokenizer.json has it (Llama-3: ignore_merges)
    hf = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    hf.pre_tokenizer = pt
    hf.decoder = decoders.ByteLevel()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    return hf, tokens, [" ".join(m) for m in merges]


def check_tokenizer(name, hf, sources, strings):
    want = [hf.encode(s, add_special_tokens=False).ids for s in strings]
    for src in sources:
        got = ts.run_jsonl(BIN, ["-m", src], [{"text": s} for s in strings], ["--no-special"])
        bad = [(s, g["ids"], w) for s, g, w in zip(strings, got, want) if g["ids"] != w]
        check(not bad, f"{name} tokenizer via {os.path.basename(src)}: {len(bad)} of {len(strings)} strings differ "
              f"from HF, first {bad[:1]}")
    print(f"{name}: tokenizer ids equal HF tokenizers' on {len(strings)} strings via {len(sources)} files")


# ---- writers --------------------------------------------------------------------------------------

def write_gguf(path, arch, w, H, KV, theta, eps, qtype=None, tok=None, rope=None, spm_vocab=0):
    g = gguf.GGUFWriter(path, arch)
    g.add_context_length(256)
    g.add_embedding_length(DIM)
    g.add_block_count(L)
    g.add_feed_forward_length(F)
    g.add_head_count(H)
    g.add_head_count_kv(KV)
    g.add_rope_dimension_count(DIM // H)
    g.add_rope_freq_base(theta)
    g.add_layer_norm_rms_eps(eps)
    if rope:  # Llama-3.1: factor and original context in the metadata, the factors in rope_freqs.weight
        g.add_rope_scaling_factor(rope["factor"])
        g.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    if tok:
        tokens, merges, pre = tok
        g.add_tokenizer_model("gpt2")
        g.add_tokenizer_pre(pre)
        g.add_token_list(tokens)
        g.add_token_types([1] * len(tokens))
        g.add_token_merges(merges)
    elif spm_vocab:
        g.add_tokenizer_model("llama")
        g.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, spm_vocab)])
        g.add_token_scores([-float(i) for i in range(spm_vocab)])
        g.add_token_types([2, 3, 3] + [1] * (spm_vocab - 3))
    for name, a in w.items():
        if qtype is not None and a.ndim == 2 and name != "token_embd.weight":
            g.add_tensor(name, quantize(a, qtype), raw_dtype=qtype)
        elif a.ndim == 2 and name.endswith("ffn_up.weight"):
            g.add_tensor(name, a.astype(np.float16))  # one F16 matrix per layer
        else:
            g.add_tensor(name, a)
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()


HF_OF = {g: h for h, g in HF_NAMES.items()}  # GGUF role name -> HF parameter name


def write_hf(d, arch_class, model_type, w, H, KV, V, theta, eps, dtype=np.float32, tok=None, **extra):
    os.makedirs(d, exist_ok=True)
    t = {}
    for name, a in w.items():
        if name == "token_embd.weight": hn = "model.embed_tokens.weight"
        elif name == "output_norm.weight": hn = "model.norm.weight"
        elif name == "output.weight": hn = "lm_head.weight"
        else:
            _, l, rest = name.split(".", 2)
            hn = f"model.layers.{l}.{HF_OF[rest]}"
        t[hn] = np.ascontiguousarray(a.astype(dtype))
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg = {"architectures": [arch_class], "model_type": model_type, "hidden_size": DIM, "intermediate_size": F,
           "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV, "vocab_size": V,
           "max_position_embeddings": 256, "rms_norm_eps": eps, "rope_theta": theta, "hidden_act": "silu",
           "tie_word_embeddings": "output.weight" not in w,
           "torch_dtype": "float16" if dtype == np.float16 else "float32"}
    cfg.update(extra)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if tok is not None:
        tok.save(os.path.join(d, "tokenizer.json"))


# ---- comparison -----------------------------------------------------------------------------------

def beagle_logits(model, ids, V, n_greedy):
    with tempfile.NamedTemporaryFile(suffix=".f32") as f:
        p = subprocess.run([TOOL, model, ",".join(map(str, ids)), f.name, "--greedy", str(n_greedy)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            check(False, f"{os.path.basename(model)}: tool_logits exited {p.returncode}: {p.stderr.strip()}")
            return None, None
        logits = np.fromfile(f.name, dtype=np.float32).reshape(len(ids), V).astype(np.float64)
    return logits, [int(x) for x in p.stdout.strip().split(",")]


def rel_err(ours, want):
    return max(np.abs(ours[t] - want[t]).max() / (want[t].max() - want[t].min()) for t in range(len(want)))


def compare(name, model, V, mutants=()):
    """Our logits and greedy tokens against the reference; mutants: (label, reference) that must differ."""
    ids = [int(x) for x in rng.integers(0, V, 12)]
    n_greedy = 8
    ours, greedy = beagle_logits(model, ids, V, n_greedy)
    if ours is None:
        return
    ref = RefLlama(model)
    want, _ = ref.forward(ids)
    err = rel_err(ours, want)
    check(err <= TOL, f"{name}: max |logit - ref| = {err:.2e} of the logit range > {TOL}")
    # greedy, teacher-forced: the reference's argmax after ids + greedy[:k] must be greedy[k]
    full, _ = ref.forward(ids + greedy[:-1])
    checked = 0
    for k in range(n_greedy):
        row = full[len(ids) - 1 + k]
        top2 = np.sort(row)[-2:]
        if top2[1] - top2[0] > 4 * TOL * (row.max() - row.min()):  # twice what TOL lets two logits move
            checked += 1
            check(int(np.argmax(row)) == greedy[k], f"{name}: greedy token {k}: ours {greedy[k]}, ref {np.argmax(row)}")
    check(checked >= n_greedy // 2, f"{name}: only {checked} of {n_greedy} greedy steps have a clear reference margin")
    line = f"{name}: max rel logit err {err:.1e}, greedy {checked}/{n_greedy} steps checked"
    for label, m in mutants:
        mw, _ = m.forward(ids)
        e = rel_err(ours, mw)
        check(e > 10 * TOL, f"{name}: the reference {label} is only {e:.2e} from ours: this check could not tell")
        line += f"; reference {label}: {e:.1e}"
    print(line)


def run(cmd):  # a random model's text is any bytes: decoded leniently
    p = subprocess.run([BIN, *cmd], capture_output=True, timeout=120)
    p.stdout, p.stderr = (x.decode("utf-8", "replace") for x in (p.stdout, p.stderr))
    return p


def expect_error(what, cmd, *needles):
    p = run(cmd)
    msg = p.stderr.strip()
    ok = p.returncode != 0 and all(n in msg for n in needles)
    check(ok, f"{what}: exit {p.returncode}, stderr {msg!r}, expected non-zero and {needles}")
    if ok:
        print(f"{what}: {msg}")


def info_config(model):
    p = run(["info", "-m", model])
    check(p.returncode == 0, f"beagle info -m {model}: exit {p.returncode}: {p.stderr}")
    cfg, section = {}, None
    for line in p.stdout.splitlines():
        if not line.startswith("  "):
            section = line.split(":")[0]
        elif section == "config":
            k, _, v = line.strip().partition(" ")
            cfg[k] = v.strip()
    return cfg


def main():
    for f in (BIN, TOOL):
        if not os.path.exists(f):
            print(f"FAIL: {f} missing (make tests)")
            sys.exit(1)
    strings = ts.all_strings(200)
    tmp = tempfile.mkdtemp(prefix="beagle_archs_")
    P = lambda n: os.path.join(tmp, n)  # noqa: E731

    # Llama-2 style: SentencePiece vocabulary, MHA, separate output
    V = 96
    write_gguf(P("llama2.gguf"), "llama", random_weights(V, 4, 4, 16, True, False), 4, 4, 10000.0, 1e-5, spm_vocab=V)
    compare("llama2.gguf", P("llama2.gguf"), V)
    write_hf(P("llama2-hf"), "LlamaForCausalLM", "llama", random_weights(V, 4, 4, 16, True, False), 4, 4, V,
             10000.0, 1e-5, dtype=np.float16)
    compare("llama2-hf", P("llama2-hf"), V)

    # Llama-3.1: rope scaling over a small original context (so positions < 20 see it), GQA, untied
    l3_tok, l3_tokens, l3_merges = train_bpe(LLAMA3, True, strings)
    V = len(l3_tokens)
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64}
    w = random_weights(V, 4, 2, 16, True, False)
    inv = 1.0 / 500000.0 ** (np.arange(0, 16, 2) / 16)
    w["rope_freqs.weight"] = (inv / hf_llama3_inv_freq(inv, rope)).astype(np.float32)
    check(len(set(np.round(w["rope_freqs.weight"], 4))) == 3, "llama31: rope_freqs should hold 1, a blend and 8")
    write_gguf(P("llama31.gguf"), "llama", w, 4, 2, 500000.0, 1e-5, tok=(l3_tokens, l3_merges, "llama-bpe"), rope=rope)
    unscaled = RefLlama(P("llama31.gguf"))
    unscaled.inv_freq = inv
    compare("llama31.gguf", P("llama31.gguf"), V, [("without rope scaling", unscaled)])
    rope_hf = dict(rope, low_freq_factor=1.5, high_freq_factor=3.0)  # the HF path reads any band edges
    write_hf(P("llama31-hf"), "LlamaForCausalLM", "llama", random_weights(V, 4, 2, 16, True, False), 4, 2, V,
             500000.0, 1e-5, tok=l3_tok, rope_scaling=rope_hf)
    unscaled = RefLlama(P("llama31-hf"))
    unscaled.inv_freq = inv
    compare("llama31-hf", P("llama31-hf"), V, [("without rope scaling", unscaled)])
    check_tokenizer("Llama-3", l3_tok, [P("llama31.gguf"), P("llama31-hf")], strings)

    # Mistral: HF MistralForCausalLM (sliding_window null: full attention), GQA 4:1
    V = 96
    write_hf(P("mistral-hf"), "MistralForCausalLM", "mistral", random_weights(V, 4, 1, 16, True, False), 4, 1, V,
             1e6, 1e-5, sliding_window=None)
    compare("mistral-hf", P("mistral-hf"), V)
    with open(P("mistral-hf/config.json")) as f:
        cfg = json.load(f)
    del cfg["sliding_window"]  # absent: HF's MistralConfig default, 4096 (> max_position_embeddings 256 here)
    with open(P("mistral-hf/config.json"), "w") as f:
        json.dump(cfg, f)
    c = info_config(P("mistral-hf"))
    check(c.get("sliding_window") == "4096" and c.get("max_seq") == "256", f"mistral without sliding_window: {c}")
    V3 = len(l3_tokens)
    write_hf(P("mistral-swa"), "MistralForCausalLM", "mistral", random_weights(V3, 4, 1, 16, True, False), 4, 1, V3,
             1e6, 1e-5, tok=l3_tok, sliding_window=16, max_position_embeddings=64)
    c = info_config(P("mistral-swa"))
    check(c.get("arch") == "mistral" and c.get("sliding_window") == "16" and c.get("max_seq") == "16",
          f"mistral with sliding_window 16: info config {c}")
    expect_error("mistral sliding window 16, -c 32", ["generate", "-m", P("mistral-swa"), "-p", "hi", "-n", "1",
                                                      "-c", "32"], "sliding-window", "16", "32")
    p = run(["generate", "-m", P("mistral-swa"), "-p", "hi", "-n", "4", "--temp", "0"])
    check(p.returncode == 0, f"mistral sliding window 16, default context: exit {p.returncode}: {p.stderr}")

    # Qwen2: q/k/v biases; GGUF with Q8_0 matrices and tied output, HF with F16 weights and tied embeddings
    q_tok, q_tokens, q_merges = train_bpe(QWEN2, False, strings)
    V = len(q_tokens)
    write_gguf(P("qwen2.gguf"), "qwen2", random_weights(V, 4, 2, 16, False, True), 4, 2, 1e6, 1e-6,
               qtype=gguf.GGMLQuantizationType.Q8_0, tok=(q_tokens, q_merges, "qwen2"))
    compare("qwen2.gguf", P("qwen2.gguf"), V, [("without biases", RefLlama(P("qwen2.gguf"), drop_bias=True))])
    write_hf(P("qwen2-hf"), "Qwen2ForCausalLM", "qwen2", random_weights(V, 4, 2, 16, False, True), 4, 2, V, 1e6,
             1e-6, dtype=np.float16, tok=q_tok, use_sliding_window=False, sliding_window=32)
    compare("qwen2-hf", P("qwen2-hf"), V, [("without biases", RefLlama(P("qwen2-hf"), drop_bias=True))])
    c = info_config(P("qwen2-hf"))
    check(c.get("arch") == "qwen2" and c.get("qkv_bias") == "true" and c.get("tied_embeddings") == "true"
          and "sliding_window" not in c, f"qwen2-hf info config {c}")
    check_tokenizer("Qwen2", q_tok, [P("qwen2.gguf"), P("qwen2-hf")], strings)

    # architectures not supported: a clear error naming the architecture and the supported ones
    g = gguf.GGUFWriter(P("gemma.gguf"), "gemma")
    g.add_embedding_length(DIM)
    g.add_tensor("token_embd.weight", mat(8, DIM))
    g.write_header_to_file()
    g.write_kv_data_to_file()
    g.write_tensors_to_file()
    g.close()
    expect_error("GGUF arch gemma", ["info", "-m", P("gemma.gguf")], "'gemma'", "not supported", "llama", "qwen2")
    V = 96
    write_hf(P("phi3-hf"), "Phi3ForCausalLM", "phi3", random_weights(V, 4, 4, 16, True, False), 4, 4, V, 1e4, 1e-5)
    expect_error("HF model_type phi3", ["info", "-m", P("phi3-hf")], "'phi3'", "not supported", "qwen2")
    with open(P("phi3-hf/config.json")) as f:
        cfg = json.load(f)
    del cfg["model_type"]
    with open(P("phi3-hf/config.json"), "w") as f:
        json.dump(cfg, f)
    expect_error("HF architectures [Phi3ForCausalLM]", ["info", "-m", P("phi3-hf")], "'Phi3ForCausalLM'",
                 "Qwen2ForCausalLM")
    # a llama file with a bias the architecture has no place for
    w = random_weights(V, 4, 4, 16, True, True)
    write_gguf(P("llama-bias.gguf"), "llama", w, 4, 4, 1e4, 1e-5)
    expect_error("GGUF llama with attn_q.bias", ["info", "-m", P("llama-bias.gguf")], "blk.0.attn_q.bias", "qwen2")
    subprocess.run(["rm", "-rf", tmp])
    finish("test_archs")


if __name__ == "__main__":
    main()
