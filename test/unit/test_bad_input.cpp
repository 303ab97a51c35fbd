// test_bad_input.cpp: every loader turns bad files into a clear beagle::Error (what, where) and
// never crashes, hangs or over-allocates: truncations at 64+ cut points of each header and in the
// data (GGUF, llama2.c, safetensors), byte flips and random mutations, offsets past the end, size
// overflows, unknown types, missing tensors, wrong shapes, bad JSON, missing files, directories.
// The same files also go through `beagle info` as a subprocess: exit code 1, "error:" on stderr,
// no signal, no timeout. Synthetic files live in a mkdtemp directory. Run it under ASan/UBSan too.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "core/common.h"
#include "io/model_file.h"
#include "test_loaders_util.h"
#include "testlib.h"

using namespace beagle;

struct CliCase {
    std::string path, needle;
};
static std::vector<CliCase> g_cli;  // files that must also fail cleanly through `beagle info`

// load_model(path) must throw Error mentioning `needle`; also queue the file for the CLI check.
static void expect_error(const std::string& path, const std::string& needle, bool cli = true) {
    CHECK_THROWS(load_model(path), needle.c_str());
    if (cli) g_cli.push_back({path, needle});
}

// load_model(path) may succeed or throw Error, but nothing else (and must not crash).
static bool load_survives(const std::string& path, int* n_errors) {
    try {
        load_model(path);
        return true;
    } catch (const Error&) {
        (*n_errors)++;
        return true;
    } catch (const std::exception& e) {
        CHECK(false, "%s: non-Error exception %s", path.c_str(), e.what());
        return false;
    }
}

static void truncate_to(const std::string& path, uint64_t n) {
    if (truncate(path.c_str(), (off_t)n) != 0) {
        perror("truncate");
        exit(2);
    }
}

// Copy `src` to `dst` and cut it, in descending order, at every cut point: each must fail with an
// Error naming the file and saying it is truncated (or empty / the wrong size).
static void check_truncations(const std::string& src, const std::string& dst, std::vector<uint64_t> cuts,
                              const char* needle, int cli_every) {
    lt::write_bytes(dst, lt::read_bytes(src));
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    int k = 0;
    for (auto it = cuts.rbegin(); it != cuts.rend(); ++it, ++k) {
        truncate_to(dst, *it);
        const char* want = *it == 0 ? "empty" : needle;
        bool thrown = false;
        try {
            load_model(dst);
        } catch (const Error& e) {
            thrown = true;
            bool ok = strstr(e.what(), want) && strstr(e.what(), dst.c_str());
            CHECK(ok, "cut at %llu: message '%s' lacks '%s' or the path", (unsigned long long)*it, e.what(), want);
        }
        CHECK(thrown, "%s cut at %llu bytes loaded without error", dst.c_str(), (unsigned long long)*it);
        if (cli_every && k % cli_every == 0 && *it < (4u << 20)) {
            // keep a copy of this cut for the CLI pass
            std::string keep = dst + ".cut" + std::to_string(*it);
            lt::write_bytes(keep, lt::read_bytes(dst));
            g_cli.push_back({keep, want});
        }
    }
}

static uint64_t data_start(const ModelFile& m) {
    uint64_t lo = UINT64_MAX;
    for (const Tensor& t : m.tensors) lo = std::min<uint64_t>(lo, (const uint8_t*)t.data - m.maps[0]->data);
    return lo;
}

static std::vector<uint64_t> cut_points(uint64_t header, uint64_t size, int data_cuts) {
    std::vector<uint64_t> cuts;
    for (int k = 0; k < 64; k++) cuts.push_back(header * k / 64);
    cuts.push_back(header - 1);
    cuts.push_back(header + 1);
    for (int k = 1; k <= data_cuts; k++) cuts.push_back(header + (size - header) * k / (data_cuts + 1));
    cuts.push_back(size - 1);
    return cuts;
}

static void test_gguf_truncations(const lt::TempDir& tmp) {
    std::string stories = lt::data_models() + "/stories260K.gguf";
    auto m = load_model(stories);
    uint64_t size = m->maps[0]->size, hdr = data_start(*m);
    m.reset();
    check_truncations(stories, tmp / "stories_cut.gguf", cut_points(hdr, size, 8), "truncated", 8);
    std::string smol = lt::smollm2();
    if (file_exists(smol)) {
        auto s = load_model(smol);
        uint64_t ssize = s->maps[0]->size, shdr = data_start(*s);
        s.reset();
        check_truncations(smol, tmp / "smol_cut.gguf", cut_points(shdr, ssize, 4), "truncated", 16);
        unlink((tmp / "smol_cut.gguf").c_str());
    } else {
        SKIP_PART("SmolLM2 model %s not found (make model): its truncations did not run", smol.c_str());
    }
}

