// test_tokenizer.cpp: tokenizer unit checks in C++: Unicode classes and UTF-8, the hand-written
// pre-tokenizer splits on cases worked out from the regexes, known encodings (ids taken from
// sentencepiece, HF tokenizers and run.c; the broad comparisons are test_tokenizer_hf.py and
// test_tokenizer_spm.py), decode rules, ChatML, end-of-generation ids, error messages for bad
// input and bad files (including mutated files: must throw Error, never crash), and speed.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/common.h"
#include "io/model_file.h"
#include "testlib.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

using namespace beagle;

static std::string env_or_fail(const char* name) {
    const char* v = getenv(name);
    if (!v || !*v) {
        fprintf(stderr, "FAIL: environment variable %s is not set (run via scripts/run_tests.sh)\n", name);
        exit(1);
    }
    return v;
}

static std::vector<std::string> split(PreSplit kind, const std::string& s) {
    std::vector<std::pair<size_t, size_t>> r;
    pre_split(kind, s, 0, s.size(), &r);
    std::vector<std::string> out;
    for (auto& p : r) out.push_back(s.substr(p.first, p.second - p.first));
    return out;
}

static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (auto& x : v) s += "[" + x + "]";
    return s;
}

static std::string ids_str(const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += std::to_string(x) + " ";
    return s;
}

#define CHECK_SPLIT(kind, text, ...)                                                     \
    do {                                                                                 \
        std::vector<std::string> want_ = {__VA_ARGS__};                                 \
        std::vector<std::string> got_ = split(kind, text);                              \
        CHECK(got_ == want_, "%s: got %s want %s", #kind, join(got_).c_str(), join(want_).c_str()); \
    } while (0)

static void test_unicode() {
    CHECK(is_letter('a') && is_letter('Z') && !is_letter('1') && !is_letter('_'));
    CHECK(is_letter(0xE9) && is_letter(0x4F60) && is_letter(0x0416) && is_letter(0x0645));  // é 你 Ж م
    CHECK(!is_letter(0x1F600) && !is_letter(0x3002));                                       // 😀 。
    CHECK(is_number('7') && is_number(0x0663) && is_number(0xB2) && is_number(0xBD) && is_number(0x216B));  // ٣ ² ½ Ⅻ
    CHECK(!is_number('a') && !is_number(0x4E00));
    CHECK(is_space(' ') && is_space('\t') && is_space('\n') && is_space(0x0B) && is_space(0x85) && is_space(0xA0));
    CHECK(is_space(0x3000) && is_space(0x2002) && is_space(0x2028));
    CHECK(!is_space(0x1C) && !is_space(0x200B) && !is_space(0xFEFF) && !is_space('x'));  // not White_Space
    // UTF-8 encode/decode round trip over every scalar value.
    int bad = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        std::string s;
        utf8_append(s, cp);
        int len;
        if (utf8_decode(s, 0, &len) != cp || len != (int)s.size() || !utf8_valid(s) || utf8_len((unsigned char)s[0]) != len) bad++;
    }
    CHECK(bad == 0, "%d code points fail the UTF-8 round trip", bad);
}

static void test_pre_split() {
    // GPT-2: a space joins the following word; a whitespace run gives up its last space.
    CHECK_SPLIT(PreSplit::GPT2, "Hello  world", "Hello", " ", " world");
    CHECK_SPLIT(PreSplit::GPT2, "Hello world  ", "Hello", " world", "  ");
    CHECK_SPLIT(PreSplit::GPT2, "it's 42!!", "it", "'s", " 42", "!!");
    CHECK_SPLIT(PreSplit::GPT2, "I'LL", "I", "'", "LL");  // case-sensitive contractions
    CHECK_SPLIT(PreSplit::GPT2, "a\n\nb", "a", "\n", "\n", "b");
    CHECK_SPLIT(PreSplit::GPT2, " \t x", " \t", " x");  // \s+(?!\S) backs off one space
    CHECK_SPLIT(PreSplit::GPT2, "", );
    // SmolLM: each digit alone, then GPT-2 on the stretches between.
    CHECK_SPLIT(PreSplit::SMOLLM, "abc123 4", "abc", "1", "2", "3", " ", "4");
    CHECK_SPLIT(PreSplit::SMOLLM, "x  1", "x", "  ", "1");
    CHECK_SPLIT(PreSplit::SMOLLM, "v\xD9\xA3.5", "v", "\xD9\xA3", ".", "5");  // Arabic-Indic 3 is \p{N}
    // Llama-3: digits in threes, case-insensitive contractions, newline runs kept together.
    CHECK_SPLIT(PreSplit::LLAMA3, "1234567", "123", "456", "7");
    CHECK_SPLIT(PreSplit::LLAMA3, "I'LL go", "I", "'LL", " go");
    CHECK_SPLIT(PreSplit::LLAMA3, "a\n\n b", "a", "\n\n", " b");
    CHECK_SPLIT(PreSplit::LLAMA3, "x.\n\ny", "x", ".\n\n", "y");
    CHECK_SPLIT(PreSplit::LLAMA3, "(hello)", "(hello", ")");
    CHECK_SPLIT(PreSplit::LLAMA3, "\thi", "\thi");
    CHECK_SPLIT(PreSplit::QWEN2, "123", "1", "2", "3");
    CHECK_THROWS(pre_split_kind("no-such-pre", "x.gguf"), "no-such-pre");
}

