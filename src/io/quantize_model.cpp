// quantize_model.cpp: `beagle quantize` (quantize_model.h): the type table, llama-quantize's per-tensor
// choice, and the rewrite: GGUF metadata copied entry by entry (HF: written from config.json and the
// tokenizer), each tensor dequantized row by row to f32 and quantized (quantize.h) on the thread pool,
// streamed into the output one tensor at a time.
#include "quantize_model.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <strings.h>
#include <vector>

#include "../core/common.h"
#include "../core/progress.h"
#include "../core/quantize.h"
#include "../core/tensor.h"
#include "../core/threadpool.h"
#include "gguf_write.h"
#include "loader_common.h"
#include "model_file.h"

namespace beagle {

namespace {

const QuantizeType kTypes[] = {
    {"Q4_0", 2, DType::Q4_0, "4.5 bits/weight (legacy)"},
    {"Q4_1", 3, DType::Q4_1, "5.0 bits/weight (legacy)"},
    {"Q5_0", 8, DType::Q5_0, "5.5 bits/weight (legacy)"},
    {"Q5_1", 9, DType::Q5_1, "6.0 bits/weight (legacy)"},
    {"Q8_0", 7, DType::Q8_0, "8.5 bits/weight"},
    {"Q4_K_S", 14, DType::Q4_K, "Q4_K, a few Q5_K tensors"},
    {"Q4_K_M", 15, DType::Q4_K, "Q4_K, Q6_K for half of attn_v / ffn_down and the output (llama.cpp's default)"},
    {"Q5_K_S", 16, DType::Q5_K, "Q5_K"},
    {"Q5_K_M", 17, DType::Q5_K, "Q5_K, Q6_K for half of attn_v / ffn_down and the output"},
    {"Q6_K", 18, DType::Q6_K, "6.56 bits/weight"},
    {"F16", 1, DType::F16, "16-bit float"},
    {"BF16", 32, DType::BF16, "16-bit bfloat"},
    {"F32", 0, DType::F32, "32-bit float"},
};

bool ends_with(const std::string& s, const char* tail) {
    const size_t n = strlen(tail);
    return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

// llama-quantize's use_more_bits: the first and last eighth of the layers, and every third between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama.cpp's fallback when a row is not a multiple of the type's block: the 32-block type of about
// the same bits (F16 if even that does not fit).
DType fallback_type(DType t, int64_t cols, bool* fell) {
    if (cols % dtype_block_elems(t) == 0) return t;
    *fell = true;
    DType r = t == DType::Q4_K ? DType::Q5_0 : t == DType::Q5_K ? DType::Q5_1 : t == DType::Q6_K ? DType::Q8_0 : t;
    return cols % dtype_block_elems(r) == 0 ? r : DType::F16;
}

// One tensor to write: its GGUF name and where its data comes from.
struct Source {
    std::string name;
    Tensor t;  // the data as stored (any dtype); name field unused
};

// HF safetensors -> GGUF: metadata from the config and tokenizer, as llama.cpp's converter writes it.
void hf_metadata(const ModelFile& mf, GgufWriter& w, const std::string& arch, uint32_t ftype) {
    const LlamaConfig& c = mf.config;
    w.str("general.architecture", arch);
    std::string name = mf.path;
    while (!name.empty() && name.back() == '/') name.pop_back();
    if (name.rfind('/') != std::string::npos) name = name.substr(name.rfind('/') + 1);
    w.str("general.name", name);
    w.u32("general.file_type", ftype);
    w.u32("general.quantization_version", 2);
    w.u32(arch + ".context_length", (uint32_t)c.max_seq);
    w.u32(arch + ".embedding_length", (uint32_t)c.dim);
    w.u32(arch + ".block_count", (uint32_t)c.n_layers);
    w.u32(arch + ".feed_forward_length", (uint32_t)c.ffn_dim);
    w.u32(arch + ".attention.head_count", (uint32_t)c.n_heads);
    w.u32(arch + ".attention.head_count_kv", (uint32_t)c.n_kv_heads);
    if (c.head_dim * c.n_heads != c.dim) {
        w.u32(arch + ".attention.key_length", (uint32_t)c.head_dim);
        w.u32(arch + ".attention.value_length", (uint32_t)c.head_dim);
    }
    w.u32(arch + ".rope.dimension_count", (uint32_t)c.head_dim);
    w.f32(arch + ".rope.freq_base", c.rope_theta);
    w.f32(arch + ".attention.layer_norm_rms_epsilon", c.rms_eps);
    w.u32(arch + ".vocab_size", (uint32_t)c.vocab_size);
    // Llama-3 rope scaling: the factors are in rope_freqs.weight (hf_tensors); the original context tells a
    // reader which rule made them (llama.cpp reads it for YaRN only; the factor key is left out, since
    // llama.cpp would apply it as a linear scaling on top)
    if (c.rope_scaling) w.u32(arch + ".rope.scaling.original_context_length", (uint32_t)c.rope_orig_max_pos);
    const TokenizerSpec& tk = mf.tokenizer;
    if (tk.kind == TokenizerSpec::NONE) return;
    w.str("tokenizer.ggml.model", tk.kind == TokenizerSpec::SPM ? "llama" : "gpt2");
    if (!tk.pre.empty()) w.str("tokenizer.ggml.pre", tk.pre);
    w.strs("tokenizer.ggml.tokens", tk.tokens);
    if (!tk.scores.empty()) w.f32s("tokenizer.ggml.scores", tk.scores);
    if (!tk.types.empty()) w.i32s("tokenizer.ggml.token_type", tk.types);
    if (!tk.merges.empty()) w.strs("tokenizer.ggml.merges", tk.merges);
    const std::pair<const char*, int> ids[] = {{"tokenizer.ggml.bos_token_id", tk.bos},
                                               {"tokenizer.ggml.eos_token_id", tk.eos},
                                               {"tokenizer.ggml.unknown_token_id", tk.unk},
                                               {"tokenizer.ggml.padding_token_id", tk.pad},
                                               {"tokenizer.ggml.eot_token_id", tk.eot}};
    for (const auto& id : ids)
        if (id.second >= 0) w.u32(id.first, (uint32_t)id.second);
    w.boolean("tokenizer.ggml.add_bos_token", tk.add_bos);
    w.boolean("tokenizer.ggml.add_space_prefix", tk.add_space_prefix);
    if (!tk.chat_template.empty()) w.str("tokenizer.chat_template", tk.chat_template);
}

// HF safetensors -> GGUF tensor names. The role tensors are in Beagle's adjacent-pair RoPE order, which
// is GGUF llama's; GGUF qwen2 keeps HF's rotate-half order, so its q / k come from the stored tensors.
std::vector<Source> hf_tensors(ModelFile& mf, const std::string& arch) {
    const LlamaWeights& w = mf.weights;
    const bool qwen2 = arch == "qwen2";
    std::vector<Source> out;
    auto stored = [&](const std::string& name) {
        const Tensor* t = find_tensor(mf, name);
        if (!t) fail("beagle quantize: '%s' has no tensor '%s'", mf.path.c_str(), name.c_str());
        return *t;
    };
    auto as_f32 = [&](Tensor t) {
        tensor_to_f32(mf, t);
        return t;
    };
    out.push_back({"token_embd.weight", w.tok_embd});
    for (int l = 0; l < (int)w.layers.size(); l++) {
        const LayerWeights& L = w.layers[l];
        const std::string b = "blk." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".self_attn.";
        out.push_back({b + "attn_norm.weight", L.attn_norm});
        out.push_back({b + "attn_q.weight", qwen2 ? stored(h + "q_proj.weight") : L.wq});
        out.push_back({b + "attn_k.weight", qwen2 ? stored(h + "k_proj.weight") : L.wk});
        out.push_back({b + "attn_v.weight", L.wv});
        if (mf.config.qkv_bias) {
            out.push_back({b + "attn_q.bias", as_f32(qwen2 ? stored(h + "q_proj.bias") : L.bq)});
            out.push_back({b + "attn_k.bias", as_f32(qwen2 ? stored(h + "k_proj.bias") : L.bk)});
            out.push_back({b + "attn_v.bias", L.bv});
        }
        out.push_back({b + "attn_output.weight", L.wo});
        out.push_back({b + "ffn_norm.weight", L.ffn_norm});
        out.push_back({b + "ffn_gate.weight", L.w_gate});
        out.push_back({b + "ffn_up.weight", L.w_up});
        out.push_back({b + "ffn_down.weight", L.w_down});
    }
    out.push_back({"output_norm.weight", w.out_norm});
    if (!mf.config.tied_embeddings) out.push_back({"output.weight", w.lm_head});
    if (mf.config.rope_scaling) {
        // Llama-3 rope scaling: GGUF's rope_freqs.weight, one frequency divisor per rotation pair
        const int pairs = mf.config.head_dim / 2;
        std::vector<uint8_t> f((size_t)pairs * 4);
        for (int i = 0; i < pairs; i++) {
            const float v = (float)llama3_rope_factor(mf.config, i);
            memcpy(f.data() + 4 * i, &v, 4);
        }
        mf.owned.push_back(std::move(f));
        Tensor t;
        t.dtype = DType::F32;
        t.ndim = 1;
        t.shape[0] = pairs;
        t.nbytes = (uint64_t)pairs * 4;
        t.data = mf.owned.back().data();
        out.push_back({"rope_freqs.weight", t});
    }
    return out;
}

// Rows [0, rows) of src (stored dtype) -> dst of type t, through f32, split over the pool's threads.
void convert_rows(ThreadPool& pool, const Tensor& src, DType t, uint8_t* dst) {
    const int64_t rows = src.rows(), cols = src.cols();
    const uint64_t out_row = dtype_row_bytes(t, (uint64_t)cols);
    pool.parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
        std::vector<float> x((size_t)cols);
        for (int64_t r = r0; r < r1; r++) {
            dequantize_row(src.dtype, src.row(r), x.data(), cols);
            quantize_row(t, x.data(), dst + (uint64_t)r * out_row, cols);
        }
    }, cols * 64);
}

}  // namespace

