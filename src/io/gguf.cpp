// gguf.cpp: GGUF v2/v3 loader (little-endian): header, typed metadata (all value types, nested
// arrays), tensor infos, aligned data section (mmapped, not copied), the config of arch "llama"
// (Llama-2/3, Mistral) or "qwen2" (Q/K/V biases, rotate-half rope: permuted on load), weights by role
// and the tokenizer.ggml.* tokenizer. Called by load_model() (load_model.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "loader_common.h"
#include "model_file.h"

namespace beagle {

namespace {

// GGUF metadata value types (gguf spec)
enum : uint32_t {
    T_U8 = 0, T_I8 = 1, T_U16 = 2, T_I16 = 3, T_U32 = 4, T_I32 = 5, T_F32 = 6, T_BOOL = 7,
    T_STRING = 8, T_ARRAY = 9, T_U64 = 10, T_I64 = 11, T_F64 = 12,
};

const char* value_type_name(uint32_t t) {
    static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
    return t <= T_F64 ? names[t] : "unknown";
}

// ggml tensor type ids and names (for messages about the ones we do not support)
const char* ggml_type_name(uint32_t id) {
    switch (id) {
        case 0: return "F32"; case 1: return "F16"; case 2: return "Q4_0"; case 3: return "Q4_1";
        case 4: return "Q4_2(removed)"; case 5: return "Q4_3(removed)";
        case 6: return "Q5_0"; case 7: return "Q5_1"; case 8: return "Q8_0"; case 9: return "Q8_1";
        case 10: return "Q2_K"; case 11: return "Q3_K"; case 12: return "Q4_K"; case 13: return "Q5_K";
        case 14: return "Q6_K"; case 15: return "Q8_K"; case 16: return "IQ2_XXS"; case 17: return "IQ2_XS";
        case 18: return "IQ3_XXS"; case 19: return "IQ1_S"; case 20: return "IQ4_NL"; case 21: return "IQ3_S";
        case 22: return "IQ2_S"; case 23: return "IQ4_XS"; case 24: return "I8"; case 25: return "I16";
        case 26: return "I32"; case 27: return "I64"; case 28: return "F64"; case 29: return "IQ1_M";
        case 30: return "BF16"; case 34: return "TQ1_0"; case 35: return "TQ2_0"; case 39: return "MXFP4";
    }
    return "unknown";
}

bool ggml_to_dtype(uint32_t id, DType* t) {
    switch (id) {
        case 0: *t = DType::F32; return true;
        case 1: *t = DType::F16; return true;
        case 2: *t = DType::Q4_0; return true;
        case 3: *t = DType::Q4_1; return true;
        case 6: *t = DType::Q5_0; return true;
        case 7: *t = DType::Q5_1; return true;
        case 8: *t = DType::Q8_0; return true;
        case 12: *t = DType::Q4_K; return true;
        case 13: *t = DType::Q5_K; return true;
        case 14: *t = DType::Q6_K; return true;
        case 30: *t = DType::BF16; return true;
    }
    return false;
}

struct Value {
    uint32_t type = 0;
    // scalars: integers and bools in i (u64 bit pattern kept), floats in f, strings in s
    int64_t i = 0;
    double f = 0;
    std::string s;
    // arrays: element type and the elements in the member that fits their type
    uint32_t elem_type = 0;
    uint64_t count = 0;
    std::vector<int64_t> ints;
    std::vector<double> floats;
    std::vector<std::string> strs;
    std::vector<Value> arrs;
};

// Bounds-checked little-endian reader over the mapped file.
struct Cursor {
    const uint8_t* data;
    uint64_t size;
    uint64_t pos = 0;
    const std::string& path;
    const char* what = "header";  // what is being read, for truncation messages
    std::string what_buf;

    Cursor(const uint8_t* d, uint64_t n, const std::string& p) : data(d), size(n), path(p) {}

