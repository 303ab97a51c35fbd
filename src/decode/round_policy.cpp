// round_policy.cpp: the round policy (see round_policy.h): per-arm running means of tokens and cost,
// the choice of the best arm with probes at doubling gaps, the thread arm by time per forward, and the
// trace of observations that replays to the same decisions.
#include "round_policy.h"

#include <algorithm>

namespace beagle {

RoundPolicy::RoundPolicy(Setup setup) : setup_(std::move(setup)), cost_(setup_.verify_cost, setup_.plain_rows) {
    calib_pred_.reset(1);
    calib_acc_.reset(1);
    build_arms();
}

void RoundPolicy::set_draft(const std::string& mode, const std::vector<int>& depths, bool thread_arms) {
    setup_.draft_mode = mode;
    setup_.depths = depths;
    setup_.thread_arms = thread_arms;
    build_arms();
}

void RoundPolicy::build_arms() {
    draft_.clear();
    if (!setup_.draft_mode.empty()) {
        if (setup_.depths.empty()) draft_.push_back(Arm());
        for (int d : setup_.depths) {
            draft_.push_back(Arm());
            draft_.back().depth = d;
        }
    }
    reset_arm(&lookup_, false);
    for (Arm& a : draft_) reset_arm(&a, true);
    draft_gap_ = Gap();
    trace_.setup = setup_;
}

void RoundPolicy::reset_arm(Arm* a, bool draft) {
    const int d = a->depth > 0 ? a->depth : 4;
    const int k = setup_.plain_rows;
    a->tokens.reset(draft ? k * std::min(2.0, 1 + 0.5 * d) : k);
    a->text = a->tokens;
    a->verify.reset(draft && !cost_.empty() ? k * std::min(4, cost_.max_tokens()) : k);
    a->forwards.reset(draft ? d : 0);
    a->draft_s = Mean();
    a->runs = 0;
    a->g = Gap();
}

void RoundPolicy::begin(int prompt_tokens) {  // estimates and gaps carry over; the text means and rounds-since counts restart
    log({Event::BEGIN, prompt_tokens});
    cost_.set_context(prompt_tokens);
    for (Arm& a : draft_) {
        a.text.v = a.tokens.v;
        a.text.n = kTextPrior;
        a.g.since = 0;
    }
    draft_gap_.since = 0;
}

int RoundPolicy::thread_arm() const {
    if (!setup_.thread_arms || fwd_s_[1].n == 0) return 0;
    if (fwd_s_[0].n == 0) return 1;
    return fwd_s_[1].v < fwd_s_[0].v ? 1 : 0;
}

double RoundPolicy::drafting_steps(double seconds) const {
    if (setup_.draft_cost >= 0) return setup_.draft_cost;
    const double step = cost_.step_seconds();
    return step > 0 ? seconds / step : 0.0;
}

double RoundPolicy::draft_steps(int i) const {
    const Arm& a = arm(i);
    if (a.draft_s.n > 0) return drafting_steps(a.draft_s.v);
    const Mean& f = fwd_s_[thread_arm()];
    return drafting_steps(f.n > 0 ? a.forwards.v * f.v : 0.0);
}

double RoundPolicy::value(int i) const {
    const Arm& a = arm(i);
    const double verify = cost_.empty() ? 1.0 : cost_.at(a.verify.v);
    const double steps = verify + (i >= 0 ? draft_steps(i) : 0.0);
    const double tokens = i >= 0 ? std::min(a.text.v, a.tokens.v) : a.tokens.v;  // draft arms: the lower
    return tokens / std::max(steps, 1e-9);
}

int RoundPolicy::best_depth() const {
    int best = -1;
    for (int i = 0; i < (int)draft_.size(); i++)
        if (draft_[i].runs > 0 && (best < 0 || value(i) > value(best))) best = i;
    return best >= 0 ? best : 0;
}

const RoundChoice& RoundPolicy::choose() {
    cur_ = RoundChoice();
    mode_probe_ = false;
    depth_probe_ = -1;
    round_forwards_ = 0;
    round_draft_s_ = 0;
    if (draft_.empty()) {  // lookup alone
        cur_.draft = false;
        cur_arm_ = -1;
        log({Event::CHOOSE, 0, 0, 0, cur_});
        return cur_;
    }
    const bool costed = !cost_.empty();
    // a plain probe (mode auto; a server's batch: plain rounds of its k rows)
    if (setup_.lookup_arm && costed &&
        (plain_left_ > 0 || (since_plain_ >= kPlainGap && cost_.t1_stale()))) {
        if (plain_left_ == 0) plain_left_ = kPlainProbe;
        if (--plain_left_ == 0) since_plain_ = 0;
        cur_.draft = false;
        cur_.plain = true;
        cur_arm_ = -1;
        log({Event::CHOOSE, 0, 0, 0, cur_});
        return cur_;
    }
    since_plain_++;
    const int bd = best_depth();
    cur_.draft = true;
    if (setup_.lookup_arm && costed) {  // modes: lookup vs the best depth; a losing draft probed after its gap
        if (probe_left_ > 0) {          // a mode probe's next round
            mode_probe_ = true;
            probe_left_--;
        } else if (value(bd) > value(-1)) {
            draft_gap_ = Gap();
        } else if (draft_gap_.since >= draft_gap_.gap) {
            mode_probe_ = true;
            draft_gap_.since = 0;
            probe_left_ = kModeProbe - 1;
        } else {
            draft_gap_.since++;
            cur_.draft = false;
        }
    }
    cur_arm_ = -1;
    if (cur_.draft) {
        cur_arm_ = bd;
        if (draft_.size() > 1 && !mode_probe_) {  // depths: the most overdue losing depth, else the best
            for (int i = 0; i < (int)draft_.size(); i++)
                if (i != bd && draft_[i].g.since >= draft_[i].g.gap &&
                    (depth_probe_ < 0 || draft_[i].g.since > draft_[depth_probe_].g.since))
                    depth_probe_ = i;
            if (depth_probe_ >= 0) cur_arm_ = depth_probe_;
            else draft_[bd].g.gap = kMinGap;
            for (int i = 0; i < (int)draft_.size(); i++) {
                if (i == cur_arm_) draft_[i].g.since = 0;
                else draft_[i].g.since++;
            }
        }
        cur_.depth = draft_[cur_arm_].depth;
        if (setup_.thread_arms) {  // the faster thread arm (first: one thread); the other every 32nd drafting round
            const int t = thread_arm();
            cur_.threads = thread_rounds_ % kThreadProbe == kThreadProbe - 1 ? 1 - t : t;
        }
    }
    cur_.probe = mode_probe_ || depth_probe_ >= 0;
    log({Event::CHOOSE, 0, 0, 0, cur_});
    return cur_;
}

void RoundPolicy::observe_draft(double seconds, int forwards) {
    log({Event::DRAFT, forwards, seconds});
    round_forwards_ = forwards;
    round_draft_s_ = seconds;
    if (forwards <= 0 || !(seconds > 0)) return;
    Mean& f = fwd_s_[cur_.threads > 0 ? 1 : 0];
    if (f.n == 0) f.reset(seconds / forwards);  // the prior: the first measurement
    else f.add(seconds / forwards);
    thread_rounds_++;
}

void RoundPolicy::observe_calibration(double predicted, double accepted) {
    log({Event::CALIB, 0, predicted, accepted});
    calib_pred_.add(predicted);
    calib_acc_.add(accepted);
}

double RoundPolicy::calibration() const {
    return std::min(1.5, std::max(0.1, calib_acc_.v / std::max(calib_pred_.v, 1e-9)));
}

void RoundPolicy::observe_verify(int T, double seconds, int context) {
    log({Event::VERIFY, T, seconds, (double)context});
    cost_.observe(T, seconds, context);
}

void RoundPolicy::observe_round(int T, int committed) {
    log({Event::ROUND, T, (double)committed});
    last_T_ = T;
    last_forwards_ = round_forwards_;
    if (cost_.empty() || cur_.plain) return;  // no cost model: nothing to choose by value; a plain probe: no arm's
    Arm& a = arm(cur_arm_);
    a.tokens.add(committed);
    a.verify.add(T);
    if (cur_arm_ >= 0) {
        a.text.add(committed);
        a.forwards.add(round_forwards_);
        if (a.draft_s.n == 0) a.draft_s.reset(round_draft_s_);  // the prior: the first measurement
        else a.draft_s.add(round_draft_s_);
    }
    a.runs++;
    if (mode_probe_ && committed / std::max(cost_[T] + drafting_steps(round_draft_s_), 1e-9) < value(-1))
        probe_left_ = 0;  // a mode probe goes on only while its rounds beat lookup
    judge_probe();
}

// A probe that leaves its arm losing doubles the arm's gap; one that makes it win sets it back to 4.
void RoundPolicy::judge_probe() {
    if (mode_probe_) {
        if (probe_left_ > 0) return;  // judged after its last round
        Gap& g = draft_gap_;
        g.gap = value(best_depth()) > value(-1) ? kMinGap : std::min(2 * g.gap, kMaxGap);
    } else if (depth_probe_ >= 0) {
        Gap& g = draft_[depth_probe_].g;
        g.gap = best_depth() == depth_probe_ ? kMinGap : std::min(2 * g.gap, kMaxGap);
    }
}

const char* RoundPolicy::round_mode() const {
    if (cur_.draft && !draft_.empty()) return setup_.draft_mode.c_str();
    return setup_.lookup_arm && last_T_ <= 1 ? "plain" : "lookup";
}

const char* RoundPolicy::round_threads() const {
    if (!setup_.thread_arms || !cur_.draft || last_forwards_ <= 0) return nullptr;
    return cur_.threads > 0 ? "all" : "1";
}

int RoundPolicy::round_depth() const { return draft_.size() > 1 && cur_.draft && last_forwards_ > 0 ? cur_.depth : 0; }

std::vector<RoundChoice> RoundPolicy::replay(const Trace& trace) {
    RoundPolicy p(trace.setup);
    std::vector<RoundChoice> out;
    for (const Event& e : trace.events) {
        switch (e.kind) {
        case Event::BEGIN: p.begin(e.n); break;
        case Event::CHOOSE: out.push_back(p.choose()); break;
        case Event::VERIFY: p.observe_verify(e.n, e.x, (int)e.y); break;
        case Event::DRAFT: p.observe_draft(e.x, e.n); break;
        case Event::CALIB: p.observe_calibration(e.x, e.y); break;
        case Event::ROUND: p.observe_round(e.n, (int)e.x); break;
        }
    }
    return out;
}

}  // namespace beagle
