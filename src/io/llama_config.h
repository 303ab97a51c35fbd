// llama_config.h: the Llama-family target's hyper-parameters and its weight tensors by role.
// Filled by every format loader (src/io/); read by the model (src/model/llama.*). One forward serves
// Llama-2/3, Mistral and Qwen2: they differ only in the values below and the optional Q/K/V biases.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "../core/tensor.h"

namespace beagle {

struct LlamaConfig {
    std::string arch = "llama";  // "llama", "mistral" or "qwen2": for messages and `beagle info`
    int dim = 0;          // model width
    int n_layers = 0;
    int n_heads = 0;
    int n_kv_heads = 0;   // GQA: n_heads % n_kv_heads == 0
    int head_dim = 0;     // usually dim / n_heads
    int ffn_dim = 0;      // SwiGLU hidden size
    int vocab_size = 0;
    int max_seq = 0;      // context length from the file
    float rope_theta = 10000.0f;
    float rms_eps = 1e-5f;
    bool tied_embeddings = false;
    bool qkv_bias = false;  // Qwen2: q, k, v = W x + b (LayerWeights bq, bk, bv)
    // Mistral's sliding-window attention (keys within the last sliding_window positions); 0: none. Only a
    // context of at most this many tokens is run (there it equals full attention): the loaders cap
    // max_seq to it and Llama refuses a longer one.
    int sliding_window = 0;
    // Llama-3 rope scaling ("rope_type": "llama3"); off unless rope_scaling is set.
    bool rope_scaling = false;
    float rope_factor = 1.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
    int rope_orig_max_pos = 8192;
};

// Weight tensors by role. All matrices have shape {out, in} (y = W x).
// RoPE convention inside Beagle is the GGUF / llama2.c one: rotation pairs are adjacent elements
// (x[2i], x[2i+1]) of each head. Loaders of files in the rotate-half convention (HF checkpoints, and
// GGUF qwen2, which llama.cpp runs with its NEOX rope) permute the rows of wq and wk, and the entries
// of bq and bk, into this convention.
struct LayerWeights {
    Tensor attn_norm;         // {dim}
    Tensor wq, wk, wv, wo;    // {n_heads*hd, dim}, {n_kv*hd, dim}, {n_kv*hd, dim}, {dim, n_heads*hd}
    Tensor bq, bk, bv;        // qkv_bias only: F32 {n_heads*hd}, {n_kv*hd}, {n_kv*hd} (bq, bk in RoPE pair order)
    // every role tensor of the layer (bq, bk, bv empty, 0 bytes, unless qkv_bias): byte counts, plans
    std::array<const Tensor*, 12> all() const {
        return {&attn_norm, &wq, &wk, &wv, &wo, &ffn_norm, &w_gate, &w_up, &w_down, &bq, &bk, &bv};
    }
    Tensor ffn_norm;          // {dim}
    Tensor w_gate, w_up;      // {ffn, dim}
    Tensor w_down;            // {dim, ffn}
};

struct LlamaWeights {
    Tensor tok_embd;          // {vocab, dim}
    std::vector<LayerWeights> layers;
    Tensor out_norm;          // {dim}
    Tensor lm_head;           // {vocab, dim}; equals tok_embd when tied
};

}  // namespace beagle
