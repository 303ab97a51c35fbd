// load_model.cpp: picks the loader for a model path (GGUF magic, HF safetensors directory/file,
// llama2.c .bin) and holds the checks every loader shares (config sanity, role tensor shapes).
// Called by the CLI (generate, info, bench) and tests.
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "loader_common.h"
#include "model_file.h"

namespace beagle {

static bool ends_with(const std::string& s, const char* suffix) {
    size_t n = strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The norm vectors as F32 (both backends' rmsnorm reads F32 weights; HF checkpoints store them in the
// checkpoint's dtype, F16 or BF16): a few KB of copies.
static std::unique_ptr<ModelFile> norms_f32(std::unique_ptr<ModelFile> mf) {
    LlamaWeights& w = mf->weights;
    for (LayerWeights& l : w.layers) {
        tensor_to_f32(*mf, l.attn_norm);
        tensor_to_f32(*mf, l.ffn_norm);
    }
    tensor_to_f32(*mf, w.out_norm);
    return mf;
}

static std::unique_ptr<ModelFile> load_any(const std::string& path);

std::unique_ptr<ModelFile> load_model(const std::string& path) { return norms_f32(load_any(path)); }

static std::unique_ptr<ModelFile> load_any(const std::string& path) {
    if (path.empty()) fail("no model path given");
    struct stat st;
    if (stat(path.c_str(), &st) != 0) fail("cannot open model '%s': %s", path.c_str(), strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        if (!file_exists(path + "/config.json"))
            fail("model directory '%s' has no config.json (expected an HF safetensors checkpoint directory)",
                 path.c_str());
        return load_safetensors(path);
    }
    if (!S_ISREG(st.st_mode)) fail("model path '%s' is not a regular file or directory", path.c_str());
    if (st.st_size == 0) fail("model file '%s' is empty (0 bytes)", path.c_str());

    // sniff the first bytes: GGUF magic, or a safetensors header (u64 length then '{')
    uint8_t head[9] = {0};
    const std::string prefix = read_file_prefix(path, sizeof head);
    memcpy(head, prefix.data(), prefix.size());
    if (memcmp(head, "GGUF", 4) == 0) return load_gguf(path);
    if (ends_with(path, ".gguf") && st.st_size < 4)
        fail("GGUF '%s' is truncated: %lld bytes, too short for the GGUF magic", path.c_str(), (long long)st.st_size);
    if (ends_with(path, ".gguf"))
        fail("'%s' has a .gguf name but does not start with the GGUF magic (found bytes %02x %02x %02x %02x)",
             path.c_str(), head[0], head[1], head[2], head[3]);
    uint64_t header_len;
    memcpy(&header_len, head, 8);
    bool looks_safetensors = st.st_size > 8 && head[8] == '{' && header_len <= (uint64_t)st.st_size - 8;
    if (ends_with(path, ".safetensors") || ends_with(path, ".json") || looks_safetensors)
        return load_safetensors(path);
    // the project's own files, which are not target models: say what the file is and where it goes
    auto is = [&](const char* magic) { return prefix.compare(0, 8, magic) == 0; };
    if (is("BEAGLEDR"))
        fail("'%s' is a Beagle draft file, not a target model: give it with -d DRAFT and the target with -m MODEL",
             path.c_str());
    if (is("BEAGLECK"))
        fail("'%s' is a training checkpoint, not a model: `beagle train ... --resume %s` continues the run, `beagle "
             "info %s` shows where it stands",
             path.c_str(), path.c_str(), path.c_str());
    if (is("BEAGLEDS") || is("BEAGLEDX") || is("BEAGLETK"))
        fail("'%s' is a datagen shard, not a model: give its directory to `beagle train --data`", path.c_str());
    // anything else: llama2.c's headerless format, whose exact-size check rejects other files
    return load_llama2c(path);
}

void validate_config(const LlamaConfig& c, const std::string& path) {
    const int64_t kMax = 1 << 24;  // bound every size so products below cannot overflow int64
    struct { const char* name; int v; } dims[] = {
        {"dim", c.dim},           {"n_layers", c.n_layers},     {"n_heads", c.n_heads},
        {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim}, {"ffn_dim", c.ffn_dim},
        {"vocab_size", c.vocab_size}, {"max_seq", c.max_seq},
    };
    for (auto& d : dims)
        if (d.v <= 0 || d.v > kMax)
            fail("model '%s': config %s = %d, expected a positive value <= %lld", path.c_str(), d.name, d.v,
                 (long long)kMax);
    if (c.n_layers > 4096) fail("model '%s': config n_layers = %d is implausibly large (> 4096)", path.c_str(), c.n_layers);
    if (c.n_heads % c.n_kv_heads != 0)
        fail("model '%s': n_heads = %d is not a multiple of n_kv_heads = %d", path.c_str(), c.n_heads, c.n_kv_heads);
    if (c.head_dim % 2 != 0) fail("model '%s': head_dim = %d must be even for RoPE", path.c_str(), c.head_dim);
    if ((int64_t)c.n_heads * c.head_dim > kMax)
        fail("model '%s': n_heads * head_dim = %lld is too large", path.c_str(), (long long)c.n_heads * c.head_dim);
    if (!(std::isfinite(c.rope_theta) && c.rope_theta > 1.0f))
        fail("model '%s': rope_theta = %g, expected a finite value > 1", path.c_str(), c.rope_theta);
    if (!(std::isfinite(c.rms_eps) && c.rms_eps > 0.0f && c.rms_eps < 1.0f))
        fail("model '%s': rms_eps = %g, expected a value in (0, 1)", path.c_str(), c.rms_eps);
    if (c.sliding_window < 0)
        fail("model '%s': sliding_window = %d, expected >= 0 (0: none)", path.c_str(), c.sliding_window);
    if (c.rope_scaling) {
        if (!(c.rope_factor >= 1.0f && std::isfinite(c.rope_factor)))
            fail("model '%s': rope scaling factor = %g, expected >= 1", path.c_str(), c.rope_factor);
        if (!(c.rope_low_freq_factor > 0.0f && c.rope_high_freq_factor > c.rope_low_freq_factor))
            fail("model '%s': rope scaling low_freq_factor = %g, high_freq_factor = %g: expected 0 < low < high",
                 path.c_str(), c.rope_low_freq_factor, c.rope_high_freq_factor);
        if (c.rope_orig_max_pos <= 0)
            fail("model '%s': rope scaling original_max_position_embeddings = %d, expected > 0", path.c_str(),
                 c.rope_orig_max_pos);
    }
}

const Tensor* find_tensor(const ModelFile& mf, const std::string& name) {
    for (const Tensor& t : mf.tensors)
        if (t.name == name) return &t;
    return nullptr;
}

static void check_role(const ModelFile& mf, const Tensor& t, const std::string& role, std::initializer_list<int64_t> want) {
    if (!t.data && t.nbytes == 0 && t.name.empty())
        fail("model '%s': no tensor for %s", mf.path.c_str(), role.c_str());
    Tensor e;
    e.ndim = (int)want.size();
    int i = 0;
    for (int64_t w : want) e.shape[i++] = w;
    bool same = t.ndim == e.ndim;
    for (int k = 0; same && k < e.ndim; k++) same = t.shape[k] == e.shape[k];
    if (!same)
        fail("model '%s': tensor '%s' (%s) has shape %s, expected %s from the config", mf.path.c_str(),
             t.name.c_str(), role.c_str(), t.shape_str().c_str(), e.shape_str().c_str());
    if (t.dtype == DType::I32)
        fail("model '%s': tensor '%s' (%s) has dtype I32, expected a float or quantized type", mf.path.c_str(),
             t.name.c_str(), role.c_str());
    if (!t.data) fail("model '%s': tensor '%s' (%s) has no data", mf.path.c_str(), t.name.c_str(), role.c_str());
}

void validate_weights(const ModelFile& mf) {
    const LlamaConfig& c = mf.config;
    const LlamaWeights& w = mf.weights;
    int64_t q = (int64_t)c.n_heads * c.head_dim, kv = (int64_t)c.n_kv_heads * c.head_dim;
    check_role(mf, w.tok_embd, "token embedding", {c.vocab_size, c.dim});
    if ((int)w.layers.size() != c.n_layers)
        fail("model '%s': %zu layers of weights, expected n_layers = %d", mf.path.c_str(), w.layers.size(), c.n_layers);
    for (int l = 0; l < c.n_layers; l++) {
        const LayerWeights& L = w.layers[l];
        std::string p = "layer " + std::to_string(l) + " ";
        check_role(mf, L.attn_norm, p + "attn_norm", {c.dim});
        check_role(mf, L.wq, p + "wq", {q, c.dim});
        check_role(mf, L.wk, p + "wk", {kv, c.dim});
        check_role(mf, L.wv, p + "wv", {kv, c.dim});
        check_role(mf, L.wo, p + "wo", {c.dim, q});
        check_role(mf, L.ffn_norm, p + "ffn_norm", {c.dim});
        check_role(mf, L.w_gate, p + "w_gate", {c.ffn_dim, c.dim});
        check_role(mf, L.w_up, p + "w_up", {c.ffn_dim, c.dim});
        check_role(mf, L.w_down, p + "w_down", {c.dim, c.ffn_dim});
        if (c.qkv_bias) {
            check_role(mf, L.bq, p + "bq", {q});
            check_role(mf, L.bk, p + "bk", {kv});
            check_role(mf, L.bv, p + "bv", {kv});
        }
    }
    check_role(mf, w.out_norm, "output norm", {c.dim});
    check_role(mf, w.lm_head, "lm_head", {c.vocab_size, c.dim});
}

void load_qkv_bias(ModelFile& mf, LayerWeights& L, const Tensor& q, const Tensor& k, const Tensor& v, bool rotate_half) {
    const LlamaConfig& c = mf.config;
    L.bq = q;
    L.bk = k;
    L.bv = v;
    // shapes first: the permutation below reads n_heads x head_dim entries
    check_role(mf, L.bq, "bq", {(int64_t)c.n_heads * c.head_dim});
    check_role(mf, L.bk, "bk", {(int64_t)c.n_kv_heads * c.head_dim});
    check_role(mf, L.bv, "bv", {(int64_t)c.n_kv_heads * c.head_dim});
    for (Tensor* t : {&L.bq, &L.bk, &L.bv}) tensor_to_f32(mf, *t);
    if (rotate_half) {
        L.bq = permute_rope_rows(mf, L.bq, c.n_heads, c.head_dim);
        L.bk = permute_rope_rows(mf, L.bk, c.n_kv_heads, c.head_dim);
    }
}

const void* keep_aligned(ModelFile& mf, const uint8_t* p, uint64_t nbytes, DType t) {
    uintptr_t align = (t == DType::F32 || t == DType::I32) ? 4 : 2;
    if ((uintptr_t)p % align == 0) return p;
    mf.owned.emplace_back(p, p + nbytes);  // std::vector storage is aligned for any scalar type
    return mf.owned.back().data();
}

// Rows of a rotate-half q/k projection are, per head, [first halves of the rotation pairs; second
// halves]. Beagle wants pairs adjacent: out row 2i+j <- in row j*hd/2 + i. A vector (a bias) is
// permuted the same way, element by element.
Tensor permute_rope_rows(ModelFile& mf, const Tensor& t, int n_heads, int head_dim) {
    const uint64_t unit = t.ndim == 1 ? dtype_row_bytes(t.dtype, 1) : t.row_bytes();
    BEAGLE_CHECK(t.ndim > 1 || !dtype_is_quantized(t.dtype), "permute_rope_rows: '%s' is a quantized vector",
                 t.name.c_str());
    std::vector<uint8_t> out(t.nbytes);
    const uint8_t* in = (const uint8_t*)t.data;
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < half; i++)
            for (int j = 0; j < 2; j++) {
                uint64_t dst = (uint64_t)h * head_dim + 2 * i + j, src = (uint64_t)h * head_dim + j * half + i;
                memcpy(out.data() + dst * unit, in + src * unit, unit);
            }
    mf.owned.push_back(std::move(out));
    Tensor p = t;
    p.data = mf.owned.back().data();
    return p;
}

double llama3_rope_factor(const LlamaConfig& c, int i) {
    const double pi = 3.14159265358979323846;
    double freq = 1.0 / std::pow((double)c.rope_theta, 2.0 * i / c.head_dim);
    double wavelen = 2 * pi / freq;
    double low_wavelen = c.rope_orig_max_pos / c.rope_low_freq_factor;
    double high_wavelen = c.rope_orig_max_pos / c.rope_high_freq_factor;
    if (wavelen < high_wavelen) return 1.0;
    if (wavelen > low_wavelen) return c.rope_factor;
    double smooth = (c.rope_orig_max_pos / wavelen - c.rope_low_freq_factor) /
                    (c.rope_high_freq_factor - c.rope_low_freq_factor);
    return 1.0 / ((1 - smooth) / c.rope_factor + smooth);
}

}  // namespace beagle
