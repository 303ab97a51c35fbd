// model_file.h: what every format loader produces: config, weights by role, all stored tensors,
// printable metadata, the tokenizer spec if the file carries one, and the storage behind them.
// load_model() detects the format: GGUF (magic), HF safetensors directory or file, llama2.c .bin.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../core/common.h"
#include "llama_config.h"
#include "../tokenizer/spec.h"

namespace beagle {

struct ModelFile {
    std::string path;
    std::string format;                      // "gguf", "safetensors", "llama2c"
    LlamaConfig config;
    LlamaWeights weights;
    std::vector<Tensor> tensors;             // every tensor as stored, in file order
    std::vector<std::pair<std::string, std::string>> metadata;  // key, printable value (for `beagle info`)
    TokenizerSpec tokenizer;                 // kind NONE if the file has none
    // GGUF only: each metadata entry as stored (u64 key length, key, u32 value type, value), in file
    // order, pointing into maps; `beagle quantize` copies them into the file it writes.
    struct RawEntry { std::string key; const uint8_t* bytes; size_t n; };
    std::vector<RawEntry> gguf_entries;
    // storage that the Tensor data pointers point into
    std::vector<std::unique_ptr<MappedFile>> maps;
    std::vector<std::vector<uint8_t>> owned;
};

// Load any supported model format (norm vectors converted to F32). Throws Error with a clear message on bad input.
std::unique_ptr<ModelFile> load_model(const std::string& path);

// Format-specific loaders (called by load_model).
std::unique_ptr<ModelFile> load_gguf(const std::string& path);
std::unique_ptr<ModelFile> load_safetensors(const std::string& path);  // dir or .safetensors / index.json
std::unique_ptr<ModelFile> load_llama2c(const std::string& path);

// Replace every quantized role tensor (matrices and embedding) by an F32 copy owned by mf: the
// float path computes with unquantized activations (slower; used where float accuracy matters).
void dequantize_weights_f32(ModelFile& mf);

// Tokenizer files: llama2.c tokenizer.bin, SentencePiece tokenizer.model, HF tokenizer.json.
TokenizerSpec load_tokenizer_file(const std::string& path);

}  // namespace beagle
