# test_tokenizer_hf.py: byte-level BPE checked against HF `tokenizers` on >= 400 strings.
# The reference is built from the SmolLM2 GGUF's own tokens and merges (read with the gguf package)
# and configured as SmolLM2's tokenizer.json is: pre_tokenizer Sequence[Digits(individual_digits),
# ByteLevel(add_prefix_space=False, use_regex=True)], ByteLevel decoder, the control tokens added as
# special tokens. Ours runs through `beagle tokenize -m $BEAGLE_MODEL --jsonl` (the GGUF loader's
# spec) and through -z with tokenizer.json files that `tokenizers` itself saved (our loader).
# The same vocabulary is also run with the GPT-2, Llama-3 and Qwen2 pre-tokenizers (Split regex /
# plain ByteLevel) to check those hand-written splitters against HF's regex engine.
# Everything must match exactly: ids, pre-tokenizer pieces, and decode(encode(s)) == s.
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_strings as ts  # noqa: E402

import gguf  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402

LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

# SmolLM2-Instruct's chat template (tokenizer.chat_template in the GGUF) and the prompt it renders
# for one user turn "What is 2+2?" with add_generation_prompt (see data/README.md).
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CHAT_WANT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
             "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")


def gguf_vocab(path):
    """tokens, token types, merges and pre name read by the gguf package. GGUFReader takes ~15 s on
    49K tokens + 49K merges, so the result is cached in build/test-cache keyed by file size+mtime."""
    st = os.stat(path)
    root = os.environ.get("BEAGLE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    cache = os.path.join(root, "build", "test-cache", f"gguf_vocab_{st.st_size}_{int(st.st_mtime)}.json")
    if os.path.exists(cache):
        with open(cache, encoding="utf-8") as f:
            d = json.load(f)
        return d["tokens"], d["types"], d["merges"], d["pre"]
    r = gguf.GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data]
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    d = {"tokens": strings("tokenizer.ggml.tokens"), "types": types, "merges": strings("tokenizer.ggml.merges"), "pre": pre}
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    with open(cache + ".tmp", "w", encoding="utf-8") as f:
        json.dump(d, f, ensure_ascii=False)
    os.replace(cache + ".tmp", cache)
    return d["tokens"], d["types"], d["merges"], d["pre"]


def build_hf(tokens, types, merges, pre_tok, ignore_merges=False):
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges], ignore_merges=ignore_merges)
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = pre_tok
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    return tk


def main():
    c = ts.Checker("test_tokenizer_hf")
    with tempfile.TemporaryDirectory(prefix="beagle_tok_") as tmp:
        run(c, tmp)
    c.done()


