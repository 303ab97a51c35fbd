// loader_common.h: checks and helpers shared by the format loaders (gguf.cpp, safetensors.cpp,
// llama2c.cpp); implemented in load_model.cpp. Internal to src/io/.
#pragma once
#include <string>

#include "model_file.h"

namespace beagle {

// Sanity of the hyper-parameters (positive, heads divide, sizes bounded); errors name `path`.
void validate_config(const LlamaConfig& c, const std::string& path);

// Every role tensor present, with the shape the config implies and a usable dtype. Errors name
// the tensor, its role, the expected and the found shape. Call after filling mf.weights.
void validate_weights(const ModelFile& mf);

// The stored tensor called `name`, or nullptr.
const Tensor* find_tensor(const ModelFile& mf, const std::string& name);

// `p` itself when it is aligned for dtype `t`, else a copy owned by mf (aligned). Keeps typed
// loads from stored data free of misaligned access (UB) when a file uses a small alignment.
const void* keep_aligned(ModelFile& mf, const uint8_t* p, uint64_t nbytes, DType t);

// A rotate-half q/k projection (HF checkpoints, GGUF qwen2) with its rows (a bias: its entries) in
// Beagle's adjacent-pair RoPE order: a copy owned by mf (llama_config.h).
Tensor permute_rope_rows(ModelFile& mf, const Tensor& t, int n_heads, int head_dim);

// t replaced by an F32 copy owned by mf (any stored dtype; F32 left as it is). dequantize.cpp.
void tensor_to_f32(ModelFile& mf, Tensor& t);

// The Q/K/V biases of a qkv_bias model (cfg.qkv_bias) as F32 in RoPE pair order, from the tensors
// named q, k, v (rotate_half: stored in the rotate-half order, as HF and GGUF qwen2 store them).
void load_qkv_bias(ModelFile& mf, LayerWeights& L, const Tensor& q, const Tensor& k, const Tensor& v, bool rotate_half);

// Llama-3 rope scaling factor of rotation pair i (frequency divisor), as HF computes inv_freq.
double llama3_rope_factor(const LlamaConfig& c, int i);

}  // namespace beagle
