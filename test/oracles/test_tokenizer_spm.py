# test_tokenizer_spm.py: SentencePiece-style BPE checked against independent references on the
# shared strings (>= 400):
#  (b) Llama-2 tokenizer.model: ids == the `sentencepiece` package's encode; tokenizer.bin (llama2.c's
#      export of the same vocabulary) gives the same ids; decode(encode(s)) == s with BOS.
#  (c) tok512.bin / tokenizer.bin: ids == a transliteration of karpathy run.c's encode() (dummy " "
#      token, per-code-point lookup with byte fallback id = byte + 3, then repeatedly merge the
#      best-scoring adjacent pair, leftmost on ties), and decoded text == run.c's decode() pieces
#      (leading space dropped after BOS, <0xXX> -> byte); stories260K.gguf (same vocabulary as GGUF,
#      read via the gguf package) gives the same ids; the stories260K golden text round-trips.
#  (d) an HF tokenizer.json for the Llama-2 vocabulary, built as transformers' converter does
#      (merges from the sentencepiece vocabulary, byte_fallback, Prepend+Replace "▁" normalizer):
#      our loader reads it as SentencePiece-style; ids == HF tokenizers' and == sentencepiece's.
# Round-trip rule for SPM: decode(encode(s, add_bos=True)) == s (the dummy-prefix space is dropped
# after BOS); without BOS the decoded text is " " + s for non-empty s.
import os
import re
import struct
import tempfile
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_strings as ts  # noqa: E402

import gguf  # noqa: E402
import sentencepiece as spm  # noqa: E402
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers  # noqa: E402


def read_llama2c(path):
    d = open(path, "rb").read()
    o, vocab, scores = 4, [], []
    while o < len(d):
        s, n = struct.unpack_from("<fi", d, o)
        vocab.append(d[o + 8:o + 8 + n])
        scores.append(s)
        o += 8 + n
    return vocab, scores


def runc_encode(vocab, scores, text, bos=True):
    """run.c encode(): a direct transliteration (the oracle; quadratic, fine for short strings)."""
    lookup = {}
    for i, v in enumerate(vocab):
        lookup.setdefault(v, i)
    tokens = [1] if bos else []
    b = text.encode("utf-8")
    if b:
        tokens.append(lookup[b" "])
    i = 0
    while i < len(b):
        j = i + 1
        while j < len(b) and (b[j] & 0xC0) == 0x80 and j - i < 4:
            j += 1
        ch = b[i:j]
        if ch in lookup:
            tokens.append(lookup[ch])
        else:
            tokens.extend(x + 3 for x in ch)
        i = j
    while True:
        best, best_id, best_idx = -1e10, -1, -1
        for k in range(len(tokens) - 1):
            t = lookup.get(vocab[tokens[k]] + vocab[tokens[k + 1]], -1)
            if t != -1 and scores[t] > best:
                best, best_id, best_idx = scores[t], t, k
        if best_idx == -1:
            break
        tokens[best_idx:best_idx + 2] = [best_id]
    return tokens


def runc_decode(vocab, prev, tok):
    piece = vocab[tok]
    if prev == 1 and piece[:1] == b" ":
        piece = piece[1:]
    m = re.fullmatch(rb"<0x([0-9A-Fa-f]{2})>", piece)
    if m:
        piece = bytes([int(m.group(1), 16)])
    return piece


def hf_llama2_json(sp, path):
    """tokenizer.json for a sentencepiece BPE model, the way transformers' converter builds it."""
    n = sp.GetPieceSize()
    vocab = {sp.IdToPiece(i): i for i in range(n)}
    merges = []
    for piece, i in vocab.items():
        if sp.IsControl(i) or sp.IsUnknown(i) or sp.IsByte(i):
            continue
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend((a, b, sp.GetScore(i)) for a, b in local)
    merges.sort(key=lambda x: x[2], reverse=True)
    bpe = models.BPE(vocab=vocab, merges=[(a, b) for a, b, _ in merges], unk_token="<unk>", fuse_unk=True, byte_fallback=True)
    tk = Tokenizer(bpe)
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    tk.save(path)
    return tk


