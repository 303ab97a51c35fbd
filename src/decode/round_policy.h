// round_policy.h: the round policy of speculative decoding. One object per drafting session owns what
// is measured about rounds (the verify cost model, the step time, the draft's calibration, its drafting
// time per forward) and chooses each round's mode, draft depth and draft threads; drafters only propose.
#pragma once
#include <string>
#include <vector>

#include "verify_cost.h"

namespace beagle {

// One round's choice. draft: run the draft model (false: prompt lookup, or a plain step when no match
// is worth its cost). depth: the draft tree's depth (0: the drafter's own --depth). threads: the draft's
// forwards on one thread (0) or on the target's whole pool (1); -1: not chosen here.
struct RoundChoice {
    bool draft = true;
    int depth = 0, threads = -1;
    bool probe = false;  // a losing arm tried again (see the rule below)
    bool plain = false;  // a plain probe's round: send the root alone (draft false), whatever lookup finds
    bool operator==(const RoundChoice& o) const {
        return draft == o.draft && depth == o.depth && threads == o.threads && probe == o.probe && plain == o.plain;
    }
    bool operator!=(const RoundChoice& o) const { return !(*this == o); }
};

// The rule. An arm is a way to run a round: lookup-or-plain (mode auto only), or the draft at one depth
// (cost-aware trees choose among {1, 2, --depth}; other modes have one draft arm). Its value is its
// expected tokens committed per unit of round cost in decode steps: tokens / (verify + drafting), where
// verify = cost(mean T of the trees it sent), priced by the cost model as it stands (VerifyCost,
// corrected online from every verify timing, per context range: a text that grows long reprices every
// arm) and
// drafting = its own mean drafting seconds per round / seconds per step (before its first measured
// round: its forwards per round x the mean seconds per forward; or a fixed cost per draft round,
// Setup::draft_cost).
// Every estimate is a running mean, weight 1 / min(n + 1, 16) for its n-th observation, the prior
// counting as the first; so priors steer the
// first rounds and one or two real rounds outweigh them. No warm-up rounds, no ignored rounds: every
// round counts for the arm that ran it. Priors: lookup 1 token for 1 step; a draft arm of depth d
// min(2, 1 + d / 2) tokens for cost[4] plus d forwards (its seconds per forward: the first measured).
// Choice: the arm with the highest value; a losing draft arm is probed after `gap` rounds without it:
// gap 4, doubled after each probe that does not make it win, at most 64, back to 4 when it wins.
// Modes first (lookup vs the best draft depth), then depths among draft rounds (a depth never run is a
// losing arm; before any has run, the shallowest, the cheapest to learn from, is the best). A mode
// probe runs the draft for up to 2 rounds, the second only if the first beat the lookup side's value
// (one round weighs 1/16 of the estimate, too little to outvote the stretch that turned the draft
// off; a draft that still fails costs one round). Lookup is never probed: the draft rounds of mode auto
// are hybrid, whose trees carry the lookup match too, so a text that favours lookup raises their tokens
// as well. Threads do not change tokens: the thread arm with the lower mean seconds per forward
// (prior: its first measurement; one thread until both are measured), the other tried every 32nd
// drafting round (a split over a busy machine's cores can cost more than a short answer's whole draft).
// Tokens per round are kept twice, as the mean above across texts and as a mean of the current text:
// begin() (a new text) starts each arm's text mean at its across-texts mean, counted as kTextPrior (2)
// rounds, and a draft arm's value takes the lower of the two. So two or three rounds of a text that suits
// the draft worse than the texts before turn the choice: a short answer the draft cannot predict stops
// drafting after its first rounds instead of paying for the 16 rounds that move the long mean, while one
// unlucky round of a text the draft predicts well does not (tau 3 before: 2.33 tokens after a 1-token
// round). Better than the texts before counts only through the long mean (a probe or two that happen to
// do well, a hybrid round carrying the lookup match, must not switch on a draft that does not pay), and
// the lookup side keeps its long mean (a text that suits lookup badly must not make a draft that does
// not pay look better by comparison).
// Plain probes (mode auto, and a server's batch, whose plain rounds are k rows): when the verify cost's t1 of
// the current context range is stale (VerifyCost::t1_stale: no plain step observed in the range's last 32
// passes, 256 once it has 2), the next 6 rounds are plain steps, whoever wins: the last two come after 4
// small passes in a row and measure t1 (verify_cost.h), which prices every verify. Without them a text
// whose every round drafts keeps the start-up table, however its verifies run. At most one plain probe per
// 32 rounds; their rounds count for no arm (they measure the step, not a way to run a round). At 256
// rounds between them they cost a draft that wins by 20% about 0.5% of its rounds' worth.
// begin() keeps every other estimate and probe gap (costs belong to the machine, not the text) and
// restarts the counts of rounds since each arm ran.
// The policy reads no clock: timings come as arguments, so a recorded trace of its observations
// (record()) replays to the same decisions (replay()).
class RoundPolicy {
public:
    struct Setup {
        std::vector<double> verify_cost;  // measure_verify_cost's table; empty: no cost model (no mode or depth choice)
        double draft_cost = -1;           // >= 0: a draft round's drafting costs this many decode steps (tests)
        std::string draft_mode;           // the draft's mode name (chain, tree, hybrid); empty: no draft (lookup)
        bool lookup_arm = false;          // mode auto: lookup-or-plain is an arm next to the draft
        std::vector<int> depths;          // the draft depths to choose from (one: no choice); set_draft
        bool thread_arms = false;         // --draft-threads -1 on a CPU pool of 2+ threads; set_draft
        int plain_rows = 1;               // the lookup side's plain round: this many rows, one token each (a
                                          // server's batch of slots: its prior is then exact, k for cost[k])
    };
    // An observation or a decision, in the order the policy received it.
    struct Event {
        enum Kind { BEGIN, CHOOSE, VERIFY, DRAFT, CALIB, ROUND } kind = BEGIN;
        int n = 0;            // VERIFY, ROUND: tokens verified (T); DRAFT: draft forwards; BEGIN: prompt tokens
        double x = 0, y = 0;  // VERIFY, DRAFT: seconds; VERIFY: y the context; CALIB: predicted, accepted;
                              // ROUND: x tokens committed
        RoundChoice choice;   // CHOOSE: what was chosen
    };
    struct Trace {
        Setup setup;
        std::vector<Event> events;
    };

