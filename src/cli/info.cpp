// info.cpp: `beagle info -m MODEL [-z TOKENIZER]`: prints a model file's format, config, every
// stored tensor (name, dtype, shape, bytes), its metadata and tokenizer facts (or a draft file's, or a
// training checkpoint's run and state). A debug option
// dumps tensors dequantized to raw f32 (used by test/oracles/test_loaders_gguf.py against the gguf package).
#include <cstdio>
#include <cstring>
#include <vector>

#include "../core/common.h"
#include "../io/model_file.h"
#include "../model/draft.h"
#include "../train/checkpoint.h"
#include "args.h"
#include "commands.h"

namespace beagle {

static const char* kind_name(TokenizerSpec::Kind k) {
    switch (k) {
        case TokenizerSpec::NONE: return "none";
        case TokenizerSpec::BPE_BYTELEVEL: return "bpe_bytelevel";
        case TokenizerSpec::SPM: return "spm";
    }
    return "?";
}

static std::string shown(const std::string& s, size_t max_len) {
    std::string out = "\"";
    for (size_t i = 0; i < s.size() && i < max_len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') out += "\\n";
        else if (c == '"' || c == '\\') out += std::string("\\") + (char)c;
        else if (c < 0x20 || c == 0x7F) out += strfmt("\\x%02x", c);
        else out += (char)c;
    }
    out += "\"";
    if (s.size() > max_len) out += "...";
    return out;
}

static void print_tokenizer(const TokenizerSpec& t, const char* from) {
    printf("tokenizer (%s):\n", from);
    printf("  kind              %s\n", kind_name(t.kind));
    if (t.kind == TokenizerSpec::NONE) return;
    printf("  source            %s\n", t.source.c_str());
    printf("  vocab_size        %zu\n", t.tokens.size());
    struct { const char* name; int id; } ids[] = {{"bos", t.bos}, {"eos", t.eos}, {"unk", t.unk}, {"pad", t.pad}, {"eot", t.eot}};
    for (auto& id : ids) {
        if (id.id >= 0 && id.id < (int)t.tokens.size())
            printf("  %-17s %d %s\n", id.name, id.id, shown(t.tokens[id.id], 40).c_str());
        else
            printf("  %-17s %d\n", id.name, id.id);
    }
    printf("  merges            %zu\n", t.merges.size());
    printf("  scores            %zu\n", t.scores.size());
    printf("  token_types       %zu\n", t.types.size());
    printf("  pre               %s\n", t.pre.empty() ? "-" : t.pre.c_str());
    printf("  add_bos           %s\n", t.add_bos ? "true" : "false");
    printf("  add_space_prefix  %s\n", t.add_space_prefix ? "true" : "false");
    printf("  llama2c_spaces    %s\n", t.llama2c_spaces ? "true" : "false");
    if (t.chat_template.empty()) printf("  chat_template     -\n");
    else printf("  chat_template     %zu bytes: %s\n", t.chat_template.size(), shown(t.chat_template, 60).c_str());
}

// Dequantize the named stored tensors (or all) to f32 and write them back to back to `out`.
static void dump_tensors(const ModelFile& mf, const std::string& names, const std::string& out) {
    std::vector<const Tensor*> list;
    if (names == "all") {
        for (const Tensor& t : mf.tensors) list.push_back(&t);
    } else {
        size_t p = 0;
        while (p <= names.size()) {
            size_t c = names.find(',', p);
            if (c == std::string::npos) c = names.size();
            std::string n = names.substr(p, c - p);
            const Tensor* found = nullptr;
            for (const Tensor& t : mf.tensors)
                if (t.name == n) found = &t;
            if (!found) fail("--dump-tensor: no tensor named '%s' in '%s' (see `beagle info -m ...` for the list)", n.c_str(), mf.path.c_str());
            list.push_back(found);
            p = c + 1;
        }
    }
    bool to_stdout = out == "-";
    FILE* f = to_stdout ? stdout : fopen(out.c_str(), "wb");
    if (!f) fail("cannot create '%s': %s", out.c_str(), strerror(errno));
    std::vector<float> row;
    for (const Tensor* t : list) {
        int64_t cols = t->cols(), rows = t->numel() / (cols ? cols : 1);
        row.resize((size_t)cols);
        for (int64_t r = 0; r < rows && cols > 0; r++) {
            dequantize_row(t->dtype, t->row(r), row.data(), cols);
            if (fwrite(row.data(), 4, (size_t)cols, f) != (size_t)cols) {
                if (!to_stdout) fclose(f);
                fail("write to '%s' failed", out.c_str());
            }
        }
    }
    if ((to_stdout ? fflush(f) : fclose(f)) != 0) fail("cannot finish writing '%s'", out.c_str());
}

// The first 8 bytes of a regular file ("" if it is not one or is shorter): the project's own formats
// (draft "BEAGLEDR", training checkpoint "BEAGLECK") are told apart by them.
static std::string file_magic(const std::string& path) {
    if (!file_exists(path)) return "";  // only regular files: opening a FIFO would block
    const std::string magic = read_file_prefix(path, 8);
    return magic.size() == 8 ? magic : "";
}

// A training checkpoint: the run's config and where it stands (its text lines), and the last step's losses.
static void print_checkpoint(const std::string& path) {
    const Checkpoint c = load_checkpoint(path);
    printf("checkpoint: %s\n", path.c_str());
    printf("format:     Beagle training checkpoint (BEAGLECK v1); `beagle train ... --resume %s` with the run's\n"
           "            flags continues it\n", path.c_str());
    printf("run and state:\n");
    for (const auto& kv : c.kv.items) printf("  %-17s %s\n", kv.first.c_str(), kv.second.c_str());
    printf("history:    %zu steps", c.history.size());
    if (!c.history.empty()) {
        const StepRecord& h = c.history.back();
        printf(", the last: loss %.4f (ce %.4f, vloss %.4f), stage %d", h.loss, h.ce, h.vloss, h.stage);
    }
    printf("\n");
}

// A Beagle draft file: its config, tensors, reduced vocabulary and training metadata.
static void print_draft(const std::string& path) {
    DraftWeights w = load_draft(path);
    const DraftConfig& c = w.cfg;
    printf("draft:   %s\n", path.c_str());
    printf("format:  Beagle draft (BEAGLEDR v1), %s\n",
           c.arch == ARCH_EAGLE    ? "EAGLE-style: fc + one decoder layer (arch eagle)"
           : c.arch == ARCH_MEDUSA ? strfmt("Medusa-1: %d heads on the target's state (arch medusa)", c.medusa_heads).c_str()
           : c.arch == ARCH_MOA    ? "Mixture of Attentions: LSA keys, token self-attention, cross-attention block (arch moa)"
                                   : "one cross-attention block");
    printf("config:\n");
    printf("  dim               %d\n", c.dim);
    printf("  n_heads           %d\n", c.n_heads);
    printf("  n_kv_heads        %d\n", c.n_kv_heads);
    printf("  head_dim          %d\n", c.head_dim);
    printf("  ffn_dim           %d\n", c.ffn_dim);
    printf("  vocab_size        %d\n", c.vocab_size);
    printf("  draft_vocab       %d%s\n", c.head_rows(), c.draft_vocab ? " (reduced, EAGLE-3 style)" : " (the target's)");
    printf("  rope_theta        %.9g\n", c.rope_theta);
    printf("  target_n_layers   %d\n", c.target_n_layers);
    printf("  tokenizer_hash    %016llx\n", (unsigned long long)c.tokenizer_hash);
    printf("tensors:\n");
    int64_t params = 0;
    for (int i = 0; i < DT_COUNT; i++) {
        if (!c.has(i)) continue;
        printf("  %-10s F32  [%lld, %lld]\n", draft_tensor_name(i), (long long)c.rows(i), (long long)c.cols(i));
        params += c.numel(i);
    }
    printf("  parameters        %lld\n", (long long)params);
    if (!w.meta.empty()) printf("metadata:\n");
    for (auto& kv : w.meta) printf("  %-17s %s\n", kv.first.c_str(), kv.second.c_str());
}

int cmd_info(int argc, char** argv) {
    std::string model, tok, dump, out;
    Args a("info", "-m MODEL [-z TOKENIZER]",
           "Print a model's format, config, every stored tensor (name, dtype, shape, bytes), metadata and tokenizer.\n"
           "MODEL is a GGUF file, a llama2.c .bin, or an HF safetensors directory / .safetensors / index.json;\n"
           "for a Beagle draft file (beagle train) it prints the draft's config, tensors and training metadata, for a\n"
           "training checkpoint (train --ckpt-every) the run's config, where it stands and its last losses.");
    a.str("-m,--model", &model, "model file or HF checkpoint directory");
    a.str("-z,--tokenizer", &tok, "tokenizer file (tokenizer.bin, tokenizer.model, tokenizer.json) to describe instead of the model's own");
    a.str("--dump-tensor", &dump,
          "debug: dequantize stored tensors NAME[,NAME...] (or 'all') to f32, write them back to back as raw "
          "little-endian f32 rows (outermost dimension first) to --out, and print nothing else");
    a.str("--out", &out, "debug: output file for --dump-tensor ('-' for stdout)");
    if (!a.parse(argc, argv)) return 0;
    if (model.empty() && a.positional.size() == 1) model = a.positional[0];
    else if (!a.positional.empty()) fail("beagle info: unexpected argument '%s' (see 'beagle info --help')", a.positional[0].c_str());
    if (model.empty()) fail("beagle info: no model given (use -m MODEL; see 'beagle info --help')");
    if (!dump.empty() && out.empty()) fail("beagle info: --dump-tensor needs --out FILE");
    if (dump.empty() && !out.empty()) fail("beagle info: --out is only used with --dump-tensor");

    const std::string magic = dump.empty() ? file_magic(model) : "";
    if (magic == "BEAGLEDR") {
        print_draft(model);
        return 0;
    }
    if (magic == "BEAGLECK") {
        print_checkpoint(model);
        return 0;
    }
    std::unique_ptr<ModelFile> mf = load_model(model);
    if (!dump.empty()) {
        dump_tensors(*mf, dump, out);
        return 0;
    }
    TokenizerSpec extra;
    if (!tok.empty()) extra = load_tokenizer_file(tok);

    const LlamaConfig& c = mf->config;
    printf("model:   %s\n", mf->path.c_str());
    printf("format:  %s\n", mf->format.c_str());
    printf("config:\n");
    printf("  arch              %s\n", c.arch.c_str());
    printf("  dim               %d\n", c.dim);
    printf("  n_layers          %d\n", c.n_layers);
    printf("  n_heads           %d\n", c.n_heads);
    printf("  n_kv_heads        %d\n", c.n_kv_heads);
    printf("  head_dim          %d\n", c.head_dim);
    printf("  ffn_dim           %d\n", c.ffn_dim);
    printf("  vocab_size        %d\n", c.vocab_size);
    printf("  max_seq           %d\n", c.max_seq);
    printf("  rope_theta        %.9g\n", c.rope_theta);
    printf("  rms_eps           %.9g\n", c.rms_eps);
    printf("  tied_embeddings   %s\n", c.tied_embeddings ? "true" : "false");
    printf("  qkv_bias          %s\n", c.qkv_bias ? "true" : "false");
    if (c.sliding_window) printf("  sliding_window    %d\n", c.sliding_window);
    if (c.rope_scaling)
        printf("  rope_scaling      llama3 factor %g low_freq_factor %g high_freq_factor %g original_max_pos %d\n",
               c.rope_factor, c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_orig_max_pos);
    else
        printf("  rope_scaling      none\n");
    uint64_t params = 0, bytes = 0;
    for (const Tensor& t : mf->tensors) {
        params += (uint64_t)t.numel();
        bytes += t.nbytes;
    }
    printf("tensors (%zu; %llu elements, %llu bytes):\n", mf->tensors.size(), (unsigned long long)params,
           (unsigned long long)bytes);
    for (const Tensor& t : mf->tensors)
        printf("  %-40s %-5s %-16s %12llu\n", t.name.c_str(), dtype_name(t.dtype), t.shape_str().c_str(),
               (unsigned long long)t.nbytes);
    printf("metadata (%zu):\n", mf->metadata.size());
    for (const auto& kv : mf->metadata) printf("  %s = %s\n", kv.first.c_str(), kv.second.c_str());
    if (!tok.empty()) print_tokenizer(extra, "from -z");
    else print_tokenizer(mf->tokenizer, "from the model");
    return 0;
}

}  // namespace beagle
