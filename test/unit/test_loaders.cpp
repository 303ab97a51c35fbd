// test_loaders.cpp: the model loaders on real files. stories260K .bin and .gguf give the same
// config and bit-identical role tensors; the HF safetensors export of the .bin (single, sharded,
// bf16, f16; made by scripts/export_safetensors.py) loads back bit-identical after our q/k
// un-permutation; the SmolLM2 GGUF has the published config; synthetic GGUFs cover every metadata
// value type, v2, custom alignment, tied embeddings and every tensor type; dequantize_row on
// hand-made blocks. (test_loaders_gguf.py checks every tensor against the gguf package.)
#include <cstring>
#include <functional>

#include "io/model_file.h"
#include "test_loaders_util.h"
#include "testlib.h"

using namespace beagle;

// Every role tensor of a model, named by role.
static std::vector<std::pair<std::string, const Tensor*>> roles(const ModelFile& m) {
    std::vector<std::pair<std::string, const Tensor*>> r;
    const LlamaWeights& w = m.weights;
    r.push_back({"tok_embd", &w.tok_embd});
    for (size_t l = 0; l < w.layers.size(); l++) {
        const LayerWeights& L = w.layers[l];
        std::string p = "layer" + std::to_string(l) + ".";
        r.push_back({p + "attn_norm", &L.attn_norm});
        r.push_back({p + "wq", &L.wq});
        r.push_back({p + "wk", &L.wk});
        r.push_back({p + "wv", &L.wv});
        r.push_back({p + "wo", &L.wo});
        r.push_back({p + "ffn_norm", &L.ffn_norm});
        r.push_back({p + "w_gate", &L.w_gate});
        r.push_back({p + "w_up", &L.w_up});
        r.push_back({p + "w_down", &L.w_down});
    }
    r.push_back({"out_norm", &w.out_norm});
    r.push_back({"lm_head", &w.lm_head});
    return r;
}

static bool same_shape(const Tensor& a, const Tensor& b) {
    if (a.ndim != b.ndim) return false;
    for (int i = 0; i < a.ndim; i++)
        if (a.shape[i] != b.shape[i]) return false;
    return true;
}

// Role by role: same dtype, shape and bytes.
static void check_bit_identical(const ModelFile& a, const ModelFile& b, const char* what) {
    auto ra = roles(a), rb = roles(b);
    CHECK(ra.size() == rb.size(), "%s: %zu vs %zu roles", what, ra.size(), rb.size());
    int bad = 0;
    for (size_t i = 0; i < ra.size() && i < rb.size(); i++) {
        const Tensor& x = *ra[i].second;
        const Tensor& y = *rb[i].second;
        bool ok = x.dtype == y.dtype && same_shape(x, y) && x.nbytes == y.nbytes && x.data && y.data &&
                  memcmp(x.data, y.data, x.nbytes) == 0;
        if (!ok && bad++ < 5)
            fprintf(stderr, "  %s: role %s differs: %s %s vs %s %s\n", what, ra[i].first.c_str(), dtype_name(x.dtype),
                    x.shape_str().c_str(), dtype_name(y.dtype), y.shape_str().c_str());
    }
    CHECK(bad == 0, "%s: %d role tensors not bit-identical", what, bad);
}

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

// Role by role: b's stored 16-bit values equal `convert` of a's f32 values; the norm vectors, which
// load_model widens to F32, equal those values widened (`widen`).
static void check_converted(const ModelFile& a, const ModelFile& b, DType t, uint16_t (*convert)(float),
                            float (*widen)(uint16_t), const char* what) {
    auto ra = roles(a), rb = roles(b);
    int bad = 0;
    for (size_t i = 0; i < ra.size() && i < rb.size(); i++) {
        const Tensor& x = *ra[i].second;
        const Tensor& y = *rb[i].second;
        const bool norm = ra[i].first.find("norm") != std::string::npos;
        if (y.dtype != (norm ? DType::F32 : t) || !same_shape(x, y) || x.dtype != DType::F32) {
            bad++;
            continue;
        }
        const float* xf = (const float*)x.data;
        const uint16_t* yh = (const uint16_t*)y.data;
        const float* yf = (const float*)y.data;
        for (int64_t k = 0; k < x.numel(); k++)
            if (norm ? float_bits(yf[k]) != float_bits(widen(convert(xf[k]))) : convert(xf[k]) != yh[k]) {
                if (bad++ < 5) fprintf(stderr, "  %s: role %s element %lld differs\n", what, ra[i].first.c_str(), (long long)k);
                break;
            }
    }
    CHECK(bad == 0, "%s: %d role tensors differ from the converted .bin values", what, bad);
}

