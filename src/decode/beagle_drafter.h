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
                             // its forwards measure faster here (MeasuredChoice below). Its matmuls
                             // are small (a few rows of at most 8192 x 576): on a quiet 2-core machine two
                             // threads draft 1.3-1.7x faster than one, under load one is 4-10x faster
    // Non-empty (--total-tokens auto): verify_cost[T] = cost of verifying T tokens in decode steps
    // (measure_verify_cost). Each round then keeps the best-ranked n candidates that maximise the
    // expected tokens per unit of cost, (1 + a sum_{i<n} exp(score_i)) / (verify_cost[n + 1] + o), with
    // a the draft's calibration (accepted / predicted, learnt online) and o the round's drafting in
    // decode steps (measured; best_prefix in verify_cost.h); n = 0 is a plain decode step. Depths
    // whose frontier cannot pay for a node are not expanded. total_tokens is ignored.
    std::vector<double> verify_cost;
    double auto_draft_cost = -1;  // mode auto (auto_drafter.h): a draft round's drafting cost in decode steps;
                                  // < 0: measured each round (tests fix it to make the choices reproducible)
};

// One of K ways to run a drafting round, chosen by measurement on this machine as it generates
// (BeagleDrafter: the draft's threads under --draft-threads -1, the depth of a cost-aware tree). The
// first WARM x K observed rounds cycle through the arms; then the arm with the highest mean value
// (running mean of its first 2 WARM values, then weight 1 / (2 WARM)) is used, and every PROBE_EVERY
// rounds one of the others is tried again (in turn), so a change of the machine's load is noticed. pick() before the round, observe()
// after it; a round that measured nothing is not observed, and with no observation at all pick() is
// always arm 0 (the configured default).
struct MeasuredChoice {
    static constexpr int MAX_ARMS = 4, PROBE_EVERY = 32;
    explicit MeasuredChoice(int arms = 2, int warm = 4) : K(std::max(1, std::min(arms, MAX_ARMS))), WARM(std::max(1, warm)) {}
    int K, WARM;
    double mean[MAX_ARMS] = {};
    int n[MAX_ARMS] = {}, rounds = 0;
    int best() const {
        int b = 0;
        for (int k = 1; k < K; k++) b = mean[k] > mean[b] ? k : b;
        return b;
    }
    bool settled() const {  // every arm has its warm-up values (one arm: nothing to choose)
        for (int k = 0; k < K && K > 1; k++)
            if (n[k] < WARM) return false;
        return true;
    }
    int pick() const {
        if (!settled()) return rounds % K;
        const int b = best();
        if (K == 1 || rounds % PROBE_EVERY != PROBE_EVERY - 1) return b;
        const int other = (rounds / PROBE_EVERY) % (K - 1);  // the other arms in turn
        return other < b ? other : other + 1;
    }
    void observe(int arm, double value) {
        n[arm]++;
        mean[arm] += (value - mean[arm]) / std::min(n[arm], 2 * WARM);
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