const QuantizeType* find_quantize_type(const std::string& name) {
    std::string n = name;
    if (!strcasecmp(n.c_str(), "Q4_K")) n = "Q4_K_M";
    if (!strcasecmp(n.c_str(), "Q5_K")) n = "Q5_K_M";
    for (const QuantizeType& q : kTypes)
        if (!strcasecmp(q.name, n.c_str())) return &q;
    return nullptr;
}

std::string quantize_type_list() {
    std::string s;
    for (const QuantizeType& q : kTypes) s += strfmt("  %-7s %s\n", q.name, q.about);
    return s;
}

DType quantize_tensor_type(const QuantizeType& q, bool pure, const std::string& name, DType stored, int ndim,
                           const int64_t* shape, int n_layers, bool has_output, int i_attn_v, int i_ffn_down,
                           bool* fallback) {
    *fallback = false;
    // llama-quantize quantizes 2-D+ tensors whose name ends in "weight", except norms
    if (ndim < 2 || !ends_with(name, "weight") || name.find("_norm.weight") != std::string::npos) return stored;
    const int64_t cols = shape[ndim - 1];
    DType t = q.base;
    if (!dtype_is_quantized(t)) return t;               // F16 / BF16 / F32: every matrix
    if (pure) return fallback_type(t, cols, fallback);  // no mix
    const bool k_m = q.ftype == 15 || q.ftype == 17;  // Q4_K_M, Q5_K_M
    if (name == "output.weight" || (!has_output && name == "token_embd.weight")) {
        // the output matrix (or the tied embedding that serves as it): Q6_K, or Q8_0 where rows do not fit the
        // base type's block
        if (cols % dtype_block_elems(t) != 0) t = DType::Q8_0;
        else if (t != DType::Q8_0) t = DType::Q6_K;
    } else if (ends_with(name, "attn_v.weight")) {
        if (k_m && use_more_bits(i_attn_v, n_layers)) t = DType::Q6_K;
        else if (q.ftype == 14 && i_attn_v < 4) t = DType::Q5_K;  // Q4_K_S
        if (n_layers == 80 && t == DType::Q4_K) t = DType::Q5_K;  // 70B: 8 query heads share each V
    } else if (ends_with(name, "ffn_down.weight")) {
        if (k_m && use_more_bits(i_ffn_down, n_layers)) t = DType::Q6_K;
        else if (q.ftype == 14 && i_ffn_down < n_layers / 8) t = DType::Q5_K;
    }
    return fallback_type(t, cols, fallback);
}

