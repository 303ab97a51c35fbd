// generate.cpp: `beagle generate`: load a target (and later a draft), encode the prompt, prefill,
// then decode token by token, streaming text to stdout; statistics go to stderr (--json: one JSON
// object on stderr's last line).
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "../backend/backend.h"
#include "../backend/ops.h"
#include "../core/common.h"
#include "../core/threadpool.h"
#include "../decode/sampling.h"
#include "../decode/speculative.h"
#include "../model/draft.h"
#include "../serve/remote.h"
#include "../io/model_file.h"
#include "../model/llama.h"
#include "../tokenizer/tokenizer.h"
#include "args.h"
#include "commands.h"
#include "../decode/session.h"

namespace beagle {

int cmd_generate(int argc, char** argv) {
    std::string model, tok_path, prompt, prompt_file, system;
    long n_predict = 256, threads = default_threads(), seed = -1, top_k = 0, ctx = 0, batch = 64;
    double temp = 0.8, top_p = 0.9, lookup_skip = 0.5;
    bool chat = false, json = false, no_stream = false, compare = false;
    std::string spec = "", draft, backend, server;
    long gamma = 5, ngram = 3, max_tree = 64, depth = 5, topk = 10;
    std::string total_tokens = "auto";
    bool no_concat = false;
    bool draft_f32 = false;
    Args a("generate", "-m MODEL [-z TOKENIZER] [-p PROMPT] [options]",
           "Generate text with a Llama-family target. Text goes to stdout, statistics to stderr.");
    a.str("-m,--model", &model, "model: GGUF file, llama2.c .bin, or HF safetensors directory");
    a.str("-z,--tokenizer", &tok_path, "tokenizer file (tokenizer.bin, tokenizer.model, tokenizer.json) if the model has none");
    a.str("-p,--prompt", &prompt, "prompt text (empty: start from BOS)");
    a.str("-f,--file", &prompt_file, "read the prompt from a file");
    a.integer("-n,--n-predict", &n_predict, "number of tokens to generate");
    a.number("--temp,--temperature", &temp, "sampling temperature (0 = greedy)");
    a.integer("--top-k", &top_k, "keep the k most likely tokens (0 = off)");
    a.number("--top-p", &top_p, "nucleus sampling threshold (1 = off)");
    a.integer("-s,--seed", &seed, "RNG seed (-1 = from the clock)");
    a.integer("-t,--threads", &threads, "CPU threads");
    a.integer("-c,--ctx-size", &ctx, "context length (0 = the model's, at most 4096)");
    a.integer("-b,--batch-size", &batch, "prefill chunk size (tokens per target forward)");
    a.flag("--chat", &chat, "wrap the prompt in the model's chat template (ChatML)");
    a.str("--system", &system, "system message for --chat (default: the template's)");
    a.flag("--json", &json, "print statistics as one JSON object on stderr's last line");
    a.flag("--no-stream", &no_stream, "print the text once at the end instead of token by token");
    a.str("-d,--draft", &draft, "Beagle draft weights (enables speculative decoding)");
    a.str("--spec", &spec, "none | lookup | chain | tree | hybrid (default: tree with a draft, else none);\n"
                               "hybrid = tree with the prompt-lookup continuation (--ngram) merged into the candidates");
    a.integer("--gamma", &gamma, "chain and lookup: tokens drafted per round");
    a.integer("--depth", &depth, "tree: draft depth");
    a.integer("--topk", &topk, "tree: children per expanded node and nodes expanded per depth");
    a.str("--total-tokens", &total_tokens, "tree: nodes per verify pass, or 'auto' (per round, as many as pay for their verify cost measured here)");
    a.flag("--no-concat", &no_concat, "draft attends to true states only (not its own predictions)");
    a.flag("--draft-f32", &draft_f32, "draft matrices in f32 as trained (default: a Q8_0 copy, 4x fewer bytes per step)");
    a.integer("--ngram", &ngram, "lookup and hybrid: longest n-gram matched in the context");
    a.number("--lookup-skip", &lookup_skip, "hybrid: send a lookup match alone (no draft forward) when its first token's learnt\n"
             "acceptance rate is at least this (> 1: never)");
    a.integer("--max-tree", &max_tree, "most tokens per verify pass (root included)");
    a.str("--server", &server, "verify on a `beagle serve` at this URL (http://HOST:PORT): the draft (-d) runs here, the\n"
          "target there (client-server speculative decoding; greedy)");
    a.flag("--compare", &compare, "also run plain decoding on the same prompt and report the speedup");
    a.str("--backend", &backend, strfmt("cpu | cuda (default: %s in this build)", default_backend()).c_str());
    if (!a.parse(argc, argv)) return 0;
    if (!a.positional.empty()) fail("beagle generate: unexpected argument '%s'", a.positional[0].c_str());
    if (model.empty()) fail("beagle generate: -m MODEL is required (see --help)");
    if (!prompt_file.empty()) {
        if (!prompt.empty()) fail("beagle generate: give -p or -f, not both");
        prompt = read_file(prompt_file);
    }
    if (n_predict < 0) fail("beagle generate: -n must be >= 0, got %ld", n_predict);
    if (temp < 0) fail("beagle generate: --temp must be >= 0, got %g", temp);
    if (top_k < 0) fail("beagle generate: --top-k must be >= 0, got %ld", top_k);
    if (threads < 1 || threads > 256) fail("beagle generate: -t must be in 1..256, got %ld", threads);
    if (batch < 1 || batch > 4096) fail("beagle generate: -b must be in 1..4096, got %ld", batch);
    if (ctx < 0) fail("beagle generate: -c must be >= 0, got %ld", ctx);
    if (spec.empty()) spec = draft.empty() ? "none" : "tree";
    if (spec != "none" && spec != "lookup" && spec != "chain" && spec != "tree" && spec != "hybrid")
        fail("beagle generate: --spec must be none, lookup, chain, tree or hybrid, got '%s'", spec.c_str());
    if ((spec == "chain" || spec == "tree" || spec == "hybrid") && draft.empty())
        fail("beagle generate: --spec %s needs a draft model (-d DRAFT)", spec.c_str());
    if (gamma < 1 || gamma > 63) fail("beagle generate: --gamma must be in 1..63, got %ld", gamma);
    if (depth < 1 || depth > 32) fail("beagle generate: --depth must be in 1..32, got %ld", depth);
    if (topk < 1 || topk > 64) fail("beagle generate: --topk must be in 1..64, got %ld", topk);
    if (ngram < 1) fail("beagle generate: --ngram must be >= 1, got %ld", ngram);
    if (max_tree < 1 || max_tree > 1024) fail("beagle generate: --max-tree must be in 1..1024, got %ld", max_tree);
    if (!server.empty() && (draft.empty() || spec == "lookup" || spec == "none" || temp != 0 || compare))
        fail("beagle generate: --server needs a draft (-d, --spec tree, chain or hybrid) and --temp 0, without --compare");
    if (!server.empty() && total_tokens == "auto") total_tokens = "60";  // the verify cost is the server's

    if (!backend.empty()) select_backend(backend);
    Session s(model, tok_path, (int)threads, (int)ctx, (int)batch);
    SamplingParams sp;
    sp.temperature = (float)temp;
    sp.top_k = (int)top_k;
    sp.top_p = (float)top_p;
    sp.seed = seed < 0 ? (uint64_t)time(nullptr) : (uint64_t)seed;

    std::vector<int> tokens = s.encode_prompt(prompt, chat, system);
    FILE* stream = no_stream ? nullptr : stdout;
    if (spec == "none") {
        GenStats st;
        std::string text = s.generate_plain(tokens, (int)n_predict, sp, stream, &st);
        if (no_stream) fputs(text.c_str(), stdout);
        fputs("\n", stdout);
        fflush(stdout);
        s.print_stats(st, json);
        return 0;
    }
    std::unique_ptr<Drafter> drafter;
    SpecParams spp;
    spp.max_tree = (int)max_tree;
    DraftWeights dw;
    DraftFrozen fz;
    if (spec == "lookup") {
        std::vector<double> cost;
        if (total_tokens == "auto") {
            cost = measure_verify_cost(s, (int)max_tree, (int)gamma + 1);
            fprintf(stderr, "lookup: --total-tokens auto: each round sends the part of the match worth its verify cost "
                    "(up to --gamma %ld tokens)\n", gamma);
        }
        drafter = make_lookup_drafter((int)ngram, (int)gamma, cost);
    } else {
        dw = load_draft(draft);
        check_draft_fits_target(dw.cfg, s.mf->config, s.tok->spec(), draft);
        fz = frozen_from_target(*s.mf, false);
        BeagleDraftParams bp;
        bp.tree = spec == "tree" || spec == "hybrid";
        bp.lookup_ngram = spec == "hybrid" ? (int)ngram : 0;
        bp.lookup_skip = lookup_skip;
        bp.gamma = (int)gamma;
        bp.depth = (int)depth;
        bp.topk = (int)topk;
        bp.concat = !no_concat;
        bp.q8 = !draft_f32;
        if (total_tokens == "auto" && bp.tree) {
            bp.verify_cost = measure_verify_cost(s, (int)max_tree, (int)depth + 1);
            const std::vector<double>& c = bp.verify_cost;
            fprintf(stderr, "%s: --total-tokens auto: each round keeps the candidates worth their verify cost, up to %d "
                    "tokens (measured here: verifying 2 / 4 / %d tokens costs %.2f / %.2f / %.2f decode steps)\n",
                    spec.c_str(), (int)c.size() - 1, (int)c.size() - 1, c[2], c[std::min<size_t>(4, c.size() - 1)], c.back());
        } else if (total_tokens != "auto") {
            char* end = nullptr;
            long v = strtol(total_tokens.c_str(), &end, 10);
            if (total_tokens.empty() || *end || v < 2 || v > 1024)
                fail("beagle generate: --total-tokens must be 'auto' or an integer in 2..1024, got '%s'", total_tokens.c_str());
            bp.total_tokens = (int)v;
        }
        spp.max_tree = std::max(spp.max_tree, bp.tree ? bp.total_tokens : bp.gamma + 1);
        drafter = make_beagle_drafter(dw, fz, s, bp);
    }
    SpecStats st;
    std::string text = server.empty() ? generate_speculative(s, *drafter, tokens, (int)n_predict, sp, spp, stream, &st)
                                      : generate_remote(s, *drafter, server, tokens, (int)n_predict, spp.max_tree, stream, &st);
    if (no_stream) fputs(text.c_str(), stdout);
    fputs("\n", stdout);
    fflush(stdout);
    double tok_s = st.decode_s > 0 ? st.gen_tokens / st.decode_s : 0;
    fprintf(stderr, "%s: %d tokens in %.3f s (%.1f tok/s), %d target passes, tau %.3f, draft %.1f ms, verify %.1f ms%s%s\n",
            spec.c_str(), st.gen_tokens, st.decode_s, tok_s, st.target_passes, st.tau(), st.draft_s * 1e3,
            st.verify_s * 1e3, st.stopped_eog ? "; stopped at end-of-generation token" : "",
            st.stopped_ctx ? "; stopped: context full" : "");
    std::string js = spec_stats_json(spec.c_str(), st, (int)threads);
    if (compare) {
        GenStats pst;
        s.generate_plain(tokens, (int)n_predict, sp, nullptr, &pst);
        double plain = pst.decode_s > 0 ? pst.gen_tokens / pst.decode_s : 0;
        fprintf(stderr, "plain: %d tokens in %.3f s (%.1f tok/s); speedup %.3fx\n", pst.gen_tokens, pst.decode_s, plain,
                plain > 0 ? tok_s / plain : 0.0);
        js.pop_back();
        js += strfmt(", \"plain_tok_s\": %.3f, \"speedup\": %.4f}", plain, plain > 0 ? tok_s / plain : 0.0);
    }
    if (json) fprintf(stderr, "%s\n", js.c_str());
    return 0;
}

}  // namespace beagle
