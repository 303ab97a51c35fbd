// test_loaders_util.h: helpers for the loader tests (test_loaders*.cpp, test_bad_input.cpp): a
// temp directory, file writing, data paths, running `beagle` as a subprocess, and a tiny GGUF
// writer that builds synthetic llama models (any value types, tensor types, corruptions).
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/common.h"
#include "core/dtype.h"

namespace lt {

inline std::string env_or(const char* name, const std::string& def) {
    const char* v = getenv(name);
    return v && *v ? std::string(v) : def;
}
inline std::string root() { return env_or("BEAGLE_ROOT", "."); }
inline std::string data_models() { return root() + "/data/models"; }
inline std::string smollm2() { return env_or("BEAGLE_MODEL", root() + "/weights/SmolLM2-135M-Instruct.Q4_1.gguf"); }
inline std::string beagle_bin() { return env_or("BEAGLE_BIN", root() + "/build/beagle"); }

// A fresh directory under $TMPDIR (or /tmp), removed by the destructor.
struct TempDir {
    std::string path;
    TempDir() {
        std::string t = env_or("TMPDIR", "/tmp") + "/beagle_loaders_XXXXXX";
        std::vector<char> buf(t.begin(), t.end());
        buf.push_back(0);
        if (!mkdtemp(buf.data())) {
            perror("mkdtemp");
            exit(2);
        }
        path = buf.data();
    }
    ~TempDir() {
        std::string cmd = "rm -rf '" + path + "'";
        if (system(cmd.c_str()) != 0) fprintf(stderr, "warning: could not remove %s\n", path.c_str());
    }
    std::string operator/(const std::string& name) const { return path + "/" + name; }
};

inline void write_bytes(const std::string& path, const void* data, size_t n) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n)) {
        perror(path.c_str());
        exit(2);
    }
    fclose(f);
}
inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) { write_bytes(path, b.data(), b.size()); }
inline void write_text(const std::string& path, const std::string& s) { write_bytes(path, s.data(), s.size()); }
inline std::vector<uint8_t> read_bytes(const std::string& path) {
    std::string s = beagle::read_file(path);
    return std::vector<uint8_t>(s.begin(), s.end());
}

// Run `beagle ARGS` with a time limit; returns the exit code (-1 if it did not exit normally, e.g.
// a signal or the timeout) and stderr in *err.
inline int run_beagle(const std::string& args, std::string* err, int timeout_s = 20) {
    static int counter = 0;
    std::string errf = env_or("TMPDIR", "/tmp") + "/beagle_loaders_err_" + std::to_string(getpid()) + "_" +
                       std::to_string(counter++);
    std::string cmd = "timeout -s KILL " + std::to_string(timeout_s) + " '" + beagle_bin() + "' " + args +
                      " >/dev/null 2>'" + errf + "'";
    int st = system(cmd.c_str());
    try {
        *err = beagle::read_file(errf);
    } catch (...) {
        err->clear();
    }
    unlink(errf.c_str());
    if (st == -1 || !WIFEXITED(st)) return -1;
    int code = WEXITSTATUS(st);
    // timeout(1) reports a killed child as 128+signal (137 for KILL): count it as not exited
    return code >= 124 && code != 125 && code != 126 && code != 127 ? -1 : code;
}

// ---- GGUF writer ----
enum : uint32_t { G_U8 = 0, G_I8, G_U16, G_I16, G_U32, G_I32, G_F32, G_BOOL, G_STRING, G_ARRAY, G_U64, G_I64, G_F64 };
enum : uint32_t { GT_F32 = 0, GT_F16 = 1, GT_Q4_0 = 2, GT_Q4_1 = 3, GT_Q8_0 = 8, GT_BF16 = 30 };

