// beagle_drafter.h: drafting with a Beagle draft model (beagle_drafter.cpp): chain, EAGLE-2 dynamic
// tree, or the tree with prompt-lookup candidates merged in (hybrid). Its settings, BeagleDraftParams,
// are every mode's settings for make_drafter (drafters.h), which sets this drafter up.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "drafter.h"
#include "round_policy.h"
#include "session.h"

namespace beagle {

struct BeagleDraftParams {
    bool tree = true;        // false: chain
    int gamma = 5;           // chain length (and prompt lookup's)
    int depth = 5, topk = 10, total_tokens = 60;  // EAGLE-2 dynamic tree
    bool concat = true;      // draft keys: true states + own predictions (false: true states only)
    int true_window = -1;    // queries see the last this many true states (Draft::set_true_window); -1: the
                             // draft's training sequence length (draft_trained_seq_len; all if not recorded); 0: all
    int lookup_ngram = 0;    // tree only, > 0 (hybrid): the prompt-lookup continuation of the context's last
                             // n-gram (n <= lookup_ngram) joins the candidates, valued by its learnt rates
                             // (make_drafter: the n-gram of modes lookup and hybrid)
    double lookup_skip = 0.5;  // hybrid: a match whose first token's learnt acceptance rate is at least this
                               // is sent alone, without running the draft (> 1: always run the draft)
    bool q8 = true;          // draft matrices from a Q8_0 copy (Draft::use_q8_weights); false: the f32 weights
    bool tree_on_backend = true;  // greedy tree of a Beagle draft: the working tree stays on the backend between
                                  // depths (one sync per round, Draft::tree_expand); false: the host loop (one per
                                  // depth), the reference the tests compare it with. EAGLE drafts use the host loop
    bool chain_on_backend = true;  // sampled chain (Beagle or EAGLE draft): each step's row warped and drawn on the
                                   // backend (Draft::sample_ids, one sync per round for its ids); false: the host
                                   // loop (one sync per step), the reference the tests compare it with
    int threads = -1;        // CPU backend: threads of the draft's forwards. N > 0: a pool of its own; 0: the
                             // target's pool; -1: the target's pool on one thread or on all of them, whichever
                             // its forwards measure faster here (the round policy, round_policy.h). Its matmuls
                             // are small (a few rows of at most 8192 x 576): on a quiet 2-core machine two
                             // threads draft faster than one, under load one thread is much faster
    // Non-empty (--total-tokens auto): verify_cost[T] = cost of verifying T tokens in decode steps
    // (measure_verify_cost), the start of the round policy's cost model. Each round then keeps the
    // best-ranked n candidates that maximise the expected tokens per unit of cost,
    // (1 + a sum_{i<n} exp(score_i)) / cost[n + 1], with a the draft's calibration (accepted /
    // predicted, the policy's; best_prefix in verify_cost.h); n = 0 is a plain decode step. Depths whose frontier cannot pay for a node are not
    // expanded, and the depth itself is the policy's choice among 1, 2 and depth. total_tokens is ignored.
    std::vector<double> verify_cost;
    double auto_draft_cost = -1;  // >= 0: the round policy counts a draft round's drafting as this many decode
                                  // steps instead of its measured time, and a draft model's tree nodes pay
                                  // for no draft row (tests: reproducible choices)
};

// The predicted keys a BeagleDrafter's Draft keeps at most in one round (tree: the root's child plus
// topk per deeper level; chain: gamma), at least 1. Its Draft is built with max_pred + 1 and
// max(topk, 1) queries; `generate --plan` sizes the same buffers from it.
inline int beagle_max_pred(bool tree, int gamma, int depth, int topk) {
    return std::max(tree ? 1 + topk * std::max(0, depth - 1) : gamma, 1);
}
// The settings every model-backed drafter takes checked (depth, topk, gamma, total_tokens, the verify cost
// table); throws Error naming the flag.
void check_draft_params(const BeagleDraftParams& p);
// `policy` if given (a drafter under mode auto's switch, *owner as given); else a round policy of the
// drafter's own from p.verify_cost and p.auto_draft_cost, which it owns (*owner true).
std::shared_ptr<RoundPolicy> policy_or_own(const BeagleDraftParams& p, std::shared_ptr<RoundPolicy> policy, bool* owner);

struct DraftWeights;
struct DraftFrozen;
// w's config must fit the session's target and fz be the target's (make_drafter does both). policy:
// the round policy to follow (null: its own, from p.verify_cost and p.auto_draft_cost); owner false:
// another drafter (mode auto's switch) owns the rounds, this one neither chooses nor reports them.
std::unique_ptr<Drafter> make_beagle_drafter(const DraftWeights& w, const DraftFrozen& fz, Session& s,
                                             const BeagleDraftParams& p, std::shared_ptr<RoundPolicy> policy = nullptr,
                                             bool owner = true);

}  // namespace beagle