    void need(uint64_t n) {
        if (n > size - pos)
            fail("GGUF '%s' is truncated or corrupt: reading %s needs %llu bytes at offset %llu, but only %llu remain "
                 "(file size %llu)",
                 path.c_str(), what, (unsigned long long)n, (unsigned long long)pos,
                 (unsigned long long)(size - pos), (unsigned long long)size);
    }
    template <class T>
    T get() {
        need(sizeof(T));
        T v;
        memcpy(&v, data + pos, sizeof v);
        pos += sizeof v;
        return v;
    }
    std::string str() {
        uint64_t n = get<uint64_t>();
        need(n);
        std::string s((const char*)data + pos, (size_t)n);
        pos += n;
        return s;
    }
    void set_what(const std::string& w) {
        what_buf = w;
        what = what_buf.c_str();
    }
};

uint64_t min_value_size(uint32_t t) {
    switch (t) {
        case T_U8: case T_I8: case T_BOOL: return 1;
        case T_U16: case T_I16: return 2;
        case T_U32: case T_I32: case T_F32: return 4;
        case T_U64: case T_I64: case T_F64: return 8;
        case T_STRING: return 8;   // length
        case T_ARRAY: return 12;   // element type + count
    }
    return 0;
}

// Read one scalar of numeric/bool type into (i, f). Returns false for string/array/unknown.
bool read_scalar(Cursor& c, uint32_t t, int64_t* i, double* f) {
    switch (t) {
        case T_U8: *i = c.get<uint8_t>(); *f = (double)*i; return true;
        case T_I8: *i = c.get<int8_t>(); *f = (double)*i; return true;
        case T_U16: *i = c.get<uint16_t>(); *f = (double)*i; return true;
        case T_I16: *i = c.get<int16_t>(); *f = (double)*i; return true;
        case T_U32: *i = c.get<uint32_t>(); *f = (double)*i; return true;
        case T_I32: *i = c.get<int32_t>(); *f = (double)*i; return true;
        case T_U64: { uint64_t u = c.get<uint64_t>(); *i = (int64_t)u; *f = (double)u; return true; }
        case T_I64: *i = c.get<int64_t>(); *f = (double)*i; return true;
        case T_F32: *f = c.get<float>(); *i = 0; return true;
        case T_F64: *f = c.get<double>(); *i = 0; return true;
        case T_BOOL: {
            uint64_t at = c.pos;
            uint8_t b = c.get<uint8_t>();
            if (b > 1) fail("GGUF '%s': %s: bool value %u at offset %llu, expected 0 or 1", c.path.c_str(), c.what, b, (unsigned long long)at);
            *i = b;
            *f = b;
            return true;
        }
    }
    return false;
}

Value read_value(Cursor& c, uint32_t type, int depth) {
    Value v;
    v.type = type;
    if (type == T_STRING) {
        v.s = c.str();
    } else if (type == T_ARRAY) {
        if (depth > 8) fail("GGUF '%s': %s: arrays nested deeper than 8 levels", c.path.c_str(), c.what);
        uint64_t at = c.pos;
        v.elem_type = c.get<uint32_t>();
        v.count = c.get<uint64_t>();
        uint64_t min = min_value_size(v.elem_type);
        if (min == 0)
            fail("GGUF '%s': %s: unknown array element type %u at offset %llu", c.path.c_str(), c.what, v.elem_type,
                 (unsigned long long)at);
        // a lying count must fail here, before anything is reserved
        if (v.count > (c.size - c.pos) / min)
            fail("GGUF '%s' is truncated or corrupt: %s: array of %llu %s elements at offset %llu needs at least %llu "
                 "bytes, only %llu remain",
                 c.path.c_str(), c.what, (unsigned long long)v.count, value_type_name(v.elem_type),
                 (unsigned long long)at, (unsigned long long)v.count * min, (unsigned long long)(c.size - c.pos));
        // memory grows with what is actually read, not with the declared count
        size_t reserve = (size_t)std::min<uint64_t>(v.count, 1 << 20);
        int64_t i;
        double f;
        if (v.elem_type == T_STRING) {
            v.strs.reserve(reserve);
            for (uint64_t k = 0; k < v.count; k++) v.strs.push_back(c.str());
        } else if (v.elem_type == T_ARRAY) {
            v.arrs.reserve(std::min<size_t>(reserve, 1024));
            for (uint64_t k = 0; k < v.count; k++) v.arrs.push_back(read_value(c, T_ARRAY, depth + 1));
        } else if (v.elem_type == T_F32 || v.elem_type == T_F64) {
            v.floats.reserve(reserve);
            for (uint64_t k = 0; k < v.count; k++) {
                read_scalar(c, v.elem_type, &i, &f);
                v.floats.push_back(f);
            }
        } else {
            v.ints.reserve(reserve);
            for (uint64_t k = 0; k < v.count; k++) {
                read_scalar(c, v.elem_type, &i, &f);
                v.ints.push_back(i);
            }
        }
    } else if (!read_scalar(c, type, &v.i, &v.f)) {
        fail("GGUF '%s': %s: unknown value type %u at offset %llu", c.path.c_str(), c.what, type,
             (unsigned long long)(c.pos - 4));
    }
    return v;
}

std::string escape(const std::string& s, size_t max_len) {
    std::string out = "\"";
    for (size_t k = 0; k < s.size() && k < max_len; k++) {
        unsigned char ch = (unsigned char)s[k];
        if (ch == '\n') out += "\\n";
        else if (ch == '\t') out += "\\t";
        else if (ch == '\r') out += "\\r";
        else if (ch == '"') out += "\\\"";
        else if (ch == '\\') out += "\\\\";
        else if (ch < 0x20 || ch == 0x7F) out += strfmt("\\x%02x", ch);
        else out += (char)ch;
    }
    out += "\"";
    if (s.size() > max_len) out += strfmt("... (%zu bytes)", s.size());
    return out;
}

std::string scalar_str(uint32_t t, int64_t i, double f) {
    switch (t) {
        case T_F32: return strfmt("%.9g", f);
        case T_F64: return strfmt("%.17g", f);
        case T_BOOL: return i ? "true" : "false";
        case T_U64: return std::to_string((uint64_t)i);
        default: return std::to_string(i);
    }
}

// Printable form for `beagle info`: scalars in full (long strings cut), arrays as type, length and
// the first few elements.
std::string value_str(const Value& v) {
    if (v.type == T_STRING) return escape(v.s, 400);
    if (v.type != T_ARRAY) return scalar_str(v.type, v.i, v.f);
    std::string out = strfmt("array[%s; %llu] [", value_type_name(v.elem_type), (unsigned long long)v.count);
    const uint64_t show = 8;
    for (uint64_t k = 0; k < v.count && k < show; k++) {
        if (k) out += ", ";
        if (v.elem_type == T_STRING) out += escape(v.strs[k], 60);
        else if (v.elem_type == T_ARRAY) out += value_str(v.arrs[k]);
        else if (v.elem_type == T_F32 || v.elem_type == T_F64) out += scalar_str(v.elem_type, 0, v.floats[k]);
        else out += scalar_str(v.elem_type, v.ints[k], 0);
    }
    if (v.count > show) out += ", ...";
    return out + "]";
}

bool is_int_type(uint32_t t) {
    return t == T_U8 || t == T_I8 || t == T_U16 || t == T_I16 || t == T_U32 || t == T_I32 || t == T_U64 || t == T_I64;
}

struct Meta {
    const std::string& path;
    std::vector<std::pair<std::string, Value>> kv;
    std::map<std::string, size_t> index;

