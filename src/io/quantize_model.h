// quantize_model.h: `beagle quantize`: a model file (GGUF, or an HF safetensors directory) rewritten
// as a GGUF of one quantization type, with the per-tensor mix llama-quantize chooses for that type
// (k-quant mixes, llama.cpp's fallbacks for rows that are not a multiple of 256), its metadata kept
// (GGUF) or written from the config and tokenizer (HF), readable by llama.cpp, the gguf package and here.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "../core/dtype.h"

namespace beagle {

// A target type, named as llama-quantize names it; ftype is GGUF's general.file_type.
struct QuantizeType {
    const char* name;  // "Q4_K_M", ...
    uint32_t ftype;
    DType base;        // what most matrices get
    const char* about;
};
// nullptr if name (case-insensitive; "Q4_K" and "Q5_K" mean their _M mixes, as llama-quantize) is unknown.
const QuantizeType* find_quantize_type(const std::string& name);
std::string quantize_type_list();  // the names and sizes, for --help and errors

struct QuantizeOptions {
    bool allow_requantize = false;  // accept already-quantized input tensors (quality suffers, as llama-quantize warns)
    bool pure = false;              // every quantizable matrix gets the base type (llama-quantize --pure)
    int threads = 1;
};

struct QuantizeReport {
    std::map<std::string, int> tensors_by_type;  // dtype name -> count in the output
    int fallbacks = 0;                           // tensors whose row length forced a smaller block
    uint64_t bytes_in = 0, bytes_out = 0;        // tensor data only
    double seconds = 0;
};

// The type llama-quantize gives one tensor: name and shape (outermost first) as GGUF stores it,
// n_layers of the model, whether it has a separate output.weight, and the running counts of attn_v and
// ffn_down tensors before this one (file order). *fallback is set when the row length forced a smaller
// block. Returns the stored type unchanged for tensors it does not quantize (norms, 1-D, non-weights).
DType quantize_tensor_type(const QuantizeType& q, bool pure, const std::string& name, DType stored, int ndim,
                           const int64_t* shape, int n_layers, bool has_output, int i_attn_v, int i_ffn_down,
                           bool* fallback);

// Quantize in_path (GGUF file or HF safetensors directory / file) to out_path (written atomically).
QuantizeReport quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeType& q,
                              const QuantizeOptions& opt);

}  // namespace beagle
