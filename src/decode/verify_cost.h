// verify_cost.h: the verify cost model of cost-aware drafting (--total-tokens auto): what a target
// forward of T tokens costs in decode steps, timed on this machine at start-up (measure_verify_cost)
// and corrected from the engine's own forward timings (VerifyCost::observe). `beagle bench` times it too.
#pragma once
#include <algorithm>
#include <vector>

#include "session.h"

namespace beagle {

// The verify cost table of a cost-aware drafter: cost(T) = time of a target forward of T tokens in
// decode steps, measured at start-up (measure_verify_cost), then corrected online from the engine's
// own forward timings (observe): t1 = mean of the plain steps (T = 1) that come after kSettle (4)
// passes of at most 2 tokens in a row (a step after a larger pass, a verify or a prompt's prefill, runs
// slower for several passes, the CPU's clock and caches recovering from the heavier load, and is neither
// what plain decoding pays nor what the table's t(1) is; such a step is not observed at all), b = mean of
// (t_T / t1 - table[T]) / (T - 1) over verify passes of T >= 2 tokens (each clamped to [-1/4, 1]:
// what each token past the first costs beyond the table, in decode steps; running means of the first
// 32, then exponential with weight 1/32; b starts at 0 and waits for kMinT1 (2) plain steps), and
// cost(T) = max(1, table[T] + b (T - 1)). Inside generation a verify costs more than the start-up
// loop (one forward repeated in place) says, by a roughly constant amount per token past the first, so
// the correction is additive per token. Scaling the table's excess over 1 instead overreacts where
// that excess is small: a slightly dearer 2-token verify would multiply the cost of every larger tree
// and shrink the cost-aware trees below what pays.
// t1 and b are kept per context range (the tokens before the pass: < 128, < 256, < 512, < 1024, more),
// each learnt from the passes in its range, and cost(T) reads the range of the latest context
// (set_context, observe). A plain step costs more the longer the context (it reads the whole KV cache:
// 2-3x at 800 tokens as at 50 on SmolLM2), a verify of T tokens reads that cache once for all of them,
// so in steps a verify is cheaper at a long context than the table (timed at 160) says. One correction
// for all lengths would carry a long text's cheap verifies into a short answer that follows it, and
// the short answer would draft trees that cost it three plain steps. A range not yet learnt borrows b
// from the nearest shorter range learnt: a text that grows into a new range keeps what its first range
// learnt until its own steps come, and a verify priced by a shorter context's excess errs towards plain
// steps, never towards drafting more.
// A server's batch of k slots (unit k) never runs a one-token pass: its plain round is k rows, and t1 comes
// from those (t_k / table[k]), so that its b is learnt as a single text's is.
// A range whose t1 has not been observed for a while is stale (t1_stale): a text whose every round
// drafts runs no plain steps, and its b stays what it was (at first 0: the table alone, which a start-up
// timed at a moment of slow plain steps makes cheap) however its verifies run. The round policy then runs
// a few plain steps in a row (RoundPolicy's plain probe) to measure t1 afresh.
// A running mean: the plain mean of the first 32 observations, then exponential with weight 1/32 (slow
// enough to average out a noisy machine's timings, quick enough to follow a change of load).
struct RunningMean32 {
    double v = 0;
    int n = 0;
    void add(double x) { v += (x - v) / std::min(++n, 32); }
};

class VerifyCost {
public:
    VerifyCost() = default;
    // unit: the rows of a plain round (1; a server's batch of k slots: k), whose passes measure t1 as
    // t_k / table[k] (seconds of a one-token step) and bound the small passes of the settle rule (<= max(2, k))
    explicit VerifyCost(std::vector<double> table, int unit = 1) : table_(std::move(table)), unit_(unit) {}
    bool empty() const { return table_.empty(); }
    int max_tokens() const { return (int)table_.size() - 1; }  // cost(T) measured for T = 1..max_tokens()
    // Past the table (a server's batch of trees): its last slope.
    double operator[](int T) const { return T <= 1 ? 1.0 : std::max(1.0, base(T) + excess() * (T - 1)); }
    // Cost of verifying T tokens for a fractional T (a mean over rounds): linear between the integers.
    double at(double T) const {
        if (T <= 1) return (*this)[1];
        const int i = (int)T;
        const double f = T - i;
        return f > 0 ? (1 - f) * (*this)[i] + f * (*this)[i + 1] : (*this)[i];
    }
    double per_token_excess() const { return excess(); }
    // The cheapest average cost of a token past the root, min over T >= 2 of (cost(T) - 1) / (T - 1), at
    // least 1e-3: a candidate whose estimated acceptance is below it cannot pay for itself in any tree.
    double min_token_cost() const {
        double m = 1e30;
        for (int T = 2; T <= max_tokens(); T++) m = std::min(m, ((*this)[T] - (*this)[1]) / (double)(T - 1));
        return std::max(m, 1e-3);
    }
    // Seconds of one decode step, estimated from every forward observed (t_T / cost(T), exponential
    // mean with weight 1/16); 0 until one is observed.
    double step_seconds() const { return step_s_; }
    // A forward of T tokens after `context` tokens took `seconds`; the range of that context becomes current.
    void observe(int T, double seconds, int context);
    // The context the next passes run after (a new text: its prompt's length, just prefilled).
    void set_context(int context) {
        range_ = range_of(context);
        settled_ = 0;
    }
    static constexpr int kSettle = 4;  // passes of <= 2 tokens in a row before a plain step is observed
    static constexpr int kMinT1 = 2;   // plain steps observed in a range before its b is learnt
    // The current range's t1 is stale: no plain step observed in its last 32 passes while it has fewer
    // than kMinT1 (b waits for them), 256 after.
    bool t1_stale() const { return since_t1_[range_] >= (t1_[range_].n < kMinT1 ? 32 : 256); }
    static constexpr int kRanges = 5;
    static int range_of(int context) {
        int r = 0;
        for (int lim = 128; r + 1 < kRanges && context >= lim; lim *= 2) r++;
        return r;
    }

private:
    std::vector<double> table_;
    RunningMean32 t1_[kRanges], b_[kRanges];  // per context range: seconds of a plain step; excess cost per
                                              // token past the first
    int range_ = 0;         // the context range cost() reads
    // b of the current range; until its first verify is observed, that of the nearest shorter range that
    // has one, else 0 (the table alone)
    double excess() const {
        for (int r = range_; r >= 0; r--)
            if (b_[r].n > 0) return b_[r].v;
        return 0;
    }
    double base(int T) const {  // the table at T (past it: its last slope)
        const int m = max_tokens();
        return T <= m ? table_[T] : table_[m] + (T - m) * (table_[m] - table_[std::max(1, m - 1)]);
    }
    int since_t1_[kRanges] = {};  // per range: passes observed since its t1 last was
    double step_s_ = 0;
    int unit_ = 1;          // rows of a plain round
    int settled_ = 0;       // passes of at most max(2, unit_) tokens in a row just before the next (none after a prefill)
};

// How many candidates of a ranked list a round verifies: p[i] = the estimated chance that candidate i
// is accepted (ranked so that every candidate's ancestors come before it), and the n returned
// maximises the expected tokens per unit of cost, (1 + p[0] + ... + p[n - 1]) / cost[n + 1] (first
// maximum; n = 0: the root alone, a plain step); n <= min(count, cost.max_tokens() - 1). The draft's
// forwards are not counted: when the candidates exist they are spent whatever is sent.
int best_prefix(const double* p, int count, const VerifyCost& cost);

// Seconds of one verify pass of T tokens (tokens[0..T) as a chain, with its tree mask) after the
// model's current n_past, best of `reps`; the cache is truncated back after each. T <= max_batch.
// clock: now_seconds (wall time), or thread_cpu_seconds for a one-thread model (CPU time, which a busy
// machine's preemptions do not inflate: a quiet machine's wall time, to a few percent).
double time_verify(Llama& m, const int* tokens, int T, int reps, double (*clock)() = now_seconds);

// --total-tokens auto: times target forwards of T tokens after a context of up to 160 tokens on this
// machine (T on a grid up to max_nodes: every T to 10, where the CPU kernels' token tiles make steps,
// then sparser; 3 interleaved sweeps from the largest T down, each T the best of two passes in a row,
// the median per T; interpolated linearly, made non-decreasing) and returns cost[T] = time(T) / time(1)
// for T = 0..cap (cost[0] unused). The grid stops at the first T costing max_commit decode steps or
// more (a round commits at most max_commit tokens: depth + 1, gamma + 1). Leaves the cache empty.
// latency_s: what every round costs beyond the forward (remote drafting: the network round trip),
// cost[T] = (latency + time(T)) / (latency + time(1)): the longer the trip, the more a large tree pays.
std::vector<double> measure_verify_cost(Session& s, int max_nodes, int max_commit, double latency_s = 0);

}  // namespace beagle
