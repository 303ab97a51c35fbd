// beagle_drafter.h: drafting with a Beagle draft model (beagle_drafter.cpp): chain, EAGLE-2 dynamic
// tree, or the tree with prompt-lookup candidates merged in (hybrid). Its settings, BeagleDraftParams,
// are every mode's settings for make_drafter (drafters.h), which sets this drafter up.
#pragma once
#include <algorithm>
#include <cstdint>
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
    int threads = -1;        // CPU backend: threads of the draft's forwards. N > 0: a pool of its own; 0: the
                             // target's pool; -1: the target's pool on one thread or on all of them, whichever
                             // its forwards measure faster here (DraftPool in beagle_drafter.cpp). Its matmuls
                             // are small (a few rows of at most 8192 x 576): on a quiet 2-core machine two
                             // threads draft 1.3-1.7x faster than one, under load one is 4-10x faster
    // Non-empty (--total-tokens auto): verify_cost[T] = cost of verifying T tokens in decode steps
    // (measure_verify_cost). Each round then keeps the best-ranked n candidates that maximise the
    // expected tokens per unit of cost, (1 + a sum_{i<n} exp(score_i)) / verify_cost[n + 1], with
    // a the draft's calibration (accepted / predicted, learnt online); n = 0 is a plain decode
    // step. Depths whose frontier cannot pay for a node are not expanded. total_tokens is ignored.
    std::vector<double> verify_cost;
    double auto_draft_cost = -1;  // mode auto (auto_drafter.h): a draft round's drafting cost in decode steps;
                                  // < 0: measured each round (tests fix it to make the choices reproducible)
};

// --draft-threads -1: the draft's forwards run on the target's pool, on one thread (the caller, no
// barrier) or on all of them (split rows, a barrier per op), whichever is faster on this machine now.
// A draft forward is small (a chain step: one query through 3.5 M weights and an 8192-row head), so
// the split gains little and a barrier on a busy machine (a descheduled worker) costs milliseconds.
// Measured, not guessed: the first 8 rounds that run the draft alternate between the two; then the
// faster by seconds per draft forward (running means of the first 8, then weight 1/8) is kept, and the
// other is tried again every 32 rounds. The choice changes no result: the split is static and every
// row is computed the same way whoever computes it.
struct DraftPool {
    static constexpr int WARM = 4, PROBE_EVERY = 32;
    double sec[2] = {0, 0};  // mean seconds per draft forward: [0] one thread, [1] all
    int n[2] = {0, 0}, rounds = 0;
    int pick() const {  // 0: one thread, 1: all
        if (n[0] < WARM || n[1] < WARM) return rounds % 2;
        const int best = sec[0] <= sec[1] ? 0 : 1;
        return rounds % PROBE_EVERY == PROBE_EVERY - 1 ? 1 - best : best;
    }
    void observe(int which, double seconds, int64_t forwards) {
        if (forwards <= 0) return;  // a hybrid round that sent a lookup match alone
        const double x = seconds / (double)forwards;
        n[which]++;
        sec[which] += (x - sec[which]) / std::min(n[which], 2 * WARM);
        rounds++;
    }
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
