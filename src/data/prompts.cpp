// prompts.cpp: the prompt-set readers of prompts.h (ShareGPT JSON, MT-Bench / Spec-Bench / GSM8K /
// self-instruct JSONL, plain text), used by datagen, bench-sd and train's evaluation.
#include "prompts.h"

#include "../core/common.h"
#include "../io/json.h"

namespace beagle {

static std::string id_of(const JsonValue& v) {
    for (const char* k : {"id", "question_id"}) {
        const JsonValue* x = v.find(k);
        if (!x) continue;
        if (x->is_string()) return x->str;
        if (x->is_number()) return x->is_integer ? strfmt("%lld", (long long)x->integer) : strfmt("%g", x->number);
    }
    return "";
}

// One record -> prompt text (empty if the record holds an empty prompt).
static Prompt from_record(const JsonValue& v, const std::string& where) {
    if (!v.is_object()) fail("%s: expected a JSON object per prompt, found %s", where.c_str(), v.type_name());
    Prompt p;
    p.id = id_of(v);
    if (const JsonValue* c = v.find("category")) p.category = json_string(*c, where + " key 'category'");
    if (const JsonValue* conv = v.find("conversations")) {
        if (!conv->is_array()) fail("%s: 'conversations' must be an array, found %s", where.c_str(), conv->type_name());
        for (const JsonValue& turn : conv->items) {
            const JsonValue* from = turn.find("from");
            const JsonValue* val = turn.find("value");
            if (from && val && from->is_string() && (from->str == "human" || from->str == "user")) {
                p.text = json_string(*val, where + " conversation 'value'");
                return p;
            }
        }
        return p;
    }
    if (const JsonValue* turns = v.find("turns")) {
        if (!turns->is_array() || turns->items.empty())
            fail("%s: 'turns' must be a non-empty array", where.c_str());
        p.text = json_string(turns->items[0], where + " turns[0]");
        return p;
    }
    for (const char* k : {"question", "prompt", "text"}) {
        if (const JsonValue* x = v.find(k)) {
            p.text = json_string(*x, where + " key '" + k + "'");
            return p;
        }
    }
    if (const JsonValue* ins = v.find("instruction")) {
        p.text = json_string(*ins, where + " key 'instruction'");
        const JsonValue* inst = v.find("instances");
        if (inst && inst->is_array() && !inst->items.empty())
            if (const JsonValue* in = inst->items[0].find("input"))
                if (in->is_string() && !in->str.empty()) p.text += "\n\n" + in->str;
        return p;
    }
    fail("%s: no prompt field (expected one of conversations, turns, question, prompt, text, instruction)", where.c_str());
}

std::vector<Prompt> load_prompts(const std::string& path) {
    std::string text = read_file(path);
    size_t i = 0;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) i++;
    std::vector<Prompt> out;
    auto add = [&](Prompt p) {
        if (!p.text.empty()) out.push_back(std::move(p));
    };
    bool is_json = path.size() >= 5 && (path.rfind(".json") == path.size() - 5 || path.rfind(".jsonl") == path.size() - 6);
    if (i < text.size() && text[i] == '[') {
        JsonValue v = json_parse(text, path);
        for (size_t k = 0; k < v.items.size(); k++) add(from_record(v.items[k], strfmt("%s: record %zu", path.c_str(), k)));
    } else if (i < text.size() && text[i] == '{') {
        std::vector<JsonValue> rows = jsonl_parse(text, path);
        for (size_t k = 0; k < rows.size(); k++) add(from_record(rows[k], strfmt("%s: line %d", path.c_str(), rows[k].line)));
    } else if (is_json) {
        fail("%s: expected a JSON array or JSON lines", path.c_str());
    } else {
        size_t b = 0;
        while (b <= text.size()) {
            size_t e = text.find('\n', b);
            if (e == std::string::npos) e = text.size();
            std::string line = text.substr(b, e - b);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            Prompt p;
            p.text = line;
            add(p);
            b = e + 1;
        }
    }
    for (size_t k = 0; k < out.size(); k++) {
        size_t bad;
        if (!utf8_valid(out[k].text, &bad)) fail("%s: prompt %zu is not valid UTF-8 (byte %zu)", path.c_str(), k, bad);
    }
    if (out.empty()) fail("%s: no prompts found", path.c_str());
    return out;
}

}  // namespace beagle
