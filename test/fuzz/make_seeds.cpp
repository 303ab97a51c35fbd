// make_seeds.cpp: writes the synthetic part of the fuzz seed corpora, small valid files of every
// format made by the project's own writers (GGUF in several dtypes and both tokenizer kinds,
// llama2.c, safetensors directory and index, draft, checkpoint, data shard, chat input), into
// OUT/<harness>/. Each binary seed is loaded back to prove it valid. test/fuzz/make_seeds.sh adds
// cut-down copies of the real files in data/. Usage: make_seeds OUT_DIR
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "data/dataset.h"
#include "fuzz_common.h"
#include "io/json.h"
#include "io/model_file.h"
#include "train/train_loop.h"

using namespace beagle;

static std::string g_out;

static std::string seed_path(const std::string& harness, const std::string& name) {
    std::string dir = g_out + "/" + harness;
    mkdir(dir.c_str(), 0755);
    return dir + "/" + name;
}
static void put(const std::string& harness, const std::string& name, const std::string& bytes) {
    lt::write_text(seed_path(harness, name), bytes);
}

// SmolLM2's first `n` tokens and the merges among them, as GGUF tokenizer metadata (byte-level BPE).
static void smollm2_tokenizer_meta(lt::GGUFWriter& w, size_t n) {
    TokenizerSpec full = load_model(lt::smollm2())->tokenizer;
    std::vector<std::string> toks(full.tokens.begin(), full.tokens.begin() + n), sorted = toks;
    std::sort(sorted.begin(), sorted.end());
    auto has = [&](const std::string& t) { return std::binary_search(sorted.begin(), sorted.end(), t); };
    std::vector<std::string> merges;
    for (const std::string& m : full.merges) {
        size_t sp = m.find(' ');
        if (sp != std::string::npos && has(m.substr(0, sp)) && has(m.substr(sp + 1)) && has(m.substr(0, sp) + m.substr(sp + 1)))
            merges.push_back(m);
    }
    w.str("tokenizer.ggml.model", "gpt2");
    w.str("tokenizer.ggml.pre", full.pre);
    w.str_array("tokenizer.ggml.tokens", toks);
    w.i32_array("tokenizer.ggml.token_type", std::vector<int32_t>(full.types.begin(), full.types.begin() + n));
    w.str_array("tokenizer.ggml.merges", merges);
    w.u32("tokenizer.ggml.bos_token_id", 1);
    w.u32("tokenizer.ggml.eos_token_id", 2);
    w.str("tokenizer.chat_template", full.chat_template);
}

static void gguf_seeds() {
    struct { const char* name; uint32_t type; } types[] = {
        {"f32", lt::GT_F32}, {"f16", lt::GT_F16}, {"bf16", lt::GT_BF16}, {"q4_0", lt::GT_Q4_0}, {"q4_1", lt::GT_Q4_1}, {"q8_0", lt::GT_Q8_0}};
    for (auto& t : types) {
        lt::TinyLlama o;
        o.dim = 32, o.heads = 2, o.kv_heads = 1, o.ffn = 32, o.layers = 1, o.vocab = 16, o.mat_type = t.type;
        o.tied = t.type == lt::GT_Q8_0;
        lt::GGUFWriter w = lt::tiny_llama(o);
        w.u32("tokenizer.ggml.unknown_token_id", 0);
        put("gguf", std::string("tiny_spm_") + t.name + ".gguf", fuzz::bytes(w.build()));
        load_model(seed_path("gguf", std::string("tiny_spm_") + t.name + ".gguf"));
    }
    // byte-level BPE: a tiny llama whose vocabulary is SmolLM2's first 300 tokens
    if (!file_exists(lt::smollm2())) {
        fprintf(stderr, "make_seeds: no model at %s (make model): no byte-level BPE GGUF seed\n", lt::smollm2().c_str());
        return;
    }
    lt::TinyLlama o;
    o.dim = 32, o.heads = 2, o.kv_heads = 1, o.ffn = 32, o.layers = 1, o.vocab = 300, o.mat_type = lt::GT_Q4_1, o.tied = true;
    o.spm_tokenizer = false;
    lt::GGUFWriter w = lt::tiny_llama(o);
    smollm2_tokenizer_meta(w, o.vocab);
    put("gguf", "tiny_bpe_q4_1.gguf", fuzz::bytes(w.build()));
    load_model(seed_path("gguf", "tiny_bpe_q4_1.gguf"));
}

