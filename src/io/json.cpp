// json.cpp: strict recursive-descent JSON parser and writer (see json.h). Callers: safetensors
// loader (headers, config.json), tokenizer file loader (tokenizer.json), prompt/data readers.
#include "json.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <unordered_set>

#include "../core/common.h"
#include "../tokenizer/unicode.h"

namespace beagle {

namespace {

constexpr int kMaxDepth = 512;

struct Parser {
    const std::string& text;
    const std::string& source;
    size_t pos = 0;
    int line = 1;           // current line (1-based, plus line_base for JSONL)
    size_t line_start = 0;  // byte offset where the current line starts
    int depth = 0;
    int line_base = 1;      // line number of text[0]

    Parser(const std::string& t, const std::string& s) : text(t), source(s) {}

    [[noreturn]] void error_at(size_t p, const char* msg) {
        // p is on the current line unless an error points backwards; recompute in that case.
        int l = line;
        size_t ls = line_start;
        if (p < line_start) {
            l = line_base;
            ls = 0;
            for (size_t i = 0; i < p; i++)
                if (text[i] == '\n') { l++; ls = i + 1; }
        }
        fail("%s: invalid JSON at line %d, column %zu: %s", source.c_str(), l, p - ls + 1, msg);
    }
    [[noreturn]] void error(const char* msg) { error_at(pos, msg); }

    void skip_ws() {
        while (pos < text.size()) {
            char c = text[pos];
            if (c == '\n') {
                line++;
                line_start = pos + 1;
            } else if (c != ' ' && c != '\t' && c != '\r') {
                break;
            }
            pos++;
        }
    }

    void expect_word(const char* w) {
        size_t n = strlen(w);
        if (text.compare(pos, n, w) != 0) error("unexpected characters (expected a value)");
        pos += n;
    }

    JsonValue parse_value() {
        skip_ws();
        if (pos >= text.size()) error("unexpected end of input (expected a value)");
        JsonValue v;
        v.line = line;
        v.column = (int)(pos - line_start + 1);
        char c = text[pos];
        switch (c) {
            case '{': parse_object(v); break;
            case '[': parse_array(v); break;
            case '"': v.type = JsonValue::STRING; parse_string(v.str); break;
            case 't': expect_word("true"); v.type = JsonValue::BOOL; v.boolean = true; break;
            case 'f': expect_word("false"); v.type = JsonValue::BOOL; v.boolean = false; break;
            case 'n': expect_word("null"); v.type = JsonValue::NUL; break;
            default:
                if (c == '-' || (c >= '0' && c <= '9')) parse_number(v);
                else error(strfmt("unexpected character '%s' (expected a value)", printable(c).c_str()).c_str());
        }
        return v;
    }

    static std::string printable(char c) {
        unsigned char u = (unsigned char)c;
        if (u >= 0x20 && u < 0x7F) return std::string(1, c);
        return strfmt("\\x%02x", u);
    }

    void enter() {
        if (++depth > kMaxDepth) error(strfmt("nesting deeper than %d levels", kMaxDepth).c_str());
    }

    void parse_object(JsonValue& v) {
        v.type = JsonValue::OBJECT;
        enter();
        pos++;  // '{'
        skip_ws();
        if (pos < text.size() && text[pos] == '}') {
            pos++;
            depth--;
            return;
        }
        std::unordered_set<std::string_view> seen;
        for (;;) {
            skip_ws();
            if (pos >= text.size()) error("unexpected end of input inside object (expected a key)");
            if (text[pos] != '"') error("expected '\"' to start an object key");
            std::string key;
            parse_string(key);
            skip_ws();
            if (pos >= text.size() || text[pos] != ':') error("expected ':' after object key");
            pos++;
            JsonValue item = parse_value();
            v.keys.push_back(std::move(key));
            v.items.push_back(std::move(item));
            skip_ws();
            if (pos >= text.size()) error("unexpected end of input inside object (expected ',' or '}')");
            char c = text[pos++];
            if (c == ',') continue;
            if (c == '}') break;
            error_at(pos - 1, "expected ',' or '}' in object");
        }
        // duplicate keys: strict parsers reject them (last-wins silently hides mistakes)
        for (size_t i = 0; i < v.keys.size(); i++) {
            if (!seen.insert(std::string_view(v.keys[i])).second) {
                const JsonValue& it = v.items[i];
                fail("%s: invalid JSON: duplicate key \"%s\" (value at line %d, column %d)", source.c_str(),
                     v.keys[i].c_str(), it.line, it.column);
            }
        }
        depth--;
    }

