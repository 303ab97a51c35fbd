// lookup_drafter.h: prompt lookup (n-gram) drafting, no model: the continuation of the latest earlier
// occurrence of the context's last n-gram is the draft. find_ngram and LookupRates also serve the
// hybrid mode of the Beagle drafter (beagle_drafter.cpp), which merges that continuation into its tree.
#pragma once
#include <memory>
#include <vector>

#include "drafter.h"
#include "round_policy.h"

namespace beagle {

// Prompt lookup: the latest earlier occurrence in ctx of its last n-gram, n = ngram .. 1 (longest
// first). Returns the matched n (0: none) and sets *from: ctx[from ..] continues the match (from <
// ctx.size(), so at least one token).
int find_ngram(const std::vector<int>& ctx, int ngram, int* from);

// Acceptance rates of lookup candidates per (matched n-gram length m, depth k): the fraction of the
// times depth k was reached (its parent accepted) that its candidate was accepted; prior 1 of 2.
class LookupRates {
public:
    LookupRates(int ngram, int depth) : K_(depth + 1), reached_((size_t)(ngram + 1) * (depth + 1), 2.0),
                                        accepted_(reached_.size(), 1.0) {}
    int max_depth() const { return K_ - 1; }
    double rate(int m, int k) const { return accepted_[at(m, k)] / reached_[at(m, k)]; }
    void count(int m, int k, bool accepted) {
        reached_[at(m, k)] += 1;
        accepted_[at(m, k)] += accepted ? 1 : 0;
    }
    // One verify of a chain sent as tree nodes chain[0 ..] (depths 1, 2, ...): depth k was reached
    // iff depth k - 1 was accepted, and accepted iff the accepted path's node k is chain[k - 1].
    void count_chain(int m, const std::vector<int>& chain, const std::vector<int>& path) {
        for (size_t k = 1; k <= chain.size(); k++) {
            const bool hit = path.size() > k && path[k] == chain[k - 1];
            count(m, (int)k, hit);
            if (!hit) break;
        }
    }

private:
    int K_;
    std::vector<double> reached_, accepted_;
    size_t at(int m, int k) const { return (size_t)m * K_ + k; }
};

// Prompt lookup (n-gram) drafting: no model; the continuation of the latest earlier occurrence of
// the context's last n-gram (n = ngram .. 1) becomes a chain of up to `gamma` tokens. With a
// verify cost table (measure_verify_cost, --total-tokens auto) each round sends only the first n
// tokens of it that maximise the expected tokens per unit of cost, from the acceptance rates seen
// so far per (matched n-gram length, depth); n = 0 is a plain step. The cost comes from its round
// policy (round_policy.h): its own, made from verify_cost, or `policy` shared with mode auto's switch,
// which then owns the rounds (owner false: this drafter neither chooses nor reports them).
std::unique_ptr<Drafter> make_lookup_drafter(int ngram, int gamma, std::vector<double> verify_cost = {});
std::unique_ptr<Drafter> make_lookup_drafter(int ngram, int gamma, std::shared_ptr<RoundPolicy> policy, bool owner);

}  // namespace beagle
