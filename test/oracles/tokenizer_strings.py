# tokenizer_strings.py: the test strings shared by test/oracles/test_tokenizer_*.py (not a test itself):
# hand-written cases per category plus seeded random mixtures, and helpers to run
# `beagle tokenize --jsonl` on a batch and to find the model files (failing loudly if missing).
import json
import os
import random
import subprocess
import sys
import tempfile

HAND = [
    # empty, spaces, leading/trailing
    "", " ", "  ", "   ", "a", " a", "a ", "  a  ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t x", "x \t\n y",
    "Hello world", "Hello, world!", " Hello world", "Hello world ", "Hello  world", "Hello   world   ",
    "hello\nworld", "hello\n\nworld", "hello \n world", "line1\r\nline2\r\n", "tabs\there\tand\tthere",
    "trailing newline\n", "\n\nleading newlines", "   indented code", "mixed \t \n \r whitespace",
    # English prose
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "It was the best of times, it was the worst of times, it was the age of wisdom...",
    "Speculative decoding drafts several tokens, then verifies them in one forward pass.",
    "ALL CAPS SENTENCE WITH NUMBERS 42 AND SYMBOLS #!",
    "CamelCaseIdentifier and snake_case_identifier and kebab-case-identifier",
    # contractions
    "it's", "It's", "IT'S", "we'll", "We'LL", "they're", "I've", "I'm", "he'd", "don't", "can't",
    "'s", "'ll", "''s", "' s", "rock 'n' roll", "the dog's bone's owner's", "'tis", "O'Brien's",
    "I'd've", "y'all'd've", "it’s (curly)", "'S 'T 'RE 'VE 'M 'LL 'D", "x'sy", "'ſ",
    # numbers and long digit runs
    "0", "7", "42", "123", "1234", "12345", "3.14159", "1,000,000", "-17", "+1 (555) 123-4567",
    "1234567890123456789012345678901234567890", "2024-01-15T12:34:56Z", "v1.2.3", "0x1F 0b1010 0o777",
    "x1y22z333w4444", "٣٤٥ Arabic-Indic digits", "²³ superscripts and ½ fractions", "Ⅻ roman", "１２３ fullwidth",
    "$100.00 and 50% off", "1e-5 2.5e10", "room 101, floor 3",
    # code
    "def f(x):\n    return x ** 2  # square\n",
    "int main() { printf(\"hi\\n\"); return 0; }",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
    "if x != y && z >= 3 || !done:",
    "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)",
    "<div class=\"main\">Hello</div>",
    "SELECT * FROM users WHERE id = 42;",
    "const f = (a, b) => a + b; // arrow",
    "    four spaces\n        eight spaces\n",
    "a=b+c*d/e-f%g^h&i|j~k",
    "#include <stdio.h>\n",
    "```python\nprint('hi')\n```",
    "https://example.com/path?q=1&r=two#frag",
    "user@example.com",
    # punctuation runs
    "!!!", "???", "...", "!?!?", "---", "***bold***", "(((nested)))", "[]{}<>", "@#$%^&*", "....hello....",
    " !!!", "hello!!! world???", "\"quoted\"", "«guillemets»", "—em dash—", "…ellipsis", ";;;;", "a--b",
    # emoji
    "😀", "Hello 😀 world", "👍🏽", "🇺🇸🇫🇷", "❤️", "👨‍👩‍👧‍👦 family", "🙂🙃😉😊", "emoji😀attached", "🚀 launch!",
    # CJK
    "你好，世界！", "这是一个测试。", "日本語のテキスト", "カタカナ ひらがな", "한국어 텍스트입니다", "中文English混合",
    "東京は日本の首都です。", "漢字123かな",
    # Arabic / Cyrillic / Greek / Hebrew / others
    "مرحبا بالعالم", "السلام عليكم", "Привет, мир!", "Россия и Україна", "Ελληνικά γράμματα", "שלום עולם",
    "हिन्दी पाठ", "ภาษาไทย", "Tiếng Việt có dấu", "Café naïve résumé façade Ångström", "straße ǅ ǈ ǋ",
    "e\u0301 combining accent", "zero\u200bwidth", "non\u00a0breaking", "ideographic\u3000space", "en\u2002space",
    "line\u2028separator", "next\u0085line", "bom\ufeffinside", "\x1c\x1d\x1e\x1f controls", "\x00nul\x01",
    # special tokens (as text)
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text<|im_end|>text", "<|im_start|><|im_end|>", "< |im_start| >", "<|im_start", "<s>hello</s>",
    "<repo_name>beagle<file_sep>main.cpp", "<|endoftext|><|endoftext|>",
    # misc long
    "word " * 40,
    "abc" * 50,
    "x" * 300,
    " " * 33 + "end",
    "\n" * 10 + "end",
    "9" * 64,
]


def random_strings(n, seed=1234):
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        "     \t\n\r",
        "'\"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`",
        "éàüñçøßÆŒ",
        "你好世界日本語한국어",
        "абвгдеёжзПРСТ",
        "مرحبا",
        "😀👍🏽❤️🚀",
        "\u00a0\u3000\u2002\u200b\u0085",
        "٣²½Ⅻ１",
        "'s'll'd'S",
    ]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 40)
        s = "".join(rng.choice(rng.choice(pools)) for _ in range(k))
        out.append(s)
    return out


def all_strings(n_random=300):
    return HAND + random_strings(n_random)


def require_file(path, what):
    if not os.path.exists(path):
        print(f"FAIL: {what} not found at {path}", file=sys.stderr)
        sys.exit(1)
    return path


def paths():
    root = os.environ.get("BEAGLE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    data = os.path.join(root, "data")
    return {
        "bin": require_file(os.environ.get("BEAGLE_BIN", os.path.join(root, "build", "beagle")), "beagle binary (run make)"),
        "model": os.environ.get("BEAGLE_MODEL", os.path.join(root, "weights", "SmolLM2-135M-Instruct.Q4_1.gguf")),
        "models": os.path.join(data, "models"),
    }


def run_jsonl(binary, source_args, lines, extra=()):
    """Run `beagle tokenize SOURCE --jsonl FILE` over `lines` (dicts); returns the parsed outputs."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for obj in lines:
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
        name = f.name
    try:
        r = subprocess.run([binary, "tokenize", *source_args, "--jsonl", name, *extra], capture_output=True)
    finally:
        os.unlink(name)
    if r.returncode != 0:
        print("beagle tokenize failed:", r.stderr.decode("utf-8", "replace"), file=sys.stderr)
        sys.exit(1)
    out = [json.loads(l) for l in r.stdout.decode("utf-8").split("\n") if l]
    if len(out) != len(lines):
        print(f"FAIL: {len(lines)} lines in, {len(out)} out", file=sys.stderr)
        sys.exit(1)
    return out


class Checker:
    def __init__(self, name):
        self.name, self.checks, self.failures = name, 0, 0

    def check(self, cond, msg):
        self.checks += 1
        if not cond:
            self.failures += 1
            if self.failures <= 30:
                print("FAIL:", msg, file=sys.stderr)

    def done(self):
        print(f"{self.name}: {self.checks} checks, {self.failures} failed")
        sys.exit(0 if self.failures == 0 and self.checks > 0 else 1)
