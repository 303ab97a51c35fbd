// auto_drafter.cpp: mode auto (see auto_drafter.h): per round, the Beagle draft (hybrid) while its
// measured tokens per unit of cost beat those of the lookup rounds (and plain decoding), else cost-aware
// prompt lookup; probes back.
#include "auto_drafter.h"

#include <algorithm>

#include "../core/common.h"
#include "verify_cost.h"

namespace beagle {

class AutoDrafter : public Drafter {
public:
    AutoDrafter(std::unique_ptr<Drafter> draft, std::unique_ptr<Drafter> lookup, std::vector<double> verify_cost,
                double draft_cost)
        : draft_(std::move(draft)), lookup_(std::move(lookup)), cost_(std::move(verify_cost)), draft_cost_(draft_cost) {}
    const char* name() const override { return "auto"; }
    const char* round_mode() const override { return use_draft_ ? draft_->name() : sent_ ? lookup_->name() : "plain"; }
    const char* round_threads() const override { return use_draft_ ? draft_->round_threads() : nullptr; }
    int round_depth() const override { return use_draft_ ? draft_->round_depth() : 0; }

    void begin(const std::vector<int>& prompt, const float* states) override {
        draft_->begin(prompt, states);
        lookup_->begin(prompt, states);
        since_draft_ = 0;
    }

    void propose(const std::vector<int>& history, DraftTree* tree, int room, const SamplingParams& sp, Rng& rng) override {
        use_draft_ = choose_draft();
        const double t0 = now_seconds();
        (use_draft_ ? draft_ : lookup_)->propose(history, tree, room, sp, rng);
        draft_s_ = now_seconds() - t0;
        sent_ = tree->size() > 1;
    }

    void accept(const DraftTree& tree, const std::vector<int>& path, const float* path_states) override {
        if (!use_draft_) {
            lookup_->accept(tree, path, path_states);
            draft_->accept_skipped(tree, path, path_states);
            // this lookup round (or plain step): path.size() tokens for a verify of tree.size() tokens
            looked_up_.add(path.size(), cost_[std::min(tree.size(), cost_.max_tokens())]);
            return;
        }
        const double t0 = now_seconds();
        draft_->accept(tree, path, path_states);
        draft_s_ += now_seconds() - t0;
        lookup_->accept_skipped(tree, path, path_states);
        // the draft's own warm-up (its threads, its depth: MeasuredChoice) is not what it is worth; at most
        // kMaxUnsettled rounds are left out (a hybrid that mostly sends lookup matches alone settles slowly)
        if (!draft_->settled() && ++unsettled_ <= kMaxUnsettled) return;
        // this draft round: path.size() tokens committed for a verify of tree.size() tokens plus drafting
        const int T = std::min(tree.size(), cost_.max_tokens());
        double c = cost_[T];
        if (draft_cost_ >= 0) c += draft_cost_;
        else if (cost_.step_seconds() > 0) c += draft_s_ / cost_.step_seconds();
        drafted_.add(path.size(), c);
        if (drafted_.gain() > baseline()) gap_ = kMinGap;
    }

    void accept_skipped(const DraftTree& tree, const std::vector<int>& path, const float* path_states) override {
        draft_->accept_skipped(tree, path, path_states);
        lookup_->accept_skipped(tree, path, path_states);
    }

    void observe_verify(int T, double seconds) override {
        draft_->observe_verify(T, seconds);
        lookup_->observe_verify(T, seconds);
        cost_.observe(T, seconds);
    }

private:
    static constexpr double kDecay = 1.0 / 16;
    static constexpr int kWarm = 4, kMinGap = 4, kMaxGap = 64, kMaxUnsettled = 32;
    // One kind of round's record: decayed sums (weight kDecay per round) of tokens committed and of cost
    // in decode steps; their ratio is its tokens per step.
    struct Rate {
        double tokens = 0, steps = 0;
        int rounds = 0;
        void add(size_t committed, double cost) {
            tokens = tokens * (1 - kDecay) + (double)committed;
            steps = steps * (1 - kDecay) + cost;
            rounds++;
        }
        double gain() const { return steps > 0 ? tokens / steps : 0; }
    };
    std::unique_ptr<Drafter> draft_, lookup_;
    VerifyCost cost_;
    double draft_cost_;             // >= 0: fixed decode steps per draft round (tests)
    Rate drafted_, looked_up_;      // draft rounds; lookup rounds and plain steps
    int since_draft_ = 0, gap_ = kMinGap, unsettled_ = 0, probe_left_ = 0;
    bool use_draft_ = true, sent_ = false;
    double draft_s_ = 0;            // this round's drafting time (draft rounds)

    // What the draft must beat: the lookup rounds' tokens per step once there are kWarm of them (a
    // repetitive text makes lookup alone worth more than plain decoding), never less than plain's 1.
    double baseline() const { return looked_up_.rounds >= kWarm ? std::max(1.0, looked_up_.gain()) : 1.0; }

    bool choose_draft() {
        if (probe_left_ > 0) {
            probe_left_--;
            return true;
        }
        if (drafted_.rounds < kWarm || drafted_.gain() > baseline()) {
            since_draft_ = 0;
            return true;
        }
        if (++since_draft_ < gap_) return false;
        // a probe: kWarm draft rounds in a row (they weigh 1 - (15/16)^4 = 23% of the record, where one
        // round weighed 6%, too little to outvote the stretch of text that turned the draft off); if they
        // leave the gain at or below the baseline, the next probe waits twice as long
        since_draft_ = 0;
        gap_ = std::min(2 * gap_, kMaxGap);
        probe_left_ = kWarm - 1;
        return true;
    }
};

std::unique_ptr<Drafter> make_auto_drafter(std::unique_ptr<Drafter> draft, std::unique_ptr<Drafter> lookup,
                                           std::vector<double> verify_cost, double draft_cost) {
    BEAGLE_CHECK(draft && lookup, "mode auto needs a draft and a lookup drafter");
    BEAGLE_CHECK(verify_cost.size() >= 3, "mode auto needs the measured verify cost (--total-tokens auto)");
    return std::unique_ptr<Drafter>(
        new AutoDrafter(std::move(draft), std::move(lookup), std::move(verify_cost), draft_cost));
}

}  // namespace beagle
