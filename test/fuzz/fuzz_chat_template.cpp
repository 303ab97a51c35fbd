// fuzz_chat_template.cpp: libFuzzer harness for chat input: the bytes split at NUL into a chat
// template (as a model file carries it), a user message and a system message. apply_chat_template()
// resolves the chat family (an unrecognised template throws Error) and renders the prompt; encode() parses it with
// special tokens (SmolLM2's real byte-level BPE and pre-tokenizer, and a cut-down copy of its
// vocabulary that carries the fuzzed template). Valid UTF-8 must round-trip, decode(encode(s)) == s,
// except for the bytes that have no token (SmolLM2 has none for 0x04, 0x06, 0x13, 0x14, 0x16,
// 0x1D): those are dropped, as HF tokenizers does (bpe.cpp, encode_word).
// Needs the default model (weights/SmolLM2-135M-Instruct.Q4_1.gguf or $BEAGLE_MODEL).
#include <algorithm>

#include "fuzz_common.h"
#include "io/model_file.h"

using namespace beagle;

static const TokenizerSpec& smollm2_spec() {
    static TokenizerSpec spec = [] {
        auto mf = load_model(lt::smollm2());
        return mf->tokenizer;
    }();
    return spec;
}

// The first 300 tokens of SmolLM2 (specials, the byte symbols, the first merges) and the merges
// among them: a vocabulary with every byte token of the full one, cheap to build for each input.
static TokenizerSpec cut_spec() {
    const TokenizerSpec& full = smollm2_spec();
    TokenizerSpec s = full;
    const size_t n = 300;
    s.tokens.resize(n);
    if (s.types.size() > n) s.types.resize(n);
    if (s.scores.size() > n) s.scores.resize(n);
    std::vector<std::string> sorted(s.tokens);
    std::sort(sorted.begin(), sorted.end());
    auto has = [&](const std::string& t) { return std::binary_search(sorted.begin(), sorted.end(), t); };
    s.merges.clear();
    for (const std::string& m : full.merges) {
        size_t sp = m.find(' ');
        if (sp != std::string::npos && has(m.substr(0, sp)) && has(m.substr(sp + 1)) &&
            has(m.substr(0, sp) + m.substr(sp + 1)))
            s.merges.push_back(m);
    }
    return s;
}

// Bytes the vocabulary has a token for, by GPT-2's byte-to-character map (printable Latin-1 bytes
// stand for themselves, the other 68 get U+0100, U+0101, ... in byte order).
static std::vector<bool> bytes_with_token(const TokenizerSpec& spec) {
    std::vector<std::string> sorted(spec.tokens);
    std::sort(sorted.begin(), sorted.end());
    std::vector<bool> has(256);
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t cp = printable ? (uint32_t)b : next++;
        std::string ch = cp < 0x80 ? std::string(1, (char)cp) : std::string{(char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F))};
        has[b] = std::binary_search(sorted.begin(), sorted.end(), ch);
    }
    return has;
}

static void roundtrip(const Tokenizer& tok, const std::string& text) {
    static const std::vector<bool> has = bytes_with_token(smollm2_spec());
    std::vector<int> ids = tok.encode(text, false, true);
    std::string back = tok.decode(ids, true), want;
    for (char c : text)
        if (has[(unsigned char)c]) want += c;
    if (back != want) {
        fprintf(stderr, "round trip failed: %zu bytes in (%zu with a token), %zu bytes back\n", text.size(), want.size(),
                back.size());
        abort();
    }
}

static void run(const uint8_t* data, size_t n) {
    static const std::unique_ptr<Tokenizer> full = Tokenizer::create(smollm2_spec());
    static const TokenizerSpec cut = cut_spec();
    std::vector<std::string> parts = fuzz::split_nul(data, n, 3);
    parts.resize(3);
    TokenizerSpec s = cut;
    s.chat_template = parts[0];
    auto tok = Tokenizer::create(s);
    std::string prompt = apply_chat_template(*tok, parts[1], parts[2]);
    if (!utf8_valid(prompt)) {  // encode must refuse it with an Error
        tok->encode(prompt, false, true);
        fprintf(stderr, "encode accepted invalid UTF-8\n");
        abort();
    }
    roundtrip(*tok, prompt);
    roundtrip(*full, prompt);
}
FUZZ_TARGET(run)
