// json.h: a small strict JSON (RFC 8259) parser and writer, plus JSONL (one value per line).
// Used for HF config.json / safetensors headers (src/io/safetensors.cpp), tokenizer.json
// (src/io/tokenizer_files.cpp), prompt and data files. Errors name the source and line:column.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace beagle {

struct JsonValue {
    enum Type { NUL, BOOL, NUMBER, STRING, ARRAY, OBJECT };
    Type type = NUL;
    bool boolean = false;
    double number = 0;              // NUMBER
    bool is_integer = false;        // NUMBER written without '.'/exponent that fits int64
    int64_t integer = 0;            //   ... its exact value
    std::string str;                // STRING (UTF-8; \uXXXX escapes and surrogate pairs decoded)
    std::vector<JsonValue> items;   // ARRAY elements, or OBJECT values (in file order)
    std::vector<std::string> keys;  // OBJECT keys, parallel to items (duplicates are an error)
    int line = 0, column = 0;       // where the value starts in its source (1-based)

    bool is_null() const { return type == NUL; }
    bool is_object() const { return type == OBJECT; }
    bool is_array() const { return type == ARRAY; }
    bool is_string() const { return type == STRING; }
    bool is_number() const { return type == NUMBER; }
    size_t size() const { return items.size(); }
    // Object member by key (linear scan), nullptr if absent or not an object.
    const JsonValue* find(const std::string& key) const;
    const char* type_name() const;  // "null", "bool", "number", "string", "array", "object"
    std::string where() const;      // "line L, column C"
};

// Parse one JSON value (surrounding whitespace allowed, a leading UTF-8 BOM skipped).
// `source` names the text in error messages ("config.json", a path, ...).
JsonValue json_parse(const std::string& text, const std::string& source);
JsonValue json_parse_file(const std::string& path);
// JSONL: one value per line, blank lines skipped. Errors name the line of the whole file.
std::vector<JsonValue> jsonl_parse(const std::string& text, const std::string& source);
std::vector<JsonValue> jsonl_parse_file(const std::string& path);

// Typed access. `what` names the value for the error, e.g. "config.json key 'hidden_size'";
// the message adds the expected and found type and the value's line:column.
int64_t json_int(const JsonValue& v, const std::string& what);  // integral numbers only (30 or 30.0)
double json_number(const JsonValue& v, const std::string& what);
const std::string& json_string(const JsonValue& v, const std::string& what);
bool json_bool(const JsonValue& v, const std::string& what);
// Member `key` of object `obj`; throws "<source>: missing key 'key'" if absent.
const JsonValue& json_require(const JsonValue& obj, const std::string& key, const std::string& source);

// Writing: a quoted, escaped JSON string (non-ASCII UTF-8 is kept as is), and compact text of a value.
std::string json_quote(const std::string& s);
std::string json_dump(const JsonValue& v);

}  // namespace beagle
