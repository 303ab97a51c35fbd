// bpe.cpp: byte-level BPE (GPT-2 style; SmolLM2, Llama-3): special tokens cut out first, then the
// pre-tokenizer regex (written by hand, no regex engine), the GPT-2 byte-to-unicode map, and merges
// applied lowest rank first with a heap. Built by Tokenizer::create (tokenizer.cpp).
#include <cstring>
#include <queue>
#include <unordered_map>

#include "../core/common.h"
#include "tokenizer_impl.h"
#include "unicode.h"

namespace beagle {

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers. Each works on code points cp[i, n) with byte offsets off[] into the text and
// emits byte ranges. The rules follow the regex alternatives in order (first alternative that
// matches wins, quantifiers greedy), see tokenizer_impl.h for the regexes.

PreSplit pre_split_kind(const std::string& pre, const std::string& source) {
    static const struct { const char* name; PreSplit kind; } kNames[] = {
        // "default"/"" (older GGUF files without tokenizer.ggml.pre) fall back to the GPT-2 regex.
        {"gpt2", PreSplit::GPT2}, {"gpt-2", PreSplit::GPT2}, {"default", PreSplit::GPT2}, {"", PreSplit::GPT2},
        {"phi-2", PreSplit::GPT2}, {"mpt", PreSplit::GPT2}, {"olmo", PreSplit::GPT2},
        {"smollm", PreSplit::SMOLLM}, {"starcoder", PreSplit::SMOLLM}, {"refact", PreSplit::SMOLLM},
        {"codeshell", PreSplit::SMOLLM}, {"command-r", PreSplit::SMOLLM},
        {"llama-bpe", PreSplit::LLAMA3}, {"llama3", PreSplit::LLAMA3}, {"llama-v3", PreSplit::LLAMA3},
        {"falcon3", PreSplit::LLAMA3}, {"pixtral", PreSplit::LLAMA3},
        {"qwen2", PreSplit::QWEN2}, {"stablelm2", PreSplit::QWEN2}, {"deepseek-r1-qwen", PreSplit::QWEN2},
    };
    for (const auto& e : kNames)
        if (pre == e.name) return e.kind;
    fail("%s: unsupported pre-tokenizer '%s' (supported: gpt2, smollm, llama-bpe, qwen2 and their aliases)",
         source.empty() ? "tokenizer" : source.c_str(), pre.c_str());
}

namespace {

struct Cps {
    std::vector<uint32_t> cp;
    std::vector<size_t> off;  // off[i] = byte offset of cp[i]; off[n] = end
};

// [^\s\p{L}\p{N}]
inline bool is_other(uint32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); }
inline bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

// Length (in code points) of a contraction at i: 's 't 're 've 'm 'll 'd, or 0.
// ignore_case for Llama-3's (?i:...) group (ASCII case, plus U+017F LONG S which folds to 's').
size_t contraction(const Cps& t, size_t i, size_t n, bool ignore_case) {
    if (t.cp[i] != '\'' || i + 1 >= n) return 0;
    auto low = [&](size_t k) -> uint32_t {
        uint32_t c = t.cp[k];
        if (!ignore_case) return c;
        if (c >= 'A' && c <= 'Z') return c + 32;
        if (c == 0x17F) return 's';
        return c;
    };
    uint32_t a = low(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 < n) {
        uint32_t b = low(i + 2);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    return 0;
}

// Whitespace at i (cp[i] is \s): \s+(?!\S) then \s+ : the run, minus its last code point when the
// run is longer than one and a non-space follows (that space then starts the next word).
size_t whitespace_end(const Cps& t, size_t i, size_t n) {
    size_t j = i;
    while (j < n && is_space(t.cp[j])) j++;
    if (j < n && j - i > 1) j--;
    return j;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(const Cps& t, size_t i, size_t n, std::vector<std::pair<size_t, size_t>>* out) {
    while (i < n) {
        size_t j;
        if (size_t c = contraction(t, i, n, false)) {
            j = i + c;
        } else {
            size_t k = (t.cp[i] == ' ' && i + 1 < n) ? i + 1 : i;  // optional leading space
            uint32_t d = t.cp[k];
            if (is_letter(d)) {
                for (j = k + 1; j < n && is_letter(t.cp[j]);) j++;
            } else if (is_number(d)) {
                for (j = k + 1; j < n && is_number(t.cp[j]);) j++;
            } else if (!is_space(d)) {
                for (j = k + 1; j < n && is_other(t.cp[j]);) j++;
            } else {
                j = whitespace_end(t, i, n);
            }
        }
        out->push_back({t.off[i], t.off[j]});
        i = j;
    }
}

// Llama-3 (digits_max 3) and Qwen2 (digits_max 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(const Cps& t, size_t i, size_t n, size_t digits_max, std::vector<std::pair<size_t, size_t>>* out) {
    while (i < n) {
        size_t j;
        uint32_t c = t.cp[i];
        if (size_t len = contraction(t, i, n, true)) {
            j = i + len;
        } else if (is_letter(c) || (!is_crlf(c) && !is_number(c) && i + 1 < n && is_letter(t.cp[i + 1]))) {
            for (j = i + 1; j < n && is_letter(t.cp[j]);) j++;
        } else if (is_number(c)) {
            for (j = i + 1; j < n && j - i < digits_max && is_number(t.cp[j]);) j++;
        } else {
            size_t k = (c == ' ' && i + 1 < n) ? i + 1 : i;
            if (is_other(t.cp[k])) {
                for (j = k + 1; j < n && is_other(t.cp[j]);) j++;
                while (j < n && is_crlf(t.cp[j])) j++;
            } else {
                // c is whitespace here. \s*[\r\n]+ : up to the last newline of the run.
                size_t last_nl = n;
                for (j = i; j < n && is_space(t.cp[j]); j++)
                    if (is_crlf(t.cp[j])) last_nl = j;
                j = last_nl < n ? last_nl + 1 : whitespace_end(t, i, n);
            }
        }
        out->push_back({t.off[i], t.off[j]});
        i = j;
    }
}

}  // namespace

void pre_split(PreSplit kind, const std::string& text, size_t begin, size_t end,
               std::vector<std::pair<size_t, size_t>>* out) {
    Cps t;
    t.cp.reserve(end - begin);
    t.off.reserve(end - begin + 1);
    for (size_t p = begin; p < end;) {
        int len;
        t.cp.push_back(utf8_decode(text, p, &len));
        t.off.push_back(p);
        p += len;
    }
    t.off.push_back(end);
    size_t n = t.cp.size();
    switch (kind) {
        case PreSplit::GPT2: split_gpt2(t, 0, n, out); break;
        case PreSplit::SMOLLM: {
            // Each \p{N} is its own piece; the stretches between are split by the GPT-2 regex.
            size_t s = 0;
            for (size_t i = 0; i < n; i++) {
                if (!is_number(t.cp[i])) continue;
                split_gpt2(t, s, i, out);
                out->push_back({t.off[i], t.off[i + 1]});
                s = i + 1;
            }
            split_gpt2(t, s, n, out);
            break;
        }
        case PreSplit::LLAMA3: split_llama3(t, 0, n, 3, out); break;
        case PreSplit::QWEN2: split_llama3(t, 0, n, 1, out); break;
    }
}

// ---------------------------------------------------------------------------------------------
// GPT-2's byte <-> unicode map: printable Latin-1 bytes stand for themselves, the other 68 bytes
// get code points 256, 257, ... in byte order, so every byte is a visible character.

static void byte_unicode_map(uint32_t byte_to_cp[256]) {
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_to_cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + extra++);
    }
}