static void check_stories_config(const LlamaConfig& c, const char* what) {
    CHECK(c.dim == 64, "%s dim %d", what, c.dim);
    CHECK(c.n_layers == 5, "%s n_layers %d", what, c.n_layers);
    CHECK(c.n_heads == 8 && c.n_kv_heads == 4, "%s heads %d/%d", what, c.n_heads, c.n_kv_heads);
    CHECK(c.head_dim == 8, "%s head_dim %d", what, c.head_dim);
    CHECK(c.ffn_dim == 172, "%s ffn %d", what, c.ffn_dim);
    CHECK(c.vocab_size == 512, "%s vocab %d", what, c.vocab_size);
    CHECK(c.rope_theta == 10000.0f, "%s theta %g", what, c.rope_theta);
    CHECK(std::fabs(c.rms_eps - 1e-5) < 1e-11, "%s rms_eps %g", what, c.rms_eps);
    CHECK(!c.rope_scaling, "%s rope scaling", what);
}

static void test_dequantize_row() {
    // Q8_0: d = 0.5, q = -16..15 -> -8..7.5
    BlockQ8_0 q8;
    q8.d = f32_to_f16(0.5f);
    for (int j = 0; j < 32; j++) q8.qs[j] = (int8_t)(j - 16);
    float out[64];
    dequantize_row(DType::Q8_0, &q8, out, 32);
    int bad = 0;
    for (int j = 0; j < 32; j++) bad += out[j] != 0.5f * (j - 16);
    CHECK(bad == 0, "Q8_0 dequant");
    // Q4_0: elem j (<16) = low nibble of qs[j], elem j+16 = high nibble; x = d * (q - 8)
    BlockQ4_0 q40;
    q40.d = f32_to_f16(0.25f);
    for (int j = 0; j < 16; j++) q40.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    dequantize_row(DType::Q4_0, &q40, out, 32);
    bad = 0;
    for (int j = 0; j < 16; j++) bad += out[j] != 0.25f * (j - 8) || out[j + 16] != 0.25f * (15 - j - 8);
    CHECK(bad == 0, "Q4_0 dequant");
    // Q4_1: x = d * q + m
    BlockQ4_1 q41[2];
    for (int b = 0; b < 2; b++) {
        q41[b].d = f32_to_f16(b ? 2.0f : 0.125f);
        q41[b].m = f32_to_f16(b ? -3.0f : 1.5f);
        for (int j = 0; j < 16; j++) q41[b].qs[j] = (uint8_t)(j | ((15 - j) << 4));
    }
    dequantize_row(DType::Q4_1, q41, out, 64);
    bad = 0;
    for (int b = 0; b < 2; b++) {
        float d = b ? 2.0f : 0.125f, m = b ? -3.0f : 1.5f;
        for (int j = 0; j < 16; j++) bad += out[32 * b + j] != d * j + m || out[32 * b + j + 16] != d * (15 - j) + m;
    }
    CHECK(bad == 0, "Q4_1 dequant");
    // F16 / BF16 / F32
    uint16_t h[4] = {0x3C00, 0xC000, 0x0001, 0x7BFF};  // 1, -2, smallest subnormal, 65504
    dequantize_row(DType::F16, h, out, 4);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == std::ldexp(1.0f, -24) && out[3] == 65504.0f, "F16 dequant");
    uint16_t bf[3] = {0x3F80, 0xC040, 0x4049};  // 1, -3, 3.140625
    dequantize_row(DType::BF16, bf, out, 3);
    CHECK(out[0] == 1.0f && out[1] == -3.0f && out[2] == 3.140625f, "BF16 dequant");
    float f[3] = {1.5f, -0.0f, 7.25f};
    dequantize_row(DType::F32, f, out, 3);
    CHECK(memcmp(f, out, sizeof f) == 0, "F32 copy");
    CHECK_THROWS(dequantize_row(DType::Q8_0, &q8, out, 31), "multiple of the block size");
}