    explicit RoundPolicy(Setup setup);
    // The drafter's arms (called by the drafter before the first round).
    void set_draft(const std::string& mode, const std::vector<int>& depths, bool thread_arms);

    // A new text after a prompt of `prompt_tokens` (the verify cost's context range).
    void begin(int prompt_tokens);
    // The round's choice (before proposing), then choice() until the next choose().
    const RoundChoice& choose();
    const RoundChoice& choice() const { return cur_; }
    // The draft's forwards of this round and their seconds (the drafter times them).
    void observe_draft(double seconds, int forwards);
    // Calibration: drafted candidates whose summed estimated acceptance was `predicted`, of which
    // `accepted` were accepted.
    void observe_calibration(double predicted, double accepted);
    // A target forward of T tokens after `context` tokens took `seconds` (once per verify).
    void observe_verify(int T, double seconds, int context);
    // The round's verify of T tokens committed `committed` tokens (accepted path + the root).
    void observe_round(int T, int committed);

    // What drafters size their trees and chains with.
    const VerifyCost& cost() const { return cost_; }
    double calibration() const;  // accepted / predicted, clamped to [0.1, 1.5]

    // The last round, for statistics (SpecStats): its mode name ("plain" for a lookup round that sent
    // nothing under mode auto), its thread arm ("1", "all"; nullptr: not chosen or no draft forward),
    // its chosen depth (0: not chosen or no draft forward).
    const char* round_mode() const;
    const char* round_threads() const;
    int round_depth() const;