    void parse_array(JsonValue& v) {
        v.type = JsonValue::ARRAY;
        enter();
        pos++;  // '['
        skip_ws();
        if (pos < text.size() && text[pos] == ']') {
            pos++;
            depth--;
            return;
        }
        for (;;) {
            v.items.push_back(parse_value());
            skip_ws();
            if (pos >= text.size()) error("unexpected end of input inside array (expected ',' or ']')");
            char c = text[pos++];
            if (c == ',') continue;
            if (c == ']') break;
            error_at(pos - 1, "expected ',' or ']' in array");
        }
        depth--;
    }

    int hex4() {
        if (pos + 4 > text.size()) error("unexpected end of input in \\u escape");
        int v = 0;
        for (int i = 0; i < 4; i++) {
            char c = text[pos + i];
            int d;
            if (c >= '0' && c <= '9') d = c - '0';
            else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
            else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
            else error_at(pos + i, "expected 4 hex digits after \\u");
            v = v * 16 + d;
        }
        pos += 4;
        return v;
    }

    void parse_string(std::string& out) {
        size_t start = pos;
        pos++;  // opening quote
        for (;;) {
            // copy a run of plain bytes
            size_t run = pos;
            while (pos < text.size()) {
                unsigned char c = (unsigned char)text[pos];
                if (c == '"' || c == '\\' || c < 0x20) break;
                pos++;
            }
            out.append(text, run, pos - run);
            if (pos >= text.size()) error_at(start, "unterminated string");
            unsigned char c = (unsigned char)text[pos];
            if (c == '"') {
                pos++;
                return;
            }
            if (c < 0x20) error(strfmt("raw control character \\x%02x in string (must be escaped)", c).c_str());
            // backslash escape
            pos++;
            if (pos >= text.size()) error_at(start, "unterminated string");
            char e = text[pos++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    size_t esc = pos - 2;
                    uint32_t cp = (uint32_t)hex4();
                    if (cp >= 0xDC00 && cp <= 0xDFFF) error_at(esc, "lone low surrogate in \\u escape");
                    if (cp >= 0xD800 && cp <= 0xDBFF) {
                        if (pos + 2 > text.size() || text[pos] != '\\' || text[pos + 1] != 'u')
                            error_at(esc, "high surrogate \\u escape not followed by a low surrogate");
                        pos += 2;
                        uint32_t lo = (uint32_t)hex4();
                        if (lo < 0xDC00 || lo > 0xDFFF)
                            error_at(pos - 6, "high surrogate \\u escape not followed by a low surrogate");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    }
                    utf8_append(out, cp);
                    break;
                }
                default:
                    error_at(pos - 2, strfmt("invalid escape '\\%s' in string", printable(e).c_str()).c_str());
            }
        }
    }

    void parse_number(JsonValue& v) {
        size_t start = pos;
        auto digit = [&](size_t p) { return p < text.size() && text[p] >= '0' && text[p] <= '9'; };
        if (text[pos] == '-') pos++;
        if (!digit(pos)) error("expected a digit in number");
        if (text[pos] == '0') {
            pos++;
            if (digit(pos)) error("leading zeros are not allowed in numbers");
        } else {
            while (digit(pos)) pos++;
        }
        bool integral = true;
        if (pos < text.size() && text[pos] == '.') {
            integral = false;
            pos++;
            if (!digit(pos)) error("expected a digit after '.' in number");
            while (digit(pos)) pos++;
        }
        if (pos < text.size() && (text[pos] == 'e' || text[pos] == 'E')) {
            integral = false;
            pos++;
            if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) pos++;
            if (!digit(pos)) error("expected a digit in number exponent");
            while (digit(pos)) pos++;
        }
        std::string s = text.substr(start, pos - start);
        v.type = JsonValue::NUMBER;
        errno = 0;
        v.number = strtod(s.c_str(), nullptr);
        if (!std::isfinite(v.number)) error_at(start, "number out of range of a double");
        if (integral) {
            errno = 0;
            long long i = strtoll(s.c_str(), nullptr, 10);
            if (errno == 0) {
                v.is_integer = true;
                v.integer = (int64_t)i;
            }
        }
    }
};

JsonValue parse_text(const std::string& text, const std::string& source, int line_base, size_t begin) {
    Parser p(text, source);
    p.pos = begin;
    p.line_start = begin;
    p.line = line_base;
    p.line_base = line_base;
    JsonValue v = p.parse_value();
    p.skip_ws();
    if (p.pos != text.size()) p.error("unexpected characters after the JSON value");
    return v;
}

void check_utf8(const std::string& text, const std::string& source, int line_base) {
    size_t bad = 0;
    if (utf8_valid(text, &bad)) return;
    int line = line_base;
    size_t ls = 0;
    for (size_t i = 0; i < bad; i++)
        if (text[i] == '\n') { line++; ls = i + 1; }
    fail("%s: invalid JSON at line %d, column %zu: invalid UTF-8 byte 0x%02x", source.c_str(), line, bad - ls + 1,
         (unsigned char)text[bad]);
}

}  // namespace