def golden_stories(models_dir):
    md = open(os.path.join(models_dir, "stories260K.md"), encoding="utf-8").read()
    m = re.search(r"\$ \./run stories260K/stories260K\.bin -z stories260K/tok512\.bin -t 0\.0\n(.*?)\n```", md, re.S)
    return m.group(1)


def main():
    c = ts.Checker("test_tokenizer_spm")
    p = ts.paths()
    md = p["models"]
    model_path = ts.require_file(os.path.join(md, "tokenizer.model"), "Llama-2 tokenizer.model")
    bin_path = ts.require_file(os.path.join(md, "tokenizer.bin"), "llama2.c tokenizer.bin")
    tok512 = ts.require_file(os.path.join(md, "tok512.bin"), "tok512.bin")
    gguf260 = ts.require_file(os.path.join(md, "stories260K.gguf"), "stories260K.gguf")
    strings = ts.all_strings(300)
    lines = [{"text": s} for s in strings]
    ns = ["--no-special"]

    # (b) tokenizer.model vs sentencepiece.
    sp = spm.SentencePieceProcessor(model_file=model_path)
    want = [sp.encode(s) for s in strings]
    got_nobos = ts.run_jsonl(p["bin"], ["-z", model_path], lines, ns + ["--no-bos"])
    got_bos = ts.run_jsonl(p["bin"], ["-z", model_path], lines, ns)
    for s, w, g, gb in zip(strings, want, got_nobos, got_bos):
        c.check(g["ids"] == w, f"[tokenizer.model] {s!r}: ids {g['ids']} != sentencepiece {w}")
        c.check(gb["ids"] == [1] + w, f"[tokenizer.model] {s!r}: with BOS {gb['ids'][:8]}...")
        c.check(gb["decoded"] == s, f"[tokenizer.model] {s!r}: decode(encode(s)) = {gb['decoded']!r}")
        c.check(g["decoded"] == ((" " + s) if s else ""), f"[tokenizer.model] {s!r}: no-BOS decode {g['decoded']!r}")
        c.check(gb["decoded"] == sp.decode(w), f"[tokenizer.model] {s!r}: decode != sentencepiece decode {sp.decode(w)!r}")

    # tokenizer.bin: same vocabulary, run.c conventions -> same ids as sentencepiece.
    got_bin = ts.run_jsonl(p["bin"], ["-z", bin_path], lines, ns)
    vocab, scores = read_llama2c(bin_path)
    c.check(len(vocab) == 32000, f"tokenizer.bin has {len(vocab)} tokens")
    for k, (s, w, g) in enumerate(zip(strings, want, got_bin)):
        c.check(g["ids"] == [1] + w, f"[tokenizer.bin] {s!r}: ids {g['ids']} != [1] + sentencepiece {w}")
        c.check(g["decoded"] == s, f"[tokenizer.bin] {s!r}: decode(encode(s)) = {g['decoded']!r}")
        if k % 4 == 0 and len(s.encode()) <= 200:  # the quadratic oracle on a quarter of the strings
            r = runc_encode(vocab, scores, s)
            c.check(g["ids"] == r, f"[tokenizer.bin] {s!r}: ids {g['ids']} != run.c {r}")

    # (c) tok512.bin vs the run.c oracle, encode and decode.
    vocab, scores = read_llama2c(tok512)
    c.check(len(vocab) == 512, f"tok512.bin has {len(vocab)} tokens")
    got512 = ts.run_jsonl(p["bin"], ["-z", tok512], lines, ns)
    for s, g in zip(strings, got512):
        r = runc_encode(vocab, scores, s)
        c.check(g["ids"] == r, f"[tok512] {s!r}: ids {g['ids']} != run.c {r}")
        want_text = b"".join(runc_decode(vocab, a, b) for a, b in zip(r, r[1:])).decode("utf-8", "replace")
        c.check(g["decoded"] == want_text, f"[tok512] {s!r}: decoded {g['decoded']!r} != run.c {want_text!r}")
        c.check(g["decoded"] == s, f"[tok512] {s!r}: decode(encode(s)) = {g['decoded']!r}")
    # A few encodings spelled out (from the run.c oracle above; also a regression guard).
    known = {"Once upon a time": [1, 403, 407, 261, 378], "": [1]}
    got = ts.run_jsonl(p["bin"], ["-z", tok512], [{"text": t} for t in known], ns)
    for (t, w), g in zip(known.items(), got):
        c.check(g["ids"] == w and runc_encode(vocab, scores, t) == w, f"[tok512] {t!r}: {g['ids']} != {w}")

    # Decoding run.c's own token stream for the stories260K golden text reproduces it byte for byte.
    gold = golden_stories(md)
    c.check(gold.startswith("Once upon a time, there was a little girl named Lily."), "golden text not found")
    ids = runc_encode(vocab, scores, gold)
    got = ts.run_jsonl(p["bin"], ["-z", tok512], [{"ids": ids}, {"text": gold}], ns)
    c.check(got[0]["decoded"] == gold, f"[tok512] golden decode differs: {got[0]['decoded'][:80]!r}")
    c.check(got[1]["ids"] == ids, "[tok512] golden text encodes differently from run.c")
    # ... and token by token (what a streaming generator prints).
    per_token = ts.run_jsonl(p["bin"], ["-z", tok512], [{"ids": [a, b]} for a, b in zip(ids, ids[1:])], ns)
    for (a, b), g in zip(zip(ids, ids[1:]), per_token):
        want_pair = (b"" if a == 1 else runc_decode(vocab, -1, a)) + runc_decode(vocab, a, b)
        c.check(g["decoded"].encode() == want_pair, f"[tok512] decode pair ({a},{b}) {g['decoded']!r} != {want_pair!r}")

    # stories260K.gguf: the GGUF copy of tok512 ("▁" for spaces) through the GGUF loader.
    r = gguf.GGUFReader(gguf260)
    f = r.fields["tokenizer.ggml.tokens"]
    gtoks = [bytes(f.parts[i]) for i in f.data]
    c.check([t.replace("▁".encode(), b" ") for t in gtoks[3:]] == vocab[3:], "stories260K.gguf vocabulary != tok512.bin")
    gotg = ts.run_jsonl(p["bin"], ["-m", gguf260], lines, ns)
    for s, g, g512 in zip(strings, gotg, got512):
        c.check(g["ids"] == g512["ids"], f"[stories260K.gguf] {s!r}: ids {g['ids']} != tok512 {g512['ids']}")
        c.check(g["decoded"] == s, f"[stories260K.gguf] {s!r}: decode(encode(s)) = {g['decoded']!r}")
    # With special parsing, "<s>" in the text is the BOS control token (GGUF types say control).
    got = ts.run_jsonl(p["bin"], ["-m", gguf260], [{"text": "<s>Once"}], ["--no-bos"])
    c.check(got[0]["ids"][0] == 1, f"'<s>' not parsed as BOS: {got[0]['ids']}")

    # (d) HF tokenizer.json of the Llama-2 vocabulary (SentencePiece-style BPE).
    with tempfile.TemporaryDirectory(prefix="beagle_spm_") as tmp:
        js = os.path.join(tmp, "tokenizer.json")
        hf = hf_llama2_json(sp, js)
        got_ns = ts.run_jsonl(p["bin"], ["-z", js], lines, ["--no-special", "--no-bos"])
        got_sp = ts.run_jsonl(p["bin"], ["-z", js], lines, ["--no-bos"])
        for s, w, g, gs in zip(strings, want, got_ns, got_sp):
            c.check(g["ids"] == w, f"[llama2 tokenizer.json] {s!r}: ids {g['ids']} != sentencepiece {w}")
            h = hf.encode(s, add_special_tokens=False).ids
            c.check(gs["ids"] == h, f"[llama2 tokenizer.json, specials] {s!r}: ids {gs['ids']} != HF {h}")
    c.done()


if __name__ == "__main__":
    main()
