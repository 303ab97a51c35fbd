// beagle_drafter.h: drafting with a Beagle draft model (beagle_drafter.cpp): chain, EAGLE-2 dynamic
// tree, or the tree with prompt-lookup candidates merged in (hybrid). Its settings, BeagleDraftParams,
// are every mode's settings for make_drafter (drafters.h), which sets this drafter up.
#pragma once
#include <algorithm>
#include <memory>
#include <vector>

#include "drafter.h"
#include "session.h"

namespace beagle {

struct BeagleDraftParams {
    bool tree = true;        // false: chain
    int gamma = 5;           // chain length (and prompt lookup's)
    int depth = 5, topk = 10, total_tokens = 60;  // EAGLE-2 dynamic tree
    bool concat = true;      // draft keys: true states + own predictions (false: true states only)
    int lookup_ngram = 0;    // tree only, > 0 (hybrid): the prompt-lookup continuation of the context's last
                             // n-gram (n <= lookup_ngram) joins the candidates, valued by its learnt rates
                             // (make_drafter: the n-gram of modes lookup and hybrid)
    double lookup_skip = 0.5;  // hybrid: a match whose first token's learnt acceptance rate is at least this
                               // is sent alone, without running the draft (> 1: always run the draft)
    bool q8 = true;          // draft matrices from a Q8_0 copy (Draft::use_q8_weights); false: the f32 weights
    bool tree_on_backend = true;  // greedy tree of a Beagle draft: the working tree stays on the backend between
                                  // depths (one sync per round, Draft::tree_expand); false: the host loop (one per
                                  // depth), the reference the tests compare it with. EAGLE drafts use the host loop
    int threads = 1;         // CPU backend: threads of the draft's forwards, its own pool (0: the target's pool).
                             // Its matmuls are small (a few rows of at most 8192 x 576), so on 2 cores one
                             // thread without barriers drafts as fast as two, and 4-10x faster under load
    // Non-empty (--total-tokens auto): verify_cost[T] = cost of verifying T tokens in decode steps
    // (measure_verify_cost). Each round then keeps the best-ranked n candidates that maximise the
    // expected tokens per unit of cost, (1 + a sum_{i<n} exp(score_i)) / verify_cost[n + 1], with
    // a the draft's calibration (accepted / predicted, learnt online); n = 0 is a plain decode
    // step. Depths whose frontier cannot pay for a node are not expanded. total_tokens is ignored.
    std::vector<double> verify_cost;
    double auto_draft_cost = -1;  // mode auto (auto_drafter.h): a draft round's drafting cost in decode steps;
                                  // < 0: measured each round (tests fix it to make the choices reproducible)
};

// The predicted keys a BeagleDrafter's Draft keeps at most in one round (tree: the root's child plus
// topk per deeper level; chain: gamma), at least 1. Its Draft is built with max_pred + 1 and
// max(topk, 1) queries; `generate --plan` sizes the same buffers from it.
inline int beagle_max_pred(bool tree, int gamma, int depth, int topk) {
    return std::max(tree ? 1 + topk * std::max(0, depth - 1) : gamma, 1);
}
struct DraftWeights;
struct DraftFrozen;
// w's config must fit the session's target and fz be the target's (make_drafter does both).
std::unique_ptr<Drafter> make_beagle_drafter(const DraftWeights& w, const DraftFrozen& fz, Session& s,
                                             const BeagleDraftParams& p);

}  // namespace beagle