    explicit Meta(const std::string& p) : path(p) {}

    const Value* find(const std::string& key) const {
        auto it = index.find(key);
        return it == index.end() ? nullptr : &kv[it->second].second;
    }
    const Value& require(const std::string& key) const {
        const Value* v = find(key);
        if (!v) fail("GGUF '%s': missing metadata key '%s'", path.c_str(), key.c_str());
        return *v;
    }
    [[noreturn]] void wrong_type(const std::string& key, const Value& v, const char* expected) const {
        fail("GGUF '%s': metadata key '%s' has type %s, expected %s", path.c_str(), key.c_str(),
             value_type_name(v.type), expected);
    }
    // integer key as int in [lo, hi]; `def` when absent (required if has_def is false)
    int64_t get_int(const std::string& key, int64_t lo, int64_t hi, bool has_def = false, int64_t def = 0) const {
        const Value* v = find(key);
        if (!v) {
            if (!has_def) require(key);
            return def;
        }
        if (!is_int_type(v->type)) wrong_type(key, *v, "an integer");
        bool bad = v->type == T_U64 ? ((uint64_t)v->i > (uint64_t)INT64_MAX || v->i > hi || v->i < lo)
                                    : (v->i > hi || v->i < lo);
        if (bad)
            fail("GGUF '%s': metadata key '%s' = %s is out of range [%lld, %lld]", path.c_str(), key.c_str(),
                 scalar_str(v->type, v->i, v->f).c_str(), (long long)lo, (long long)hi);
        return v->i;
    }
    double get_float(const std::string& key, double def) const {
        const Value* v = find(key);
        if (!v) return def;
        if (v->type != T_F32 && v->type != T_F64 && !is_int_type(v->type)) wrong_type(key, *v, "a number");
        return v->f;
    }
    bool get_bool(const std::string& key, bool def) const {
        const Value* v = find(key);
        if (!v) return def;
        if (v->type != T_BOOL) wrong_type(key, *v, "bool");
        return v->i != 0;
    }
    const std::string* get_str(const std::string& key) const {
        const Value* v = find(key);
        if (!v) return nullptr;
        if (v->type != T_STRING) wrong_type(key, *v, "string");
        return &v->s;
    }
    const Value* get_array(const std::string& key, uint32_t elem_kind) const {
        // elem_kind: T_STRING, T_F32 (any float), T_I32 (any integer)
        const Value* v = find(key);
        if (!v) return nullptr;
        if (v->type != T_ARRAY) wrong_type(key, *v, "an array");
        bool ok = elem_kind == T_STRING ? v->elem_type == T_STRING
                  : elem_kind == T_F32  ? (v->elem_type == T_F32 || v->elem_type == T_F64)
                                        : is_int_type(v->elem_type);
        if (!ok)
            fail("GGUF '%s': metadata key '%s' is an array of %s, expected an array of %s", path.c_str(), key.c_str(),
                 value_type_name(v->elem_type),
                 elem_kind == T_STRING ? "string" : elem_kind == T_F32 ? "float" : "integers");
        return v;
    }
};

void read_tokenizer(const Meta& meta, ModelFile& mf) {
    TokenizerSpec& tk = mf.tokenizer;
    const std::string* model = meta.get_str("tokenizer.ggml.model");
    if (!model || *model == "none" || *model == "no_vocab") return;
    if (*model == "gpt2") tk.kind = TokenizerSpec::BPE_BYTELEVEL;
    else if (*model == "llama") tk.kind = TokenizerSpec::SPM;
    else
        fail("GGUF '%s': unsupported tokenizer model '%s' (tokenizer.ggml.model; supported: gpt2, llama); pass a "
             "tokenizer file with -z instead",
             mf.path.c_str(), model->c_str());
    bool spm = tk.kind == TokenizerSpec::SPM;
    const Value* tokens = meta.get_array("tokenizer.ggml.tokens", T_STRING);
    if (!tokens) fail("GGUF '%s': tokenizer.ggml.model is '%s' but tokenizer.ggml.tokens is missing", mf.path.c_str(), model->c_str());
    tk.tokens = tokens->strs;
    size_t n = tk.tokens.size();
    if (n == 0) fail("GGUF '%s': tokenizer.ggml.tokens is empty", mf.path.c_str());
    if ((int64_t)n > mf.config.vocab_size)
        fail("GGUF '%s': tokenizer has %zu tokens but the model's vocabulary (token_embd rows) is %d", mf.path.c_str(), n,
             mf.config.vocab_size);
    if (const Value* s = meta.get_array("tokenizer.ggml.scores", T_F32)) {
        if (s->count != n)
            fail("GGUF '%s': tokenizer.ggml.scores has %llu entries, expected %zu (one per token)", mf.path.c_str(),
                 (unsigned long long)s->count, n);
        tk.scores.assign(s->floats.begin(), s->floats.end());
    }
    if (const Value* t = meta.get_array("tokenizer.ggml.token_type", T_I32)) {
        if (t->count != n)
            fail("GGUF '%s': tokenizer.ggml.token_type has %llu entries, expected %zu (one per token)", mf.path.c_str(),
                 (unsigned long long)t->count, n);
        tk.types.resize(n);
        for (size_t k = 0; k < n; k++) {
            if (t->ints[k] < 0 || t->ints[k] > 6)
                fail("GGUF '%s': tokenizer.ggml.token_type[%zu] = %lld, expected 0..6", mf.path.c_str(), k,
                     (long long)t->ints[k]);
            tk.types[k] = (int)t->ints[k];
        }
    }
    if (const Value* m = meta.get_array("tokenizer.ggml.merges", T_STRING)) tk.merges = m->strs;
    if (tk.kind == TokenizerSpec::BPE_BYTELEVEL && tk.merges.empty())
        fail("GGUF '%s': byte-level BPE tokenizer (gpt2) without tokenizer.ggml.merges", mf.path.c_str());
    struct { const char* key; int* out; } ids[] = {
        {"tokenizer.ggml.bos_token_id", &tk.bos},     {"tokenizer.ggml.eos_token_id", &tk.eos},
        {"tokenizer.ggml.unknown_token_id", &tk.unk}, {"tokenizer.ggml.padding_token_id", &tk.pad},
        {"tokenizer.ggml.eot_token_id", &tk.eot},
    };
    for (auto& id : ids) {
        // absent, or stored as -1 / 0xFFFFFFFF: no such token
        int64_t v = meta.get_int(id.key, INT64_MIN, INT64_MAX, true, -1);
        if (v == 0xFFFFFFFFLL || v < 0) v = -1;
        if (v >= (int64_t)n)
            fail("GGUF '%s': %s = %lld is out of range (the tokenizer has %zu tokens)", mf.path.c_str(), id.key,
                 (long long)v, n);
        *id.out = (int)v;
    }
    // defaults as llama.cpp applies them: SPM adds BOS and a space prefix, byte-level BPE neither
    tk.add_bos = meta.get_bool("tokenizer.ggml.add_bos_token", spm);
    tk.add_space_prefix = meta.get_bool("tokenizer.ggml.add_space_prefix", spm);
    if (const std::string* pre = meta.get_str("tokenizer.ggml.pre")) tk.pre = *pre;
    else if (!spm) tk.pre = "default";
    if (const std::string* tmpl = meta.get_str("tokenizer.chat_template")) tk.chat_template = *tmpl;
    tk.source = mf.path;
}

// Llama-3 rope scaling appears in GGUF as rope_freqs.weight (one frequency divisor per rotation
// pair). Accept it when it is all ones (no scaling) or matches the Llama-3 rule with the stored
// factor / original context (defaults 8192) and low/high frequency factors 1 and 4.
void read_rope_freqs(const Meta& meta, ModelFile& mf, const std::string& arch) {
    const Tensor* t = find_tensor(mf, "rope_freqs.weight");
    LlamaConfig& c = mf.config;
    if (!t) {
        const std::string* type = meta.get_str(arch + ".rope.scaling.type");
        if (type && *type != "none")
            fail("GGUF '%s': rope scaling type '%s' (%s.rope.scaling.type) is not supported (only Llama-3 rope_freqs)",
                 mf.path.c_str(), type->c_str(), arch.c_str());
        return;
    }
    int pairs = c.head_dim / 2;
    if (t->dtype != DType::F32 || t->numel() != pairs)
        fail("GGUF '%s': rope_freqs.weight is %s %s, expected F32 with %d elements (head_dim / 2)", mf.path.c_str(),
             dtype_name(t->dtype), t->shape_str().c_str(), pairs);
    std::vector<float> f(pairs);
    memcpy(f.data(), t->data, pairs * sizeof(float));
    bool all_one = true;
    float max_f = 0;
    for (float x : f) {
        if (x != 1.0f) all_one = false;
        max_f = std::max(max_f, x);
    }
    if (all_one) return;
    LlamaConfig s = c;
    s.rope_scaling = true;
    s.rope_factor = (float)meta.get_float(arch + ".rope.scaling.factor", max_f);
    s.rope_low_freq_factor = 1.0f;
    s.rope_high_freq_factor = 4.0f;
    s.rope_orig_max_pos = (int)meta.get_int(arch + ".rope.scaling.original_context_length", 1, 1 << 24, true, 8192);
    for (int i = 0; i < pairs; i++) {
        double want = llama3_rope_factor(s, i);
        if (!(std::fabs(f[i] - want) <= 1e-5 * std::fabs(want)))
            fail("GGUF '%s': rope_freqs.weight[%d] = %.9g but Llama-3 rope scaling (factor %g, low 1, high 4, "
                 "original context %d) gives %.9g: this rope scaling is not supported",
                 mf.path.c_str(), i, f[i], s.rope_factor, s.rope_orig_max_pos, want);
    }
    c = s;
}

}  // namespace

std::unique_ptr<ModelFile> load_gguf(const std::string& path) {
    auto mf = std::make_unique<ModelFile>();
    mf->path = path;
    mf->format = "gguf";
    mf->maps.push_back(std::make_unique<MappedFile>(path));
    const MappedFile& map = *mf->maps.back();
    Cursor c(map.data, map.size, path);

    // header
    c.what = "the magic";
    uint32_t magic = c.get<uint32_t>();
    if (memcmp(&magic, "GGUF", 4) != 0) fail("'%s' is not a GGUF file: the first 4 bytes are not 'GGUF'", path.c_str());
    c.what = "the version";
    uint32_t version = c.get<uint32_t>();
    if (version == 1) fail("GGUF '%s' is version 1, which is not supported (expected 2 or 3)", path.c_str());
    if (version == 0x02000000 || version == 0x03000000)
        fail("GGUF '%s' is big-endian (version bytes %08x), only little-endian files are supported", path.c_str(), version);
    if (version != 2 && version != 3)
        fail("GGUF '%s' has version %u, expected 2 or 3", path.c_str(), version);
    c.what = "the tensor count";
    uint64_t n_tensors = c.get<uint64_t>();
    c.what = "the metadata count";
    uint64_t n_kv = c.get<uint64_t>();
    // each key/value takes >= 13 bytes and each tensor info >= 32: reject impossible counts early
    if (n_kv > map.size / 13 || n_tensors > map.size / 32)
        fail("GGUF '%s' is truncated or corrupt: %llu metadata entries and %llu tensors cannot fit in %zu bytes", path.c_str(),
             (unsigned long long)n_kv, (unsigned long long)n_tensors, map.size);

    // metadata
    Meta meta(path);
    meta.kv.reserve((size_t)std::min<uint64_t>(n_kv, 4096));  // grows with what is read
    for (uint64_t k = 0; k < n_kv; k++) {
        c.set_what(strfmt("metadata key #%llu", (unsigned long long)k));
        const uint64_t entry_begin = c.pos;
        std::string key = c.str();
        if (key.empty()) fail("GGUF '%s': metadata key #%llu at offset %llu is empty", path.c_str(), (unsigned long long)k,
                              (unsigned long long)c.pos);
        if (meta.index.count(key)) fail("GGUF '%s': duplicate metadata key '%s'", path.c_str(), key.c_str());
        c.set_what(strfmt("the value of metadata key '%s'", key.c_str()));
        uint32_t type = c.get<uint32_t>();
        if (min_value_size(type) == 0)
            fail("GGUF '%s': metadata key '%s' has unknown value type %u (offset %llu)", path.c_str(), key.c_str(), type,
                 (unsigned long long)(c.pos - 4));
        Value v = read_value(c, type, 0);
        mf->gguf_entries.push_back({key, map.data + entry_begin, (size_t)(c.pos - entry_begin)});
        meta.index[key] = meta.kv.size();
        meta.kv.emplace_back(std::move(key), std::move(v));
    }
    uint64_t alignment = (uint64_t)meta.get_int("general.alignment", 1, 1 << 30, true, 32);
    if (alignment & (alignment - 1))
        fail("GGUF '%s': general.alignment = %llu is not a power of two", path.c_str(), (unsigned long long)alignment);

    // tensor infos
    struct Info {
        std::string name;
        int ndim;
        int64_t shape[4];
        DType dtype;
        uint64_t offset, nbytes;
    };
    std::vector<Info> infos;
    infos.reserve((size_t)std::min<uint64_t>(n_tensors, 1 << 16));
    std::map<std::string, size_t> seen;
    for (uint64_t k = 0; k < n_tensors; k++) {
        Info t;
        c.set_what(strfmt("tensor info #%llu", (unsigned long long)k));
        t.name = c.str();
        if (t.name.empty()) fail("GGUF '%s': tensor #%llu has an empty name", path.c_str(), (unsigned long long)k);
        if (seen.count(t.name)) fail("GGUF '%s': duplicate tensor name '%s'", path.c_str(), t.name.c_str());
        seen[t.name] = k;
        c.set_what(strfmt("tensor info '%s'", t.name.c_str()));
        uint32_t ndim = c.get<uint32_t>();
        if (ndim < 1 || ndim > 4)
            fail("GGUF '%s': tensor '%s' has %u dimensions, expected 1 to 4", path.c_str(), t.name.c_str(), ndim);
        t.ndim = (int)ndim;
        uint64_t ne[4] = {1, 1, 1, 1};
        for (uint32_t d = 0; d < ndim; d++) {
            ne[d] = c.get<uint64_t>();
            if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX)
                fail("GGUF '%s': tensor '%s' dimension %u is %llu, expected 1 .. 2^63-1", path.c_str(), t.name.c_str(), d,
                     (unsigned long long)ne[d]);
        }
        for (int d = 0; d < t.ndim; d++) t.shape[d] = (int64_t)ne[t.ndim - 1 - d];  // innermost-first -> outermost-first
        for (int d = t.ndim; d < 4; d++) t.shape[d] = 1;
        uint32_t type = c.get<uint32_t>();
        if (!ggml_to_dtype(type, &t.dtype))
            fail("GGUF '%s': unsupported tensor type %s (id %u) for tensor '%s' (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                 "Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
                 path.c_str(), ggml_type_name(type), type, t.name.c_str());
        t.offset = c.get<uint64_t>();
        const uint64_t block_elems = (uint64_t)dtype_block_elems(t.dtype);
        if (ne[0] % block_elems != 0)
            fail("GGUF '%s': tensor '%s' is %s but its row length %llu is not a multiple of %llu", path.c_str(),
                 t.name.c_str(), dtype_name(t.dtype), (unsigned long long)ne[0], (unsigned long long)block_elems);
        std::string what = "size of tensor '" + t.name + "'";
        uint64_t rows = checked_mul(checked_mul(ne[1], ne[2], what.c_str()), ne[3], what.c_str());
        uint64_t row_bytes = checked_mul(ne[0] / block_elems, dtype_block_bytes(t.dtype), what.c_str());
        t.nbytes = checked_mul(row_bytes, rows, what.c_str());
        checked_mul(checked_mul(ne[0], rows, what.c_str()), 4, what.c_str());  // numel fits comfortably in int64
        if (t.offset % alignment != 0)
            fail("GGUF '%s': tensor '%s' data offset %llu is not a multiple of the alignment %llu", path.c_str(),
                 t.name.c_str(), (unsigned long long)t.offset, (unsigned long long)alignment);
        infos.push_back(std::move(t));
    }
    uint64_t data_start = checked_add(c.pos, (alignment - c.pos % alignment) % alignment, "GGUF data section start");

