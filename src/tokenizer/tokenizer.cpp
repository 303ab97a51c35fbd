// tokenizer.cpp: Tokenizer::create (checks a TokenizerSpec, picks byte-level BPE or SentencePiece
// BPE), decode, end-of-generation ids, special-token matching shared by both algorithms, and chat
// prompts in the tokenizer's chat family (chat_template.h). Callers: the CLI, the server, datagen, tests.
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
    static const char* kEogNames[] = {"<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>", "<|eom_id|>",
                                      "<end_of_turn>", "<|end|>"};
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

void Tokenizer::set_chat_template(const std::string& name) {
    check_chat_template_name(name);
    spec_.chat_template_name = name;
}

static ChatTokens chat_tokens(const TokenizerSpec& spec, ChatFamily f) {
    ChatTokens t;
    int n = (int)spec.tokens.size();
    if (spec.bos >= 0 && spec.bos < n) t.bos = spec.tokens[spec.bos];
    if (spec.eos >= 0 && spec.eos < n) t.eos = spec.tokens[spec.eos];
    if (f == ChatFamily::CHATML) t.default_system = chatml_default_system(spec.chat_template);
    return t;
}

// The rendering with the leading bos_token text left out where encode adds BOS (see tokenizer.h).
static std::string without_bos(const TokenizerSpec& spec, ChatFamily f, const ChatTokens& t, std::string text) {
    if (chat_family_writes_bos(f) && spec.prompt_bos() && !t.bos.empty() && text.compare(0, t.bos.size(), t.bos) == 0)
        text.erase(0, t.bos.size());
    return text;
}

std::string apply_chat_template(const Tokenizer& tok, const std::string& user, const std::string& system) {
    std::vector<ChatMessage> messages;
    if (!system.empty()) messages.push_back({"system", system});
    messages.push_back({"user", user});
    return apply_chat_template(tok, messages);
}

std::string apply_chat_template(const Tokenizer& tok, const std::vector<ChatMessage>& messages) {
    const TokenizerSpec& spec = tok.spec();
    ChatFamily f = resolve_chat_family(spec);
    ChatTokens t = chat_tokens(spec, f);
    return without_bos(spec, f, t, render_chat(f, messages, t, true));
}

std::string chat_user_prefix(const Tokenizer& tok) {
    const TokenizerSpec& spec = tok.spec();
    ChatFamily f = resolve_chat_family(spec);
    ChatTokens t = chat_tokens(spec, f);
    const std::string mark = "\x01user\x01";  // cannot come out of a template's own text
    std::string text = without_bos(spec, f, t, render_chat(f, {{"user", mark}}, t, true));
    return text.substr(0, text.find(mark));
}

}  // namespace beagle