const JsonValue* JsonValue::find(const std::string& key) const {
    if (type != OBJECT) return nullptr;
    for (size_t i = 0; i < keys.size(); i++)
        if (keys[i] == key) return &items[i];
    return nullptr;
}

const char* JsonValue::type_name() const {
    switch (type) {
        case NUL: return "null";
        case BOOL: return "bool";
        case NUMBER: return "number";
        case STRING: return "string";
        case ARRAY: return "array";
        case OBJECT: return "object";
    }
    return "?";
}

std::string JsonValue::where() const { return strfmt("line %d, column %d", line, column); }

JsonValue json_parse(const std::string& text, const std::string& source) {
    check_utf8(text, source, 1);
    size_t begin = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
    return parse_text(text, source, 1, begin);
}

JsonValue json_parse_file(const std::string& path) {
    if (is_directory(path)) fail("'%s' is a directory, expected a JSON file", path.c_str());
    return json_parse(read_file(path), path);
}

std::vector<JsonValue> jsonl_parse(const std::string& text, const std::string& source) {
    std::vector<JsonValue> out;
    size_t begin = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
    int line = 1;
    while (begin <= text.size()) {
        size_t end = text.find('\n', begin);
        if (end == std::string::npos) end = text.size();
        std::string row = text.substr(begin, end - begin);
        bool blank = true;
        for (char c : row)
            if (c != ' ' && c != '\t' && c != '\r') blank = false;
        if (!blank) {
            check_utf8(row, source, line);
            out.push_back(parse_text(row, source, line, 0));
        }
        if (end == text.size()) break;
        begin = end + 1;
        line++;
    }
    return out;
}

std::vector<JsonValue> jsonl_parse_file(const std::string& path) {
    if (is_directory(path)) fail("'%s' is a directory, expected a JSONL file", path.c_str());
    return jsonl_parse(read_file(path), path);
}

static std::string found(const JsonValue& v) {
    return strfmt("found %s at %s", v.type_name(), v.where().c_str());
}

int64_t json_int(const JsonValue& v, const std::string& what) {
    if (v.type == JsonValue::NUMBER) {
        if (v.is_integer) return v.integer;
        if (std::floor(v.number) == v.number && std::fabs(v.number) < 9.2e18) return (int64_t)v.number;
        fail("%s: expected an integer, found %.17g at %s", what.c_str(), v.number, v.where().c_str());
    }
    fail("%s: expected an integer, %s", what.c_str(), found(v).c_str());
}

double json_number(const JsonValue& v, const std::string& what) {
    if (v.type != JsonValue::NUMBER) fail("%s: expected a number, %s", what.c_str(), found(v).c_str());
    return v.number;
}

const std::string& json_string(const JsonValue& v, const std::string& what) {
    if (v.type != JsonValue::STRING) fail("%s: expected a string, %s", what.c_str(), found(v).c_str());
    return v.str;
}

bool json_bool(const JsonValue& v, const std::string& what) {
    if (v.type != JsonValue::BOOL) fail("%s: expected true or false, %s", what.c_str(), found(v).c_str());
    return v.boolean;
}

const JsonValue& json_require(const JsonValue& obj, const std::string& key, const std::string& source) {
    if (obj.type != JsonValue::OBJECT)
        fail("%s: expected an object with key '%s', %s", source.c_str(), key.c_str(), found(obj).c_str());
    const JsonValue* v = obj.find(key);
    if (!v) fail("%s: missing key '%s' (object at %s)", source.c_str(), key.c_str(), obj.where().c_str());
    return *v;
}

std::string json_quote(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) out += strfmt("\\u%04x", c);
                else out += (char)c;
        }
    }
    return out + "\"";
}

std::string json_dump(const JsonValue& v) {
    switch (v.type) {
        case JsonValue::NUL: return "null";
        case JsonValue::BOOL: return v.boolean ? "true" : "false";
        case JsonValue::NUMBER:
            if (v.is_integer) return std::to_string(v.integer);
            {
                // shortest of %.15g / %.17g that reads back exactly
                std::string s = strfmt("%.15g", v.number);
                if (strtod(s.c_str(), nullptr) != v.number) s = strfmt("%.17g", v.number);
                return s;
            }
        case JsonValue::STRING: return json_quote(v.str);
        case JsonValue::ARRAY: {
            std::string s = "[";
            for (size_t i = 0; i < v.items.size(); i++) s += (i ? "," : "") + json_dump(v.items[i]);
            return s + "]";
        }
        case JsonValue::OBJECT: {
            std::string s = "{";
            for (size_t i = 0; i < v.items.size(); i++)
                s += (i ? "," : "") + json_quote(v.keys[i]) + ":" + json_dump(v.items[i]);
            return s + "}";
        }
    }
    return "null";
}

}  // namespace beagle