static std::unique_ptr<ModelFile> load_ok(const std::string& path) {
    try {
        return load_model(path);
    } catch (const Error& e) {
        CHECK(false, "loading %s failed: %s", path.c_str(), e.what());
        return nullptr;
    }
}

static void test_stories(std::unique_ptr<ModelFile>& bin) {
    std::string dir = lt::data_models();
    bin = load_ok(dir + "/stories260K.bin");
    auto gguf = load_ok(dir + "/stories260K.gguf");
    if (!bin || !gguf) return;
    CHECK(bin->format == "llama2c" && gguf->format == "gguf", "formats %s %s", bin->format.c_str(), gguf->format.c_str());
    check_stories_config(bin->config, ".bin");
    check_stories_config(gguf->config, ".gguf");
    CHECK(bin->config.max_seq == 512, "bin seq_len %d", bin->config.max_seq);
    CHECK(gguf->config.max_seq == 2048, "gguf context_length %d", gguf->config.max_seq);
    CHECK(bin->config.tied_embeddings, "bin has a shared classifier (positive vocab_size)");
    CHECK(!gguf->config.tied_embeddings, "gguf stores output.weight");
    CHECK(bin->weights.lm_head.data == bin->weights.tok_embd.data, "tied lm_head is the embedding");
    CHECK(bin->tensors.size() == 1 + 5 * 9 + 1 + 2, "bin tensors %zu", bin->tensors.size());
    CHECK(gguf->tensors.size() == 48, "gguf tensors %zu", gguf->tensors.size());
    CHECK(bin->tokenizer.kind == TokenizerSpec::NONE, "bin->tokenizer.kind == TokenizerSpec::NONE");
    const TokenizerSpec& t = gguf->tokenizer;
    CHECK(t.kind == TokenizerSpec::SPM, "stories gguf tokenizer is llama/SPM");
    CHECK(t.tokens.size() == 512 && t.scores.size() == 512 && t.types.size() == 512, "tok512 vocab");
    CHECK(t.bos == 1 && t.eos == 2 && t.unk == 0 && t.pad == -1, "ids bos %d eos %d unk %d pad %d", t.bos, t.eos, t.unk, t.pad);
    CHECK(t.tokens.size() > 2 && t.tokens[1] == "<s>" && t.tokens[2] == "</s>", "special pieces");
    CHECK(t.add_bos && t.add_space_prefix, "SPM defaults");
    // the GGUF is the .bin converted: every role tensor bit-identical (wq/wk included: both use the
    // interleaved RoPE layout, and lm_head = output.weight equals the shared embedding)
    check_bit_identical(*bin, *gguf, "stories260K .bin vs .gguf");
}