QuantizeReport quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeType& q,
                              const QuantizeOptions& opt) {
    const double t0 = now_seconds();
    std::unique_ptr<ModelFile> mf = load_model(in_path);
    if (mf->format == "llama2c")
        fail("beagle quantize: '%s' is a llama2.c checkpoint; expected a GGUF file or an HF safetensors directory",
             in_path.c_str());
    const LlamaConfig& c = mf->config;
    const std::string arch = c.arch == "qwen2" ? "qwen2" : "llama";
    GgufWriter w;
    std::vector<Source> src;
    if (mf->format == "gguf") {
        // every entry as stored, then general.quantization_version and general.file_type last, as
        // llama-quantize sets them (the file's alignment, if it sets one, is kept)
        for (const ModelFile::RawEntry& e : mf->gguf_entries) {
            if (e.key == "general.file_type" || e.key == "general.quantization_version") continue;
            w.raw(e.key, e.bytes, e.n);
            if (e.key == "general.alignment") {
                uint32_t type = 0, v = 0;
                memcpy(&type, e.bytes + 8 + e.key.size(), 4);
                if (type != 4 || e.n != 16 + e.key.size())
                    fail("beagle quantize: '%s': general.alignment is not a u32", in_path.c_str());
                memcpy(&v, e.bytes + 12 + e.key.size(), 4);
                w.set_alignment(v);
            }
        }
        w.u32("general.quantization_version", 2);
        w.u32("general.file_type", q.ftype);
        for (const Tensor& t : mf->tensors) src.push_back({t.name, t});
    } else {
        hf_metadata(*mf, w, arch, q.ftype);
        src = hf_tensors(*mf, arch);
    }

    // llama.cpp's order (its loader's weight map): by layer, non-layer tensors first, then by name. The
    // output has it, and llama-quantize counts the attn_v and ffn_down tensors in it.
    auto layer_of = [](const std::string& n) {
        int l = -1;
        return sscanf(n.c_str(), "blk.%d.", &l) == 1 ? l : -1;
    };
    std::stable_sort(src.begin(), src.end(), [&](const Source& x, const Source& y) {
        const int lx = layer_of(x.name), ly = layer_of(y.name);
        return lx != ly ? lx < ly : x.name < y.name;
    });
    bool has_output = false;
    for (const Source& s : src) has_output |= s.name == "output.weight";
    std::vector<DType> types;
    int i_attn_v = 0, i_ffn_down = 0;
    QuantizeReport rep;
    for (const Source& s : src) {
        bool fell = false;
        DType t = quantize_tensor_type(q, opt.pure, s.name, s.t.dtype, s.t.ndim, s.t.shape, c.n_layers, has_output,
                                       i_attn_v, i_ffn_down, &fell);
        i_attn_v += ends_with(s.name, "attn_v.weight");
        i_ffn_down += ends_with(s.name, "ffn_down.weight");
        rep.fallbacks += fell;
        if (t != s.t.dtype && dtype_is_quantized(s.t.dtype) && !opt.allow_requantize)
            fail("beagle quantize: tensor '%s' of '%s' is already %s; requantizing to %s loses quality (pass "
                 "--allow-requantize to do it anyway, or start from an F32 / F16 / BF16 file)",
                 s.name.c_str(), in_path.c_str(), dtype_name(s.t.dtype), dtype_name(t));
        types.push_back(t);
        w.tensor(s.name, t, s.t.ndim, s.t.shape);
    }

    ThreadPool pool(std::max(1, opt.threads));
    w.begin(out_path);
    Progress prog("quantize", (int64_t)src.size(), "tensors");
    std::vector<uint8_t> buf;
    for (size_t k = 0; k < src.size(); k++) {
        const Tensor& t = src[k].t;
        rep.bytes_in += t.nbytes;
        rep.tensors_by_type[dtype_name(types[k])]++;
        if (types[k] == t.dtype) {
            w.data(t.data, t.nbytes);  // kept as stored, byte for byte
            rep.bytes_out += t.nbytes;
        } else {
            buf.resize((size_t)((uint64_t)t.rows() * dtype_row_bytes(types[k], (uint64_t)t.cols())));
            convert_rows(pool, t, types[k], buf.data());
            w.data(buf.data(), buf.size());
            rep.bytes_out += buf.size();
        }
        prog.update((int64_t)k + 1, src[k].name);
    }
    w.finish();
    prog.finish();
    rep.seconds = now_seconds() - t0;
    return rep;
}

}  // namespace beagle
