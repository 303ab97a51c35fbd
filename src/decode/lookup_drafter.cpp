// lookup_drafter.cpp: prompt lookup drafting (see lookup_drafter.h): find_ngram, and the drafter that
// sends the match's continuation as a chain, cut to the length worth its verify cost when cost-aware.
#include "lookup_drafter.h"

#include <algorithm>
#include <numeric>

#include "../core/common.h"
#include "verify_cost.h"

namespace beagle {

int find_ngram(const std::vector<int>& ctx, int ngram, int* from) {
    const int L = (int)ctx.size();
    for (int n = std::min(ngram, L - 1); n >= 1; n--) {
        const int* tail = &ctx[L - n];
        for (int start = L - n - 1; start >= 0; start--)
            if (std::equal(tail, tail + n, &ctx[start])) {
                *from = start + n;  // < L: the continuation holds at least the token after the match
                return n;
            }
    }
    return 0;
}

class LookupDrafter : public Drafter {
public:
    LookupDrafter(int ngram, int gamma, std::shared_ptr<RoundPolicy> policy, bool owner)
        : ngram_(ngram), gamma_(gamma), policy_(std::move(policy)), owner_(owner), rates_(ngram, gamma) {}
    const char* name() const override { return "lookup"; }
    RoundPolicy* policy() const override { return policy_.get(); }
    void begin(const std::vector<int>& prompt, const float*) override {
        shadow_tok_ = -1;
        if (owner_) policy_->begin((int)prompt.size());
    }
    // prompt lookup reads the committed tokens each round: nothing of an earlier text to keep or drop
    void begin_cached(const std::vector<int>& prompt, int, const float* states) override { begin(prompt, states); }
    void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams&, Rng&) override {
        if (owner_) policy_->choose();
        if (shadow_tok_ >= 0) {  // last round matched but sent nothing: was its first token the target's?
            rates_.count(shadow_m_, 1, tree->token[0] == shadow_tok_);
            shadow_tok_ = -1;
        }
        // context = history + root; the continuation of the latest earlier occurrence of its last n-gram
        std::vector<int> ctx(history);
        ctx.push_back(tree->token[0]);
        int from = 0, m = find_ngram(ctx, ngram_, &from);
        if (m == 0) return;
        int len = std::min({gamma_, (int)ctx.size() - from, room - 1});
        if (len < 1) return;
        if (!policy_->cost().empty()) len = worth_sending(m, len, ctx[from]);
        for (int k = 0, par = 0; k < len; k++) par = tree->add(par, ctx[from + k], 0.0f);
        matched_ = m;
    }
    void observe_verify(int T, double seconds, int context) override {
        if (owner_) policy_->observe_verify(T, seconds, context);
    }
    void accept_skipped(const DraftTree&, const std::vector<int>&, const float*) override { shadow_tok_ = -1; }  // the shadow was of another round
    void accept(const DraftTree& tree, const std::vector<int>& path, const float*) override {
        if (!policy_->cost().empty()) {
            std::vector<int> chain(tree.size() - 1);  // the tree is the chain itself: node k at depth k
            std::iota(chain.begin(), chain.end(), 1);
            rates_.count_chain(matched_, chain, path);
        }
        if (owner_) policy_->observe_round(tree.size(), (int)path.size());
    }
    void accept_rows(const DraftTree& tree, const std::vector<int>& path, Ops&, const float*, int) override {
        accept(tree, path, nullptr);  // prompt lookup needs no states
    }

private:
    int ngram_, gamma_;
    std::shared_ptr<RoundPolicy> policy_;  // its verify cost: non-empty, cost-aware length (see make_lookup_drafter)
    bool owner_;
    LookupRates rates_;
    int matched_ = 1, shadow_tok_ = -1, shadow_m_ = 1;
    std::vector<double> reach_;  // worth_sending: the chance that the chain is accepted up to each token
    // The chain length n <= len with the most expected tokens per unit of verify cost, from the
    // acceptance rates seen so far for matches of this length (0: a plain step).
    int worth_sending(int m, int len, int first_tok) {
        const VerifyCost& cost = policy_->cost();
        len = std::max(0, std::min(len, cost.max_tokens() - 1));
        reach_.resize(len);
        double reach = 1;
        for (int k = 1; k <= len; k++) reach_[k - 1] = reach *= rates_.rate(m, k);
        const int keep = best_prefix(reach_.data(), len, cost);
        if (keep == 0) { shadow_tok_ = first_tok; shadow_m_ = m; }
        return keep;
    }
};

std::unique_ptr<Drafter> make_lookup_drafter(int ngram, int gamma, std::shared_ptr<RoundPolicy> policy, bool owner) {
    BEAGLE_CHECK(ngram >= 1, "--ngram must be >= 1, got %d", ngram);
    BEAGLE_CHECK(gamma >= 1, "--gamma must be >= 1, got %d", gamma);
    BEAGLE_CHECK(policy, "a lookup drafter needs a round policy");
    BEAGLE_CHECK(policy->cost().empty() || policy->cost().max_tokens() >= 2, "verify cost table needs T = 1..2 at least");
    return std::unique_ptr<Drafter>(new LookupDrafter(ngram, gamma, std::move(policy), owner));
}

std::unique_ptr<Drafter> make_lookup_drafter(int ngram, int gamma, std::vector<double> verify_cost) {
    RoundPolicy::Setup setup;
    setup.verify_cost = std::move(verify_cost);
    return make_lookup_drafter(ngram, gamma, std::make_shared<RoundPolicy>(setup), true);
}

}  // namespace beagle