static void test_safetensors(const ModelFile* bin) {
    if (!bin) return;
    lt::TempDir tmp;
    std::string script = lt::root() + "/scripts/export_safetensors.py";
    std::string src = lt::data_models() + "/stories260K.bin";
    struct Case { const char* name; const char* args; } cases[] = {
        {"single", ""}, {"sharded", "--shards 3"}, {"bf16", "--dtype bf16"}, {"f16", "--dtype f16 --shards 2"},
    };
    for (auto& c : cases) {
        std::string cmd = "python3 '" + script + "' '" + src + "' '" + (tmp / c.name) + "' " + c.args;
        int rc = system(cmd.c_str());
        CHECK(rc == 0, "export %s failed: %s", c.name, cmd.c_str());
    }
    auto single = load_ok(tmp / "single");
    auto sharded = load_ok(tmp / "sharded");
    auto bf16 = load_ok(tmp / "bf16");
    auto f16 = load_ok(tmp / "f16");
    if (!single || !sharded || !bf16 || !f16) return;
    for (const ModelFile* m : {single.get(), sharded.get(), bf16.get(), f16.get()}) {
        check_stories_config(m->config, m->path.c_str());
        CHECK(m->config.max_seq == 512 && m->config.tied_embeddings, "%s", m->path.c_str());
        CHECK(m->format == "safetensors", "format %s", m->format.c_str());
        CHECK(m->tensors.size() == 1 + 5 * 9 + 1, "%s: %zu tensors", m->path.c_str(), m->tensors.size());
    }
    check_bit_identical(*bin, *single, "stories260K .bin vs safetensors (un-permuted q/k)");
    check_bit_identical(*bin, *sharded, "stories260K .bin vs sharded safetensors");
    check_converted(*bin, *bf16, DType::BF16, f32_to_bf16, bf16_to_f32, "bf16 export");
    check_converted(*bin, *f16, DType::F16, f32_to_f16, f16_to_f32, "f16 export");
    // the stored HF q_proj really is in another row order (so the test above proves the permutation)
    const Tensor* hf_q = nullptr;
    for (const Tensor& t : single->tensors)
        if (t.name == "model.layers.0.self_attn.q_proj.weight") hf_q = &t;
    CHECK(hf_q && memcmp(hf_q->data, bin->weights.layers[0].wq.data, hf_q->nbytes) != 0, "HF q_proj stored permuted");
    // the same checkpoint by file path rather than directory
    auto by_file = load_ok(tmp / "single/model.safetensors");
    auto by_index = load_ok(tmp / "sharded/model.safetensors.index.json");
    if (by_file) check_bit_identical(*bin, *by_file, "safetensors by file path");
    if (by_index) check_bit_identical(*bin, *by_index, "safetensors by index path");
}

static void test_smollm2() {
    std::string path = lt::smollm2();
    if (!file_exists(path)) {
        CHECK(false, "SmolLM2 model missing at %s (make model)", path.c_str());
        return;
    }
    auto m = load_ok(path);
    if (!m) return;
    const LlamaConfig& c = m->config;
    CHECK(c.n_layers == 30 && c.dim == 576, "layers %d dim %d", c.n_layers, c.dim);
    CHECK(c.n_heads == 9 && c.n_kv_heads == 3 && c.head_dim == 64, "heads %d/%d hd %d", c.n_heads, c.n_kv_heads, c.head_dim);
    CHECK(c.ffn_dim == 1536 && c.vocab_size == 49152, "ffn %d vocab %d", c.ffn_dim, c.vocab_size);
    CHECK(c.rope_theta == 100000.0f, "theta %g", c.rope_theta);
    CHECK(std::fabs(c.rms_eps - 1e-5) < 1e-11, "rms_eps %g", c.rms_eps);
    CHECK(c.tied_embeddings && m->weights.lm_head.data == m->weights.tok_embd.data, "tied");
    CHECK(c.max_seq == 8192, "context %d", c.max_seq);
    CHECK(m->tensors.size() == 272, "tensors %zu", m->tensors.size());
    const Tensor& e = m->weights.tok_embd;
    CHECK(e.dtype == DType::Q8_0 && e.ndim == 2 && e.shape[0] == 49152 && e.shape[1] == 576, "token_embd %s %s",
          dtype_name(e.dtype), e.shape_str().c_str());
    const LayerWeights& L = m->weights.layers[7];
    CHECK(L.wq.dtype == DType::Q4_1 && L.wq.shape[0] == 576 && L.wq.shape[1] == 576, "wq");
    CHECK(L.wk.shape[0] == 192 && L.wk.shape[1] == 576, "wk %s", L.wk.shape_str().c_str());
    CHECK(L.w_down.shape[0] == 576 && L.w_down.shape[1] == 1536 && L.w_down.nbytes == 576 * 1536 / 32 * 20, "w_down");
    CHECK(L.attn_norm.dtype == DType::F32 && L.attn_norm.ndim == 1, "norm");
    const TokenizerSpec& t = m->tokenizer;
    CHECK(t.kind == TokenizerSpec::BPE_BYTELEVEL, "gpt2 tokenizer");
    CHECK(t.tokens.size() == 49152 && t.merges.size() == 48900 && t.types.size() == 49152, "vocab/merges");
    CHECK(t.bos == 1 && t.eos == 2 && t.unk == 0 && t.pad == 2, "ids");
    CHECK(t.tokens.size() > 2 && t.tokens[0] == "<|endoftext|>" && t.tokens[2] == "<|im_end|>", "special pieces");
    CHECK(t.pre == "smollm" && !t.add_bos && !t.add_space_prefix, "pre '%s'", t.pre.c_str());
    CHECK(t.chat_template.find("<|im_start|>") != std::string::npos, "chat template");
    CHECK(!t.merges.empty() && t.merges[0] == "\xC4\xA0 t", "first merge '%s'", t.merges.empty() ? "" : t.merges[0].c_str());
    // data pointers point into the mapping (not copied): the file is mapped once
    CHECK(m->maps.size() == 1 && m->owned.empty(), "mmapped, nothing copied");
    const uint8_t* base = m->maps[0]->data;
    CHECK((const uint8_t*)e.data > base && (const uint8_t*)e.data + e.nbytes <= base + m->maps[0]->size, "(const uint8_t*)e.data > base && (const uint8_t*)e.data + e.");
}

