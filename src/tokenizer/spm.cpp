// spm.cpp: SentencePiece-style BPE (Llama-2 tokenizer.model, llama2.c tokenizer.bin / tok512.bin,
// GGUF "llama" vocabularies): dummy-prefix space, spaces as "▁" (or ' ' for llama2.c files), merges
// of the adjacent pair whose concatenation has the highest score (leftmost on ties), then byte
// fallback <0xXX> or unk for what is not in the vocabulary. Built by Tokenizer::create.
#include <queue>
#include <unordered_map>

#include "../core/common.h"
#include "tokenizer_impl.h"
#include "unicode.h"

namespace beagle {

namespace {

const char* kSpaceMark = "\xE2\x96\x81";  // U+2581 "▁"

// "<0xXX>" -> XX, else -1.
int byte_piece_value(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = t[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

class SpmTokenizer final : public Tokenizer {
public:
    explicit SpmTokenizer(const TokenizerSpec& spec);
    std::vector<int> encode(const std::string& text, bool add_bos, bool parse_special) const override;
    std::string decode_token(int prev, int id, bool render_special) const override;

private:
    std::string space_;                          // what a space becomes: "▁", or " " for llama2.c files
    std::unordered_map<std::string, int> piece_id_;  // pieces merges may produce (normal, user-defined)
    int byte_token_[256];                        // <0xXX> pieces, -1 if absent
    std::vector<std::string> piece_;             // what each token prints
    std::vector<char> is_byte_;
    SpecialTokens specials_;

    void encode_text(const std::string& s, std::vector<int>* out) const;
};

SpmTokenizer::SpmTokenizer(const TokenizerSpec& spec) {
    spec_ = spec;
    space_ = spec.llama2c_spaces ? " " : kSpaceMark;
    size_t n = spec.tokens.size();
    for (int b = 0; b < 256; b++) byte_token_[b] = -1;
    piece_.resize(n);
    is_byte_.assign(n, 0);
    piece_id_.reserve(n * 2);
    for (size_t i = 0; i < n; i++) {
        const std::string& t = spec.tokens[i];
        int type = spec.types[i];
        int bv = byte_piece_value(t);
        if (bv >= 0 && (byte_token_[bv] < 0 || (type == 6 && spec.types[byte_token_[bv]] != 6))) byte_token_[bv] = (int)i;
        if (bv >= 0 && type != 2 && type != 3) {
            piece_[i] = std::string(1, (char)bv);
            is_byte_[i] = 1;
        }
        if (type == 0 || type == 1 || type == 4) piece_id_.emplace(t, (int)i);  // first id wins
        if (!is_byte_[i]) {
            std::string p;
            for (size_t k = 0; k < t.size();) {
                if (!spec.llama2c_spaces && t.compare(k, 3, kSpaceMark) == 0) {
                    p += ' ';
                    k += 3;
                } else {
                    p += t[k++];
                }
            }
            piece_[i] = p;
        }
    }
    specials_.build(spec_);
}

// BPE over the already normalized text s (spaces replaced, dummy prefix added).
void SpmTokenizer::encode_text(const std::string& s, std::vector<int>* out) const {
    struct Sym {
        int start, len, prev, next;
    };
    struct Cand {
        float score;
        int left, size;
        bool operator<(const Cand& o) const { return score != o.score ? score < o.score : left > o.left; }
    };
    std::vector<Sym> sym;
    sym.reserve(s.size());
    for (size_t p = 0; p < s.size();) {
        int len = utf8_len((unsigned char)s[p]);
        int k = (int)sym.size();
        sym.push_back({(int)p, len, k - 1, -1});
        if (k > 0) sym[k - 1].next = k;
        p += len;
    }
    std::priority_queue<Cand> heap;
    std::string key;
    auto consider = [&](int l) {
        if (l < 0) return;
        int r = sym[l].next;
        if (r < 0) return;
        key.assign(s, sym[l].start, sym[l].len + sym[r].len);
        auto it = piece_id_.find(key);
        if (it != piece_id_.end()) heap.push({spec_.scores[it->second], l, (int)key.size()});
    };
    for (int k = 0; k + 1 < (int)sym.size(); k++) consider(k);
    while (!heap.empty()) {
        Cand c = heap.top();
        heap.pop();
        int l = c.left, r = sym[l].next;
        if (sym[l].len == 0 || r < 0 || sym[l].len + sym[r].len != c.size) continue;  // stale
        sym[l].len += sym[r].len;
        sym[r].len = 0;
        sym[l].next = sym[r].next;
        if (sym[r].next >= 0) sym[sym[r].next].prev = l;
        consider(sym[l].prev);
        consider(l);
    }
    for (int k = sym.empty() ? -1 : 0; k >= 0; k = sym[k].next) {
        key.assign(s, sym[k].start, sym[k].len);
        auto it = piece_id_.find(key);
        if (it != piece_id_.end()) {
            out->push_back(it->second);
            continue;
        }
        for (unsigned char c : key) {  // byte fallback, else unknown
            int id = byte_token_[c] >= 0 ? byte_token_[c] : spec_.unk;
            if (id < 0)
                fail("%s: '%s' is not in the vocabulary and there is no byte or unknown token", spec_.source.c_str(), key.c_str());
            out->push_back(id);
            if (byte_token_[c] < 0) break;  // one unk for the whole piece, as sentencepiece does
        }
    }
}

std::vector<int> SpmTokenizer::encode(const std::string& text, bool add_bos, bool parse_special) const {
    check_utf8(text);
    std::vector<int> out;
    if (add_bos && spec_.bos >= 0) out.push_back(spec_.bos);
    std::vector<SpecialTokens::Fragment> frags;
    specials_.split(text, parse_special, &frags);
    std::string s;
    for (const auto& f : frags) {
        if (f.id >= 0) {
            out.push_back(f.id);
            continue;
        }
        // Every text fragment starts the text or follows a special token, and gets the dummy
        // prefix (as llama.cpp does; sentencepiece and run.c only see one fragment).
        s.clear();
        if (spec_.add_space_prefix) s += space_;
        for (size_t i = f.begin; i < f.end; i++) {
            if (text[i] == ' ') s += space_;
            else s += text[i];
        }
        encode_text(s, &out);
    }
    return out;
}

std::string SpmTokenizer::decode_token(int prev, int id, bool render_special) const {
    if (id < 0 || id >= vocab_size()) fail("token id %d out of range [0, %d)", id, vocab_size());
    int type = spec_.types[id];
    if (type == 3) return render_special ? spec_.tokens[id] : "";
    const std::string& p = piece_[id];
    // llama2.c run.c: after BOS the leading space of a (non-byte) piece is dropped.
    if (prev >= 0 && prev == spec_.bos && !is_byte_[id] && !p.empty() && p[0] == ' ') return p.substr(1);
    return p;
}

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(const TokenizerSpec& spec) {
    return std::unique_ptr<Tokenizer>(new SpmTokenizer(spec));
}

}  // namespace beagle
