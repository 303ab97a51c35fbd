// gen_options.h: the flags `beagle generate` and `beagle chat` share (model, sampling, context, chat
// template, speculative decoding), their checks, and what both set up from them: the sampling parameters
// and the drafter of the chosen mode (gen_options.cpp).
#pragma once
#include <memory>
#include <string>

#include "../core/threadpool.h"
#include "../decode/drafter.h"
#include "../decode/sampling.h"
#include "../decode/speculative.h"
#include "../decode/session.h"
#include "args.h"
#include "draft_options.h"

namespace beagle {

struct GenOptions {
    std::string model, tok_path, backend, chat_template, system;
    long n_predict = 256, threads = default_threads(), seed = -1, top_k = 0, ctx = 0, batch = 64;
    double temp = 0.8, top_p = 0.9;
    // speculative decoding
    std::string spec, draft, model_draft, total_tokens = "auto";
    long tree_nodes = 0;  // --total-tokens as a number (0: auto)
    long max_tree = 64;
    std::string accept = "exact";  // exact (lossless) | typical (Medusa-2's typical acceptance: lossy)
    DraftOptions d;

    // -m, -z: the target and its tokenizer.
    void declare_model(Args& a);
    // -n (n_help: what it counts), --temp, --top-k, --top-p, -s, -t, -c, -b.
    void declare_sampling(Args& a, const char* n_help);
    // --chat-template, -sys: the chat template's family and system message.
    void declare_template(Args& a);
    // -d, -md, --spec, the drafting flags (DraftOptions), --total-tokens, --no-concat, --max-tree.
    void declare_draft(Args& a);
    // The shared flags' ranges and the speculative mode (spec set from the drafts when not given), checked
    // as `cmd` (e.g. "beagle chat") in the messages. remote: the target is a server's (generate --server);
    // plan: only a memory plan is printed (generate --plan: a mode needs no draft file). -n is the command's.
    void check(const char* cmd, bool remote, bool plan);
    bool uses_draft() const { return spec == "chain" || spec == "tree" || spec == "hybrid" || spec == "auto"; }
};

// --temp, --top-k, --top-p and --seed (-1: from the clock).
SamplingParams sampling_params(const GenOptions& o);
// The speculative engine's acceptance rule from --accept (exact: the default, lossless).
Acceptance acceptance(const GenOptions& o);

// The drafter for o.spec (lookup, chain, tree, hybrid or auto; not none) on the session's target, from -d
// or -md. --total-tokens auto: the verify cost is measured here first (lookup, tree, hybrid, auto: each round
// sends what pays for its cost), each verify also costing round_trip_s (a remote target's round trip).
// Raises *max_tree to hold the largest tree a drafter sends.
std::unique_ptr<Drafter> set_up_drafter(Session& s, const GenOptions& o, int* max_tree, double round_trip_s = 0);

}  // namespace beagle