static std::string meta(const ModelFile& m, const std::string& key) {
    for (auto& kv : m.metadata)
        if (kv.first == key) return kv.second;
    return "<absent>";
}

static void test_synthetic_gguf() {
    lt::TempDir tmp;
    // every metadata value type, nested arrays; GGUF v2 and v3
    for (uint32_t version : {2u, 3u}) {
        lt::GGUFWriter w = lt::tiny_llama();
        w.version = version;
        w.key("t.u8", lt::G_U8).put<uint8_t>(200);
        w.key("t.i8", lt::G_I8).put<int8_t>(-100);
        w.key("t.u16", lt::G_U16).put<uint16_t>(60000);
        w.key("t.i16", lt::G_I16).put<int16_t>(-30000);
        w.key("t.u32", lt::G_U32).put<uint32_t>(4000000000u);
        w.key("t.i32", lt::G_I32).put<int32_t>(-2000000000);
        w.key("t.f32", lt::G_F32).put<float>(0.1f);
        w.key("t.bool", lt::G_BOOL).put<uint8_t>(1);
        w.key("t.str", lt::G_STRING).str("a \"q\"\n");
        w.key("t.u64", lt::G_U64).put<uint64_t>(18000000000000000000ull);
        w.key("t.i64", lt::G_I64).put<int64_t>(-9000000000000000000ll);
        w.key("t.f64", lt::G_F64).put<double>(0.1);
        w.key("t.arr_bool", lt::G_ARRAY).put<uint32_t>(lt::G_BOOL).put<uint64_t>(2).put<uint8_t>(0).put<uint8_t>(1);
        w.key("t.arr_i16", lt::G_ARRAY).put<uint32_t>(lt::G_I16).put<uint64_t>(3).put<int16_t>(-1).put<int16_t>(2).put<int16_t>(3);
        w.key("t.arr_f64", lt::G_ARRAY).put<uint32_t>(lt::G_F64).put<uint64_t>(1).put<double>(2.5);
        {
            lt::Bytes& b = w.key("t.nested", lt::G_ARRAY).put<uint32_t>(lt::G_ARRAY).put<uint64_t>(2);
            b.put<uint32_t>(lt::G_U8).put<uint64_t>(2).put<uint8_t>(7).put<uint8_t>(8);
            b.put<uint32_t>(lt::G_STRING).put<uint64_t>(1).str("x");
        }
        w.key("t.empty", lt::G_ARRAY).put<uint32_t>(lt::G_I32).put<uint64_t>(0);
        std::string p = tmp / ("v" + std::to_string(version) + ".gguf");
        lt::write_bytes(p, w.build());
        auto m = load_ok(p);
        if (!m) continue;
        CHECK(meta(*m, "GGUF.version") == std::to_string(version), "version %u", version);
        struct { const char* k; const char* v; } want[] = {
            {"t.u8", "200"}, {"t.i8", "-100"}, {"t.u16", "60000"}, {"t.i16", "-30000"},
            {"t.u32", "4000000000"}, {"t.i32", "-2000000000"}, {"t.f32", "0.100000001"}, {"t.bool", "true"},
            {"t.str", "\"a \\\"q\\\"\\n\""}, {"t.u64", "18000000000000000000"}, {"t.i64", "-9000000000000000000"},
            {"t.f64", "0.10000000000000001"}, {"t.arr_bool", "array[bool; 2] [false, true]"},
            {"t.arr_i16", "array[i16; 3] [-1, 2, 3]"}, {"t.arr_f64", "array[f64; 1] [2.5]"},
            {"t.nested", "array[array; 2] [array[u8; 2] [7, 8], array[string; 1] [\"x\"]]"},
            {"t.empty", "array[i32; 0] []"}, {"llama.block_count", "2"},
        };
        for (auto& kv : want) CHECK(meta(*m, kv.k) == kv.v, "v%u %s = %s, want %s", version, kv.k, meta(*m, kv.k).c_str(), kv.v);
        CHECK(m->config.n_layers == 2 && m->config.head_dim == 16 && m->config.n_kv_heads == 2 && m->config.vocab_size == 40, "m->config.n_layers == 2 && m->config.head_dim == 16 && m->co");
        CHECK(m->tokenizer.kind == TokenizerSpec::SPM && m->tokenizer.tokens.size() == 40 && m->tokenizer.bos == 1, "m->tokenizer.kind == TokenizerSpec::SPM && m->tokenizer.toke");
    }
    // every supported tensor type, tied embeddings, alignment 64
    for (uint32_t type : {lt::GT_F32, lt::GT_F16, lt::GT_BF16, lt::GT_Q8_0, lt::GT_Q4_0, lt::GT_Q4_1}) {
        lt::TinyLlama o;
        o.mat_type = type;
        o.tied = true;
        lt::GGUFWriter w = lt::tiny_llama(o);
        w.alignment = 64;
        w.u32("general.alignment", 64);
        std::string p = tmp / ("t" + std::to_string(type) + ".gguf");
        lt::write_bytes(p, w.build());
        auto m = load_ok(p);
        if (!m) continue;
        CHECK(m->config.tied_embeddings && m->weights.lm_head.data == m->weights.tok_embd.data, "m->config.tied_embeddings && m->weights.lm_head.data == m->w");
        const Tensor& wq = m->weights.layers[1].wq;
        DType want = type == lt::GT_F32 ? DType::F32 : type == lt::GT_F16 ? DType::F16 : type == lt::GT_BF16 ? DType::BF16
                   : type == lt::GT_Q8_0 ? DType::Q8_0 : type == lt::GT_Q4_0 ? DType::Q4_0 : DType::Q4_1;
        CHECK(wq.dtype == want && wq.shape[0] == 64 && wq.shape[1] == 64, "type %u: %s %s", type, dtype_name(wq.dtype), wq.shape_str().c_str());
        CHECK(((uintptr_t)wq.data - (uintptr_t)m->maps[0]->data) % 64 == 0, "aligned to 64");
        // the bytes are the writer's bytes for that tensor
        for (const auto& t : w.tensors)
            if (t.name == "blk.1.attn_q.weight")
                CHECK(t.data.size() == wq.nbytes && memcmp(t.data.data(), wq.data, wq.nbytes) == 0, "type %u bytes", type);
    }
}

