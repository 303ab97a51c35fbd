// llama2c.cpp: loader for karpathy/llama2.c `run.c` checkpoints (.bin): a 7 x int32 header, then
// f32 weights in a fixed order, mmapped in place. No tokenizer inside (use -z tok512.bin etc.).
// Called by load_model() (load_model.cpp).
#include <climits>
#include <cstring>

#include "loader_common.h"
#include "model_file.h"

namespace beagle {

std::unique_ptr<ModelFile> load_llama2c(const std::string& path) {
    auto mf = std::make_unique<ModelFile>();
    mf->path = path;
    mf->format = "llama2c";
    mf->maps.push_back(std::make_unique<MappedFile>(path));
    const MappedFile& map = *mf->maps.back();
    if (map.size < 28)
        fail("llama2.c checkpoint '%s' is %zu bytes, too small for the 28-byte header", path.c_str(), map.size);
    if (memcmp(map.data, "ak42", 4) == 0 || memcmp(map.data, "24ka", 4) == 0)
        fail("'%s' is a llama2.c version-1/2 export (magic 'ak42'); only the legacy run.c format (version 0) is "
             "supported",
             path.c_str());
    int32_t h[7];
    memcpy(h, map.data, sizeof h);
    const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
    for (int i = 0; i < 7; i++)
        if (h[i] == 0 || (h[i] < 0 && i != 5) || h[i] == INT_MIN || h[i] > (1 << 24))
            fail("llama2.c checkpoint '%s': header field %s = %d is invalid (expected 1 .. 2^24%s); is this a "
                 "llama2.c .bin file?",
                 path.c_str(), names[i], h[i], i == 5 ? ", negative for an unshared classifier" : "");
    for (int i = 0; i < 7; i++) mf->metadata.emplace_back(std::string("llama2c.") + names[i], std::to_string(h[i]));

    LlamaConfig& c = mf->config;
    c.dim = h[0];
    c.ffn_dim = h[1];
    c.n_layers = h[2];
    c.n_heads = h[3];
    c.n_kv_heads = h[4];
    c.vocab_size = h[5] < 0 ? -h[5] : h[5];
    c.max_seq = h[6];
    c.tied_embeddings = h[5] > 0;
    c.rope_theta = 10000.0f;
    c.rms_eps = 1e-5f;
    if (c.n_heads > 0 && c.dim % c.n_heads != 0)
        fail("llama2.c checkpoint '%s': dim %d is not a multiple of n_heads %d", path.c_str(), c.dim, c.n_heads);
    c.head_dim = c.dim / c.n_heads;
    validate_config(c, path);

    // the layout, in run.c's order: {name, rows, cols} per layer or once; sizes in floats
    const int64_t L = c.n_layers, D = c.dim, F = c.ffn_dim, V = c.vocab_size, hd = c.head_dim;
    const int64_t q = c.n_heads * hd, kv = c.n_kv_heads * hd;
    uint64_t off = 28;
    std::vector<Tensor> ts;
    std::vector<uint64_t> offsets;
    auto add = [&](const std::string& name, int64_t rows, int64_t cols, bool matrix) {
        Tensor t;
        t.name = name;
        t.dtype = DType::F32;
        t.ndim = matrix ? 2 : 1;
        t.shape[0] = matrix ? rows : cols;
        t.shape[1] = matrix ? cols : 1;
        t.nbytes = checked_mul(checked_mul((uint64_t)rows, (uint64_t)cols, "llama2.c tensor size"), 4, "llama2.c tensor size");
        offsets.push_back(off);
        off = checked_add(off, t.nbytes, "llama2.c file size");
        ts.push_back(t);
    };
    auto per_layer = [&](const char* suffix, int64_t rows, int64_t cols, bool matrix) {
        for (int l = 0; l < L; l++) add("blk." + std::to_string(l) + "." + suffix, rows, cols, matrix);
    };
    add("token_embd.weight", V, D, true);
    per_layer("attn_norm.weight", 1, D, false);
    per_layer("attn_q.weight", q, D, true);
    per_layer("attn_k.weight", kv, D, true);
    per_layer("attn_v.weight", kv, D, true);
    per_layer("attn_output.weight", D, q, true);
    per_layer("ffn_norm.weight", 1, D, false);
    per_layer("ffn_gate.weight", F, D, true);  // w1
    per_layer("ffn_down.weight", D, F, true);  // w2
    per_layer("ffn_up.weight", F, D, true);    // w3
    add("output_norm.weight", 1, D, false);
    add("freq_cis_real", c.max_seq, hd / 2, true);  // unused: Beagle computes RoPE itself
    add("freq_cis_imag", c.max_seq, hd / 2, true);
    if (!c.tied_embeddings) add("output.weight", V, D, true);
    if (off != map.size)
        fail("llama2.c checkpoint '%s' has %zu bytes, expected %llu for the header (dim %d, hidden_dim %d, n_layers %d, "
             "n_heads %d, n_kv_heads %d, vocab_size %d, seq_len %d)",
             path.c_str(), map.size, (unsigned long long)off, h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
    for (size_t i = 0; i < ts.size(); i++) {
        ts[i].data = map.data + offsets[i];  // 28 + 4k: always 4-byte aligned
        mf->tensors.push_back(ts[i]);
    }

    auto get = [&](const std::string& name) { return *find_tensor(*mf, name); };
    LlamaWeights& w = mf->weights;
    w.tok_embd = get("token_embd.weight");
    w.out_norm = get("output_norm.weight");
    w.lm_head = c.tied_embeddings ? w.tok_embd : get("output.weight");
    w.layers.resize(c.n_layers);
    for (int l = 0; l < c.n_layers; l++) {
        std::string b = "blk." + std::to_string(l) + ".";
        LayerWeights& Lw = w.layers[l];
        Lw.attn_norm = get(b + "attn_norm.weight");
        Lw.wq = get(b + "attn_q.weight");
        Lw.wk = get(b + "attn_k.weight");
        Lw.wv = get(b + "attn_v.weight");
        Lw.wo = get(b + "attn_output.weight");
        Lw.ffn_norm = get(b + "ffn_norm.weight");
        Lw.w_gate = get(b + "ffn_gate.weight");
        Lw.w_up = get(b + "ffn_up.weight");
        Lw.w_down = get(b + "ffn_down.weight");
    }
    validate_weights(*mf);
    return mf;
}

}  // namespace beagle