static void test_gguf_flips(const lt::TempDir& tmp) {
    // flip bytes all over the header region of stories260K.gguf: load or Error, never a crash
    std::string src = lt::data_models() + "/stories260K.gguf";
    std::vector<uint8_t> orig = lt::read_bytes(src);
    auto m = load_model(src);
    uint64_t hdr = data_start(*m);
    m.reset();
    std::string p = tmp / "flip.gguf";
    lt::write_bytes(p, orig);
    int fd = open(p.c_str(), O_WRONLY);
    int n = 0, errors = 0;
    for (uint64_t pos = 0; pos < hdr; pos += pos < 256 ? 1 : 13) {
        for (uint8_t mask : {0x01, 0x80, 0xFF}) {
            uint8_t flipped = orig[pos] ^ mask;
            if (pwrite(fd, &flipped, 1, (off_t)pos) != 1) exit(2);  // flip in place
            load_survives(p, &errors);
            n++;
            if (n % 97 == 0) {
                std::string keep = tmp / ("flip_" + std::to_string(pos) + ".gguf");
                lt::write_bytes(keep, lt::read_bytes(p));
                g_cli.push_back({keep, ""});  // may load fine: the CLI pass only checks a clean exit
            }
            if (pwrite(fd, &orig[pos], 1, (off_t)pos) != 1) exit(2);  // and back
        }
    }
    close(fd);
    CHECK(errors > n / 4, "flips: %d of %d loads failed; expected most header flips to be caught", errors, n);
    printf("gguf byte flips: %d files, %d rejected with Error, none crashed\n", n, errors);

    // random multi-byte mutations of a small synthetic file, header and data
    lt::GGUFWriter w = lt::tiny_llama();
    std::vector<uint8_t> base = w.build();
    std::mt19937 rng(1234);
    errors = 0;
    for (int it = 0; it < 600; it++) {
        std::vector<uint8_t> b = base;
        int k = 1 + rng() % 8;
        for (int j = 0; j < k; j++) {
            size_t pos = rng() % std::min<size_t>(b.size(), it % 2 ? b.size() : 2048);
            b[pos] = (uint8_t)rng();
        }
        lt::write_bytes(p, b);
        load_survives(p, &errors);
    }
    printf("gguf random mutations: 600 files, %d rejected with Error, none crashed\n", errors);
}

using Edit = std::function<void(lt::GGUFWriter&)>;

static lt::GGUFWriter::T* tensor_named(lt::GGUFWriter& w, const std::string& name) {
    for (auto& t : w.tensors)
        if (t.name == name) return &t;
    fprintf(stderr, "no tensor %s in the writer\n", name.c_str());
    exit(2);
}

// Rebuild the tiny llama with its metadata written by `meta` instead of the default.
static lt::GGUFWriter tiny_with_meta(const std::function<void(lt::GGUFWriter&)>& meta) {
    lt::GGUFWriter full = lt::tiny_llama();
    lt::GGUFWriter w;
    meta(w);
    w.tensors = full.tensors;
    return w;
}

static void base_meta(lt::GGUFWriter& w, const std::string& skip, const std::string& arch = "llama") {
    auto u = [&](const char* k, uint32_t v) { if (skip != arch + k) w.u32(arch + k, v); };
    if (skip != "general.architecture") w.str("general.architecture", arch);
    u(".context_length", 128);
    u(".embedding_length", 64);
    u(".block_count", 2);
    u(".feed_forward_length", 96);
    u(".attention.head_count", 4);
    u(".attention.head_count_kv", 2);
}

