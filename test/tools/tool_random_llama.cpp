// tool_random_llama.cpp: writes a Llama GGUF with random weights of any shape (default: 7B-shaped,
// dim 4096, heads 32/8, ffn 14336, vocab 32000, 2 layers; Q4_1 or Q8_0 matrices, F32 norms) and a
// small SentencePiece-style tokenizer, from a fixed seed. Test data for 7B-class runs (test_7b_shaped.sh).
//
//   build/test/tool_random_llama OUT.gguf [--layers N] [--vocab V] [--dim D] [--heads H] [--kv-heads K]
//                                [--ffn F] [--type q4_1|q8_0] [--seed S] [--chatml 1] [--qwen2 1]
// --chatml 1: the vocabulary also holds "\n" and the ChatML control tokens <|im_start|> <|im_end|>, no
// dummy space prefix, and the file a chat template with a default system line (a tiny instruct-shaped model: datagen --self-prompts).
// --qwen2 1: GGUF arch qwen2, with F32 Q/K/V bias vectors (uniform in [-0.5, 0.5]) in every layer.
//
// Weights have the scale of a trained model's (each matrix row's std about 1/sqrt(in), norms 1), so
// activations stay O(1) and logits are spread, not saturated. Tensor data is streamed to the file one
// block row at a time (a 128256-vocabulary file is about 1.4 GB at Q4_1).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/common.h"
#include "core/dtype.h"
#include "unit/test_loaders_util.h"

using namespace beagle;

namespace {

struct Shape {
    long layers = 2, vocab = 32000, dim = 4096, heads = 32, kv_heads = 8, ffn = 14336, seed = 1234, chatml = 0, qwen2 = 0;
    uint32_t type = lt::GT_Q4_1;
};

uint64_t block_bytes(uint32_t type) { return type == lt::GT_Q8_0 ? 34 : type == lt::GT_Q4_1 ? 20 : 4; }
uint64_t tensor_bytes(uint32_t type, uint64_t n) { return type == lt::GT_F32 ? 4 * n : n / 32 * block_bytes(type); }

// One 32-element block of a matrix with `in` columns: q uniform over the type's codes; the scale
// makes the element std 1/sqrt(in) (uniform over 2^b codes has std about 2^b / sqrt(12)).
void random_block(uint32_t type, uint64_t in, std::mt19937& rng, uint8_t* out) {
    const double target = 1.0 / std::sqrt((double)in);
    if (type == lt::GT_Q8_0) {
        uint16_t d = f32_to_f16((float)(target / (255.0 / std::sqrt(12.0))));
        memcpy(out, &d, 2);
        for (int i = 0; i < 32; i++) out[2 + i] = (uint8_t)(int8_t)((int)(rng() % 255) - 127);
    } else {  // Q4_1: x = d * q + m, q in 0..15, m = -7.5 d centers it (mean 0: no common direction)
        float df = (float)(target / (16.0 / std::sqrt(12.0)));
        uint16_t d = f32_to_f16(df), m = f32_to_f16(-7.5f * f16_to_f32(d));
        memcpy(out, &d, 2);
        memcpy(out + 2, &m, 2);
        for (int i = 0; i < 16; i++) out[4 + i] = (uint8_t)rng();
    }
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const char* usage = "usage: tool_random_llama OUT.gguf [--layers N] [--vocab V] [--dim D] [--heads H] "
                            "[--kv-heads K] [--ffn F] [--type q4_1|q8_0] [--seed S] [--chatml 1] [--qwen2 1]";
        if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
            printf("%s\n", usage);
            return 0;
        }
        if (argc < 2 || argv[1][0] == '-') fail("%s (the output file comes first)", usage);
        std::string out = argv[1];
        Shape s;
        for (int i = 2; i < argc; i++) {
            std::string a = argv[i];
            if (i + 1 >= argc) fail("tool_random_llama: %s needs a value", a.c_str());
            std::string v = argv[++i];
            long* dst = a == "--layers" ? &s.layers : a == "--vocab" ? &s.vocab : a == "--dim" ? &s.dim
                      : a == "--heads" ? &s.heads : a == "--kv-heads" ? &s.kv_heads : a == "--ffn" ? &s.ffn
                      : a == "--seed" ? &s.seed : a == "--chatml" ? &s.chatml : a == "--qwen2" ? &s.qwen2 : nullptr;
            if (a == "--type") {
                if (v != "q4_1" && v != "q8_0") fail("tool_random_llama: --type q4_1 or q8_0, got '%s'", v.c_str());
                s.type = v == "q8_0" ? lt::GT_Q8_0 : lt::GT_Q4_1;
            } else if (dst) {
                *dst = atol(v.c_str());
                if (*dst <= 0) fail("tool_random_llama: %s needs a positive integer, got '%s'", a.c_str(), v.c_str());
            } else {
                fail("tool_random_llama: unknown option '%s'", a.c_str());
            }
        }
        if (s.dim % s.heads || s.heads % s.kv_heads || s.dim % 32 || s.ffn % 32 || s.vocab < 100)
            fail("tool_random_llama: need heads | dim, kv heads | heads, 32 | dim and ffn, vocab >= 100");