struct Bytes {
    std::vector<uint8_t> b;
    template <class T>
    Bytes& put(T v) {
        size_t n = b.size();
        b.resize(n + sizeof v);
        memcpy(b.data() + n, &v, sizeof v);
        return *this;
    }
    Bytes& str(const std::string& s) {
        put<uint64_t>(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
};

struct GGUFWriter {
    uint32_t version = 3;
    uint64_t alignment = 32;  // only for layout; add general.alignment yourself when not 32
    Bytes kv;
    uint64_t n_kv = 0;
    struct T {
        std::string name;
        std::vector<uint64_t> ne;  // innermost first, as GGUF stores it
        uint32_t type;
        std::vector<uint8_t> data;
        bool fixed_offset = false;  // write `offset` instead of the computed one (corruption tests)
        uint64_t offset = 0;
        void set_offset(uint64_t o) {
            fixed_offset = true;
            offset = o;
        }
    };
    std::vector<T> tensors;

    Bytes& key(const std::string& k, uint32_t type) {
        n_kv++;
        kv.str(k).put<uint32_t>(type);
        return kv;
    }
    void u32(const std::string& k, uint32_t v) { key(k, G_U32).put(v); }
    void f32(const std::string& k, float v) { key(k, G_F32).put(v); }
    void boolean(const std::string& k, bool v) { key(k, G_BOOL).put<uint8_t>(v); }
    void str(const std::string& k, const std::string& v) { key(k, G_STRING).str(v); }
    void str_array(const std::string& k, const std::vector<std::string>& v) {
        Bytes& b = key(k, G_ARRAY).put<uint32_t>(G_STRING).put<uint64_t>(v.size());
        for (auto& s : v) b.str(s);
    }
    void f32_array(const std::string& k, const std::vector<float>& v) {
        Bytes& b = key(k, G_ARRAY).put<uint32_t>(G_F32).put<uint64_t>(v.size());
        for (float x : v) b.put(x);
    }
    void i32_array(const std::string& k, const std::vector<int32_t>& v) {
        Bytes& b = key(k, G_ARRAY).put<uint32_t>(G_I32).put<uint64_t>(v.size());
        for (int32_t x : v) b.put(x);
    }
    void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, std::vector<uint8_t> data) {
        tensors.push_back({name, std::move(ne), type, std::move(data)});
    }
    std::vector<uint8_t> build() const {
        Bytes h;
        h.b = {'G', 'G', 'U', 'F'};
        h.put(version).put<uint64_t>(tensors.size()).put(n_kv);
        h.b.insert(h.b.end(), kv.b.begin(), kv.b.end());
        uint64_t off = 0;
        std::vector<uint64_t> offs;
        for (const T& t : tensors) {
            off = (off + alignment - 1) / alignment * alignment;
            offs.push_back(off);
            h.str(t.name).put<uint32_t>(t.ne.size());
            for (uint64_t d : t.ne) h.put(d);
            h.put(t.type).put<uint64_t>(t.fixed_offset ? t.offset : off);
            off += t.data.size();
        }
        while (h.b.size() % alignment) h.b.push_back(0);
        size_t base = h.b.size();
        for (size_t i = 0; i < tensors.size(); i++) {
            h.b.resize(base + offs[i], 0);
            h.b.insert(h.b.end(), tensors[i].data.begin(), tensors[i].data.end());
        }
        return h.b;
    }
};

// Bytes of `n` elements of GGUF type `type` with pseudo-random content (valid half scales).
inline std::vector<uint8_t> random_data(uint32_t type, uint64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<uint8_t> out;
    auto put = [&](const void* p, size_t k) { out.insert(out.end(), (const uint8_t*)p, (const uint8_t*)p + k); };
    if (type == GT_F32) {
        for (uint64_t i = 0; i < n; i++) { float x = u(rng); put(&x, 4); }
    } else if (type == GT_F16 || type == GT_BF16) {
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = type == GT_F16 ? beagle::f32_to_f16(u(rng)) : beagle::f32_to_bf16(u(rng));
            put(&h, 2);
        }
    } else {
        size_t block = type == GT_Q8_0 ? 34 : type == GT_Q4_0 ? 18 : 20;
        for (uint64_t b = 0; b < n / 32; b++) {
            std::vector<uint8_t> blk(block);
            for (auto& x : blk) x = (uint8_t)rng();
            uint16_t d = beagle::f32_to_f16(0.01f + 0.1f * std::fabs(u(rng)));
            memcpy(blk.data(), &d, 2);
            if (type == GT_Q4_1) {
                uint16_t m = beagle::f32_to_f16(u(rng));
                memcpy(blk.data() + 2, &m, 2);
            }
            put(blk.data(), block);
        }
    }
    return out;
}