static void test_gguf_targeted(const lt::TempDir& tmp) {
    int n = 0;
    auto check_edit = [&](const char* needle, const Edit& edit) {
        lt::GGUFWriter w = lt::tiny_llama();
        edit(w);
        std::string p = tmp / ("bad" + std::to_string(n++) + ".gguf");
        lt::write_bytes(p, w.build());
        expect_error(p, needle);
    };
    auto check_meta = [&](const char* needle, const std::function<void(lt::GGUFWriter&)>& meta) {
        lt::GGUFWriter w = tiny_with_meta(meta);
        std::string p = tmp / ("badmeta" + std::to_string(n++) + ".gguf");
        lt::write_bytes(p, w.build());
        expect_error(p, needle);
    };
    auto raw = [&](const char* needle, std::vector<uint8_t> bytes) {
        std::string p = tmp / ("raw" + std::to_string(n++) + ".gguf");
        lt::write_bytes(p, bytes);
        expect_error(p, needle);
    };

    // header
    check_edit("version 1, which is not supported", [](lt::GGUFWriter& w) { w.version = 1; });
    check_edit("has version 4, expected 2 or 3", [](lt::GGUFWriter& w) { w.version = 4; });
    check_edit("big-endian", [](lt::GGUFWriter& w) { w.version = 0x03000000; });
    {
        std::vector<uint8_t> b = lt::tiny_llama().build();
        uint64_t huge = 1ull << 40;
        memcpy(b.data() + 16, &huge, 8);  // metadata count
        raw("cannot fit in", b);
        b = lt::tiny_llama().build();
        memcpy(b.data() + 8, &huge, 8);  // tensor count
        raw("cannot fit in", b);
        b = lt::tiny_llama().build();
        b[0] = 'X';
        raw("does not start with the GGUF magic", b);
    }
    // metadata
    check_edit("unknown value type 13", [](lt::GGUFWriter& w) { w.key("bad.type", 13).put<uint32_t>(0); });
    check_edit("bool value 2", [](lt::GGUFWriter& w) { w.key("bad.bool", lt::G_BOOL).put<uint8_t>(2); });
    check_edit("array of 1099511627776 u32 elements",
               [](lt::GGUFWriter& w) { w.key("bad.arr", lt::G_ARRAY).put<uint32_t>(lt::G_U32).put<uint64_t>(1ull << 40); });
    check_edit("unknown array element type 77",
               [](lt::GGUFWriter& w) { w.key("bad.arr", lt::G_ARRAY).put<uint32_t>(77).put<uint64_t>(1); });
    check_edit("nested deeper than 8", [](lt::GGUFWriter& w) {
        lt::Bytes& b = w.key("bad.deep", lt::G_ARRAY);
        for (int i = 0; i < 12; i++) b.put<uint32_t>(lt::G_ARRAY).put<uint64_t>(1);
        b.put<uint32_t>(lt::G_U8).put<uint64_t>(0);
    });
    check_edit("needs 4294967295 bytes", [](lt::GGUFWriter& w) { w.key("bad.str", lt::G_STRING).put<uint64_t>(0xFFFFFFFFull); });
    check_edit("duplicate metadata key 'general.name'", [](lt::GGUFWriter& w) { w.str("general.name", "again"); });
    check_edit("general.alignment = 48 is not a power of two", [](lt::GGUFWriter& w) { w.u32("general.alignment", 48); });
    check_edit("'general.alignment' = 0 is out of range", [](lt::GGUFWriter& w) { w.u32("general.alignment", 0); });
    check_edit("'general.alignment' has type string", [](lt::GGUFWriter& w) { w.str("general.alignment", "32"); });
    // tensor infos
    check_edit("unsupported tensor type Q2_K (id 10) for tensor 'blk.0.attn_q.weight' (supported: F32, F16, BF16, "
               "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
               [](lt::GGUFWriter& w) { tensor_named(w, "blk.0.attn_q.weight")->type = 10; });
    // k-quant super-blocks are 256 elements: a 64-wide row cannot hold one (llama.cpp falls back to Q5_0 there)
    check_edit("tensor 'blk.0.attn_q.weight' is Q4_K but its row length 64 is not a multiple of 256",
               [](lt::GGUFWriter& w) { tensor_named(w, "blk.0.attn_q.weight")->type = 12; });
    check_edit("unsupported tensor type unknown (id 99) for tensor 'output.weight'",
               [](lt::GGUFWriter& w) { tensor_named(w, "output.weight")->type = 99; });
    check_edit("tensor 'blk.1.ffn_up.weight' has 5 dimensions",
               [](lt::GGUFWriter& w) { tensor_named(w, "blk.1.ffn_up.weight")->ne = {64, 96, 1, 1, 1}; });
    check_edit("tensor 'blk.1.ffn_up.weight' dimension 1 is 0",
               [](lt::GGUFWriter& w) { tensor_named(w, "blk.1.ffn_up.weight")->ne = {64, 0}; });
    check_edit("size overflow computing size of tensor 'blk.0.attn_v.weight'",
               [](lt::GGUFWriter& w) { tensor_named(w, "blk.0.attn_v.weight")->ne = {1ull << 40, 1ull << 40}; });
    check_edit("size overflow", [](lt::GGUFWriter& w) { tensor_named(w, "blk.0.attn_v.weight")->ne = {1ull << 62, 2}; });
    check_edit("dimension 0 is 18446744073709551615",
               [](lt::GGUFWriter& w) { tensor_named(w, "blk.0.attn_v.weight")->ne = {~0ull, 2}; });
    check_edit("tensor 'token_embd.weight' is Q8_0 but its row length 48 is not a multiple of 32", [](lt::GGUFWriter& w) {
        auto* t = tensor_named(w, "token_embd.weight");
        t->type = lt::GT_Q8_0;
        t->ne = {48, 40};
    });
    check_edit("tensor 'blk.1.attn_output.weight' data [", [](lt::GGUFWriter& w) {
        tensor_named(w, "blk.1.attn_output.weight")->set_offset(1ll << 40);
    });
    check_edit("extends past the end of the file", [](lt::GGUFWriter& w) {
        tensor_named(w, "blk.1.attn_output.weight")->set_offset(1ll << 40);
    });
    check_edit("size overflow computing data range of tensor 'output_norm.weight'", [](lt::GGUFWriter& w) {
        tensor_named(w, "output_norm.weight")->set_offset(~0ull - 31);  // 2^64 - 32: aligned, overflows
    });
    check_edit("data offset 4 is not a multiple of the alignment 32",
               [](lt::GGUFWriter& w) { tensor_named(w, "output_norm.weight")->set_offset(4); });
    check_edit("overlap", [](lt::GGUFWriter& w) { tensor_named(w, "output_norm.weight")->set_offset(0); });
    check_edit("duplicate tensor name 'blk.0.attn_q.weight'", [](lt::GGUFWriter& w) {
        tensor_named(w, "blk.0.attn_k.weight")->name = "blk.0.attn_q.weight";
    });
    // missing / wrong tensors
    auto drop = [](const char* name) {
        return [name](lt::GGUFWriter& w) {
            for (size_t i = 0; i < w.tensors.size(); i++)
                if (w.tensors[i].name == name) w.tensors.erase(w.tensors.begin() + i);
        };
    };
    check_edit("missing tensor 'blk.1.ffn_up.weight' (layer 1 w_up)", drop("blk.1.ffn_up.weight"));
    check_edit("missing tensor 'output_norm.weight' (output norm)", drop("output_norm.weight"));
    check_edit("missing tensor 'token_embd.weight'", drop("token_embd.weight"));
    check_edit("tensor 'blk.0.attn_k.weight' (layer 0 wk) has shape [64, 64], expected [32, 64]", [](lt::GGUFWriter& w) {
        auto* t = tensor_named(w, "blk.0.attn_k.weight");
        t->ne = {64, 64};
        t->data = lt::random_data(lt::GT_F32, 64 * 64, 9);
    });
    check_edit("tensor 'blk.1.ffn_norm.weight' (layer 1 ffn_norm) has shape [32, 2], expected [64]", [](lt::GGUFWriter& w) {
        tensor_named(w, "blk.1.ffn_norm.weight")->ne = {2, 32};
    });
    check_edit("tensor 'output.weight' (lm_head) has shape [39, 64]", [](lt::GGUFWriter& w) {
        auto* t = tensor_named(w, "output.weight");
        t->ne = {64, 39};
        t->data.resize(64 * 39 * 4);
    });
    check_edit("'blk.2.attn_q.weight' belongs to layer 2 but block_count is 2",
               [](lt::GGUFWriter& w) { w.tensor("blk.2.attn_q.weight", {64, 64}, lt::GT_F32, lt::random_data(0, 4096, 3)); });
    check_edit("bias tensors are not supported",
               [](lt::GGUFWriter& w) { w.tensor("blk.0.attn_q.bias", {64}, lt::GT_F32, lt::random_data(0, 64, 3)); });
    check_edit("unsupported tensor type I32 (id 26) for tensor 'blk.0.ffn_gate.weight'",
               [](lt::GGUFWriter& w) { tensor_named(w, "blk.0.ffn_gate.weight")->type = 26; });
    // config keys
    check_meta("missing metadata key 'llama.block_count'", [&](lt::GGUFWriter& w) { base_meta(w, "llama.block_count"); });
    check_meta("missing metadata key 'general.architecture'", [&](lt::GGUFWriter& w) { base_meta(w, "general.architecture"); });
    check_meta("architecture 'gpt2' is not supported", [&](lt::GGUFWriter& w) { base_meta(w, "", "gpt2"); });
    // qwen2: the tiny llama's tensors lack the q/k/v biases; a bias of the wrong length
    check_meta("missing tensor 'blk.0.attn_q.bias' (layer 0 bq)", [&](lt::GGUFWriter& w) { base_meta(w, "", "qwen2"); });
    {
        lt::GGUFWriter w = tiny_with_meta([&](lt::GGUFWriter& m) { base_meta(m, "", "qwen2"); });
        for (int l = 0; l < 2; l++) {
            std::string b = "blk." + std::to_string(l) + ".";
            w.tensor(b + "attn_q.bias", {64}, lt::GT_F32, lt::random_data(0, 64, 3));
            w.tensor(b + "attn_k.bias", {(uint64_t)(l ? 32 : 64)}, lt::GT_F32, lt::random_data(0, l ? 32 : 64, 3));
            w.tensor(b + "attn_v.bias", {32}, lt::GT_F32, lt::random_data(0, 32, 3));
        }
        std::string p = tmp / "qwen2_bias_shape.gguf";
        lt::write_bytes(p, w.build());
        expect_error(p, "tensor 'blk.0.attn_k.bias' (bk) has shape [64], expected [32]");
    }
    check_meta("'llama.block_count' has type string, expected an integer", [&](lt::GGUFWriter& w) {
        base_meta(w, "llama.block_count");
        w.str("llama.block_count", "2");
    });
    check_meta("'llama.attention.head_count' = 0 is out of range", [&](lt::GGUFWriter& w) {
        base_meta(w, "llama.attention.head_count");
        w.u32("llama.attention.head_count", 0);
    });
    check_meta("n_heads = 4 is not a multiple of n_kv_heads = 3", [&](lt::GGUFWriter& w) {
        base_meta(w, "llama.attention.head_count_kv");
        w.u32("llama.attention.head_count_kv", 3);
    });
    check_meta("embedding_length 64 is not a multiple of head_count 5", [&](lt::GGUFWriter& w) {
        base_meta(w, "llama.attention.head_count");
        w.u32("llama.attention.head_count", 5);
    });
    check_meta("partial rotary embeddings are not supported", [&](lt::GGUFWriter& w) {
        base_meta(w, "");
        w.u32("llama.rope.dimension_count", 8);
    });
    check_meta("rope_theta = 0", [&](lt::GGUFWriter& w) {
        base_meta(w, "");
        w.f32("llama.rope.freq_base", 0.0f);
    });
    check_meta("rms_eps = nan", [&](lt::GGUFWriter& w) {
        base_meta(w, "");
        w.f32("llama.attention.layer_norm_rms_epsilon", NAN);
    });
    check_meta("rope scaling type 'yarn'", [&](lt::GGUFWriter& w) {
        base_meta(w, "");
        w.str("llama.rope.scaling.type", "yarn");
    });
    // tokenizer metadata
    auto with_tok = [&](const std::function<void(lt::GGUFWriter&)>& f) {
        return [&, f](lt::GGUFWriter& w) {
            base_meta(w, "");
            f(w);
        };
    };
    std::vector<std::string> toks;
    for (int i = 0; i < 40; i++) toks.push_back("t" + std::to_string(i));
    check_meta("unsupported tokenizer model 'bert'", with_tok([&](lt::GGUFWriter& w) {
        w.str("tokenizer.ggml.model", "bert");
        w.str_array("tokenizer.ggml.tokens", toks);
    }));
    check_meta("tokenizer.ggml.tokens is missing", with_tok([&](lt::GGUFWriter& w) { w.str("tokenizer.ggml.model", "llama"); }));
    check_meta("tokenizer.ggml.scores has 3 entries, expected 40", with_tok([&](lt::GGUFWriter& w) {
        w.str("tokenizer.ggml.model", "llama");
        w.str_array("tokenizer.ggml.tokens", toks);
        w.f32_array("tokenizer.ggml.scores", {1, 2, 3});
    }));
    check_meta("tokenizer.ggml.bos_token_id = 40 is out of range", with_tok([&](lt::GGUFWriter& w) {
        w.str("tokenizer.ggml.model", "llama");
        w.str_array("tokenizer.ggml.tokens", toks);
        w.u32("tokenizer.ggml.bos_token_id", 40);
    }));
    check_meta("without tokenizer.ggml.merges", with_tok([&](lt::GGUFWriter& w) {
        w.str("tokenizer.ggml.model", "gpt2");
        w.str_array("tokenizer.ggml.tokens", toks);
    }));
    check_meta("tokenizer has 41 tokens but the model's vocabulary (token_embd rows) is 40", with_tok([&](lt::GGUFWriter& w) {
        std::vector<std::string> more = toks;
        more.push_back("extra");
        w.str("tokenizer.ggml.model", "llama");
        w.str_array("tokenizer.ggml.tokens", more);
    }));
    check_meta("'tokenizer.ggml.tokens' is an array of f32, expected an array of string", with_tok([&](lt::GGUFWriter& w) {
        w.str("tokenizer.ggml.model", "llama");
        w.f32_array("tokenizer.ggml.tokens", {1, 2});
    }));
    check_meta("token_type[0] = 9", with_tok([&](lt::GGUFWriter& w) {
        w.str("tokenizer.ggml.model", "llama");
        w.str_array("tokenizer.ggml.tokens", toks);
        std::vector<int32_t> ty(40, 1);
        ty[0] = 9;
        w.i32_array("tokenizer.ggml.token_type", ty);
    }));
    // rope_freqs that is not Llama-3 scaling
    check_edit("rope_freqs.weight[0] = 2", [](lt::GGUFWriter& w) {
        std::vector<uint8_t> d(8 * 4);
        for (int i = 0; i < 8; i++) {
            float v = 2.0f;
            memcpy(d.data() + 4 * i, &v, 4);
        }
        w.tensor("rope_freqs.weight", {8}, lt::GT_F32, d);
    });
    check_edit("rope_freqs.weight is F32 [4], expected F32 with 8 elements",
               [](lt::GGUFWriter& w) { w.tensor("rope_freqs.weight", {4}, lt::GT_F32, lt::random_data(0, 4, 1)); });
}

