// tokenize.cpp: `beagle tokenize`: text -> token ids (-p/-f), ids -> text (--decode), and a batch
// mode for tests (--jsonl: one {"text": ...} or {"ids": [...]} per line in, one JSON object per
// line out). The tokenizer comes from a model file (-m) or a tokenizer file (-z).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../core/common.h"
#include "../io/json.h"
#include "../io/json_write.h"
#include "../io/model_file.h"
#include "../tokenizer/tokenizer.h"
#include "../tokenizer/tokenizer_impl.h"
#include "args.h"
#include "commands.h"

namespace beagle {

static std::vector<int> parse_ids(const std::string& s, int vocab) {
    std::vector<int> ids;
    size_t i = 0;
    while (i < s.size()) {
        char c = s[i];
        if (c == ' ' || c == ',' || c == '\t' || c == '\n' || c == '[' || c == ']') {
            i++;
            continue;
        }
        const char* start = s.c_str() + i;
        char* end = nullptr;
        errno = 0;
        long v = strtol(start, &end, 10);
        if (end == start || errno) fail("--decode: expected token ids like \"1 2 3\", found '%s' at character %zu", std::string(start).substr(0, 16).c_str(), i);
        if (v < 0 || v >= vocab) fail("--decode: token id %ld out of range [0, %d)", v, vocab);
        ids.push_back((int)v);
        i += end - start;
    }
    return ids;
}

int cmd_tokenize(int argc, char** argv) {
    std::string model, tok_path, prompt, file, decode_ids, jsonl, system, chat_template;
    bool ids_only = false, no_bos = false, no_special = false, pieces = false, chat = false, render_special = false;
    Args a("tokenize", "(-m MODEL | -z TOKENIZER) [-p TEXT | -f FILE | --decode IDS | --jsonl FILE] [options]",
           "Encode text to token ids, or decode ids to text.");
    a.str("-m,--model", &model, "model file carrying a tokenizer (GGUF)");
    a.str("-z,--tokenizer", &tok_path, "tokenizer file: tokenizer.bin, tokenizer.model, tokenizer.json (or its directory)");
    a.str("-p,--prompt", &prompt, "text to encode");
    a.str("-f,--file", &file, "encode the contents of a file");
    a.flag("--ids", &ids_only, "print only the ids, space separated, on one line");
    a.flag("--no-bos", &no_bos, "do not prepend BOS (default: as the tokenizer says)");
    a.flag("--no-special", &no_special, "encode special-token text like <|im_start|> as plain text");
    a.str("--decode", &decode_ids, "decode these ids (\"1 2 3\" or \"1,2,3\") and print the text");
    a.flag("--render-special", &render_special, "when decoding, print control tokens' text");
    a.str("--jsonl", &jsonl, "batch: each line {\"text\": ...} -> {\"ids\": [...], \"decoded\": ...}; {\"ids\": [...]} -> {\"decoded\": ...}");
    a.flag("--pieces", &pieces, "with --jsonl: also output the pre-tokenizer pieces (byte-level BPE)");
    a.flag("--chat", &chat, "wrap the text in the chat template (the file's; see --chat-template) before encoding");
    a.str("--chat-template", &chat_template, (std::string("with --chat: the ") + "chat template family instead of the file's: " + chat_family_names() + "\n(the file's template, else ChatML when the vocabulary has <|im_start|>; docs/usage.md)").c_str());
    a.str("--system", &system, "system message for --chat (default: the template's)");
    if (!a.parse(argc, argv)) return 0;
    if (!a.positional.empty()) fail("beagle tokenize: unexpected argument '%s' (text goes after -p)", a.positional[0].c_str());

    TokenizerSpec spec;
    if (!tok_path.empty()) {
        spec = load_tokenizer_file(tok_path);
    } else if (!model.empty()) {
        std::unique_ptr<ModelFile> mf = load_model(model);
        spec = mf->tokenizer;
        if (spec.kind == TokenizerSpec::NONE) fail("%s: the model file has no tokenizer; give one with -z", model.c_str());
    } else {
        fail("beagle tokenize: give -m MODEL or -z TOKENIZER (see --help)");
    }
    check_chat_template_name(chat_template);
    spec.chat_template_name = chat_template;
    std::unique_ptr<Tokenizer> tok = Tokenizer::create(spec);
    bool add_bos = spec.add_bos && !no_bos;
    bool parse_special = !no_special || chat;

    if (!decode_ids.empty()) {
        std::string text = tok->decode(parse_ids(decode_ids, tok->vocab_size()), render_special);
        fwrite(text.data(), 1, text.size(), stdout);
        if (isatty(fileno(stdout))) fputc('\n', stdout);
        return 0;
    }

    if (!jsonl.empty()) {
        PreSplit kind = PreSplit::GPT2;
        if (pieces) {
            if (spec.kind != TokenizerSpec::BPE_BYTELEVEL) fail("--pieces needs a byte-level BPE tokenizer");
            kind = pre_split_kind(spec.pre, spec.source);
        }
        std::vector<JsonValue> lines = jsonl_parse_file(jsonl);
        for (size_t li = 0; li < lines.size(); li++) {
            const JsonValue& v = lines[li];
            std::string where = strfmt("%s line %zu", jsonl.c_str(), li + 1);
            if (!v.is_object()) fail("%s: expected an object, found %s", where.c_str(), v.type_name());
            Json out;
            if (const JsonValue* t = v.find("text")) {
                std::string text = json_string(*t, where + " 'text'");
                if (chat) text = apply_chat_template(*tok, text, system);
                std::vector<int> ids = tok->encode(text, add_bos, parse_special);
                out["ids"] = ids;
                out["decoded"] = utf8_sanitize(tok->decode(ids, render_special));
                if (pieces) {
                    std::vector<std::pair<size_t, size_t>> words;
                    pre_split(kind, text, 0, text.size(), &words);
                    out["pieces"] = Json::array();
                    for (const auto& w : words) out["pieces"].push_back(text.substr(w.first, w.second - w.first));
                }
            } else if (const JsonValue* idv = v.find("ids")) {
                if (!idv->is_array()) fail("%s: 'ids' is %s, expected an array", where.c_str(), idv->type_name());
                std::vector<int> ids;
                for (const JsonValue& x : idv->items) {
                    int64_t id = json_int(x, where + " 'ids'");
                    if (id < 0 || id >= tok->vocab_size()) fail("%s: token id %lld out of range [0, %d)", where.c_str(), (long long)id, tok->vocab_size());
                    ids.push_back((int)id);
                }
                out["decoded"] = utf8_sanitize(tok->decode(ids, render_special));
            } else {
                fail("%s: expected a 'text' or 'ids' member", where.c_str());
            }
            std::string line = json_text(out) + "\n";
            fwrite(line.data(), 1, line.size(), stdout);
        }
        return 0;
    }

    std::string text;
    if (!file.empty()) {
        if (!prompt.empty()) fail("beagle tokenize: give -p or -f, not both");
        text = read_file(file);
        size_t bad;
        if (!utf8_valid(text, &bad))
            fail("%s: invalid UTF-8 at byte offset %zu (byte 0x%02X); expected UTF-8 text", file.c_str(), bad,
                 (unsigned)(unsigned char)text[bad]);
    } else {
        text = prompt;
    }
    if (chat) text = apply_chat_template(*tok, text, system);
    std::vector<int> ids = tok->encode(text, add_bos, parse_special);
    if (ids_only) {
        std::string s;
        for (size_t i = 0; i < ids.size(); i++) s += (i ? " " : "") + std::to_string(ids[i]);
        printf("%s\n", s.c_str());
        return 0;
    }
    int prev = -1;
    for (int id : ids) {
        printf("%7d  %s\n", id, json_text(Json(utf8_sanitize(tok->decode_token(prev, id, true)))).c_str());
        prev = id;
    }
    fprintf(stderr, "%zu tokens\n", ids.size());
    return 0;
}

}  // namespace beagle
