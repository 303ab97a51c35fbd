// test_loaders_json.cpp: the strict JSON parser (src/io/json.cpp): values of every kind, all string
// escapes including surrogate pairs, number grammar, JSONL, the writer round trip, and errors that
// name line:column for malformed input (RFC 8259 is the reference for what is valid).
#include <cstring>

#include "core/common.h"
#include "io/json.h"
#include "testlib.h"

using namespace beagle;

static JsonValue parse(const std::string& s) { return json_parse(s, "t.json"); }

static void test_values() {
    JsonValue v = parse(" {\"a\": [1, -2.5e3, true, false, null], \"b\": {\"c\": \"d\"}, \"e\": 0, \"f\": -0.0} \n");
    CHECK(v.is_object() && v.keys.size() == 4, "object with 4 keys");
    const JsonValue* a = v.find("a");
    CHECK(a && a->is_array() && a->size() == 5, "array a");
    if (a && a->size() == 5) {
        CHECK(a->items[0].is_integer && a->items[0].integer == 1, "1");
        CHECK(!a->items[1].is_integer && a->items[1].number == -2500.0, "-2.5e3");
        CHECK(a->items[2].type == JsonValue::BOOL && a->items[2].boolean, "true");
        CHECK(a->items[3].type == JsonValue::BOOL && !a->items[3].boolean, "false");
        CHECK(a->items[4].is_null(), "null");
        CHECK(a->line == 1 && a->column == 8, "position of a: %s", a->where().c_str());
    }
    const JsonValue* b = v.find("b");
    CHECK(b && b->find("c") && b->find("c")->str == "d", "nested object");
    CHECK(v.find("zz") == nullptr, "absent key");
    CHECK(v.find("f") && v.find("f")->number == 0.0 && std::signbit(v.find("f")->number), "-0.0");
    // numbers
    CHECK(parse("9007199254740993").integer == 9007199254740993LL, "int64 exact beyond 2^53");
    CHECK(parse("-9223372036854775808").integer == INT64_MIN, "int64 min");
    CHECK(!parse("9223372036854775808").is_integer, "beyond int64 is not an integer");
    CHECK(parse("1E+2").number == 100.0 && parse("1e-2").number == 0.01, "exponents");
    CHECK(parse("123.456").number == 123.456, "fraction");
    // scalars at top level, empty containers
    CHECK(parse("\"x\"").str == "x" && parse("[]").size() == 0 && parse("{}").is_object(), "scalars/empties");
    // typed access
    CHECK(json_int(parse("30.0"), "x") == 30, "integral double as int");
    CHECK_THROWS(json_int(parse("30.5"), "config.json key 'n'"), "config.json key 'n': expected an integer");
    CHECK_THROWS(json_string(parse("[1]"), "k"), "expected a string, found array at line 1, column 1");
    CHECK_THROWS(json_require(v, "missing", "cfg.json"), "cfg.json: missing key 'missing'");
}

static void test_strings() {
    JsonValue v = parse("\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t u\\u0041\\u00e9\\u20AC\\ud83d\\ude00 raw\xC3\xA9\"");
    std::string want = "q\" b\\ s/ \b\f\n\r\t uA\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80 raw\xC3\xA9";
    CHECK(v.str == want, "escapes decode to UTF-8");
    CHECK(parse("\"\\u0000\"").str == std::string(1, '\0'), "\\u0000 gives a NUL byte");
    // writer round trip
    JsonValue w = parse(json_quote(want));
    CHECK(w.str == want, "json_quote round trip");
    std::string text = "{\"a\":[1,2.5,\"x\\n\",null,true],\"b\":{}}";
    CHECK(json_dump(parse(text)) == text, "json_dump round trip: %s", json_dump(parse(text)).c_str());
    CHECK(json_dump(parse("0.1")) == "0.1" && json_dump(parse("1e-05")) == "1e-05" && json_dump(parse("0.30000000000000004")) == "0.30000000000000004", "shortest doubles: %s",
          json_dump(parse("1e-05")).c_str());
    CHECK(parse("\xEF\xBB\xBF[1]").size() == 1, "leading BOM skipped");
}