static double time_encode(const Tokenizer& tok, const std::string& text, int reps) {
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        std::vector<int> ids = tok.encode(text, true, true);
        double dt = now_seconds() - t0;
        if (dt < best) best = dt;
        CHECK(!ids.empty());
    }
    return best;
}

static std::string ten_kb_text() {
    const char* para =
        "The quick brown fox jumps over the lazy dog; it's 3.14159 and 1,234,567 apples. "
        "def f(x):\n    return x ** 2  # comment\n\tIndented\ttabs   and   spaces. "
        "Unicode: caf\xC3\xA9 na\xC3\xAFve \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C "
        "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xF0\x9F\x98\x80 <|im_start|>user\n";
    std::string s;
    while (s.size() < 10240) s += para;
    size_t n = 10240;
    while ((s[n] & 0xC0) == 0x80) n--;  // cut at a character boundary
    return s.substr(0, n);
}

static void test_smollm2(const std::string& model_path) {
    std::unique_ptr<ModelFile> mf = load_model(model_path);
    CHECK(mf->tokenizer.kind == TokenizerSpec::BPE_BYTELEVEL, "SmolLM2 GGUF tokenizer kind %d", (int)mf->tokenizer.kind);
    std::unique_ptr<Tokenizer> tok = Tokenizer::create(mf->tokenizer);
    CHECK(tok->vocab_size() == 49152);
    // Ids from HF tokenizers (see test_tokenizer_hf.py for the broad comparison).
    std::vector<int> ids = tok->encode("Hello world! It's 12345 <|im_start|>user", false, true);
    std::vector<int> want = {19556, 905, 17, 657, 506, 216, 33, 34, 35, 36, 37, 216, 1, 4093};
    CHECK(ids == want, "got %s", ids_str(ids).c_str());
    CHECK(tok->decode(ids, true) == "Hello world! It's 12345 <|im_start|>user");
    CHECK(tok->decode(ids, false) == "Hello world! It's 12345 user");  // control tokens hidden
    std::vector<int> plain = tok->encode("<|im_start|>", false, false);
    CHECK(plain.size() > 1 && plain[0] != 1, "without parse_special <|im_start|> is text: %s", ids_str(plain).c_str());
    CHECK(tok->encode("", false, true).empty());
    CHECK(tok->is_eog(2) && tok->is_eog(0) && !tok->is_eog(1) && !tok->is_eog(19556));
    CHECK(tok->eos() == 2, "eos %d", tok->eos());
    CHECK_THROWS(tok->encode("ab\xFF" "cd", false, true), "byte offset 2");
    CHECK_THROWS(tok->encode("\xE4\xBD", false, true), "byte offset 0");
    CHECK_THROWS(tok->decode_token(-1, 49152), "out of range");
    CHECK_THROWS(tok->decode_token(-1, -1), "out of range");

    std::string chat = apply_chat_template(*tok, "What is 2+2?");
    CHECK(chat == "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                  "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
          "chat: %s", chat.c_str());
    // the prefix datagen --self-prompts continues: what the template writes before the user's words
    CHECK(chat_user_prefix(*tok) == "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                                    "Face<|im_end|>\n<|im_start|>user\n",
          "user prefix: %s", chat_user_prefix(*tok).c_str());
    chat = apply_chat_template(*tok, "Hi", "Be brief.");
    CHECK(chat == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    std::vector<int> cids = tok->encode(chat, false, true);
    CHECK(cids.front() == 1 && tok->decode(cids, true) == chat);

    std::string text = ten_kb_text();
    double dt = time_encode(*tok, text, 3);
    printf("SmolLM2 byte-level BPE: 10 KB in %.2f ms\n", dt * 1e3);
    CHECK(dt < 0.050, "10 KB took %.1f ms (limit 50)", dt * 1e3);
    CHECK(tok->decode(tok->encode(text, false, true), true) == text);
}

static void test_spm(const std::string& models) {
    std::unique_ptr<Tokenizer> llama = Tokenizer::create(load_tokenizer_file(models + "/tokenizer.model"));
    CHECK(llama->vocab_size() == 32000 && llama->bos() == 1 && llama->eos() == 2);
    // sentencepiece: encode("Hello world") = [15043, 3186]; encode(" Hello  world") = [29871, 15043, 29871, 3186].
    CHECK(llama->encode("Hello world", true, false) == std::vector<int>({1, 15043, 3186}));
    CHECK(llama->encode(" Hello  world", false, false) == std::vector<int>({29871, 15043, 29871, 3186}));
    CHECK(llama->encode("   ", false, false) == std::vector<int>({268}));  // "▁▁▁▁"
    CHECK(llama->decode({1, 15043, 3186}) == "Hello world");
    CHECK(llama->decode({15043, 3186}) == " Hello world");  // no BOS: the dummy-prefix space stays
    CHECK(llama->encode("", true, false) == std::vector<int>({1}));
    // Byte fallback: U+1F600 is not a piece -> <0xF0><0x9F><0x98><0x80> = ids 243 162 155 131.
    std::vector<int> e = llama->encode("\xF0\x9F\x98\x80", false, false);
    CHECK(e == std::vector<int>({29871, 243, 162, 155, 131}), "got %s", ids_str(e).c_str());
    CHECK(llama->decode(e) == " \xF0\x9F\x98\x80");
    CHECK(llama->is_eog(2) && !llama->is_eog(1));
    CHECK_THROWS(apply_chat_template(*llama, "hi"), "--chat-template");
    {  // Llama-2 named by --chat-template: the template's leading <s> is left to encode(add_bos), one BOS
        std::unique_ptr<Tokenizer> l2 = Tokenizer::create(llama->spec());
        l2->set_chat_template("llama2");
        std::string t = apply_chat_template(*l2, "hi");
        CHECK(t == (l2->spec().prompt_bos() ? "[INST] hi [/INST]" : "<s>[INST] hi [/INST]"), "llama2: %s", t.c_str());
        std::vector<int> ids = l2->encode(t, l2->spec().prompt_bos(), true);
        CHECK(ids.size() > 2 && ids[0] == 1 && ids[1] != 1, "one BOS: %s", ids_str(ids).c_str());
        CHECK_THROWS(l2->set_chat_template("llama-2"), "expected one of");
    }
    CHECK_THROWS(llama->encode("ok\xC3", true, false), "byte offset 2");
    double dt = time_encode(*llama, ten_kb_text(), 3);
    printf("Llama-2 SentencePiece BPE: 10 KB in %.2f ms\n", dt * 1e3);
    CHECK(dt < 0.050, "10 KB took %.1f ms (limit 50)", dt * 1e3);

    std::unique_ptr<Tokenizer> t512 = Tokenizer::create(load_tokenizer_file(models + "/tok512.bin"));
    CHECK(t512->vocab_size() == 512);
    CHECK(t512->encode("Once upon a time", true, false) == std::vector<int>({1, 403, 407, 261, 378}));
    CHECK(t512->decode_token(1, 403) == "Once", "after BOS the leading space is dropped (run.c)");
    CHECK(t512->decode_token(403, 407) == " upon");
    CHECK(t512->decode_token(-1, 403) == " Once");
    CHECK(t512->decode_token(1, 3 + 'A') == "A");  // <0x41>
    CHECK(t512->decode_token(1, 3 + ' ') == " ", "a byte piece keeps its space after BOS (run.c)");
    CHECK(t512->decode_token(-1, 1) == "" && t512->decode_token(-1, 1, true) == "\n<s>\n");
    CHECK(t512->is_eog(2));
}

// Write bytes to a temporary file with the given suffix; returns its path.
static std::string temp_file(const std::string& suffix, const std::string& data) {
    static int counter = 0;
    std::string p = strfmt("/tmp/beagle_test_tok_%d_%d%s", (int)getpid(), counter++, suffix.c_str());
    write_file_atomic(p, data.data(), data.size());
    return p;
}

static void test_bad_files(const std::string& models) {
    std::string bin = read_file(models + "/tok512.bin");
    std::string p = temp_file(".bin", bin.substr(0, bin.size() - 3));
    CHECK_THROWS(load_tokenizer_file(p), "truncated");
    remove(p.c_str());
    p = temp_file(".bin", std::string("\x07\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff", 12));
    CHECK_THROWS(load_tokenizer_file(p), "length -1");
    remove(p.c_str());
    p = temp_file(".bin", "ab");
    CHECK_THROWS(load_tokenizer_file(p), "truncated");
    remove(p.c_str());

    std::string model = read_file(models + "/tokenizer.model");
    p = temp_file(".model", model.substr(0, model.size() / 2));
    CHECK_THROWS(load_tokenizer_file(p), "byte offset");
    remove(p.c_str());
    p = temp_file(".model", "");
    CHECK_THROWS(load_tokenizer_file(p), "no pieces");
    remove(p.c_str());

    p = temp_file(".json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []");
    CHECK_THROWS(load_tokenizer_file(p), "JSON");
    remove(p.c_str());
    p = temp_file(".json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}");
    CHECK_THROWS(load_tokenizer_file(p), "WordPiece");
    remove(p.c_str());
    p = temp_file(".json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]},"
                           " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}");
    TokenizerSpec s = load_tokenizer_file(p);
    CHECK_THROWS(Tokenizer::create(s), "'ab' is not in the vocabulary");
    remove(p.c_str());
    CHECK_THROWS(load_tokenizer_file("/nonexistent/tokenizer.bin"), "/nonexistent/tokenizer.bin");

    // Inconsistent specs.
    TokenizerSpec bad;
    CHECK_THROWS(Tokenizer::create(bad), "no tokenizer");
    bad.kind = TokenizerSpec::SPM;
    bad.tokens = {"a", "b"};
    bad.scores = {0};
    CHECK_THROWS(Tokenizer::create(bad), "scores");
    bad.scores = {0, 0};
    bad.bos = 5;
    CHECK_THROWS(Tokenizer::create(bad), "bos token id 5");

    // Mutated files: each load/create/encode must either work or throw Error.
    std::mt19937 rng(7);
    int ok = 0, errors = 0;
    for (int it = 0; it < 200; it++) {
        bool use_model = it % 2;
        std::string d = use_model ? model : bin;
        int kind = it % 5;
        if (kind == 0) d.resize(rng() % d.size());
        else if (kind == 1)
            for (int k = 0; k < 8; k++) d[rng() % d.size()] ^= (char)(1 << (rng() % 8));
        else if (kind == 2) d[rng() % 64] = (char)rng();
        else if (kind == 3) d.insert(rng() % d.size(), std::string(rng() % 16, (char)rng()));
        else for (int k = 0; k < 4; k++) d[rng() % d.size()] = (char)0xFF;
        std::string path = temp_file(use_model ? ".model" : ".bin", d);
        try {
            std::unique_ptr<Tokenizer> t = Tokenizer::create(load_tokenizer_file(path));
            std::vector<int> ids = t->encode("Hello world, 123 caf\xC3\xA9 \xF0\x9F\x98\x80", true, true);
            t->decode(ids);
            ok++;
        } catch (const Error&) {
            errors++;
        }
        remove(path.c_str());
    }
    printf("mutated tokenizer files: %d loaded, %d rejected with Error\n", ok, errors);
    CHECK(ok + errors == 200);
}

int main() {
    std::string model = env_or_fail("BEAGLE_MODEL");
    std::string models = test_root() + "/data/models";
    if (!file_exists(model)) {
        fprintf(stderr, "FAIL: SmolLM2 model not found at %s (run make model)\n", model.c_str());
        return 1;
    }
    test_unicode();
    test_pre_split();
    test_smollm2(model);
    test_spm(models);
    test_bad_files(models);
    return test_summary("test_tokenizer");
}
