// tokenizer_files.cpp: load_tokenizer_file(): TokenizerSpec from a llama2.c tokenizer.bin, a
// SentencePiece tokenizer.model (protobuf, parsed by hand here) or an HF tokenizer.json (with the
// tokenizer_config.json beside it, if any). Called by `beagle tokenize -z`, generate and tests.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "../core/common.h"
#include "json.h"
#include "model_file.h"

namespace beagle {

namespace {

bool ends_with(const std::string& s, const char* suffix) {
    size_t n = strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool is_byte_piece(const std::string& t) {
    return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && isxdigit((unsigned char)t[3]) &&
           isxdigit((unsigned char)t[4]);
}

// ---------------------------------------------------------------------------------------------
// llama2.c tokenizer.bin: int32 max_token_length, then per token: float32 score, int32 length,
// that many bytes. The vocabulary size is not stored: tokens run to the end of the file.
// Conventions of run.c: 0 <unk>, 1 BOS, 2 EOS, <0xXX> byte pieces, ' ' (not "▁") for spaces.
TokenizerSpec load_llama2c_tokenizer(const std::string& path, const std::string& data) {
    const char* src = path.c_str();
    size_t n = data.size();
    if (n < 4) fail("%s: truncated llama2.c tokenizer: %zu bytes, expected at least a 4-byte header", src, n);
    int32_t max_len;
    memcpy(&max_len, data.data(), 4);
    if (max_len <= 0 || max_len > 65536)
        fail("%s: llama2.c tokenizer header max_token_length is %d, expected 1..65536 (is this a tokenizer.bin?)", src, max_len);
    TokenizerSpec spec;
    spec.kind = TokenizerSpec::SPM;
    spec.source = path;
    size_t off = 4;
    while (off < n) {
        if (off + 8 > n)
            fail("%s: truncated llama2.c tokenizer: token %zu at byte offset %zu needs 8 header bytes, file has %zu", src,
                 spec.tokens.size(), off, n - off);
        float score;
        int32_t len;
        memcpy(&score, data.data() + off, 4);
        memcpy(&len, data.data() + off + 4, 4);
        if (len < 0 || len > max_len)
            fail("%s: token %zu at byte offset %zu has length %d, expected 0..max_token_length %d", src,
                 spec.tokens.size(), off + 4, len, max_len);
        if (off + 8 + (size_t)len > n)
            fail("%s: truncated llama2.c tokenizer: token %zu at byte offset %zu needs %d bytes, file has %zu", src,
                 spec.tokens.size(), off + 8, len, n - off - 8);
        spec.tokens.emplace_back(data, off + 8, (size_t)len);
        spec.scores.push_back(score);
        off += 8 + (size_t)len;
    }
    if (spec.tokens.size() < 3) fail("%s: llama2.c tokenizer has %zu tokens, expected at least 3 (<unk>, BOS, EOS)", src, spec.tokens.size());
    spec.types.assign(spec.tokens.size(), 1);
    spec.unk = 0;
    spec.bos = 1;
    spec.eos = 2;
    spec.types[0] = 2;
    spec.types[1] = spec.types[2] = 3;
    for (size_t i = 3; i < spec.tokens.size(); i++)
        if (is_byte_piece(spec.tokens[i])) spec.types[i] = 6;
    spec.add_bos = true;
    spec.add_space_prefix = true;
    spec.llama2c_spaces = true;
    return spec;
}

// ---------------------------------------------------------------------------------------------
// SentencePiece tokenizer.model: a protobuf ModelProto. The fields we read:
//   ModelProto      1 pieces (repeated SentencePiece), 2 trainer_spec, 3 normalizer_spec
//   SentencePiece   1 piece (string), 2 score (float), 3 type (enum: 1 normal, 2 unknown, 3 control,
//                   4 user-defined, 5 unused, 6 byte)
//   TrainerSpec     3 model_type (1 unigram, 2 BPE, 3 word, 4 char), 35 byte_fallback,
//                   40 unk_id, 41 bos_id, 42 eos_id, 43 pad_id
//   NormalizerSpec  1 name, 2 precompiled_charsmap, 3 add_dummy_prefix, 4 remove_extra_whitespaces,
//                   5 escape_whitespaces
struct Pb {
    const std::string& path;
    const uint8_t* p;
    size_t begin, end, pos;  // absolute offsets into the file

    uint64_t varint() {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (pos >= end) fail("%s: truncated protobuf varint at byte offset %zu", path.c_str(), pos);
            uint8_t b = p[pos++];
            v |= (uint64_t)(b & 0x7F) << shift;
            if (!(b & 0x80)) return v;
        }
        fail("%s: protobuf varint longer than 10 bytes at byte offset %zu", path.c_str(), pos);
    }
    bool next(uint32_t* field, int* wire) {
        if (pos >= end) return false;
        size_t at = pos;
        uint64_t key = varint();
        *field = (uint32_t)(key >> 3);
        *wire = (int)(key & 7);
        if (*field == 0) fail("%s: protobuf field number 0 at byte offset %zu (corrupt file?)", path.c_str(), at);
        return true;
    }
    // A length-delimited field: returns [start, start + len) and moves past it.
    std::pair<size_t, size_t> len_field() {
        uint64_t len = varint();
        if (len > end - pos)
            fail("%s: protobuf field at byte offset %zu claims %llu bytes, only %zu remain (truncated file?)",
                 path.c_str(), pos, (unsigned long long)len, end - pos);
        size_t s = pos;
        pos += (size_t)len;
        return {s, pos};
    }
    uint32_t fixed32() {
        if (end - pos < 4) fail("%s: truncated protobuf fixed32 at byte offset %zu", path.c_str(), pos);
        uint32_t v;
        memcpy(&v, p + pos, 4);
        pos += 4;
        return v;
    }
    void skip(int wire) {
        size_t at = pos;
        switch (wire) {
            case 0: varint(); break;
            case 1:
                if (end - pos < 8) fail("%s: truncated protobuf fixed64 at byte offset %zu", path.c_str(), pos);
                pos += 8;
                break;
            case 2: len_field(); break;
            case 5: fixed32(); break;
            default: fail("%s: unsupported protobuf wire type %d at byte offset %zu (corrupt file?)", path.c_str(), wire, at);
        }
    }
    Pb sub(std::pair<size_t, size_t> r) const { return Pb{path, p, r.first, r.second, r.first}; }
    void expect_wire(int wire, int want, uint32_t field, const char* msg) {
        if (wire != want)
            fail("%s: protobuf %s field %u has wire type %d, expected %d at byte offset %zu", path.c_str(), msg, field,
                 wire, want, pos);
    }
};

TokenizerSpec load_sentencepiece_model(const std::string& path, const std::string& data) {
    const char* src = path.c_str();
    Pb pb{path, (const uint8_t*)data.data(), 0, data.size(), 0};
    TokenizerSpec spec;
    spec.kind = TokenizerSpec::SPM;
    spec.source = path;
    int model_type = 1;  // protobuf default: UNIGRAM
    bool byte_fallback = false, add_dummy_prefix = true, remove_extra_ws = true, escape_ws = true;
    std::string norm_name, charsmap;
    int64_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;
    uint32_t field;
    int wire;
    while (pb.next(&field, &wire)) {
        if (field == 1) {
            pb.expect_wire(wire, 2, field, "ModelProto.pieces");
            Pb sp = pb.sub(pb.len_field());
            std::string piece;
            float score = 0;
            int type = 1;
            uint32_t f;
            int w;
            while (sp.next(&f, &w)) {
                if (f == 1) {
                    sp.expect_wire(w, 2, f, "SentencePiece.piece");
                    auto r = sp.len_field();
                    piece.assign(data, r.first, r.second - r.first);
                } else if (f == 2) {
                    sp.expect_wire(w, 5, f, "SentencePiece.score");
                    uint32_t bits = sp.fixed32();
                    memcpy(&score, &bits, 4);
                } else if (f == 3) {
                    sp.expect_wire(w, 0, f, "SentencePiece.type");
                    type = (int)sp.varint();
                } else {
                    sp.skip(w);
                }
            }
            if (type < 1 || type > 6)
                fail("%s: piece %zu '%s' has type %d, expected 1..6", src, spec.tokens.size(), piece.c_str(), type);
            if (!utf8_valid(piece)) fail("%s: piece %zu is not valid UTF-8", src, spec.tokens.size());
            spec.tokens.push_back(piece);
            spec.scores.push_back(score);
            spec.types.push_back(type);
        } else if (field == 2) {
            pb.expect_wire(wire, 2, field, "ModelProto.trainer_spec");
            Pb ts = pb.sub(pb.len_field());
            uint32_t f;
            int w;
            while (ts.next(&f, &w)) {
                if (w != 0 || (f != 3 && f != 35 && f != 40 && f != 41 && f != 42 && f != 43)) {
                    ts.skip(w);
                    continue;
                }
                int64_t v = (int64_t)(int32_t)(uint32_t)ts.varint();  // int32 fields (negatives are sign-extended)
                if (f == 3) model_type = (int)v;
                else if (f == 35) byte_fallback = v != 0;
                else if (f == 40) unk_id = v;
                else if (f == 41) bos_id = v;
                else if (f == 42) eos_id = v;
                else pad_id = v;
            }
        } else if (field == 3) {
            pb.expect_wire(wire, 2, field, "ModelProto.normalizer_spec");
            Pb ns = pb.sub(pb.len_field());
            uint32_t f;
            int w;
            while (ns.next(&f, &w)) {
                if ((f == 1 || f == 2) && w == 2) {
                    auto r = ns.len_field();
                    (f == 1 ? norm_name : charsmap).assign(data, r.first, r.second - r.first);
                } else if ((f == 3 || f == 4 || f == 5) && w == 0) {
                    bool v = ns.varint() != 0;
                    if (f == 3) add_dummy_prefix = v;
                    else if (f == 4) remove_extra_ws = v;
                    else escape_ws = v;
                } else {
                    ns.skip(w);
                }
            }
        } else {
            pb.skip(wire);
        }
    }
    size_t n = spec.tokens.size();
    if (n == 0) fail("%s: SentencePiece model has no pieces (not a tokenizer.model, or truncated)", src);
    static const char* kTypes[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
    if (model_type != 2)
        fail("%s: SentencePiece model type %s is not supported (only BPE)", src,
             model_type >= 1 && model_type <= 4 ? kTypes[model_type] : "unknown");
    if (!charsmap.empty())
        fail("%s: SentencePiece normalizer '%s' with a precompiled character map is not supported (only identity)",
             src, norm_name.c_str());
    if (remove_extra_ws) fail("%s: SentencePiece normalizer with remove_extra_whitespaces is not supported", src);
    if (!escape_ws) fail("%s: SentencePiece normalizer without escape_whitespaces is not supported", src);
    auto id_or_none = [&](int64_t id, const char* what) -> int {
        if (id < 0) return -1;
        if (id >= (int64_t)n) fail("%s: trainer_spec %s %lld out of range [0, %zu)", src, what, (long long)id, n);
        return (int)id;
    };
    spec.unk = id_or_none(unk_id, "unk_id");
    spec.bos = id_or_none(bos_id, "bos_id");
    spec.eos = id_or_none(eos_id, "eos_id");
    spec.pad = id_or_none(pad_id, "pad_id");
    (void)byte_fallback;  // byte pieces, when present, are what the tokenizer falls back to
    spec.add_bos = true;  // Llama convention (sentencepiece itself adds no BOS)
    spec.add_space_prefix = add_dummy_prefix;
    return spec;
}

// ---------------------------------------------------------------------------------------------
// HF tokenizer.json (model type BPE). Byte-level vocabularies (pre_tokenizer ByteLevel, alone or
// after Digits or a Split regex) become BPE_BYTELEVEL with the matching `pre` name;
// SentencePiece-style ones (byte_fallback, "▁" spaces; e.g. Llama-2) become SPM, with each
// token's score = -(rank of the first merge that makes it), so higher-ranked merges win.

const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::string str_member(const JsonValue& obj, const char* key, const std::string& dflt = "") {
    const JsonValue* v = obj.find(key);
    return v && v->is_string() ? v->str : dflt;
}
bool bool_member(const JsonValue& obj, const char* key, bool dflt) {
    const JsonValue* v = obj.find(key);
    return v && v->type == JsonValue::BOOL ? v->boolean : dflt;
}

// The pre-tokenizer name for a byte-level pre_tokenizer, or "" when there is no ByteLevel step.
std::string hf_pre_name(const JsonValue* pre, const std::string& path) {
    if (!pre || pre->is_null()) return "";
    std::vector<const JsonValue*> steps;
    if (str_member(*pre, "type") == "Sequence") {
        const JsonValue* list = pre->find("pretokenizers");
        if (!list || !list->is_array()) fail("%s: pre_tokenizer Sequence without a 'pretokenizers' list", path.c_str());
        for (const JsonValue& s : list->items) steps.push_back(&s);
    } else {
        steps.push_back(pre);
    }
    bool digits = false, bytelevel = false, bl_regex = true;
    std::string split, other;
    for (const JsonValue* s : steps) {
        std::string t = str_member(*s, "type");
        if (t == "ByteLevel") {
            bytelevel = true;
            bl_regex = bool_member(*s, "use_regex", true);
        } else if (t == "Digits") {
            if (!bool_member(*s, "individual_digits", false))
                fail("%s: pre_tokenizer Digits without individual_digits is not supported", path.c_str());
            digits = true;
        } else if (t == "Split") {
            const JsonValue* pat = s->find("pattern");
            const JsonValue* re = pat ? pat->find("Regex") : nullptr;
            if (!re || !re->is_string()) fail("%s: pre_tokenizer Split without a Regex pattern is not supported", path.c_str());
            if (str_member(*s, "behavior") != "Isolated" || bool_member(*s, "invert", false))
                fail("%s: pre_tokenizer Split with behavior '%s' is not supported (only Isolated)", path.c_str(),
                     str_member(*s, "behavior").c_str());
            split = re->str;
        } else {
            other = t;
        }
    }
    if (!bytelevel) return "";
    if (!other.empty()) fail("%s: pre_tokenizer step '%s' is not supported with ByteLevel", path.c_str(), other.c_str());
    if (split.empty()) {
        if (!bl_regex) fail("%s: ByteLevel pre_tokenizer without a regex split is not supported", path.c_str());
        return digits ? "smollm" : "gpt2";
    }
    if (bl_regex || digits) fail("%s: this combination of Split, Digits and ByteLevel regex is not supported", path.c_str());
    if (split == kLlama3Regex) return "llama-bpe";
    if (split == kQwen2Regex) return "qwen2";
    if (split == kGpt2Regex) return "gpt2";
    fail("%s: unsupported pre-tokenizer regex '%s' (supported: GPT-2, Llama-3, Qwen2 patterns)", path.c_str(), split.c_str());
}

// True when a json tree mentions the SentencePiece space mark "▁" (Metaspace, Replace, Prepend).
bool mentions_space_mark(const JsonValue* v) {
    if (!v) return false;
    if (v->is_string()) return v->str.find("\xE2\x96\x81") != std::string::npos;
    for (const JsonValue& c : v->items)
        if (mentions_space_mark(&c)) return true;
    return false;
}

// Token text of a tokenizer_config.json entry: "…" or {"content": "…"}.
std::string config_token(const JsonValue& cfg, const char* key) {
    const JsonValue* v = cfg.find(key);
    if (!v) return "";
    if (v->is_string()) return v->str;
    if (v->is_object()) return str_member(*v, "content");
    return "";
}

// The special token a TemplateProcessing post-processor puts first in "single"
// ([{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}]), searched inside Sequences.
std::string template_bos(const JsonValue& pp) {
    if (str_member(pp, "type") == "TemplateProcessing") {
        const JsonValue* single = pp.find("single");
        if (single && single->is_array() && single->size() > 0)
            if (const JsonValue* st = single->items[0].find("SpecialToken")) return str_member(*st, "id");
        return "";
    }
    if (const JsonValue* list = pp.find("processors"))
        for (const JsonValue& p : list->items) {
            std::string t = template_bos(p);
            if (!t.empty()) return t;
        }
    return "";
}

TokenizerSpec load_hf_tokenizer_json(const std::string& path, const std::string& data) {
    const char* src = path.c_str();
    JsonValue root = json_parse(data, path);
    if (!root.is_object()) fail("%s: expected a JSON object at the top level, found %s", src, root.type_name());
    const JsonValue& model = json_require(root, "model", path);
    std::string mtype = str_member(model, "type", "BPE");
    if (mtype != "BPE") fail("%s: model type '%s' is not supported (only BPE)", src, mtype.c_str());
    const JsonValue& vocab = json_require(model, "vocab", path);
    if (!vocab.is_object()) fail("%s: model.vocab is %s, expected an object {token: id}", src, vocab.type_name());

    // Vocabulary and added tokens, by id.
    std::vector<std::pair<int64_t, std::string>> entries;
    std::vector<std::pair<int64_t, bool>> added;  // id, special
    for (size_t i = 0; i < vocab.size(); i++)
        entries.push_back({json_int(vocab.items[i], "model.vocab['" + vocab.keys[i] + "']"), vocab.keys[i]});
    if (const JsonValue* at = root.find("added_tokens")) {
        if (!at->is_array()) fail("%s: added_tokens is %s, expected an array", src, at->type_name());
        for (const JsonValue& t : at->items) {
            int64_t id = json_int(json_require(t, "id", path), "added_tokens[].id");
            entries.push_back({id, json_string(json_require(t, "content", path), "added_tokens[].content")});
            added.push_back({id, bool_member(t, "special", false)});
        }
    }
    int64_t max_id = -1;
    for (const auto& e : entries) {
        if (e.first < 0 || e.first >= (1 << 30)) fail("%s: token '%s' has id %lld out of range", src, e.second.c_str(), (long long)e.first);
        max_id = std::max(max_id, e.first);
    }
    if (max_id < 0) fail("%s: empty vocabulary", src);
    // Ids may leave holes ([UNUSED_i] below), but not so many that a few bytes of JSON allocate gigabytes.
    const int64_t kMaxHoles = 1 << 16;
    if (max_id >= (int64_t)entries.size() + kMaxHoles)
        fail("%s: token id %lld but only %zu tokens are defined: expected ids below %lld (at most %lld unused ids)", src,
             (long long)max_id, entries.size(), (long long)entries.size() + kMaxHoles, (long long)kMaxHoles);
    TokenizerSpec spec;
    spec.source = path;
    size_t n = (size_t)max_id + 1;
    spec.tokens.assign(n, "");
    spec.types.assign(n, 1);
    std::vector<char> seen(n, 0);
    for (const auto& e : entries) {
        spec.tokens[e.first] = e.second;  // an added token overrides the vocab entry with its id
        seen[e.first] = 1;
    }
    for (const auto& a : added) spec.types[a.first] = a.second ? 3 : 4;
    for (size_t i = 0; i < n; i++)
        if (!seen[i]) {
            spec.tokens[i] = strfmt("[UNUSED_%zu]", i);  // a hole in the ids
            spec.types[i] = 5;
        }
    std::unordered_map<std::string, int> id_of;
    for (size_t i = 0; i < n; i++) id_of.emplace(spec.tokens[i], (int)i);
    auto find_id = [&](const std::string& t) -> int {
        auto it = id_of.find(t);
        return it == id_of.end() ? -1 : it->second;
    };

    // Merges: "a b" strings or ["a", "b"] pairs.
    std::vector<std::pair<std::string, std::string>> merges;
    if (const JsonValue* m = model.find("merges")) {
        if (!m->is_array()) fail("%s: model.merges is %s, expected an array", src, m->type_name());
        for (size_t r = 0; r < m->size(); r++) {
            const JsonValue& e = m->items[r];
            if (e.is_string()) {
                size_t sp = e.str.find(' ');
                if (sp == std::string::npos) fail("%s: merge %zu '%s' is not 'left right'", src, r, e.str.c_str());
                merges.push_back({e.str.substr(0, sp), e.str.substr(sp + 1)});
            } else if (e.is_array() && e.size() == 2 && e.items[0].is_string() && e.items[1].is_string()) {
                merges.push_back({e.items[0].str, e.items[1].str});
            } else {
                fail("%s: merge %zu (%s) is neither \"left right\" nor [\"left\", \"right\"]", src, r, e.where().c_str());
            }
        }
    }

    std::string pre = hf_pre_name(root.find("pre_tokenizer"), path);
    bool byte_fallback = bool_member(model, "byte_fallback", false);
    if (!pre.empty()) {
        spec.kind = TokenizerSpec::BPE_BYTELEVEL;
        spec.pre = pre;
        // NFC (Qwen2) is not applied: it changes only text that is not already NFC.
        for (const auto& m : merges) {
            if (m.first.find(' ') != std::string::npos || m.second.find(' ') != std::string::npos)
                fail("%s: merge ('%s', '%s') has a space inside a token; byte-level merges cannot", src, m.first.c_str(), m.second.c_str());
            spec.merges.push_back(m.first + " " + m.second);
        }
    } else if (byte_fallback || mentions_space_mark(root.find("normalizer")) || mentions_space_mark(root.find("pre_tokenizer")) ||
               mentions_space_mark(root.find("decoder"))) {
        spec.kind = TokenizerSpec::SPM;
        spec.scores.assign(n, 0.0f);
        std::vector<char> scored(n, 0);
        for (size_t r = 0; r < merges.size(); r++) {
            int id = find_id(merges[r].first + merges[r].second);
            if (id < 0) fail("%s: merge %zu result '%s' is not in the vocabulary", src, r, (merges[r].first + merges[r].second).c_str());
            if (!scored[id]) spec.scores[id] = -(float)r, scored[id] = 1;
        }
        for (size_t i = 0; i < n; i++)
            if (!scored[i]) spec.scores[i] = -(float)merges.size() - 1;  // never made by a merge: last resort
        for (size_t i = 0; i < n; i++)
            if (spec.types[i] == 1 && is_byte_piece(spec.tokens[i])) spec.types[i] = 6;
        // "▁" prefix: a Prepend normalizer or a Metaspace pre-tokenizer that prepends.
        std::string js = json_dump(root.find("normalizer") ? *root.find("normalizer") : JsonValue()) +
                         json_dump(root.find("pre_tokenizer") ? *root.find("pre_tokenizer") : JsonValue());
        spec.add_space_prefix = js.find("\"Prepend\"") != std::string::npos ||
                                (js.find("\"Metaspace\"") != std::string::npos && js.find("\"never\"") == std::string::npos &&
                                 js.find("\"add_prefix_space\":false") == std::string::npos);
    } else {
        fail("%s: unsupported tokenizer.json: pre_tokenizer is neither ByteLevel nor SentencePiece-style (Metaspace / byte_fallback)", src);
    }
    std::string unk = str_member(model, "unk_token");
    if (!unk.empty()) spec.unk = find_id(unk);

    // bos / eos / chat template from tokenizer_config.json beside the file, else from the
    // post-processor and well-known names.
    std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
    std::string cfg_path = dir + "/tokenizer_config.json";
    std::string bos_text, eos_text;
    const JsonValue* pp = root.find("post_processor");
    std::string template_first = pp ? template_bos(*pp) : "";
    spec.add_bos = !template_first.empty();
    bos_text = template_first;
    if (file_exists(cfg_path)) {
        JsonValue cfg = json_parse_file(cfg_path);
        if (cfg.is_object()) {
            if (!config_token(cfg, "bos_token").empty()) bos_text = config_token(cfg, "bos_token");
            eos_text = config_token(cfg, "eos_token");
            if (!config_token(cfg, "pad_token").empty()) spec.pad = find_id(config_token(cfg, "pad_token"));
            if (!config_token(cfg, "unk_token").empty()) spec.unk = find_id(config_token(cfg, "unk_token"));
            spec.add_bos = bool_member(cfg, "add_bos_token", spec.add_bos);
            if (const JsonValue* ct = cfg.find("chat_template")) {
                if (ct->is_string()) spec.chat_template = ct->str;
                else if (ct->is_array())
                    for (const JsonValue& t : ct->items)
                        if (str_member(t, "name") == "default") spec.chat_template = str_member(t, "template");
            }
        }
    }
    if (bos_text.empty())
        for (const char* t : {"<s>", "<|begin_of_text|>"})
            if (find_id(t) >= 0) { bos_text = t; break; }
    if (eos_text.empty())
        for (const char* t : {"</s>", "<|end_of_text|>", "<|endoftext|>"})
            if (find_id(t) >= 0) { eos_text = t; break; }
    if (!bos_text.empty()) spec.bos = find_id(bos_text);
    if (!eos_text.empty()) spec.eos = find_id(eos_text);
    spec.eot = find_id("<|eot_id|>");
    return spec;
}

}  // namespace

TokenizerSpec load_tokenizer_file(const std::string& path_in) {
    std::string path = path_in;
    if (is_directory(path)) {
        if (file_exists(path + "/tokenizer.json")) path += "/tokenizer.json";
        else if (file_exists(path + "/tokenizer.model")) path += "/tokenizer.model";
        else fail("%s: directory has no tokenizer.json or tokenizer.model", path.c_str());
    }
    std::string data = read_file(path);
    size_t first = data.find_first_not_of(" \t\r\n");
    if (ends_with(path, ".json") || (first != std::string::npos && data[first] == '{'))
        return load_hf_tokenizer_json(path, data);
    if (ends_with(path, ".model")) return load_sentencepiece_model(path, data);
    if (ends_with(path, ".bin")) return load_llama2c_tokenizer(path, data);
    if (ends_with(path, ".gguf") || data.compare(0, 4, "GGUF") == 0)
        fail("%s: a GGUF file is a model, not a tokenizer file: use -m", path.c_str());
    // Unknown extension: a llama2.c file starts with a small positive int32; a ModelProto with
    // field 1 (pieces), i.e. byte 0x0A, then a length varint.
    try {
        return load_llama2c_tokenizer(path, data);
    } catch (const Error&) {
        return load_sentencepiece_model(path, data);
    }
}

}  // namespace beagle
