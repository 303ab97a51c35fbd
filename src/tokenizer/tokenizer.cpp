// tokenizer.cpp: Tokenizer::create (checks a TokenizerSpec, picks byte-level BPE or SentencePiece
// BPE), decode, end-of-generation ids, special-token matching shared by both algorithms, and the
// ChatML prompt builder. Callers: the CLI (generate, tokenize), datagen and tests.
#include <algorithm>
#include <cstring>

#include "../core/common.h"
#include "tokenizer.h"
#include "tokenizer_impl.h"

namespace beagle {

void check_utf8(const std::string& text) {
    size_t bad = 0;
    if (!utf8_valid(text, &bad))
        fail("invalid UTF-8 in input text at byte offset %zu (byte 0x%02X); expected UTF-8 text", bad,
             (unsigned)(unsigned char)text[bad]);
}

void SpecialTokens::build(const TokenizerSpec& spec) {
    entries.clear();
    for (size_t id = 0; id < spec.tokens.size(); id++) {
        int type = spec.types[id];
        if ((type != 3 && type != 4) || spec.tokens[id].empty()) continue;
        entries.push_back({spec.tokens[id], (int)id, type == 4});
    }
    std::stable_sort(entries.begin(), entries.end(),
                     [](const Entry& a, const Entry& b) { return a.text.size() > b.text.size(); });
    by_first.assign(256, {});
    for (size_t k = 0; k < entries.size(); k++) by_first[(unsigned char)entries[k].text[0]].push_back((int)k);
}

void SpecialTokens::split(const std::string& text, bool parse_special, std::vector<Fragment>* out) const {
    out->clear();
    size_t n = text.size(), start = 0, i = 0;
    if (!entries.empty()) {
        while (i < n) {
            int hit = -1;
            for (int k : by_first[(unsigned char)text[i]]) {
                const Entry& e = entries[k];
                if (!parse_special && !e.always) continue;
                if (text.compare(i, e.text.size(), e.text) == 0) {
                    hit = k;
                    break;
                }
            }
            if (hit < 0) {
                i++;
                continue;
            }
            if (i > start) out->push_back({start, i, -1});
            out->push_back({i, i + entries[hit].text.size(), entries[hit].id});
            i += entries[hit].text.size();
            start = i;
        }
    }
    if (start < n) out->push_back({start, n, -1});
}

std::unique_ptr<Tokenizer> Tokenizer::create(const TokenizerSpec& spec_in) {
    TokenizerSpec spec = spec_in;
    const char* src = spec.source.empty() ? "tokenizer" : spec.source.c_str();
    if (spec.kind == TokenizerSpec::NONE) fail("%s: no tokenizer (expected byte-level BPE or SentencePiece data)", src);
    size_t n = spec.tokens.size();
    if (n == 0) fail("%s: tokenizer has no tokens", src);
    if (n > (size_t)1 << 30) fail("%s: tokenizer has %zu tokens (too many)", src, n);
    auto check_id = [&](int id, const char* what) {
        if (id < -1 || id >= (int)n) fail("%s: %s token id %d out of range [0, %zu)", src, what, id, n);
    };
    check_id(spec.bos, "bos");
    check_id(spec.eos, "eos");
    check_id(spec.unk, "unk");
    check_id(spec.pad, "pad");
    check_id(spec.eot, "eot");
    if (spec.types.empty()) {
        // No types stored: everything normal except the declared special ids.
        spec.types.assign(n, 1);
        for (int id : {spec.bos, spec.eos, spec.eot})
            if (id >= 0) spec.types[id] = 3;
        if (spec.unk >= 0) spec.types[spec.unk] = 2;
    }
    if (spec.types.size() != n) fail("%s: %zu token types for %zu tokens", src, spec.types.size(), n);
    for (size_t i = 0; i < n; i++)
        if (spec.types[i] < 0 || spec.types[i] > 6)
            fail("%s: token %zu has type %d (expected 0..6)", src, i, spec.types[i]);

    std::unique_ptr<Tokenizer> tok;
    if (spec.kind == TokenizerSpec::BPE_BYTELEVEL) {
        if (spec.merges.empty()) fail("%s: byte-level BPE tokenizer has no merges", src);
        tok = make_bpe_tokenizer(spec);
    } else if (spec.kind == TokenizerSpec::SPM) {
        if (spec.scores.size() != n) fail("%s: %zu token scores for %zu tokens (SentencePiece needs one per token)", src, spec.scores.size(), n);
        tok = make_spm_tokenizer(spec);
    } else {
        fail("%s: unknown tokenizer kind %d", src, (int)spec.kind);
    }

    // End of generation: eos, eot, and the end-of-turn / end-of-text control tokens by name.
    std::vector<int>& eog = tok->eog_ids_;
    if (spec.eos >= 0) eog.push_back(spec.eos);
    if (spec.eot >= 0) eog.push_back(spec.eot);
    static const char* kEogNames[] = {"<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "<|eom_id|>"};
    for (size_t i = 0; i < n; i++) {
        if (spec.types[i] != 3 && spec.types[i] != 4) continue;
        for (const char* name : kEogNames)
            if (spec.tokens[i] == name) eog.push_back((int)i);
    }
    std::sort(eog.begin(), eog.end());
    eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
    return tok;
}

std::string Tokenizer::decode(const std::vector<int>& ids, bool render_special) const {
    std::string out;
    int prev = -1;
    for (int id : ids) {
        out += decode_token(prev, id, render_special);
        prev = id;
    }
    return out;
}

bool Tokenizer::is_eog(int id) const {
    return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

// The system text a ChatML template inserts when the conversation has none, e.g. SmolLM2's
// "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\n' }}".
// Returns "" when the template has no such literal (the system turn then comes from a variable).
static std::string default_system_from_template(const std::string& tmpl) {
    const std::string start = "<|im_start|>system";
    size_t p = tmpl.find(start);
    while (p != std::string::npos) {
        size_t q = p + start.size();
        if (tmpl.compare(q, 1, "\n") == 0) q += 1;
        else if (tmpl.compare(q, 2, "\\n") == 0) q += 2;
        else q = std::string::npos;
        if (q != std::string::npos) {
            size_t e = tmpl.find("<|im_end|>", q);
            if (e != std::string::npos) {
                std::string text = tmpl.substr(q, e - q);
                if (!text.empty() && text.find_first_of("'\"{}+") == std::string::npos) return text;
            }
        }
        p = tmpl.find(start, p + 1);
    }
    return "";
}

static std::string turn_start(const std::string& role) {
    return "<|im_start|>" + role + "\n";
}

std::string apply_chat_template(const Tokenizer& tok, const std::string& user, const std::string& system) {
    std::vector<ChatMessage> messages;
    if (!system.empty()) messages.push_back({"system", system});
    messages.push_back({"user", user});
    return apply_chat_template(tok, messages);
}

// The default system turn (when the conversation has none of its own); throws Error without ChatML tokens.
static std::string default_system_turn(const Tokenizer& tok) {
    const TokenizerSpec& spec = tok.spec();
    bool has_start = false, has_end = false;
    for (const std::string& t : spec.tokens) {
        if (t == "<|im_start|>") has_start = true;
        if (t == "<|im_end|>") has_end = true;
    }
    if (!has_start || !has_end)
        fail("%s: no ChatML tokens <|im_start|> and <|im_end|> in the vocabulary; only ChatML chat prompts are supported",
             spec.source.empty() ? "tokenizer" : spec.source.c_str());
    std::string sys = default_system_from_template(spec.chat_template);
    return sys.empty() ? "" : turn_start("system") + sys + "<|im_end|>\n";
}

std::string apply_chat_template(const Tokenizer& tok, const std::vector<ChatMessage>& messages) {
    std::string out = default_system_turn(tok);
    if (!messages.empty() && messages[0].role == "system") out.clear();
    for (const ChatMessage& m : messages) out += turn_start(m.role) + m.content + "<|im_end|>\n";
    out += turn_start("assistant");
    return out;
}

std::string chat_user_prefix(const Tokenizer& tok) {
    return default_system_turn(tok) + turn_start("user");
}

}  // namespace beagle
