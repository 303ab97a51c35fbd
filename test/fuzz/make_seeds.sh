#!/usr/bin/env bash
# make_seeds.sh: builds the fuzz seed corpora in OUT/<harness>/: the synthetic files of
# build/test/fuzz/make_seeds (every format, small and valid), plus the real files of
# data (models and tokenizers as they are; prompt files cut to their first records) and a
# tiny SentencePiece model / tokenizer.json trained here with the test oracle packages (pydeps).
# Nothing here is committed; libFuzzer reads at most -max_len bytes of each seed.
# Usage: test/fuzz/make_seeds.sh OUT_DIR
set -euo pipefail
OUT=${1:?usage: make_seeds.sh OUT_DIR}
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
DATA=$PWD/data
D=$DATA
rm -rf "$OUT"
mkdir -p "$OUT"
"$BUILD/test/fuzz/make_seeds" "$OUT"
for h in gguf llama2c tokenizer_bin tokenizer_model tokenizer_json prompts; do mkdir -p "$OUT/$h"; done
cp "$D/models/stories260K.gguf" "$OUT/gguf/"
cp "$D/models/stories260K.bin" "$OUT/llama2c/"
cp "$D/models/tok512.bin" "$D/models/tokenizer.bin" "$OUT/tokenizer_bin/"
cp "$D/models/tokenizer.model" "$OUT/tokenizer_model/"
cp test/data/stories_prompts.txt "$OUT/prompts/"
# committed hand-written seeds (test/fuzz/seeds/<harness>/: e.g. the server's request bodies)
for d in test/fuzz/seeds/*/; do h=$(basename "$d"); mkdir -p "$OUT/$h"; cp "$d"* "$OUT/$h/"; done
for f in "$D"/eval/*.jsonl "$D"/train/*.jsonl; do head -n 3 "$f" >"$OUT/prompts/$(basename "$f")"; done
python3 - "$D" "$OUT" <<'PY'
import json, os, sys, tempfile
data, out = sys.argv[1], sys.argv[2]
for name in ("sharegpt_sg90k_first_sampled_sorted.json", "sharegpt_v3_filtered_1000.json"):
    recs = json.load(open(os.path.join(data, "train", name), encoding="utf-8"))[:3]
    json.dump(recs, open(os.path.join(out, "prompts", name), "w", encoding="utf-8"), ensure_ascii=False)
text = [l.strip() for l in open(os.path.join(data, "models", "stories260K.md"), encoding="utf-8") if l.strip()] * 4
try:
    import sentencepiece as spm
    with tempfile.TemporaryDirectory() as t:
        corpus = os.path.join(t, "c.txt")
        open(corpus, "w", encoding="utf-8").write("\n".join(text) + "\n")
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(t, "m"), vocab_size=400, model_type="bpe", character_coverage=0.98, normalization_rule_name="identity", remove_extra_whitespaces=False,
                                       byte_fallback=True, minloglevel=2)
        os.replace(os.path.join(t, "m.model"), os.path.join(out, "tokenizer_model", "tiny_bpe.model"))
except ImportError:
    print("make_seeds.sh: sentencepiece not installed (make pydeps): no tiny tokenizer.model seed", file=sys.stderr)
try:
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.save(os.path.join(out, "tokenizer_json", "tiny_bytelevel.json"))
except ImportError:
    print("make_seeds.sh: tokenizers not installed (make pydeps): no tokenizer.json seed", file=sys.stderr)
PY