static void test_llama2c(const lt::TempDir& tmp) {
    std::string src = lt::data_models() + "/stories260K.bin";
    std::vector<uint8_t> orig = lt::read_bytes(src);
    std::vector<uint64_t> cuts;
    for (int k = 0; k < 64; k++) cuts.push_back(orig.size() * k / 64);
    for (uint64_t c : {1, 4, 27, 28, 29}) cuts.push_back(c);
    cuts.push_back(orig.size() - 1);
    check_truncations(src, tmp / "stories_cut.bin", cuts, "bytes", 8);
    // the wrong-size message names both sizes
    lt::write_bytes(tmp / "short.bin", orig.data(), orig.size() - 4);
    expect_error(tmp / "short.bin", "has 1056536 bytes, expected 1056540");
    std::vector<uint8_t> longer = orig;
    longer.resize(orig.size() + 4);
    lt::write_bytes(tmp / "long.bin", longer);
    expect_error(tmp / "long.bin", "has 1056544 bytes, expected 1056540");
    int n = 0;
    auto header = [&](int field, int32_t value, const char* needle) {
        std::vector<uint8_t> b = orig;
        memcpy(b.data() + 4 * field, &value, 4);
        std::string p = tmp / ("hdr" + std::to_string(n++) + ".bin");
        lt::write_bytes(p, b);
        expect_error(p, needle);
    };
    header(0, 0, "header field dim = 0 is invalid");
    header(2, -5, "header field n_layers = -5 is invalid");
    header(5, INT32_MIN, "vocab_size = -2147483648 is invalid");
    header(3, 7, "dim 64 is not a multiple of n_heads 7");
    header(4, 3, "n_heads = 8 is not a multiple of n_kv_heads = 3");
    header(0, 1 << 24, "expected");  // huge dim: sizes computed without overflow, then wrong size
    header(1, 1 << 24, "bytes, expected");
    header(5, -512, "expected 1187612");  // negative vocab: a classifier should follow
    header(3, 64, "head_dim = 1 must be even");
    {
        std::vector<uint8_t> b = orig;
        memcpy(b.data(), "ak42", 4);
        std::string p = tmp / "v1.bin";
        lt::write_bytes(p, b);
        expect_error(p, "version-1/2 export");
    }
    lt::write_text(tmp / "hello.txt", "hello world, this is not a model at all\n");
    expect_error(tmp / "hello.txt", "is this a llama2.c .bin file?");
    lt::write_text(tmp / "tiny.bin", "abc");
    expect_error(tmp / "tiny.bin", "too small for the 28-byte header");
}