// Llama-3 rope scaling: as rope_freqs.weight in a GGUF, and as rope_scaling in an HF config.json.
// The expected factors are computed here from the HF formula (transformers' llama3 rope init).
static void test_llama3_rope() {
    lt::TempDir tmp;
    const double pi = 3.14159265358979323846, theta = 500000, factor = 8, lo = 1, hi = 4, orig = 8192;
    const int hd = 16;
    std::vector<uint8_t> freqs(hd / 2 * 4);
    int regions[3] = {0, 0, 0};
    for (int i = 0; i < hd / 2; i++) {
        double inv = 1.0 / std::pow(theta, 2.0 * i / hd), wavelen = 2 * pi / inv, scaled;
        if (wavelen < orig / hi) scaled = inv, regions[0]++;
        else if (wavelen > orig / lo) scaled = inv / factor, regions[2]++;
        else {
            double smooth = (orig / wavelen - lo) / (hi - lo);
            scaled = (1 - smooth) * inv / factor + smooth * inv;
            regions[1]++;
        }
        float f = (float)(inv / scaled);  // GGUF stores the divisor of each frequency
        memcpy(freqs.data() + 4 * i, &f, 4);
    }
    CHECK(regions[0] && regions[1] && regions[2], "the test covers all three frequency bands");
    lt::GGUFWriter w;  // the tiny llama's tensors with rope_freqs added and theta 500000
    {
        lt::GGUFWriter full = lt::tiny_llama();
        w.str("general.architecture", "llama");
        w.u32("llama.embedding_length", 64);
        w.u32("llama.block_count", 2);
        w.u32("llama.feed_forward_length", 96);
        w.u32("llama.attention.head_count", 4);
        w.u32("llama.attention.head_count_kv", 2);
        w.f32("llama.rope.freq_base", (float)theta);
        w.tensors = full.tensors;
        w.tensor("rope_freqs.weight", {hd / 2}, lt::GT_F32, freqs);
    }
    lt::write_bytes(tmp / "l3.gguf", w.build());
    auto m = load_ok(tmp / "l3.gguf");
    if (m) {
        const LlamaConfig& c = m->config;
        CHECK(c.rope_scaling && c.rope_factor == 8.0f && c.rope_low_freq_factor == 1.0f && c.rope_high_freq_factor == 4.0f &&
                  c.rope_orig_max_pos == 8192 && c.rope_theta == 500000.0f,
              "llama3 rope scaling from rope_freqs.weight: %d %g %g %g %d", c.rope_scaling, c.rope_factor,
              c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_orig_max_pos);
        CHECK(c.max_seq == 2048, "default context length %d", c.max_seq);
    }
    // HF: rope_scaling in config.json of the exported stories checkpoint
    std::string dir = tmp / "hf";
    std::string cmd = "python3 '" + lt::root() + "/scripts/export_safetensors.py' '" + lt::data_models() +
                      "/stories260K.bin' '" + dir + "'";
    CHECK(system(cmd.c_str()) == 0, "export");
    std::string cfg = read_file(dir + "/config.json");
    size_t p = cfg.find("\"rope_theta\"");
    CHECK(p != std::string::npos, "rope_theta in config");
    if (p == std::string::npos) return;
    cfg.insert(p, "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0, "
                  "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 256},\n  ");
    lt::write_text(dir + "/config.json", cfg);
    auto h = load_ok(dir);
    if (h) {
        const LlamaConfig& c = h->config;
        CHECK(c.rope_scaling && c.rope_factor == 32.0f && c.rope_high_freq_factor == 4.0f && c.rope_orig_max_pos == 256,
              "llama3 rope scaling from config.json");
    }
}