def run(c, tmp):
    p = ts.paths()
    model = ts.require_file(p["model"], "SmolLM2 GGUF ($BEAGLE_MODEL; run make model)")
    tokens, types, merges, pre = gguf_vocab(model)
    c.check(pre == "smollm", f"GGUF tokenizer.ggml.pre is {pre!r}, expected 'smollm'")
    strings = ts.all_strings(300)
    c.check(len(strings) >= 400, f"only {len(strings)} strings")

    smollm_pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                          pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    hf = build_hf(tokens, types, merges, smollm_pre)
    byte_map = pre_tokenizers.ByteLevel.alphabet()
    c.check(len(byte_map) == 256, "ByteLevel alphabet is not 256 characters")

    def hf_pieces(pt, s):
        # HF's pre-tokenizer pieces, in the byte-to-unicode alphabet (ours are mapped the same way).
        return [w for w, _ in pt.pre_tokenize_str(s)]

    # GPT-2 byte-to-unicode map (an independent re-statement of the published table).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + len(cs) - 188)
    byte_char = dict(zip(bs, (chr(x) for x in cs)))
    c.check(set(byte_char.values()) == set(byte_map), "our byte map differs from ByteLevel.alphabet()")

    def to_bytelevel(s):
        return "".join(byte_char[b] for b in s.encode("utf-8"))

    lines = [{"text": s} for s in strings]
    # SmolLM2 has no token for a few bytes (0x04, 0x1D, ...); HF drops them, so do we, and for
    # strings containing them decode(encode(s)) is s without those characters.
    vocab = set(tokens)
    covered = [all(b in vocab for b in to_bytelevel(s)) for s in strings]
    c.check(0 < sum(not x for x in covered) < 5, f"{sum(not x for x in covered)} strings with bytes outside the vocabulary")

    def roundtrip_ok(s, cov, decoded, hf_decoded):
        return decoded == s if cov else decoded == hf_decoded

    # 1. -m GGUF (loader + tokenizer), parse_special on, render special on decode.
    hf.encode_special_tokens = False
    want = [hf.encode(s, add_special_tokens=False).ids for s in strings]
    for src_name, src in [("-m gguf", ["-m", model])]:
        got = ts.run_jsonl(p["bin"], src, lines, ["--render-special", "--pieces"])
        for s, cov, w, g in zip(strings, covered, want, got):
            c.check(g["ids"] == w, f"[{src_name}] {s!r}: ids {g['ids']} != HF {w}")
            c.check(roundtrip_ok(s, cov, g["decoded"], hf.decode(w, skip_special_tokens=False)),
                    f"[{src_name}] {s!r}: decode(encode(s)) = {g['decoded']!r}")
            hp = hf_pieces(smollm_pre, s)
            op = [to_bytelevel(x) for x in g["pieces"]]
            c.check(op == hp, f"[{src_name}] {s!r}: pieces {op} != HF {hp}")

    # 2. --no-special: special-token text is plain text (HF encode_special_tokens=True).
    hf.encode_special_tokens = True
    want_ns = [hf.encode(s, add_special_tokens=False).ids for s in strings]
    hf.encode_special_tokens = False
    got = ts.run_jsonl(p["bin"], ["-m", model], lines, ["--no-special"])
    for s, cov, w, g in zip(strings, covered, want_ns, got):
        c.check(g["ids"] == w, f"[--no-special] {s!r}: ids {g['ids']} != HF {w}")
        c.check(roundtrip_ok(s, cov, g["decoded"], hf.decode(w, skip_special_tokens=False)),
                f"[--no-special] {s!r}: decode(encode(s)) = {g['decoded']!r}")
    c.check(any(w != v for w, v in zip(want, want_ns)), "no string exercised special-token parsing")

    # 3. tokenizer.json saved by `tokenizers` (merges as ["a","b"] lists) and rewritten with "a b"
    #    strings, plus a tokenizer_config.json: our HF loader must give the same ids.
    js_path = os.path.join(tmp, "tokenizer.json")
    hf.save(js_path)
    with open(js_path, encoding="utf-8") as f:
        js = json.load(f)
    c.check(isinstance(js["model"]["merges"][0], list), "tokenizers saved merges as strings; list form untested")
    got = ts.run_jsonl(p["bin"], ["-z", js_path], lines, ["--render-special"])
    for s, w, g in zip(strings, want, got):
        c.check(g["ids"] == w, f"[-z json lists] {s!r}: ids {g['ids']} != HF {w}")
    js["model"]["merges"] = [" ".join(m) for m in js["model"]["merges"]]
    d2 = os.path.join(tmp, "strmerges")
    os.makedirs(d2)
    with open(os.path.join(d2, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(js, f, ensure_ascii=False)
    with open(os.path.join(d2, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "add_bos_token": False,
                   "chat_template": SMOLLM2_TEMPLATE}, f)
    got = ts.run_jsonl(p["bin"], ["-z", d2], lines, ["--render-special"])
    for s, w, g in zip(strings, want, got):
        c.check(g["ids"] == w, f"[-z json strings] {s!r}: ids {g['ids']} != HF {w}")
    got = ts.run_jsonl(p["bin"], ["-z", d2], [{"text": "What is 2+2?"}], ["--chat", "--render-special"])
    c.check(got[0]["decoded"] == CHAT_WANT, f"[-z json] chat prompt {got[0]['decoded']!r}")

    # 4. Other pre-tokenizers on the same vocabulary, via tokenizer.json files.
    variants = [
        ("gpt2", pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), False),
        ("llama3", pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
                                            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), True),
        ("qwen2", pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
                                           pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), False),
    ]
    for name, pt, ignore_merges in variants:
        hv = build_hf(tokens, types, merges, pt, ignore_merges=ignore_merges)
        path = os.path.join(tmp, f"{name}.json")
        hv.save(path)
        want_v = [hv.encode(s, add_special_tokens=False).ids for s in strings]
        got = ts.run_jsonl(p["bin"], ["-z", path], lines, ["--render-special", "--pieces"])
        for s, cov, w, g in zip(strings, covered, want_v, got):
            c.check(g["ids"] == w, f"[{name}] {s!r}: ids {g['ids']} != HF {w}")
            c.check(roundtrip_ok(s, cov, g["decoded"], hv.decode(w, skip_special_tokens=False)),
                    f"[{name}] {s!r}: decode(encode(s)) = {g['decoded']!r}")
            hp = hf_pieces(pt, s)
            op = [to_bytelevel(x) for x in g["pieces"]]
            c.check(op == hp, f"[{name}] {s!r}: pieces {op} != HF {hp}")

    # 5. Chat template through the CLI: the exact ChatML text, with SmolLM2's default system line.
    got = ts.run_jsonl(p["bin"], ["-m", model], [{"text": "What is 2+2?"}], ["--chat", "--render-special"])
    c.check(got[0]["decoded"] == CHAT_WANT, f"chat prompt {got[0]['decoded']!r}")
    c.check(got[0]["ids"] == hf.encode(CHAT_WANT, add_special_tokens=False).ids, "chat prompt ids differ from HF")
    c.check(got[0]["ids"][0] == 1 and got[0]["ids"].count(2) == 2, f"chat ids {got[0]['ids']}")


if __name__ == "__main__":
    main()