    // data: every tensor inside the file, no two overlapping
    std::vector<std::pair<uint64_t, size_t>> order;
    for (size_t k = 0; k < infos.size(); k++) {
        const Info& t = infos[k];
        std::string what = "data range of tensor '" + t.name + "'";
        uint64_t begin = checked_add(data_start, t.offset, what.c_str());
        uint64_t end = checked_add(begin, t.nbytes, what.c_str());
        if (end > map.size)
            fail("GGUF '%s' is truncated or corrupt: tensor '%s' data [%llu, %llu) extends past the end of the file "
                 "(%zu bytes)",
                 path.c_str(), t.name.c_str(), (unsigned long long)begin, (unsigned long long)end, map.size);
        order.emplace_back(t.offset, k);
    }
    std::sort(order.begin(), order.end());
    for (size_t k = 1; k < order.size(); k++) {
        const Info& a = infos[order[k - 1].second];
        const Info& b = infos[order[k].second];
        if (a.offset + a.nbytes > b.offset)
            fail("GGUF '%s' is corrupt: data of tensors '%s' [%llu, +%llu) and '%s' [%llu, +%llu) overlap", path.c_str(),
                 a.name.c_str(), (unsigned long long)a.offset, (unsigned long long)a.nbytes, b.name.c_str(),
                 (unsigned long long)b.offset, (unsigned long long)b.nbytes);
    }
    for (const Info& t : infos) {
        Tensor x;
        x.name = t.name;
        x.dtype = t.dtype;
        x.ndim = t.ndim;
        for (int d = 0; d < 4; d++) x.shape[d] = t.shape[d];
        x.nbytes = t.nbytes;
        x.data = keep_aligned(*mf, map.data + data_start + t.offset, t.nbytes, t.dtype);
        mf->tensors.push_back(x);
    }

