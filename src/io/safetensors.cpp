// safetensors.cpp: loader for Hugging Face checkpoints of model_type llama, mistral and qwen2 (Q/K/V
// biases): a directory with config.json and model.safetensors, or model.safetensors.index.json plus
// shards (F32/F16/BF16, mmapped). HF stores wq/wk rows (and Qwen2's bq/bk) in rotate-half order; we
// permute them into Beagle's interleaved-pair RoPE order (owned copies). tokenizer.json (or
// tokenizer.model) beside it is read by load_tokenizer_file().
// Called by load_model() (load_model.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "json.h"
#include "loader_common.h"
#include "model_file.h"

namespace beagle {

namespace {

std::string dirname_of(const std::string& p) {
    size_t s = p.find_last_of('/');
    if (s == std::string::npos) return ".";
    if (s == 0) return "/";
    return p.substr(0, s);
}

bool ends_with(const std::string& s, const char* suffix) {
    size_t n = strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Parse one .safetensors file: 8-byte header length, JSON header, data. Appends its tensors to mf
// (names must be new) and returns their names.
std::vector<std::string> read_file_tensors(ModelFile& mf, const std::string& file, bool keep_metadata) {
    if (is_directory(file)) fail("safetensors file '%s' is a directory", file.c_str());
    mf.maps.push_back(std::make_unique<MappedFile>(file));
    const MappedFile& map = *mf.maps.back();
    if (map.size < 8)
        fail("safetensors '%s' is truncated: %zu bytes, need at least 8 for the header length", file.c_str(), map.size);
    uint64_t n;
    memcpy(&n, map.data, 8);
    if (n > map.size - 8)
        fail("safetensors '%s' is truncated or corrupt: header length %llu exceeds the %zu bytes after it", file.c_str(),
             (unsigned long long)n, map.size - 8);
    if (n > (100u << 20))
        fail("safetensors '%s': header length %llu is implausibly large (> 100 MiB)", file.c_str(), (unsigned long long)n);
    if (n < 2) fail("safetensors '%s': header length %llu is too small for a JSON object", file.c_str(), (unsigned long long)n);
    std::string source = file + " (safetensors header)";
    JsonValue h = json_parse(std::string((const char*)map.data + 8, (size_t)n), source);
    if (!h.is_object()) fail("%s: expected a JSON object, found %s", source.c_str(), h.type_name());
    const uint8_t* base = map.data + 8 + n;
    uint64_t data_size = map.size - 8 - n;

    struct Range { uint64_t begin, end; std::string name; };
    std::vector<Range> ranges;
    std::vector<std::string> names;
    for (size_t k = 0; k < h.keys.size(); k++) {
        const std::string& name = h.keys[k];
        const JsonValue& e = h.items[k];
        if (name == "__metadata__") {
            if (!e.is_object()) fail("%s: __metadata__ must be an object, found %s", source.c_str(), e.type_name());
            for (size_t m = 0; m < e.keys.size(); m++) {
                const std::string& v = json_string(e.items[m], source + " __metadata__ '" + e.keys[m] + "'");
                if (keep_metadata) mf.metadata.emplace_back("safetensors." + e.keys[m], "\"" + v + "\"");
            }
            continue;
        }
        std::string what = source + " tensor '" + name + "'";
        if (!e.is_object()) fail("%s: expected an object, found %s at %s", what.c_str(), e.type_name(), e.where().c_str());
        if (find_tensor(mf, name)) fail("safetensors: tensor '%s' appears twice (again in '%s')", name.c_str(), file.c_str());
        const std::string& dt = json_string(json_require(e, "dtype", what), what + " dtype");
        Tensor t;
        t.name = name;
        if (dt == "F32") t.dtype = DType::F32;
        else if (dt == "F16") t.dtype = DType::F16;
        else if (dt == "BF16") t.dtype = DType::BF16;
        else fail("%s: unsupported dtype '%s' (supported: F32, F16, BF16)", what.c_str(), dt.c_str());
        const JsonValue& shape = json_require(e, "shape", what);
        if (!shape.is_array()) fail("%s: shape must be an array, found %s", what.c_str(), shape.type_name());
        if (shape.size() > 4) fail("%s: %zu dimensions, at most 4 are supported", what.c_str(), shape.size());
        t.ndim = (int)shape.size();
        uint64_t numel = 1;
        for (int d = 0; d < t.ndim; d++) {
            int64_t v = json_int(shape.items[d], what + " shape[" + std::to_string(d) + "]");
            if (v < 0) fail("%s: shape[%d] = %lld is negative", what.c_str(), d, (long long)v);
            t.shape[d] = v;
            numel = checked_mul(numel, (uint64_t)v, ("element count of " + what).c_str());
        }
        t.nbytes = checked_mul(numel, dtype_row_bytes(t.dtype, 1), ("byte size of " + what).c_str());
        const JsonValue& offs = json_require(e, "data_offsets", what);
        if (!offs.is_array() || offs.size() != 2)
            fail("%s: data_offsets must be an array of 2 integers, found %s", what.c_str(), json_dump(offs).c_str());
        int64_t b = json_int(offs.items[0], what + " data_offsets[0]");
        int64_t en = json_int(offs.items[1], what + " data_offsets[1]");
        if (b < 0 || en < b)
            fail("%s: data_offsets [%lld, %lld] are not an increasing pair of non-negative offsets", what.c_str(),
                 (long long)b, (long long)en);
        if ((uint64_t)(en - b) != t.nbytes)
            fail("%s: data_offsets [%lld, %lld] hold %lld bytes, but %s %s needs %llu", what.c_str(), (long long)b,
                 (long long)en, (long long)(en - b), dt.c_str(), t.shape_str().c_str(), (unsigned long long)t.nbytes);
        if ((uint64_t)en > data_size)
            fail("safetensors '%s' is truncated or corrupt: tensor '%s' data [%lld, %lld) extends past the %llu data bytes",
                 file.c_str(), name.c_str(), (long long)b, (long long)en, (unsigned long long)data_size);
        t.data = keep_aligned(mf, base + b, t.nbytes, t.dtype);
        ranges.push_back({(uint64_t)b, (uint64_t)en, name});
        names.push_back(name);
        mf.tensors.push_back(t);
    }
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    for (size_t k = 1; k < ranges.size(); k++)
        if (ranges[k - 1].end > ranges[k].begin)
            fail("safetensors '%s' is corrupt: data of tensors '%s' and '%s' overlap", file.c_str(),
                 ranges[k - 1].name.c_str(), ranges[k].name.c_str());
    return names;
}

void read_config(ModelFile& mf, const std::string& cfg_path) {
    JsonValue j = json_parse_file(cfg_path);
    if (!j.is_object()) fail("%s: expected a JSON object, found %s", cfg_path.c_str(), j.type_name());
    for (size_t k = 0; k < j.keys.size(); k++) {
        std::string v = json_dump(j.items[k]);
        if (v.size() > 300) v = v.substr(0, 300) + "...";
        mf.metadata.emplace_back("config." + j.keys[k], v);
    }
    auto key = [&](const char* k) { return cfg_path + " key '" + k + "'"; };
    auto geti = [&](const char* k, bool required, int64_t def) -> int {
        const JsonValue* v = j.find(k);
        if (!v || v->is_null()) {
            if (required) fail("%s: missing key '%s'", cfg_path.c_str(), k);
            return (int)def;
        }
        int64_t x = json_int(*v, key(k));
        if (x < 1 || x > (1 << 24)) fail("%s: %lld is out of range [1, 2^24]", key(k).c_str(), (long long)x);
        return (int)x;
    };
    auto getf = [&](const JsonValue& o, const char* k, double def) -> double {
        const JsonValue* v = o.find(k);
        return v && !v->is_null() ? json_number(*v, key(k)) : def;
    };
    auto getb = [&](const char* k, bool def) -> bool {
        const JsonValue* v = j.find(k);
        return v && !v->is_null() ? json_bool(*v, key(k)) : def;
    };
    LlamaConfig& c = mf.config;
    // the architecture: model_type (HF's config class), else the class of the first "architectures" entry
    std::string arch, arch_from = "model_type";
    if (const JsonValue* mt = j.find("model_type")) {
        arch = json_string(*mt, key("model_type"));
    } else if (const JsonValue* as = j.find("architectures")) {
        if (!as->is_array() || as->size() == 0)
            fail("%s: expected a non-empty array of class names, found %s", key("architectures").c_str(), as->type_name());
        static const char* classes[][2] = {
            {"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"}, {"Qwen2ForCausalLM", "qwen2"}};
        arch = json_string(as->items[0], key("architectures"));
        arch_from = "architectures";
        for (auto& k : classes)
            if (arch == k[0]) arch = k[1];
    } else {
        arch = "llama";  // configs older than model_type
    }
    if (arch != "llama" && arch != "mistral" && arch != "qwen2")
        fail("%s: %s '%s' is not supported (supported: llama, mistral, qwen2, i.e. LlamaForCausalLM, "
             "MistralForCausalLM, Qwen2ForCausalLM)",
             cfg_path.c_str(), arch_from.c_str(), arch.c_str());
    c.arch = arch;
    c.qkv_bias = arch == "qwen2";  // Qwen2's q/k/v projections always have biases (no config key)
    if (const JsonValue* act = j.find("hidden_act")) {
        const std::string& s = json_string(*act, key("hidden_act"));
        if (s != "silu") fail("%s: hidden_act '%s' is not supported (expected 'silu')", cfg_path.c_str(), s.c_str());
    }
    if (getb("attention_bias", false) || getb("mlp_bias", false))
        fail("%s: attention_bias / mlp_bias are not supported", cfg_path.c_str());
    c.dim = geti("hidden_size", true, 0);
    c.n_layers = geti("num_hidden_layers", true, 0);
    c.n_heads = geti("num_attention_heads", true, 0);
    c.n_kv_heads = geti("num_key_value_heads", false, c.n_heads);
    c.ffn_dim = geti("intermediate_size", true, 0);
    c.vocab_size = geti("vocab_size", true, 0);
    c.max_seq = geti("max_position_embeddings", false, 2048);
    if (c.dim % c.n_heads != 0 && !j.find("head_dim"))
        fail("%s: hidden_size %d is not a multiple of num_attention_heads %d (and no head_dim)", cfg_path.c_str(), c.dim,
             c.n_heads);
    c.head_dim = geti("head_dim", false, c.dim / c.n_heads);
    c.rope_theta = (float)getf(j, "rope_theta", 10000.0);
    c.rms_eps = (float)getf(j, "rms_norm_eps", 1e-6);  // HF LlamaConfig's default
    c.tied_embeddings = getb("tie_word_embeddings", false);
    // sliding-window attention: Mistral's whenever sliding_window is set, Qwen2's only with use_sliding_window
    if (arch != "llama" && (arch == "mistral" || getb("use_sliding_window", false))) {
        // absent: HF's default window (4096, MistralConfig and Qwen2Config); null: none
        c.sliding_window = j.find("sliding_window") ? geti("sliding_window", false, 0) : 4096;
        if (c.sliding_window > 0 && c.max_seq > c.sliding_window) c.max_seq = c.sliding_window;
    }
    const JsonValue* rs = j.find("rope_scaling");
    if (rs && !rs->is_null()) {
        if (!rs->is_object()) fail("%s: expected an object or null, found %s", key("rope_scaling").c_str(), rs->type_name());
        const JsonValue* t = rs->find("rope_type");
        if (!t) t = rs->find("type");
        std::string type = t ? json_string(*t, key("rope_scaling.rope_type")) : "";
        if (type == "llama3") {
            c.rope_scaling = true;
            c.rope_factor = (float)getf(*rs, "factor", 1.0);
            c.rope_low_freq_factor = (float)getf(*rs, "low_freq_factor", 1.0);
            c.rope_high_freq_factor = (float)getf(*rs, "high_freq_factor", 4.0);
            double orig = getf(*rs, "original_max_position_embeddings", 8192);
            if (!(orig >= 1 && orig <= (1 << 24) && std::floor(orig) == orig))
                fail("%s: original_max_position_embeddings = %g is not a positive integer", key("rope_scaling").c_str(), orig);
            c.rope_orig_max_pos = (int)orig;
        } else if (type != "default") {
            fail("%s: rope scaling type '%s' is not supported (only 'llama3')", key("rope_scaling").c_str(), type.c_str());
        }
    }
    validate_config(c, cfg_path);
}

}  // namespace

std::unique_ptr<ModelFile> load_safetensors(const std::string& path) {
    auto mf = std::make_unique<ModelFile>();
    mf->path = path;
    mf->format = "safetensors";
    std::string dir, single, index;
    if (is_directory(path)) {
        dir = path;
        if (file_exists(dir + "/model.safetensors")) single = dir + "/model.safetensors";
        else if (file_exists(dir + "/model.safetensors.index.json")) index = dir + "/model.safetensors.index.json";
        else fail("HF checkpoint directory '%s' has neither model.safetensors nor model.safetensors.index.json", path.c_str());
    } else {
        dir = dirname_of(path);
        if (ends_with(path, ".json")) index = path;
        else single = path;
    }
    std::string cfg_path = dir + "/config.json";
    if (!file_exists(cfg_path))
        fail("HF checkpoint '%s': missing %s (the model's hyper-parameters)", path.c_str(), cfg_path.c_str());
    read_config(*mf, cfg_path);

    if (!single.empty()) {
        read_file_tensors(*mf, single, true);
    } else {
        JsonValue ij = json_parse_file(index);
        const JsonValue& wm = json_require(ij, "weight_map", index);
        if (!wm.is_object()) fail("%s: weight_map must be an object, found %s", index.c_str(), wm.type_name());
        std::vector<std::string> shards;
        for (size_t k = 0; k < wm.keys.size(); k++) {
            const std::string& f = json_string(wm.items[k], index + " weight_map['" + wm.keys[k] + "']");
            if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
                fail("%s: weight_map['%s'] = '%s' is not a plain file name in the checkpoint directory", index.c_str(),
                     wm.keys[k].c_str(), f.c_str());
            if (std::find(shards.begin(), shards.end(), f) == shards.end()) shards.push_back(f);
        }
        if (shards.empty()) fail("%s: weight_map is empty", index.c_str());
        std::map<std::string, std::set<std::string>> in_shard;
        for (const std::string& f : shards) {
            std::string p = dir + "/" + f;
            if (!file_exists(p)) fail("%s: shard '%s' named in weight_map does not exist", index.c_str(), p.c_str());
            std::vector<std::string> names = read_file_tensors(*mf, p, f == shards[0]);
            in_shard[f].insert(names.begin(), names.end());
        }
        for (size_t k = 0; k < wm.keys.size(); k++)
            if (!in_shard[wm.items[k].str].count(wm.keys[k]))
                fail("%s: weight_map says tensor '%s' is in '%s', but that shard has no such tensor", index.c_str(),
                     wm.keys[k].c_str(), wm.items[k].str.c_str());
        mf->metadata.emplace_back("safetensors.shards", std::to_string(shards.size()));
    }

    // weights by role
    LlamaConfig& c = mf->config;
    auto need = [&](const std::string& name, const std::string& role) -> Tensor {
        const Tensor* t = find_tensor(*mf, name);
        if (!t) fail("HF checkpoint '%s': missing tensor '%s' (%s)", path.c_str(), name.c_str(), role.c_str());
        return *t;
    };
    LlamaWeights& w = mf->weights;
    w.tok_embd = need("model.embed_tokens.weight", "token embedding");
    w.out_norm = need("model.norm.weight", "output norm");
    if (c.tied_embeddings) w.lm_head = w.tok_embd;
    else w.lm_head = need("lm_head.weight", "lm_head; config.json has tie_word_embeddings false");
    w.layers.resize(c.n_layers);
    for (int l = 0; l < c.n_layers; l++) {
        std::string b = "model.layers." + std::to_string(l) + ".", r = "layer " + std::to_string(l) + " ";
        LayerWeights& L = w.layers[l];
        L.attn_norm = need(b + "input_layernorm.weight", r + "attn_norm");
        L.wq = need(b + "self_attn.q_proj.weight", r + "wq");
        L.wk = need(b + "self_attn.k_proj.weight", r + "wk");
        L.wv = need(b + "self_attn.v_proj.weight", r + "wv");
        L.wo = need(b + "self_attn.o_proj.weight", r + "wo");
        L.ffn_norm = need(b + "post_attention_layernorm.weight", r + "ffn_norm");
        L.w_gate = need(b + "mlp.gate_proj.weight", r + "w_gate");
        L.w_up = need(b + "mlp.up_proj.weight", r + "w_up");
        L.w_down = need(b + "mlp.down_proj.weight", r + "w_down");
        if (c.qkv_bias) {
            Tensor bq = need(b + "self_attn.q_proj.bias", r + "bq"), bk = need(b + "self_attn.k_proj.bias", r + "bk");
            load_qkv_bias(*mf, L, bq, bk, need(b + "self_attn.v_proj.bias", r + "bv"), true);
        }
    }
    for (const Tensor& t : mf->tensors) {
        if (t.name.compare(0, 13, "model.layers.") == 0) {
            long layer = strtol(t.name.c_str() + 13, nullptr, 10);
            if (layer < 0 || layer >= c.n_layers)
                fail("HF checkpoint '%s': tensor '%s' belongs to layer %ld but num_hidden_layers is %d", path.c_str(),
                     t.name.c_str(), layer, c.n_layers);
        }
        bool qkv = ends_with(t.name, ".self_attn.q_proj.bias") || ends_with(t.name, ".self_attn.k_proj.bias") ||
                   ends_with(t.name, ".self_attn.v_proj.bias");
        if (ends_with(t.name, ".bias") && !(c.qkv_bias && qkv))
            fail("HF checkpoint '%s': tensor '%s': bias tensors are not supported by model_type '%s' (only qwen2's "
                 "q_proj / k_proj / v_proj biases)",
                 path.c_str(), t.name.c_str(), c.arch.c_str());
    }
    validate_weights(*mf);  // shapes checked before the permutation relies on them
    for (LayerWeights& L : w.layers) {
        L.wq = permute_rope_rows(*mf, L.wq, c.n_heads, c.head_dim);
        L.wk = permute_rope_rows(*mf, L.wk, c.n_kv_heads, c.head_dim);
    }

    // tokenizer beside the weights, if any
    std::string tok_json = dir + "/tokenizer.json", tok_model = dir + "/tokenizer.model";
    if (file_exists(tok_json)) mf->tokenizer = load_tokenizer_file(tok_json);
    else if (file_exists(tok_model)) mf->tokenizer = load_tokenizer_file(tok_model);
    if (mf->tokenizer.kind != TokenizerSpec::NONE && (int64_t)mf->tokenizer.tokens.size() > c.vocab_size)
        fail("HF checkpoint '%s': tokenizer has %zu tokens but vocab_size is %d", path.c_str(),
             mf->tokenizer.tokens.size(), c.vocab_size);
    return mf;
}

}  // namespace beagle