namespace {

struct MergeInfo {
    int rank;
    int id;  // token of the merged pair
};

inline uint64_t pair_key(int a, int b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

class BpeTokenizer final : public Tokenizer {
public:
    explicit BpeTokenizer(const TokenizerSpec& spec);
    std::vector<int> encode(const std::string& text, bool add_bos, bool parse_special) const override;
    std::string decode_token(int prev, int id, bool render_special) const override;

private:
    PreSplit pre_;
    bool ignore_merges_;  // Llama-3: a pre-token that is itself in the vocabulary is one token
    std::unordered_map<std::string, int> token_id_;
    std::unordered_map<uint64_t, MergeInfo> merges_;
    int byte_token_[256];
    std::string byte_char_[256];  // UTF-8 of the unicode character standing for each byte
    std::vector<std::string> piece_;  // bytes each token decodes to
    SpecialTokens specials_;

    void encode_word(const std::string& text, size_t b, size_t e, std::vector<int>* out) const;
};

BpeTokenizer::BpeTokenizer(const TokenizerSpec& spec) {
    spec_ = spec;
    const char* src = spec.source.empty() ? "tokenizer" : spec.source.c_str();
    pre_ = pre_split_kind(spec.pre, spec.source);
    ignore_merges_ = pre_ == PreSplit::LLAMA3;
    size_t n = spec.tokens.size();
    token_id_.reserve(n * 2);
    for (size_t i = 0; i < n; i++) token_id_.emplace(spec.tokens[i], (int)i);  // first id wins

    uint32_t byte_to_cp[256];
    byte_unicode_map(byte_to_cp);
    std::vector<int> cp_to_byte(512, -1);
    for (int b = 0; b < 256; b++) {
        cp_to_byte[byte_to_cp[b]] = b;
        utf8_append(byte_char_[b], byte_to_cp[b]);
        auto it = token_id_.find(byte_char_[b]);
        byte_token_[b] = it == token_id_.end() ? -1 : it->second;
    }

    merges_.reserve(spec.merges.size() * 2);
    for (size_t r = 0; r < spec.merges.size(); r++) {
        const std::string& m = spec.merges[r];
        size_t sp = m.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size() || m.find(' ', sp + 1) != std::string::npos)
            fail("%s: merge %zu '%s' is not of the form 'left right'", src, r, m.c_str());
        std::string left = m.substr(0, sp), right = m.substr(sp + 1);
        auto a = token_id_.find(left), b = token_id_.find(right), c = token_id_.find(left + right);
        if (a == token_id_.end() || b == token_id_.end() || c == token_id_.end())
            fail("%s: merge %zu '%s': '%s' is not in the vocabulary", src, r, m.c_str(),
                 (a == token_id_.end() ? left : b == token_id_.end() ? right : left + right).c_str());
        merges_.emplace(pair_key(a->second, b->second), MergeInfo{(int)r, c->second});  // first rank wins
    }

    // What each token prints: user-defined and control tokens their text; others through the
    // inverse byte map (a token with a character outside the map prints its text, as HF does).
    piece_.resize(n);
    for (size_t i = 0; i < n; i++) {
        const std::string& t = spec.tokens[i];
        if (spec.types[i] == 3 || spec.types[i] == 4) {
            piece_[i] = t;
            continue;
        }
        std::string bytes;
        bool ok = utf8_valid(t);
        for (size_t p = 0; ok && p < t.size();) {
            int len;
            uint32_t cp = utf8_decode(t, p, &len);
            if (cp >= 512 || cp_to_byte[cp] < 0) ok = false;
            else bytes += (char)cp_to_byte[cp];
            p += len;
        }
        piece_[i] = ok ? bytes : t;
    }
    specials_.build(spec_);
}

void BpeTokenizer::encode_word(const std::string& text, size_t b, size_t e, std::vector<int>* out) const {
    size_t n = e - b;
    // A byte with no token in the vocabulary (SmolLM2 has none for 0x04, 0x1D, ...) is dropped,
    // as HF tokenizers (BPE without unk_token) and llama.cpp do.
    auto emit_byte = [&](unsigned char c) {
        if (byte_token_[c] >= 0) out->push_back(byte_token_[c]);
    };
    if (n == 1) {
        emit_byte((unsigned char)text[b]);
        return;
    }
    if (ignore_merges_) {
        std::string mapped;
        for (size_t i = b; i < e; i++) mapped += byte_char_[(unsigned char)text[i]];
        auto it = token_id_.find(mapped);
        if (it != token_id_.end()) {
            out->push_back(it->second);
            return;
        }
    }
    // Symbols form a linked list; candidate merges sit in a heap keyed by (rank, position).
    // A popped candidate is stale if either side has changed since it was pushed.
    struct Sym {
        int id, prev, next;
        unsigned char byte;
    };
    struct Cand {
        int rank, pos, left, right, merged;
        bool operator<(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::vector<Sym> sym(n);
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)text[b + k];
        sym[k] = {byte_token_[c], (int)k - 1, k + 1 < n ? (int)k + 1 : -1, c};
    }
    std::priority_queue<Cand> heap;
    auto consider = [&](int l) {
        int r = sym[l].next;
        if (r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
        auto it = merges_.find(pair_key(sym[l].id, sym[r].id));
        if (it != merges_.end()) heap.push({it->second.rank, l, sym[l].id, sym[r].id, it->second.id});
    };
    for (size_t k = 0; k + 1 < n; k++) consider((int)k);
    while (!heap.empty()) {
        Cand c = heap.top();
        heap.pop();
        int l = c.pos, r = sym[l].next;
        if (sym[l].id != c.left || r < 0 || sym[r].id != c.right) continue;
        sym[l].id = c.merged;
        sym[r].id = -2;  // dead
        sym[l].next = sym[r].next;
        if (sym[r].next >= 0) sym[sym[r].next].prev = l;
        if (sym[l].prev >= 0) consider(sym[l].prev);
        consider(l);
    }
    for (int k = 0; k >= 0; k = sym[k].next) {
        if (sym[k].id >= 0) out->push_back(sym[k].id);
        else emit_byte(sym[k].byte);  // a byte without a token (never merged): dropped
    }
}

std::vector<int> BpeTokenizer::encode(const std::string& text, bool add_bos, bool parse_special) const {
    check_utf8(text);
    std::vector<int> out;
    if (add_bos && spec_.bos >= 0) out.push_back(spec_.bos);
    std::vector<SpecialTokens::Fragment> frags;
    specials_.split(text, parse_special, &frags);
    std::vector<std::pair<size_t, size_t>> words;
    for (const auto& f : frags) {
        if (f.id >= 0) {
            out.push_back(f.id);
            continue;
        }
        words.clear();
        pre_split(pre_, text, f.begin, f.end, &words);
        for (const auto& w : words) encode_word(text, w.first, w.second, &out);
    }
    return out;
}

std::string BpeTokenizer::decode_token(int prev, int id, bool render_special) const {
    if (id < 0 || id >= vocab_size()) fail("token id %d out of range [0, %d)", id, vocab_size());
    if (spec_.types[id] == 3 && !render_special) return "";
    return piece_[id];
}

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(const TokenizerSpec& spec) {
    return std::unique_ptr<Tokenizer>(new BpeTokenizer(spec));
}

}  // namespace beagle
