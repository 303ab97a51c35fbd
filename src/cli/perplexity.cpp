// perplexity.cpp: `beagle perplexity`: a target's perplexity over a text file by llama-perplexity's
// method (src/decode/perplexity.h), printed as llama-perplexity does: a running estimate per chunk,
// then "Final estimate: PPL = X +/- Y"; --json: one JSON object on stdout instead.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../core/threadpool.h"
#include "../decode/perplexity.h"
#include "../decode/session.h"
#include "../io/json_write.h"
#include "args.h"
#include "commands.h"

namespace beagle {

int cmd_perplexity(int argc, char** argv) {
    std::string model, tok_path, file, backend;
    long ctx = 512, batch = 512, threads = default_threads(), chunks = -1;
    bool json = false;
    Args a("perplexity", "-m MODEL -f TEXT [-c N] [-b N] [-t N] [--chunks N] [--json]",
           "Perplexity of a target over a text file, by llama-perplexity's method: the whole text is tokenized\n"
           "(BOS as the tokenizer wants) and cut into chunks of -c tokens; each chunk runs from an empty KV\n"
           "cache with its first token replaced by BOS (when the tokenizer prepends one), and only the second\n"
           "half of each chunk is scored (each scored token sees at least c/2 tokens before it). PPL =\n"
           "exp(mean negative log-likelihood); +/- is llama-perplexity's standard error. The text needs at\n"
           "least 2 x c tokens (as llama-perplexity). Prints a running estimate [chunk]ppl per chunk.");
    a.str("-m,--model", &model, "model: GGUF file, llama2.c .bin, or HF safetensors directory");
    a.str("-z,--tokenizer", &tok_path, "tokenizer file (tokenizer.bin, tokenizer.model, tokenizer.json) if the model has none");
    a.str("-f,--file", &file, "the text to score (UTF-8)");
    a.integer("-c,--ctx-size", &ctx, "tokens per chunk (llama-perplexity's default)");
    a.integer("-b,--batch-size", &batch, "tokens per target forward (at most -c)");
    a.integer("-t,--threads", &threads, "CPU threads");
    a.integer("--chunks", &chunks, "score only the first N chunks (-1 = all)");
    a.flag("--json", &json, "print one JSON object on stdout (the running estimates go to stderr)");
    a.str("--backend", &backend, strfmt("cpu | cuda (default: %s in this build)", default_backend()).c_str());
    if (!a.parse(argc, argv)) return 0;
    if (!a.positional.empty()) fail("beagle perplexity: unexpected argument '%s'", a.positional[0].c_str());
    if (model.empty()) fail("beagle perplexity: -m MODEL is required (see --help)");
    if (file.empty()) fail("beagle perplexity: -f TEXT is required (see --help)");
    if (ctx < 4 || ctx > 65536) fail("beagle perplexity: -c must be in 4..65536, got %ld", ctx);
    if (batch < 1 || batch > 4096) fail("beagle perplexity: -b must be in 1..4096, got %ld", batch);
    if (threads < 1 || threads > 256) fail("beagle perplexity: -t must be in 1..256, got %ld", threads);
    if (chunks == 0 || chunks < -1) fail("beagle perplexity: --chunks must be -1 (all) or >= 1, got %ld", chunks);
    const std::string text = read_file(file);
    if (!backend.empty()) select_backend(backend);

    Session s(model, tok_path, (int)threads, (int)ctx, (int)std::min(batch, ctx));
    const int max_seq = s.mf->config.max_seq;
    if (max_seq > 0 && ctx > max_seq)
        fail("beagle perplexity: -c %ld exceeds the model's context length %d", ctx, max_seq);
    const std::vector<int> tokens = s.tokenize_prompt(text, false, "");
    if ((long)tokens.size() < perplexity_min_tokens((int)ctx))
        fail("beagle perplexity: '%s' is %zu tokens; -c %ld needs at least %ld (two chunks, as llama-perplexity): "
             "give a longer text or a smaller -c", file.c_str(), tokens.size(), ctx, perplexity_min_tokens((int)ctx));
    const int n_chunk_max = (int)(tokens.size() / ctx);
    fprintf(stderr, "perplexity: %zu tokens, %d chunks of %ld, batch %ld, BOS per chunk: %s, first %ld scored positions skipped\n",
            tokens.size(), chunks > 0 ? std::min((int)chunks, n_chunk_max) : n_chunk_max, ctx, std::min(batch, ctx),
            s.tok->spec().prompt_bos() && s.tok->bos() >= 0 ? "yes" : "no", ctx / 2);
    FILE* progress = json ? stderr : stdout;
    const PerplexityResult r = perplexity(s, tokens, (int)ctx, (int)chunks, [&](int c, double ppl) {
        fprintf(progress, "[%d]%.4f,", c + 1, ppl);
        fflush(progress);
    });
    fprintf(progress, "\n");
    const double tok_s = r.seconds > 0 ? (double)r.chunks * r.n_ctx / r.seconds : 0;
    if (!json) {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_stderr);
        fprintf(stderr, "perplexity: %ld tokens scored in %d chunks, %.3f s (%.1f tok/s through the model)\n", r.scored,
                r.chunks, r.seconds, tok_s);
        return 0;
    }
    Json js;
    js["ppl"] = rounded(r.ppl, 6);
    js["stderr"] = rounded(r.ppl_stderr, 6);
    js["nll"] = rounded(r.nll, 9);
    js["chunks"] = r.chunks;
    js["tokens_scored"] = r.scored;
    js["tokens"] = tokens.size();
    js["n_ctx"] = r.n_ctx;
    js["n_batch"] = s.llama->max_batch();
    js["bos_per_chunk"] = r.bos_per_chunk;
    js["seconds"] = rounded(r.seconds, 3);
    js["tok_s"] = rounded(tok_s, 1);
    js["threads"] = threads;
    printf("%s\n", json_text(js).c_str());
    return 0;
}

}  // namespace beagle
