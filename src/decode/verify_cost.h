// verify_cost.h: the verify cost model of cost-aware drafting (--total-tokens auto): what a target
// forward of T tokens costs in decode steps, timed on this machine at start-up (measure_verify_cost)
// and corrected from the engine's own forward timings (VerifyCost::observe). `beagle bench` times it too.
#pragma once
#include <vector>

#include "session.h"

namespace beagle {

// The verify cost table of a cost-aware drafter: cost(T) = time of a target forward of T tokens in
// decode steps, measured at start-up (measure_verify_cost), then corrected online from the engine's
// own forward timings (observe): t1 = mean of the plain steps (T = 1) seen, r = mean of
// (t_T / t1 - 1) / (table[T] - 1) over verify passes of T >= 2 tokens (each clamped to [1/4, 4];
// running means of the first 32, then exponential with weight 1/32; r starts at 1 and waits for 4
// plain steps), and cost(T) = 1 + r (table[T] - 1). Start-up timing repeats
// each T in place; inside generation a verify of 2-4 tokens was measured 20-40% dearer.
class VerifyCost {
public:
    VerifyCost() = default;
    explicit VerifyCost(std::vector<double> table) : table_(std::move(table)) {}
    bool empty() const { return table_.empty(); }
    int max_tokens() const { return (int)table_.size() - 1; }  // cost(T) defined for T = 1..max_tokens()
    double operator[](int T) const { return T <= 1 ? 1.0 : 1.0 + r_ * (table_[T] - 1.0); }
    double correction() const { return r_; }
    void observe(int T, double seconds);

private:
    std::vector<double> table_;
    double t1_ = 0, r_ = 1.0;
    int n1_ = 0, nr_ = 0;
};

// Seconds of one verify pass of T tokens (tokens[0..T) as a chain, with its tree mask) after the
// model's current n_past, best of `reps`; the cache is truncated back after each. T <= max_batch.
// clock: now_seconds (wall time), or thread_cpu_seconds for a one-thread model (CPU time, which a busy
// machine's preemptions do not inflate: a quiet machine's wall time, to a few percent).
double time_verify(Llama& m, const int* tokens, int T, int reps, double (*clock)() = now_seconds);

// --total-tokens auto: times target forwards of T tokens after a context of up to 160 tokens on this
// machine (T on a grid up to max_nodes; 5 interleaved sweeps, the median per T; interpolated linearly,
// made non-decreasing) and returns cost[T] = time(T) / time(1) for T = 0..cap (cost[0] unused). The
// grid stops at the first T costing max_commit decode steps or more (a round commits at most
// max_commit tokens: depth + 1, gamma + 1). Leaves the cache empty. latency_s: what every round costs
// beyond the forward (remote drafting: the network round trip), cost[T] = (latency + time(T)) /
// (latency + time(1)): the longer the trip, the more a large tree pays.
std::vector<double> measure_verify_cost(Session& s, int max_nodes, int max_commit, double latency_s = 0);

}  // namespace beagle