// llama2.c: 7 int32 (dim, hidden, layers, heads, kv heads, vocab (< 0: unshared classifier), seq_len),
// then f32 tensors in run.c's order.
static void llama2c_seeds() {
    for (int shared = 0; shared < 2; shared++) {
        int32_t h[7] = {16, 32, 1, 2, 1, shared ? 20 : -20, 8};
        int64_t D = h[0], F = h[1], L = h[2], hd = D / h[3], q = h[3] * hd, kv = h[4] * hd, V = 20, S = h[6];
        int64_t floats = V * D + L * (D + D * q + 2 * D * kv + q * D + D + 3 * F * D) + D + S * hd + (shared ? 0 : V * D);
        std::string b((const char*)h, 28);
        b += fuzz::bytes(lt::random_data(lt::GT_F32, floats, 7 + shared));
        put("llama2c", shared ? "tiny_shared.bin" : "tiny_unshared.bin", b);
        load_model(seed_path("llama2c", shared ? "tiny_shared.bin" : "tiny_unshared.bin"));
    }
}

static void safetensors_seeds() {
    std::vector<lt::StT> ts = lt::tiny_hf_tensors(fuzz::kTinyHF);
    put("safetensors", "tiny_f32.safetensors", fuzz::bytes(lt::st_build(ts)));
    std::vector<lt::StT> bf = ts;
    for (size_t i = 0; i < bf.size(); i++) {
        bf[i].dtype = i % 2 ? "BF16" : "F16";
        bf[i].data = lt::random_data(i % 2 ? lt::GT_BF16 : lt::GT_F16, bf[i].data.size() / 4, (uint32_t)i);
    }
    put("safetensors", "tiny_f16_bf16.safetensors", fuzz::bytes(lt::st_build(bf)));
    // index: the split fuzz_safetensors_index.cpp writes (embedding + norm, then the layers)
    std::string map;
    for (size_t i = 0; i < ts.size(); i++)
        map += std::string(i ? ",\n    " : "") + json_quote(ts[i].name) + ": " +
               json_quote(i < 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors");
    put("safetensors_index", "index.json", "{\n  \"metadata\": {\"total_size\": 4096},\n  \"weight_map\": {\n    " + map + "\n  }\n}\n");
    put("hf_config", "config.json", lt::tiny_hf_config(fuzz::kTinyHF));
    std::string c = lt::tiny_hf_config(fuzz::kTinyHF);
    c.insert(c.rfind('}'), ",  \"head_dim\": 4, \"hidden_act\": \"silu\", \"attention_bias\": false,\n"
                           "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
                           " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}\n");
    c.erase(c.rfind("\n,"), 1);
    put("hf_config", "config_llama3.json", c);
}

static DraftConfig tiny_draft_config() {
    DraftConfig c;
    c.dim = 8, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 4, c.ffn_dim = 16, c.vocab_size = 16;
    c.target_n_layers = 1;
    c.tokenizer_hash = 0x0123456789abcdefull;
    return c;
}

static void draft_seeds() {
    DraftWeights w;
    w.init_random(tiny_draft_config(), 1);
    w.meta = {{"step", "10"}, {"data", "tiny"}};
    save_draft(seed_path("draft", "tiny.bin"), w);
    DraftConfig c = tiny_draft_config();
    c.draft_vocab = 4;
    DraftWeights r;
    r.init_random(c, 2);
    r.d2t = {1, 3, 5, 7};
    save_draft(seed_path("draft", "tiny_d2t.bin"), r);
    DraftConfig mc = tiny_draft_config();  // Medusa heads: the arch and medusa_heads lines, two tensors
    mc.arch = ARCH_MEDUSA;
    mc.medusa_heads = 2;
    DraftWeights m;
    m.init_random(mc, 3);
    save_draft(seed_path("draft", "tiny_medusa.bin"), m);
    load_draft(seed_path("draft", "tiny.bin"));
    load_draft(seed_path("draft", "tiny_d2t.bin"));
    load_draft(seed_path("draft", "tiny_medusa.bin"));
}

static void checkpoint_seeds() {
    DraftConfig cfg = tiny_draft_config();
    Checkpoint c;
    c.kv.items = {{"dim", "8"}, {"n_heads", "2"}, {"n_kv_heads", "1"}, {"head_dim", "4"}, {"ffn_dim", "16"}, {"vocab", "16"},
            {"items", "3"}, {"n_history", "2"}, {"step", "2"}, {"epoch", "0"}, {"lr", "0.001"}};
    for (int i = 0; i < DT_COUNT; i++) {
        c.w[i].assign((size_t)cfg.numel(i), 0.5f);
        c.m[i].assign((size_t)cfg.numel(i), 0.01f);
        c.v[i].assign((size_t)cfg.numel(i), 0.001f);
    }
    c.order = {2, 0, 1};
    c.history = {{3.5f, 3.0f, 0.5f, 1}, {3.2f, 2.9f, 0.3f, 1}};
    std::string p = seed_path("checkpoint", "tiny.ckpt");
    save_checkpoint(p, c, cfg);
    load_checkpoint(p);
}

static void shard_seeds() {
    std::vector<SeqData> seqs(2);
    const int dim = 4;
    seqs[0].tokens = {1, 5, 7, 2};
    seqs[0].n_prompt = 2;
    seqs[1].tokens = {1, 9, 3};
    seqs[1].n_prompt = 1;
    for (SeqData& s : seqs) s.states.assign(s.tokens.size() * dim, 0x3c00);  // f16 1.0
    std::string p = seed_path("shard", "shard-00000.bin");
    write_shard(p, dim, 16, 0x0123456789abcdefull, seqs);
    std::string dir = g_out + "/shard";
    Dataset ds(dir);
    // the same sequences as tokens only ("BEAGLETK", datagen's default), checked in a folder of its own
    std::string tdir = g_out + "/shard-tokens-check";
    mkdir(tdir.c_str(), 0755);
    write_token_shard(tdir + "/shard-00000.bin", dim, 16, 0x0123456789abcdefull, seqs);
    Dataset tds(tdir);
    lt::write_text(seed_path("shard", "tokens-00000.bin"), read_file(tdir + "/shard-00000.bin"));
    std::remove((tdir + "/shard-00000.bin").c_str());
    rmdir(tdir.c_str());
    put("shard", "meta.txt", "model weights/x.gguf\nseqs 2\ntokens 7\n");
}

static void chat_seeds() {
    if (!file_exists(lt::smollm2())) {
        fprintf(stderr, "make_seeds: no model at %s (make model): no chat seeds\n", lt::smollm2().c_str());
        return;
    }
    TokenizerSpec s = load_model(lt::smollm2())->tokenizer;
    std::string z(1, '\0');
    put("chat_template", "smollm2", s.chat_template + z + "Write a haiku about the sea." + z);
    put("chat_template", "system", s.chat_template + z + "What is 2+2?" + z + "You are terse.");
    put("chat_template", "special", std::string("{{ '<|im_start|>system\\nBe kind<|im_end|>\\n' }}") + z +
                                        "<|im_start|>user\n<|im_end|> \xf0\x9f\x90\xb6 caf\xc3\xa9 12345" + z);
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds OUT_DIR\n");
        return 2;
    }
    g_out = argv[1];
    mkdir(g_out.c_str(), 0755);
    try {
        gguf_seeds();
        llama2c_seeds();
        safetensors_seeds();
        draft_seeds();
        checkpoint_seeds();
        shard_seeds();
        chat_seeds();
    } catch (const Error& e) {
        fprintf(stderr, "make_seeds: %s\n", e.what());
        return 1;
    }
    return 0;
}