    // printable metadata
    mf->metadata.emplace_back("GGUF.version", std::to_string(version));
    for (const auto& kv : meta.kv) mf->metadata.emplace_back(kv.first, value_str(kv.second));

    // config: arch "llama" or "qwen2", whose keys are the same under the arch's prefix
    const std::string* arch_p = meta.get_str("general.architecture");
    if (!arch_p) fail("GGUF '%s': missing metadata key 'general.architecture'", path.c_str());
    const std::string arch = *arch_p;
    if (arch != "llama" && arch != "qwen2")
        fail("GGUF '%s': architecture '%s' is not supported (general.architecture; supported: llama, qwen2; "
             "Llama-2, Llama-3 and Mistral GGUF files are 'llama')",
             path.c_str(), arch.c_str());
    const bool qwen2 = arch == "qwen2";
    LlamaConfig& cfg = mf->config;
    cfg.arch = arch;
    cfg.qkv_bias = qwen2;
    const int64_t big = 1 << 24;
    cfg.dim = (int)meta.get_int(arch + ".embedding_length", 1, big);
    cfg.n_layers = (int)meta.get_int(arch + ".block_count", 1, 4096);
    cfg.ffn_dim = (int)meta.get_int(arch + ".feed_forward_length", 1, big);
    cfg.n_heads = (int)meta.get_int(arch + ".attention.head_count", 1, big);
    cfg.n_kv_heads = (int)meta.get_int(arch + ".attention.head_count_kv", 1, big, true, cfg.n_heads);
    if (meta.find(arch + ".attention.key_length")) {
        cfg.head_dim = (int)meta.get_int(arch + ".attention.key_length", 1, big);
        int64_t vl = meta.get_int(arch + ".attention.value_length", 1, big, true, cfg.head_dim);
        if (vl != cfg.head_dim)
            fail("GGUF '%s': attention.key_length %d != attention.value_length %lld is not supported", path.c_str(),
                 cfg.head_dim, (long long)vl);
    } else {
        if (cfg.dim % cfg.n_heads != 0)
            fail("GGUF '%s': embedding_length %d is not a multiple of head_count %d", path.c_str(), cfg.dim, cfg.n_heads);
        cfg.head_dim = cfg.dim / cfg.n_heads;
    }
    int64_t rot = meta.get_int(arch + ".rope.dimension_count", 1, big, true, cfg.head_dim);
    if (rot != cfg.head_dim)
        fail("GGUF '%s': rope.dimension_count = %lld but head_dim = %d: partial rotary embeddings are not supported",
             path.c_str(), (long long)rot, cfg.head_dim);
    cfg.max_seq = (int)meta.get_int(arch + ".context_length", 1, big, true, 2048);
    cfg.rope_theta = (float)meta.get_float(arch + ".rope.freq_base", 10000.0);
    cfg.rms_eps = (float)meta.get_float(arch + ".attention.layer_norm_rms_epsilon", 1e-5);
    const Tensor* embd = find_tensor(*mf, "token_embd.weight");
    if (!embd) fail("GGUF '%s': missing tensor 'token_embd.weight' (token embedding)", path.c_str());
    if (embd->ndim != 2)
        fail("GGUF '%s': tensor 'token_embd.weight' has shape %s, expected [vocab, %d]", path.c_str(),
             embd->shape_str().c_str(), cfg.dim);
    if (meta.find(arch + ".vocab_size")) cfg.vocab_size = (int)meta.get_int(arch + ".vocab_size", 1, big);
    else cfg.vocab_size = embd->shape[0] <= big ? (int)embd->shape[0] : 0;
    validate_config(cfg, path);
    read_rope_freqs(meta, *mf, arch);