        lt::GGUFWriter w;
        const std::string A = s.qwen2 ? "qwen2" : "llama";
        w.str("general.architecture", A);
        w.str("general.name", "random-" + A);
        w.u32(A + ".context_length", 4096);
        w.u32(A + ".embedding_length", (uint32_t)s.dim);
        w.u32(A + ".block_count", (uint32_t)s.layers);
        w.u32(A + ".feed_forward_length", (uint32_t)s.ffn);
        w.u32(A + ".attention.head_count", (uint32_t)s.heads);
        w.u32(A + ".attention.head_count_kv", (uint32_t)s.kv_heads);
        w.u32(A + ".rope.dimension_count", (uint32_t)(s.dim / s.heads));
        w.f32(A + ".rope.freq_base", 10000.0f);
        w.f32(A + ".attention.layer_norm_rms_epsilon", 1e-5f);
        // SentencePiece-style vocabulary: <unk> <s> </s>, the space mark and printable ASCII (so any
        // ASCII prompt encodes), then filler pieces with falling scores
        w.str("tokenizer.ggml.model", "llama");
        std::vector<std::string> toks = {"<unk>", "<s>", "</s>", "\xe2\x96\x81"};
        for (int c = 33; c < 127; c++) toks.push_back(std::string(1, (char)c));
        const size_t n_plain = toks.size();
        if (s.chatml) toks.insert(toks.end(), {"\n", "<|im_start|>", "<|im_end|>"});
        while ((long)toks.size() < s.vocab) toks.push_back("\xe2\x96\x81t" + std::to_string(toks.size()));
        std::vector<float> scores(toks.size());
        std::vector<int32_t> types(toks.size(), 1);
        for (size_t i = 0; i < toks.size(); i++) scores[i] = -(float)i;
        types[0] = 2;
        types[1] = types[2] = 3;
        if (s.chatml) types[n_plain + 1] = types[n_plain + 2] = 3;
        w.str_array("tokenizer.ggml.tokens", toks);
        w.f32_array("tokenizer.ggml.scores", scores);
        w.i32_array("tokenizer.ggml.token_type", types);
        w.u32("tokenizer.ggml.bos_token_id", 1);
        w.u32("tokenizer.ggml.eos_token_id", 2);
        if (s.chatml) w.boolean("tokenizer.ggml.add_space_prefix", false);  // as ChatML models: no dummy " "
        if (s.chatml)
            w.str("tokenizer.chat_template",
                  "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                  "{{ '<|im_start|>system\\nYou are a tiny random model<|im_end|>\\n' }}{% endif %}"
                  "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");