// ---- safetensors ----
using lt::StT;
using lt::st_build;
using lt::tiny_hf_tensors;
static const std::string kTinyConfig = lt::tiny_hf_config();

static std::string make_hf(const lt::TempDir& tmp, const std::string& name, const std::vector<uint8_t>& st,
                           const std::string& config = kTinyConfig) {
    std::string dir = tmp / name;
    mkdir(dir.c_str(), 0755);
    lt::write_text(dir + "/config.json", config);
    lt::write_bytes(dir + "/model.safetensors", st);
    return dir;
}

static std::string replace(std::string s, const std::string& from, const std::string& to) {
    size_t p = s.find(from);
    if (p == std::string::npos) {
        fprintf(stderr, "replace: '%s' not found\n", from.c_str());
        exit(2);
    }
    return s.replace(p, from.size(), to);
}

static void test_safetensors(const lt::TempDir& tmp) {
    std::vector<StT> good = tiny_hf_tensors();
    std::string ok_dir = make_hf(tmp, "hf_ok", st_build(good));
    try {
        auto m = load_model(ok_dir);
        CHECK(m->config.n_layers == 2 && m->config.tied_embeddings, "the unmodified tiny HF checkpoint loads");
    } catch (const Error& e) {
        CHECK(false, "tiny HF checkpoint: %s", e.what());
    }
    int n = 0;
    auto st_case = [&](const char* needle, const std::function<void(std::vector<StT>&)>& edit) {
        std::vector<StT> ts = good;
        edit(ts);
        expect_error(make_hf(tmp, "hf" + std::to_string(n++), st_build(ts)), needle);
    };
    auto header_case = [&](const char* needle, const std::string& header) {
        expect_error(make_hf(tmp, "hf" + std::to_string(n++), st_build(good, header)), needle);
    };
    auto config_case = [&](const char* needle, const std::string& config) {
        expect_error(make_hf(tmp, "hf" + std::to_string(n++), st_build(good), config), needle);
    };
    auto find = [](std::vector<StT>& ts, const std::string& name) -> StT& {
        for (auto& t : ts)
            if (t.name == name) return t;
        fprintf(stderr, "no %s\n", name.c_str());
        exit(2);
    };
    // header / tensor entries
    st_case("unsupported dtype 'I64'", [&](auto& ts) { find(ts, "model.norm.weight").dtype = "I64"; });
    st_case("shape[0] = -64 is negative", [&](auto& ts) { find(ts, "model.norm.weight").shape = {-64}; });
    st_case("5 dimensions, at most 4", [&](auto& ts) { find(ts, "model.norm.weight").shape = {1, 1, 1, 1, 64}; });
    st_case("size overflow", [&](auto& ts) { find(ts, "model.norm.weight").shape = {1ll << 40, 1ll << 40}; });
    st_case("hold 256 bytes, but F32 [65] needs 260", [&](auto& ts) { find(ts, "model.norm.weight").shape = {65}; });
    st_case("data_offsets must be an array of 2 integers",
            [&](auto& ts) { find(ts, "model.norm.weight").offsets_override = "[0]"; });
    st_case("are not an increasing pair", [&](auto& ts) { find(ts, "model.norm.weight").offsets_override = "[300,44]"; });
    st_case("extends past the", [&](auto& ts) { find(ts, "model.norm.weight").offsets_override = "[10000000,10000256]"; });
    st_case("overlap", [&](auto& ts) { find(ts, "model.norm.weight").offsets_override = "[0,256]"; });
    st_case("data_offsets[0]: expected an integer, found string",
            [&](auto& ts) { find(ts, "model.norm.weight").offsets_override = "[\"0\",256]"; });
    st_case("missing tensor 'model.layers.1.mlp.up_proj.weight' (layer 1 w_up)", [&](auto& ts) {
        ts.erase(std::remove_if(ts.begin(), ts.end(), [](const StT& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; }),
                 ts.end());
    });
    st_case("'model.layers.0.self_attn.k_proj.weight' (layer 0 wk) has shape [64, 32], expected [32, 64]",
            [&](auto& ts) { find(ts, "model.layers.0.self_attn.k_proj.weight").shape = {64, 32}; });
    st_case("belongs to layer 7", [&](auto& ts) {
        StT t = find(ts, "model.norm.weight");
        t.name = "model.layers.7.input_layernorm.weight";
        ts.push_back(t);
    });
    st_case("bias tensors are not supported", [&](auto& ts) {
        StT t = find(ts, "model.norm.weight");
        t.name = "model.layers.0.self_attn.q_proj.bias";
        ts.push_back(t);
    });
    header_case("(safetensors header): invalid JSON at line 1, column 10", "{\"a\": [1,}");
    header_case("(safetensors header): expected a JSON object, found array", "[1, 2]");
    header_case("__metadata__ must be an object", "{\"__metadata__\": 5}");
    header_case("tensor 'x': expected an object", "{\"x\": 5}");
    header_case("missing key 'dtype'", "{\"x\": {\"shape\": [1], \"data_offsets\": [0, 4]}}");
    header_case("invalid UTF-8", "{\"x\xff\": 1}");
    // file-level corruption of the safetensors container
    std::vector<uint8_t> file = st_build(good);
    {
        std::vector<uint8_t> b = file;
        uint64_t huge = 1ull << 50;
        memcpy(b.data(), &huge, 8);
        expect_error(make_hf(tmp, "hf" + std::to_string(n++), b), "header length 1125899906842624 exceeds");
        b = file;
        uint64_t zero = 0;
        memcpy(b.data(), &zero, 8);
        expect_error(make_hf(tmp, "hf" + std::to_string(n++), b), "header length 0 is too small");
    }
    {
        // truncations: 64 cuts over the header, some in the data
        uint64_t hdr;
        memcpy(&hdr, file.data(), 8);
        hdr += 8;
        std::string dir = make_hf(tmp, "hf_cut", file);
        std::vector<uint64_t> cuts = cut_points(hdr, file.size(), 8);
        std::string st = dir + "/model.safetensors";
        std::sort(cuts.begin(), cuts.end());
        for (auto it = cuts.rbegin(); it != cuts.rend(); ++it) {
            truncate_to(st, *it);
            const char* want = *it < 8 ? "truncated" : *it < hdr ? "exceeds the" : "extends past the";
            CHECK_THROWS(load_model(dir), want);
        }
    }
    // random mutations of the header bytes
    {
        std::mt19937 rng(99);
        uint64_t hdr;
        memcpy(&hdr, file.data(), 8);
        std::string dir = make_hf(tmp, "hf_fuzz", file);
        int errors = 0;
        for (int it = 0; it < 400; it++) {
            std::vector<uint8_t> b = file;
            int k = 1 + rng() % 4;
            for (int j = 0; j < k; j++) b[rng() % (8 + hdr)] = (uint8_t)rng();
            lt::write_bytes(dir + "/model.safetensors", b);
            load_survives(dir, &errors);
        }
        printf("safetensors header mutations: 400 files, %d rejected with Error, none crashed\n", errors);
    }
    // config.json
    config_case("config.json: invalid JSON at line 3, column 3", "{\n  \"hidden_size\": 64,\n  ]\n}");
    config_case("config.json: invalid JSON at line 1, column 1: unexpected end of input", "");
    config_case("config.json: missing key 'hidden_size'", replace(kTinyConfig, "\"hidden_size\": 64,", ""));
    config_case("key 'hidden_size': expected an integer, found string at line 3, column 18",
                replace(kTinyConfig, "\"hidden_size\": 64", "\"hidden_size\": \"64\""));
    config_case("key 'num_hidden_layers': -2 is out of range",
                replace(kTinyConfig, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": -2"));
    config_case("model_type 'gpt2' is not supported", replace(kTinyConfig, "\"llama\"", "\"gpt2\""));
    config_case("rope scaling type 'yarn' is not supported",
                replace(kTinyConfig, "\"rope_theta\"", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 2}, \"rope_theta\""));
    config_case("missing tensor 'lm_head.weight'", replace(kTinyConfig, "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false"));
    config_case("n_heads = 4 is not a multiple of n_kv_heads = 3",
                replace(kTinyConfig, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3"));
    config_case("expected a JSON object, found array", "[1]");
    config_case("duplicate key \"hidden_size\"", replace(kTinyConfig, "\"vocab_size\"", "\"hidden_size\": 64, \"vocab_size\""));
    // sharded checkpoints
    {
        std::string dir = tmp / "hf_shard";
        mkdir(dir.c_str(), 0755);
        lt::write_text(dir + "/config.json", kTinyConfig);
        std::vector<StT> a(good.begin(), good.begin() + 10), b(good.begin() + 10, good.end());
        lt::write_bytes(dir + "/a.safetensors", st_build(a));
        lt::write_bytes(dir + "/b.safetensors", st_build(b));
        auto index = [&](const std::string& extra_entry, const std::string& b_name) {
            std::string s = "{\"metadata\": {}, \"weight_map\": {";
            for (size_t i = 0; i < good.size(); i++)
                s += (i ? ", \"" : "\"") + good[i].name + "\": \"" + (i < 10 ? "a.safetensors" : b_name) + "\"";
            return s + extra_entry + "}}";
        };
        std::string idx = dir + "/model.safetensors.index.json";
        lt::write_text(idx, index("", "b.safetensors"));
        try {
            auto m = load_model(dir);
            CHECK(m->tensors.size() == good.size(), "sharded tiny checkpoint loads");
        } catch (const Error& e) {
            CHECK(false, "sharded tiny: %s", e.what());
        }
        lt::write_text(idx, index("", "c.safetensors"));
        expect_error(dir, "shard '" + dir + "/c.safetensors' named in weight_map does not exist", false);
        lt::write_text(idx, index("", "../b.safetensors"));
        expect_error(dir, "is not a plain file name", false);
        lt::write_text(idx, index(", \"model.extra.weight\": \"a.safetensors\"", "b.safetensors"));
        expect_error(dir, "weight_map says tensor 'model.extra.weight' is in 'a.safetensors', but that shard has no such tensor", false);
        lt::write_text(idx, "{\"weight_map\": {}}");
        expect_error(dir, "weight_map is empty", false);
        lt::write_text(idx, "{\"metadata\": {}}");
        expect_error(dir, "model.safetensors.index.json: missing key 'weight_map'", false);
        // the same tensor in two shards
        lt::write_bytes(dir + "/b.safetensors", st_build(std::vector<StT>(good.begin() + 9, good.end())));
        lt::write_text(idx, index("", "b.safetensors"));
        expect_error(dir, "appears twice", false);
    }
    // missing / misplaced files
    {
        std::string dir = tmp / "hf_nocfg";
        mkdir(dir.c_str(), 0755);
        lt::write_bytes(dir + "/model.safetensors", file);
        expect_error(dir, "has no config.json");
        expect_error(dir + "/model.safetensors", "missing " + dir + "/config.json (the model's hyper-parameters)");
        std::string d2 = tmp / "hf_noweights";
        mkdir(d2.c_str(), 0755);
        lt::write_text(d2 + "/config.json", kTinyConfig);
        expect_error(d2, "has neither model.safetensors nor model.safetensors.index.json");
        mkdir((d2 + "/model.safetensors").c_str(), 0755);  // a directory where the file should be
        expect_error(d2, "has neither model.safetensors");
        std::string d3 = tmp / "hf_cfgdir";
        mkdir(d3.c_str(), 0755);
        mkdir((d3 + "/config.json").c_str(), 0755);
        expect_error(d3, "has no config.json");
    }
}

static void test_paths(const lt::TempDir& tmp) {
    expect_error("/nonexistent/model.gguf", "cannot open model '/nonexistent/model.gguf'");
    expect_error(tmp.path, "has no config.json");
    lt::write_bytes(tmp / "empty.gguf", "", 0);
    expect_error(tmp / "empty.gguf", "is empty (0 bytes)");
    lt::write_text(tmp / "notgguf.gguf", "GGML and more bytes");
    expect_error(tmp / "notgguf.gguf", "does not start with the GGUF magic");
    std::string fifo = tmp / "fifo.gguf";
    if (mkfifo(fifo.c_str(), 0644) == 0) expect_error(fifo, "is not a regular file or directory");  // no hang on open
    CHECK_THROWS(load_gguf(tmp.path), "is a directory");
    CHECK_THROWS(load_llama2c(tmp.path), "is a directory");
    CHECK_THROWS(load_safetensors(tmp / "nothing_here"), "missing");
}

static void run_cli_cases() {
    std::string bin = lt::beagle_bin();
    if (access(bin.c_str(), X_OK) != 0) {
        CHECK(false, "%s is not built: cannot run the CLI checks", bin.c_str());
        return;
    }
    int bad = 0;
    for (const CliCase& c : g_cli) {
        std::string err;
        int code = lt::run_beagle("info -m '" + c.path + "'", &err);
        bool loaded_ok = c.needle.empty() && code == 0;  // flipped files may be valid
        bool ok = loaded_ok || (code == 1 && err.rfind("error: ", 0) == 0 && err.find(c.needle) != std::string::npos &&
                                std::count(err.begin(), err.end(), '\n') == 1);
        if (!ok && bad++ < 10)
            fprintf(stderr, "FAIL cli: beagle info -m %s: exit %d, stderr '%s' (want '%s')\n", c.path.c_str(), code,
                    err.c_str(), c.needle.c_str());
    }
    CHECK(bad == 0, "%d of %zu CLI runs did not fail cleanly", bad, g_cli.size());
    printf("CLI: %zu bad files through `beagle info`, all exit 1 with one 'error:' line (or load)\n", g_cli.size());
}

int main() {
    lt::TempDir tmp;
    test_paths(tmp);
    test_gguf_targeted(tmp);
    test_gguf_truncations(tmp);
    test_gguf_flips(tmp);
    test_llama2c(tmp);
    test_safetensors(tmp);
    run_cli_cases();
    return test_summary("test_bad_input");
}