// A small valid llama GGUF: dim 64, 2 layers, 4 heads / 2 KV heads (head_dim 16), ffn 96, vocab 40,
// SPM tokenizer (none with spm_tokenizer false: add your own). `mat_type` is used for the
// matrices; norms are F32.
struct TinyLlama {
    int dim = 64, layers = 2, heads = 4, kv_heads = 2, ffn = 96, vocab = 40;
    uint32_t mat_type = GT_F32;
    bool tied = false;
    bool spm_tokenizer = true;
};

inline GGUFWriter tiny_llama(const TinyLlama& o = TinyLlama()) {
    GGUFWriter w;
    w.str("general.architecture", "llama");
    w.str("general.name", "tiny");
    w.u32("llama.context_length", 128);
    w.u32("llama.embedding_length", o.dim);
    w.u32("llama.block_count", o.layers);
    w.u32("llama.feed_forward_length", o.ffn);
    w.u32("llama.attention.head_count", o.heads);
    w.u32("llama.attention.head_count_kv", o.kv_heads);
    w.u32("llama.rope.dimension_count", o.dim / o.heads);
    w.f32("llama.rope.freq_base", 10000.0f);
    w.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    if (o.spm_tokenizer) {
        w.str("tokenizer.ggml.model", "llama");
        std::vector<std::string> toks;
        std::vector<float> scores;
        std::vector<int32_t> types;
        for (int i = 0; i < o.vocab; i++) {
            toks.push_back(i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : "tok" + std::to_string(i));
            scores.push_back(-(float)i);
            types.push_back(i == 0 ? 2 : i < 3 ? 3 : 1);
        }
        w.str_array("tokenizer.ggml.tokens", toks);
        w.f32_array("tokenizer.ggml.scores", scores);
        w.i32_array("tokenizer.ggml.token_type", types);
        w.u32("tokenizer.ggml.bos_token_id", 1);
        w.u32("tokenizer.ggml.eos_token_id", 2);
    }
    uint64_t hd = o.dim / o.heads, q = o.heads * hd, kv = o.kv_heads * hd;
    uint32_t seed = 1;
    auto mat = [&](const std::string& n, uint64_t rows, uint64_t cols) {
        w.tensor(n, {cols, rows}, o.mat_type, random_data(o.mat_type, rows * cols, seed++));
    };
    auto vec = [&](const std::string& n, uint64_t len) { w.tensor(n, {len}, GT_F32, random_data(GT_F32, len, seed++)); };
    mat("token_embd.weight", o.vocab, o.dim);
    vec("output_norm.weight", o.dim);
    if (!o.tied) mat("output.weight", o.vocab, o.dim);
    for (int l = 0; l < o.layers; l++) {
        std::string b = "blk." + std::to_string(l) + ".";
        vec(b + "attn_norm.weight", o.dim);
        mat(b + "attn_q.weight", q, o.dim);
        mat(b + "attn_k.weight", kv, o.dim);
        mat(b + "attn_v.weight", kv, o.dim);
        mat(b + "attn_output.weight", o.dim, q);
        vec(b + "ffn_norm.weight", o.dim);
        mat(b + "ffn_gate.weight", o.ffn, o.dim);
        mat(b + "ffn_up.weight", o.ffn, o.dim);
        mat(b + "ffn_down.weight", o.dim, o.ffn);
    }
    return w;
}