    // weights by role
    auto need = [&](const std::string& name, const std::string& role) -> Tensor {
        const Tensor* t = find_tensor(*mf, name);
        if (!t) fail("GGUF '%s': missing tensor '%s' (%s)", path.c_str(), name.c_str(), role.c_str());
        return *t;
    };
    LlamaWeights& w = mf->weights;
    w.tok_embd = *embd;
    w.out_norm = need("output_norm.weight", "output norm");
    if (const Tensor* out = find_tensor(*mf, "output.weight")) {
        w.lm_head = *out;
    } else {
        w.lm_head = w.tok_embd;
        cfg.tied_embeddings = true;
    }
    w.layers.resize(cfg.n_layers);
    for (int l = 0; l < cfg.n_layers; l++) {
        std::string b = "blk." + std::to_string(l) + ".", r = "layer " + std::to_string(l) + " ";
        LayerWeights& L = w.layers[l];
        L.attn_norm = need(b + "attn_norm.weight", r + "attn_norm");
        L.wq = need(b + "attn_q.weight", r + "wq");
        L.wk = need(b + "attn_k.weight", r + "wk");
        L.wv = need(b + "attn_v.weight", r + "wv");
        L.wo = need(b + "attn_output.weight", r + "wo");
        L.ffn_norm = need(b + "ffn_norm.weight", r + "ffn_norm");
        L.w_gate = need(b + "ffn_gate.weight", r + "w_gate");
        L.w_up = need(b + "ffn_up.weight", r + "w_up");
        L.w_down = need(b + "ffn_down.weight", r + "w_down");
        if (qwen2) {
            Tensor bq = need(b + "attn_q.bias", r + "bq"), bk = need(b + "attn_k.bias", r + "bk");
            load_qkv_bias(*mf, L, bq, bk, need(b + "attn_v.bias", r + "bv"), true);
        }
    }
    // tensors this loader would silently ignore but the model would need: refuse them
    for (const Tensor& t : mf->tensors) {
        if (t.name.compare(0, 4, "blk.") == 0) {
            long layer = strtol(t.name.c_str() + 4, nullptr, 10);
            if (layer < 0 || layer >= cfg.n_layers)
                fail("GGUF '%s': tensor '%s' belongs to layer %ld but block_count is %d", path.c_str(), t.name.c_str(),
                     layer, cfg.n_layers);
            size_t dot = t.name.find('.', 4);
            const std::string role = dot == std::string::npos ? "" : t.name.substr(dot + 1);
            bool qkv = role == "attn_q.bias" || role == "attn_k.bias" || role == "attn_v.bias";
            if (t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0 && !(qwen2 && qkv))
                fail("GGUF '%s': tensor '%s': bias tensors are not supported by architecture '%s' (only qwen2's "
                     "attn_q / attn_k / attn_v biases)",
                     path.c_str(), t.name.c_str(), arch.c_str());
        }
    }
    validate_weights(*mf);
    if (qwen2)  // llama.cpp runs qwen2 with its NEOX (rotate-half) rope, so the file keeps HF's row order
        for (LayerWeights& L : w.layers) {
            L.wq = permute_rope_rows(*mf, L.wq, cfg.n_heads, cfg.head_dim);
            L.wk = permute_rope_rows(*mf, L.wk, cfg.n_kv_heads, cfg.head_dim);
        }
    read_tokenizer(meta, *mf);
    return mf;
}

}  // namespace beagle