    void record(bool on) { recording_ = on; }
    const Trace& trace() const { return trace_; }
    // A fresh policy fed the trace's observations in order; returns its decisions (one per CHOOSE).
    static std::vector<RoundChoice> replay(const Trace& trace);

    // Estimates, for tests and reports: an arm's value (arm -1: lookup; 0..: the draft depths in order).
    double value(int arm) const;

private:
    // A running mean whose prior counts as its first observation, exponential (weight 1/16) from the 16th.
    struct Mean {
        double v = 0;
        int n = 0;
        void reset(double prior) { v = prior, n = 1; }
        void add(double x) {
            n++;
            v += (x - v) / (n < 16 ? n : 16);
        }
    };
    struct Gap {  // rounds without an arm (among the rounds it competes in) and its probe gap
        int since = 0, gap = 4;
    };
    struct Arm {
        int depth = 0;
        Mean tokens, verify, forwards, draft_s;  // verify: tokens sent per round; draft_s: seconds of drafting
                                                 // per round (n 0: not measured)
        Mean text;     // draft arms: tokens per round on the current text (begin(): `tokens`, weight kTextPrior)
        int runs = 0;  // rounds observed
        Gap g;         // draft arms: among draft rounds
    };
    static constexpr int kMinGap = 4, kMaxGap = 64, kThreadProbe = 32, kModeProbe = 2, kTextPrior = 2;
    static constexpr int kPlainProbe = 6, kPlainGap = 32;  // a plain probe's rounds; rounds at least between two

    Setup setup_;
    VerifyCost cost_;
    Arm lookup_;
    std::vector<Arm> draft_;  // one per depth
    Mean calib_pred_, calib_acc_;
    Mean fwd_s_[2];           // seconds per draft forward, per thread arm (n 0: not measured)
    int thread_rounds_ = 0;   // drafting rounds that ran forwards
    RoundChoice cur_;
    Gap draft_gap_;           // mode auto: the draft side's rounds without it and probe gap (lookup is never probed)
    int cur_arm_ = -1;        // the arm that runs this round (-1 lookup)
    bool mode_probe_ = false; // this round probes the draft side, judged at observe_round
    int probe_left_ = 0;      // a mode probe in progress: its rounds still to run
    int plain_left_ = 0;      // a plain probe in progress: its rounds still to run
    int since_plain_ = kPlainGap;  // rounds since the last plain probe ended
    int depth_probe_ = -1;    // the draft arm probed this round (-1 none), judged at observe_round
    int round_forwards_ = 0, last_T_ = 0, last_forwards_ = 0;
    double round_draft_s_ = 0;
    bool recording_ = false;
    Trace trace_;

    void log(Event e) {
        if (recording_) trace_.events.push_back(e);
    }
    void build_arms();
    void reset_arm(Arm* a, bool draft);
    Arm& arm(int i) { return i < 0 ? lookup_ : draft_[i]; }
    const Arm& arm(int i) const { return i < 0 ? lookup_ : draft_[i]; }
    int best_depth() const;   // the best draft arm ever run (none: the first, the shallowest)
    int thread_arm() const;   // the faster measured thread arm
    double draft_steps(int i) const;      // an arm's drafting per round, in decode steps (its estimate)
    double drafting_steps(double seconds) const;  // seconds of drafting in decode steps (or Setup::draft_cost)
    void judge_probe();
};

// The best candidate of a cost-aware round that sent none (its token and estimated acceptance): the next
// round's root says whether it would have been accepted, one calibration observation, so that a draft that
// sends nothing for a while still learns how far its estimates are off.
struct ShadowCandidate {
    int tok = -1;
    double p = 0;
    void set(int token, double prob) { tok = token, p = prob; }
    void clear() { tok = -1; }
    void settle(RoundPolicy& policy, int root) {
        if (tok < 0) return;
        policy.observe_calibration(p, root == tok ? 1 : 0);
        tok = -1;
    }
};

}  // namespace beagle