static void test_errors() {
    struct { const char* text; const char* needle; } bad[] = {
        {"", "line 1, column 1: unexpected end of input"},
        {"{\"a\": 1,}", "line 1, column 9: expected '\"' to start an object key"},
        {"[1, 2", "line 1, column 6: unexpected end of input inside array"},
        {"[1 2]", "line 1, column 4: expected ',' or ']'"},
        {"{\"a\" 1}", "expected ':' after object key"},
        {"{\n  \"a\": 1,\n  \"a\": 2\n}", "duplicate key \"a\" (value at line 3, column 8)"},
        {"\"abc", "line 1, column 1: unterminated string"},
        {"\"a\nb\"", "raw control character"},
        {"\"\\x\"", "invalid escape '\\x'"},
        {"\"\\u12G4\"", "expected 4 hex digits"},
        {"\"\\ud83d\"", "high surrogate \\u escape not followed by a low surrogate"},
        {"\"\\ud83d\\u0041\"", "not followed by a low surrogate"},
        {"\"\\ude00\"", "lone low surrogate"},
        {"01", "leading zeros"},
        {"1.", "expected a digit after '.'"},
        {"-", "expected a digit"},
        {"1e", "expected a digit in number exponent"},
        {"+1", "unexpected character '+'"},
        {".5", "unexpected character '.'"},
        {"1e999", "out of range"},
        {"NaN", "unexpected character 'N'"},
        {"tru", "unexpected characters"},
        {"[1] x", "unexpected characters after the JSON value"},
        {"{'a': 1}", "expected '\"' to start an object key"},
        {"[1,\n 2,\n   ?]", "line 3, column 4"},
        {"\"\xC3\x28\"", "line 1, column 2: invalid UTF-8 byte 0xc3"},
        {"\"\xED\xA0\x80\"", "invalid UTF-8"},  // encoded surrogate
        {"/* c */ 1", "unexpected character '/'"},
    };
    for (auto& b : bad) CHECK_THROWS(parse(b.text), b.needle);
    CHECK_THROWS(parse("[1, 2"), "t.json: invalid JSON");
    // nesting is bounded, not a stack overflow
    CHECK_THROWS(parse(std::string(100000, '[')), "nesting deeper than");
    std::string deep = std::string(500, '[') + std::string(500, ']');
    CHECK(parse(deep).is_array(), "500 levels are fine");
    CHECK_THROWS(json_parse_file("/nonexistent/x.json"), "cannot open '/nonexistent/x.json'");
    CHECK_THROWS(json_parse_file("/tmp"), "is a directory");
}

static void test_jsonl() {
    std::vector<JsonValue> v = jsonl_parse("{\"a\": 1}\n\n  [2]\r\n\"s\"", "p.jsonl");
    CHECK(v.size() == 3 && v[0].find("a") && v[1].items[0].integer == 2 && v[2].str == "s", "3 rows");
    CHECK(v.size() == 3 && v[1].line == 3 && v[1].column == 3, "row positions %d:%d", v.size() == 3 ? v[1].line : 0,
          v.size() == 3 ? v[1].column : 0);
    CHECK(jsonl_parse("", "e").empty() && jsonl_parse("\n\n", "e").empty(), "empty JSONL");
    CHECK_THROWS(jsonl_parse("{\"a\": 1}\n{\"b\": }\n", "p.jsonl"), "p.jsonl: invalid JSON at line 2, column 7");
    CHECK_THROWS(jsonl_parse("1\n2\n[1,\n2]", "p.jsonl"), "line 3");
}

int main() {
    test_values();
    test_strings();
    test_errors();
    test_jsonl();
    return test_summary("test_loaders_json");
}
