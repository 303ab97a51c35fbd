// auto_drafter.cpp: mode auto (see auto_drafter.h): per round the drafter the round policy chose, the
// other kept in step.
#include "auto_drafter.h"

#include "../core/common.h"

namespace beagle {

class AutoDrafter : public Drafter {
public:
    AutoDrafter(std::unique_ptr<Drafter> draft, std::unique_ptr<Drafter> lookup, std::shared_ptr<RoundPolicy> policy)
        : draft_(std::move(draft)), lookup_(std::move(lookup)), policy_(std::move(policy)) {}
    const char* name() const override { return "auto"; }
    RoundPolicy* policy() const override { return policy_.get(); }

    void begin(const std::vector<int>& prompt, const float* states) override { begin_cached(prompt, 0, states); }
    void begin_cached(const std::vector<int>& prompt, int keep, const float* states) override {
        policy_->begin((int)prompt.size());
        draft_->begin_cached(prompt, keep, states);
        lookup_->begin_cached(prompt, keep, states);
    }

    void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) override {
        const RoundChoice& c = policy_->choose();
        if (!c.plain) (c.draft ? draft_ : lookup_)->propose(history, tree, room, sp, rng);
    }

    // the round's choice is the policy's until its next choose()
    void accept(const DraftTree& tree, const std::vector<int>& path, const float* path_states) override {
        const RoundChoice& c = policy_->choice();
        if (c.plain) {  // a plain probe's step: neither proposed
            draft_->accept_skipped(tree, path, path_states);
            lookup_->accept_skipped(tree, path, path_states);
        } else if (c.draft) {
            draft_->accept(tree, path, path_states);
            lookup_->accept_skipped(tree, path, path_states);
        } else {
            lookup_->accept(tree, path, path_states);
            draft_->accept_skipped(tree, path, path_states);
        }
        policy_->observe_round(tree.size(), (int)path.size());
    }

    void accept_skipped(const DraftTree& tree, const std::vector<int>& path, const float* path_states) override {
        draft_->accept_skipped(tree, path, path_states);
        lookup_->accept_skipped(tree, path, path_states);
    }

    void observe_verify(int T, double seconds, int context) override { policy_->observe_verify(T, seconds, context); }

private:
    std::unique_ptr<Drafter> draft_, lookup_;
    std::shared_ptr<RoundPolicy> policy_;
};

std::unique_ptr<Drafter> make_auto_drafter(std::unique_ptr<Drafter> draft, std::unique_ptr<Drafter> lookup,
                                           std::shared_ptr<RoundPolicy> policy) {
    BEAGLE_CHECK(draft && lookup && policy, "mode auto needs a draft, a lookup drafter and their round policy");
    BEAGLE_CHECK(policy->cost().max_tokens() >= 2, "mode auto needs the measured verify cost (--total-tokens auto)");
    return std::unique_ptr<Drafter>(new AutoDrafter(std::move(draft), std::move(lookup), std::move(policy)));
}

}  // namespace beagle