        // tensor list: name, rows, cols (cols innermost), norm or matrix; bias: an F32 vector of random values
        struct TI { std::string name; uint64_t rows, cols; bool norm; bool bias = false; };
        const uint64_t D = s.dim, hd = s.dim / s.heads, q = s.heads * hd, kv = s.kv_heads * hd, F = s.ffn;
        std::vector<TI> ts = {{"token_embd.weight", (uint64_t)s.vocab, D, false}, {"output_norm.weight", 1, D, true},
                              {"output.weight", (uint64_t)s.vocab, D, false}};
        for (long l = 0; l < s.layers; l++) {
            std::string b = "blk." + std::to_string(l) + ".";
            ts.push_back({b + "attn_norm.weight", 1, D, true});
            ts.push_back({b + "attn_q.weight", q, D, false});
            ts.push_back({b + "attn_k.weight", kv, D, false});
            ts.push_back({b + "attn_v.weight", kv, D, false});
            if (s.qwen2)
                for (auto& bn : {std::make_pair("attn_q.bias", q), {"attn_k.bias", kv}, {"attn_v.bias", kv}})
                    ts.push_back({b + bn.first, 1, bn.second, true, true});
            ts.push_back({b + "attn_output.weight", D, q, false});
            ts.push_back({b + "ffn_norm.weight", 1, D, true});
            ts.push_back({b + "ffn_gate.weight", F, D, false});
            ts.push_back({b + "ffn_up.weight", F, D, false});
            ts.push_back({b + "ffn_down.weight", D, F, false});
        }
        // header: the writer's metadata, then tensor infos with aligned offsets (as GGUFWriter::build)
        lt::Bytes h;
        h.b = {'G', 'G', 'U', 'F'};
        h.put<uint32_t>(3).put<uint64_t>(ts.size()).put<uint64_t>(w.n_kv);
        h.b.insert(h.b.end(), w.kv.b.begin(), w.kv.b.end());
        std::vector<uint64_t> offs;
        uint64_t off = 0;
        for (const TI& t : ts) {
            off = (off + 31) / 32 * 32;
            offs.push_back(off);
            uint32_t type = t.norm ? lt::GT_F32 : s.type;
            h.str(t.name);
            if (t.norm) h.put<uint32_t>(1).put<uint64_t>(t.cols);
            else h.put<uint32_t>(2).put<uint64_t>(t.cols).put<uint64_t>(t.rows);
            h.put<uint32_t>(type).put<uint64_t>(off);
            off += tensor_bytes(type, t.rows * t.cols);
        }
        while (h.b.size() % 32) h.b.push_back(0);
        FILE* f = fopen(out.c_str(), "wb");
        if (!f) fail("tool_random_llama: cannot write '%s'", out.c_str());
        fwrite(h.b.data(), 1, h.b.size(), f);
        std::mt19937 rng((uint32_t)s.seed);
        uint64_t pos = 0;
        std::vector<uint8_t> row;
        for (size_t i = 0; i < ts.size(); i++) {
            const TI& t = ts[i];
            std::vector<uint8_t> pad(offs[i] - pos, 0);
            if (!pad.empty()) fwrite(pad.data(), 1, pad.size(), f);  // (an empty vector's data() may be null)
            pos = offs[i];
            if (t.norm) {
                std::vector<float> one(t.cols, 1.0f);
                if (t.bias)
                    for (float& x : one) x = (float)(rng() % 1001) / 1000.0f - 0.5f;
                fwrite(one.data(), 4, one.size(), f);
                pos += 4 * t.cols;
                continue;
            }
            const uint64_t bb = block_bytes(s.type), nb = t.cols / 32;
            row.resize(nb * bb);
            for (uint64_t r = 0; r < t.rows; r++) {
                for (uint64_t b = 0; b < nb; b++) random_block(s.type, t.cols, rng, row.data() + b * bb);
                fwrite(row.data(), 1, row.size(), f);
            }
            pos += t.rows * row.size();
        }
        if (fclose(f) != 0) fail("tool_random_llama: write error on '%s'", out.c_str());
        fprintf(stderr, "tool_random_llama: %s: %ld layers, dim %ld, heads %ld/%ld, ffn %ld, vocab %ld, %s, %.1f MB\n",
                out.c_str(), s.layers, s.dim, s.heads, s.kv_heads, s.ffn, s.vocab,
                s.type == lt::GT_Q8_0 ? "Q8_0" : "Q4_1", pos / 1e6);
        return 0;
    } catch (const std::exception& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
