// gen_options.cpp: the flags `beagle generate` and `beagle chat` share (gen_options.h): their declarations,
// checks, the sampling parameters and the drafter set-up of the chosen speculative mode.
#include "gen_options.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <vector>

#include "../backend/backend.h"
#include "../core/common.h"
#include "../decode/drafters.h"
#include "../decode/verify_cost.h"
#include "../tokenizer/chat_template.h"

namespace beagle {

void GenOptions::declare_model(Args& a) {
    a.str("-m,--model", &model, "model: GGUF file, llama2.c .bin, or HF safetensors directory");
    a.str("-z,--tokenizer", &tok_path, "tokenizer file (tokenizer.bin, tokenizer.model, tokenizer.json) if the model has none");
    a.str("--backend", &backend, strfmt("cpu | cuda (default: %s in this build)", default_backend()).c_str());
}

void GenOptions::declare_sampling(Args& a, const char* n_help) {
    a.integer("-n,--n-predict", &n_predict, n_help);
    a.number("--temp,--temperature", &temp, "sampling temperature (0 = greedy)");
    a.integer("--top-k", &top_k, "keep the k most likely tokens (0 = off)");
    a.number("--top-p", &top_p, "nucleus sampling threshold (1 = off)");
    a.integer("-s,--seed", &seed, "RNG seed (-1 = from the clock)");
    a.integer("-t,--threads", &threads, "CPU threads");
    a.integer("-c,--ctx-size", &ctx, "context length (0 = the model's, at most 4096)");
    a.integer("-b,--batch-size", &batch, "prefill chunk size (tokens per target forward)");
}

void GenOptions::declare_template(Args& a) {
    a.str("--chat-template", &chat_template, (std::string("the chat template family instead of the file's: ") + chat_family_names() +
          "\n(the file's template, else ChatML when the vocabulary has <|im_start|>; docs/usage.md)").c_str());
    a.str("-sys,--system-prompt,--system", &system, "system message of the chat template (default: the template's, if any)");
}

void GenOptions::declare_draft(Args& a) {
    a.str("-d,--draft", &draft, "Beagle draft weights (enables speculative decoding)");
    a.str("-md,--model-draft", &model_draft, "an independent draft model instead (any model file that loads, with the\n"
          "target's vocabulary: a smaller model of its family); modes chain (its default), tree, auto");
    a.str("--spec", &spec, "none | lookup | chain | tree | hybrid | auto (default: auto with a draft, tree with generate\n"
                           "--server or a numeric --total-tokens, else none); hybrid = tree with the prompt-lookup continuation\n"
                           "(--ngram) merged into the candidates; auto = per round hybrid while the draft pays for its\n"
                           "measured cost here, else cost-aware lookup or a plain step (the statistics count each mode's rounds)");
    d.declare(a);
    a.str("--total-tokens", &total_tokens, "tree: nodes per verify pass, or 'auto' (per round, as many as pay for their verify cost measured here;\n"
          "with generate --server, plus the round trip to it)");
    a.flag("--no-concat", &d.no_concat, "draft attends to true states only (not its own predictions)");
    a.integer("--max-tree", &max_tree, "most tokens per verify pass (root included)");
    a.str("--accept", &accept, "exact | typical: the acceptance rule of speculative sampling. exact (default) is lossless;\n"
          "typical is Medusa-2's typical acceptance, LOSSY: a candidate x passes if p(x) > min(0.09, 0.3 exp(-H(p)))\n"
          "(p the target's distribution at --temp, H its entropy), the token after the accepted path is the target's\n"
          "argmax; the output is no longer distributed as the target's samples. Needs --temp > 0 (at 0 it is greedy)");
}

void GenOptions::check(const char* cmd, bool remote, bool plan) {
    if (model.empty() && !plan) fail("%s: -m MODEL is required (see --help)", cmd);
    if (temp < 0) fail("%s: --temp must be >= 0, got %g", cmd, temp);
    if (top_k < 0) fail("%s: --top-k must be >= 0, got %ld", cmd, top_k);
    if (threads < 1 || threads > 256) fail("%s: -t must be in 1..256, got %ld", cmd, threads);
    if (batch < 1 || batch > 4096) fail("%s: -b must be in 1..4096, got %ld", cmd, batch);
    if (ctx < 0) fail("%s: -c must be >= 0, got %ld", cmd, ctx);
    check_chat_template_name(chat_template);
    const bool has_draft = !draft.empty() || !model_draft.empty();
    if (!draft.empty() && !model_draft.empty()) fail("%s: give a Beagle draft (-d) or a draft model (-md), not both", cmd);
    // auto decides from measured costs; with a fixed tree size or a remote target it would have none. A draft
    // model (-md) chains by default, as llama.cpp's: its forwards cost a fair part of a target step, and a wide
    // tree's draft rows and verify rarely pay for themselves on a CPU (tree and auto measure that)
    if (spec.empty())
        spec = !has_draft ? "none" : !model_draft.empty() ? "chain" : !remote && total_tokens == "auto" ? "auto" : "tree";
    if (spec != "none" && spec != "lookup" && spec != "chain" && spec != "tree" && spec != "hybrid" && spec != "auto")
        fail("%s: --spec must be none, lookup, chain, tree, hybrid or auto, got '%s'", cmd, spec.c_str());
    if (uses_draft() && !has_draft && !plan) fail("%s: --spec %s needs a draft (-d DRAFT or -md MODEL)", cmd, spec.c_str());
    if (!model_draft.empty() && spec != "chain" && spec != "tree" && spec != "auto")
        fail("%s: a draft model (-md) drafts in mode chain, tree or auto, got --spec %s", cmd, spec.c_str());
    if (max_tree < 1 || max_tree > 1024) fail("%s: --max-tree must be in 1..1024, got %ld", cmd, max_tree);
    if (accept != "exact" && accept != "typical") fail("%s: --accept must be exact or typical, got '%s'", cmd, accept.c_str());
    if (accept == "typical" && temp <= 0)
        fail("%s: --accept typical needs --temp > 0 (at temperature 0 only the argmax passes: the greedy rule, the default)", cmd);
    if (accept == "typical" && (spec == "none" || remote))
        fail("%s: --accept typical is a rule of local speculative decoding: it needs --spec other than none and no --server", cmd);
    d.check(cmd);
    if (spec == "auto" && total_tokens != "auto")
        fail("%s: --spec auto chooses from measured costs: it needs --total-tokens auto, got '%s'", cmd, total_tokens.c_str());
    if (uses_draft()) tree_nodes = auto_or_integer(total_tokens, 2, 1024, (std::string(cmd) + ": --total-tokens").c_str());
}

Acceptance acceptance(const GenOptions& o) {
    Acceptance acc;
    if (o.accept == "typical") acc.rule = accept_typical;
    return acc;
}

SamplingParams sampling_params(const GenOptions& o) {
    SamplingParams sp;
    sp.temperature = (float)o.temp;
    sp.top_k = (int)o.top_k;
    sp.top_p = (float)o.top_p;
    sp.seed = o.seed < 0 ? (uint64_t)time(nullptr) : (uint64_t)o.seed;
    return sp;
}

std::unique_ptr<Drafter> set_up_drafter(Session& s, const GenOptions& o, int* max_tree, double round_trip_s) {
    const bool lookup = o.spec == "lookup", tree = o.spec == "tree" || o.spec == "hybrid" || o.spec == "auto";
    DraftWeights w;
    std::shared_ptr<const ModelFile> dm;
    if (!o.model_draft.empty()) dm = load_draft_model_for(s, o.model_draft);
    else if (!lookup) w = load_draft_for(s, o.draft);
    BeagleDraftParams p = o.d.params();
    if (o.tree_nodes > 0) p.total_tokens = (int)o.tree_nodes;
    if (o.total_tokens == "auto" && (lookup || tree)) {
        const long commit = lookup ? o.d.gamma : o.spec == "auto" ? std::max(o.d.depth, o.d.gamma) : o.d.depth;
        p.verify_cost = measure_verify_cost(s, (int)o.max_tree, (int)commit + 1, round_trip_s);
        const std::vector<double>& c = p.verify_cost;
        if (o.spec == "auto")
            fprintf(stderr, "auto: each round runs the draft (hybrid) while its tokens per measured draft + verify cost beat "
                    "those of prompt lookup and plain steps, else prompt lookup or a plain step (measured here: verifying 2 / 4 / %d tokens costs %.2f / %.2f / "
                    "%.2f decode steps)\n", (int)c.size() - 1, c[2], c[std::min<size_t>(4, c.size() - 1)], c.back());
        else if (lookup)
            fprintf(stderr, "lookup: --total-tokens auto: each round sends the part of the match worth its verify cost "
                    "(up to --gamma %ld tokens)\n", o.d.gamma);
        else
            fprintf(stderr, "%s: --total-tokens auto: each round keeps the candidates worth their verify cost, up to %d "
                    "tokens (measured here: verifying 2 / 4 / %d tokens costs %.2f / %.2f / %.2f decode steps)\n",
                    o.spec.c_str(), (int)c.size() - 1, (int)c.size() - 1, c[2], c[std::min<size_t>(4, c.size() - 1)], c.back());
    }
    if (!lookup) *max_tree = std::max(*max_tree, tree ? p.total_tokens : p.gamma + 1);
    return dm ? make_drafter(s, o.spec, p, dm) : make_drafter(s, o.spec, p, &w, o.draft);
}

}  // namespace beagle