// general.alignment 1 packs tensors at odd offsets: F32 data must still come out 4-byte aligned
// (copied) and equal to what was written.
static void test_unaligned() {
    lt::TempDir tmp;
    lt::GGUFWriter w = lt::tiny_llama();
    w.alignment = 1;
    w.u32("general.alignment", 1);
    w.str("pad", "x");  // make the header length odd
    lt::write_bytes(tmp / "a1.gguf", w.build());
    auto m = load_ok(tmp / "a1.gguf");
    if (!m) return;
    int bad = 0;
    for (const Tensor& t : m->tensors) {
        if ((uintptr_t)t.data % 4) bad++;
        for (const auto& wt : w.tensors)
            if (wt.name == t.name && (wt.data.size() != t.nbytes || memcmp(wt.data.data(), t.data, t.nbytes))) bad++;
    }
    CHECK(bad == 0, "%d tensors misaligned or different", bad);
    CHECK(!m->owned.empty(), "some tensors sat at odd offsets and were copied");
}

int main() {
    test_dequantize_row();
    std::unique_ptr<ModelFile> bin;
    test_stories(bin);
    test_safetensors(bin.get());
    test_smollm2();
    test_synthetic_gguf();
    test_llama3_rope();
    test_unaligned();
    return test_summary("test_loaders");
}