// ---- safetensors writer ----
struct StT {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::string offsets_override;  // raw JSON for data_offsets, if set
    std::vector<uint8_t> data;
};

// A .safetensors file of the tensors (data packed in order); header_override replaces the JSON header.
inline std::vector<uint8_t> st_build(const std::vector<StT>& ts, const std::string& header_override = "") {
    std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
    std::vector<uint8_t> data;
    for (const StT& t : ts) {
        std::string shape;
        for (size_t i = 0; i < t.shape.size(); i++) shape += (i ? "," : "") + std::to_string(t.shape[i]);
        std::string offs = t.offsets_override.empty()
                               ? "[" + std::to_string(data.size()) + "," + std::to_string(data.size() + t.data.size()) + "]"
                               : t.offsets_override;
        h += ",\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" + shape + "],\"data_offsets\":" + offs + "}";
        data.insert(data.end(), t.data.begin(), t.data.end());
    }
    h += "}";
    if (!header_override.empty()) h = header_override;
    while (h.size() % 8) h += ' ';
    uint64_t n = h.size();
    std::vector<uint8_t> out(8 + n + data.size());
    memcpy(out.data(), &n, 8);
    memcpy(out.data() + 8, h.data(), n);
    if (!data.empty()) memcpy(out.data() + 8 + n, data.data(), data.size());
    return out;
}

// The HF tensors of a tiny llama with tied embeddings (F32, rotate-half order does not matter for
// loading), and its config.json. Defaults: dim 64, 2 layers, 4 heads / 2 KV heads, ffn 96, vocab 40.
inline std::vector<StT> tiny_hf_tensors(const TinyLlama& o = TinyLlama()) {
    std::vector<StT> ts;
    uint32_t seed = 100;
    auto add = [&](const std::string& n, std::vector<int64_t> shape) {
        int64_t numel = 1;
        for (int64_t d : shape) numel *= d;
        ts.push_back({n, "F32", shape, "", random_data(GT_F32, numel, seed++)});
    };
    int64_t hd = o.dim / o.heads, q = o.heads * hd, kv = o.kv_heads * hd;
    add("model.embed_tokens.weight", {o.vocab, o.dim});
    add("model.norm.weight", {o.dim});
    for (int l = 0; l < o.layers; l++) {
        std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {o.dim});
        add(p + "self_attn.q_proj.weight", {q, o.dim});
        add(p + "self_attn.k_proj.weight", {kv, o.dim});
        add(p + "self_attn.v_proj.weight", {kv, o.dim});
        add(p + "self_attn.o_proj.weight", {o.dim, q});
        add(p + "post_attention_layernorm.weight", {o.dim});
        add(p + "mlp.gate_proj.weight", {o.ffn, o.dim});
        add(p + "mlp.up_proj.weight", {o.ffn, o.dim});
        add(p + "mlp.down_proj.weight", {o.dim, o.ffn});
    }
    return ts;
}

inline std::string tiny_hf_config(const TinyLlama& o = TinyLlama()) {
    auto i = [](int v) { return std::to_string(v); };
    return "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": " + i(o.dim) + ",\n  \"num_hidden_layers\": " +
           i(o.layers) + ",\n  \"num_attention_heads\": " + i(o.heads) + ",\n  \"num_key_value_heads\": " +
           i(o.kv_heads) + ",\n  \"intermediate_size\": " + i(o.ffn) + ",\n  \"vocab_size\": " + i(o.vocab) +
           ",\n  \"max_position_embeddings\": 128,\n  \"rms_norm_eps\": 1e-05,\n"
           "  \"rope_theta\": 10000.0,\n  \"tie_word_embeddings\": true\n}\n";
}

}  // namespace lt
