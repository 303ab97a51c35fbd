// verify_cost.cpp: the verify cost model (see verify_cost.h): start-up timing of target forwards of
// T tokens (measure_verify_cost, time_verify) and the online correction from the engine's timings.
#include "verify_cost.h"

#include <algorithm>

#include "../core/common.h"
#include "tree.h"

namespace beagle {

void VerifyCost::observe(int T, double seconds, int context) {
    if (table_.empty() || T < 1 || !(seconds > 0)) return;
    range_ = range_of(context);
    RunningMean32 &t1 = t1_[range_], &b = b_[range_];
    const int settled = settled_, u = unit_ <= max_tokens() ? unit_ : 1;
    settled_ = T <= std::max(2, u) ? settled_ + 1 : 0;
    since_t1_[range_]++;
    if (T == u) {
        if (settled < kSettle) return;  // soon after a larger pass: not the step plain decoding runs (verify_cost.h)
        t1.add(seconds / base(u));  // one token's step (base(1) = 1)
        since_t1_[range_] = 0;
    } else if (T > u && t1.n >= kMinT1) {
        const double e = (seconds / t1.v - base(T)) / (T - 1);
        b.add(std::min(1.0, std::max(-0.25, e)));
    }
    const double step = seconds / (*this)[T];
    step_s_ = step_s_ > 0 ? step_s_ + (step - step_s_) / 16 : step;
}

int best_prefix(const double* p, int count, const VerifyCost& cost) {
    count = std::min(count, cost.max_tokens() - 1);
    double expect = 1, best = 1.0 / cost[1];
    int keep = 0;
    for (int i = 0; i < count; i++) {
        expect += p[i];
        const double gain = expect / cost[i + 2];
        if (gain > best) {
            best = gain;
            keep = i + 1;
        }
    }
    return keep;
}

double time_verify(Llama& m, const int* tokens, int T, int reps, double (*clock)()) {
    const int n0 = m.n_past();
    DraftTree chain;
    chain.reset(tokens[0]);
    for (int i = 1; i < T; i++) chain.add(i - 1, tokens[i], 0.0f);
    std::vector<uint64_t> mask;
    chain.mask(&mask);
    std::vector<int> pos(T);
    for (int i = 0; i < T; i++) pos[i] = n0 + i;
    std::vector<float> logits((size_t)T * m.config().vocab_size);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = clock();
        m.forward(chain.token.data(), pos.data(), T, mask.data(), chain.words(), logits.data(), T, nullptr, 0);
        best = std::min(best, clock() - t0);
        m.truncate(n0);
    }
    return best;
}

std::vector<double> measure_verify_cost(Session& s, int max_nodes, int max_commit, double latency_s) {
    Llama& m = *s.llama;
    int cap = std::max(2, std::min({max_nodes, m.max_batch(), m.ctx() - 40}));
    // a context of typical length (attention grows with it), as much as fits
    const int n_ctx = std::max(1, std::min(160, m.ctx() - cap - 1));
    m.truncate(0);
    std::vector<int> toks(n_ctx + cap);
    for (size_t i = 0; i < toks.size(); i++) toks[i] = (int)(i * 7919 % m.config().vocab_size);
    m.prefill(toks.data(), n_ctx, nullptr);
    const int* tree_toks = toks.data() + n_ctx;
    // Every T up to 10, then sparser: the CPU kernels run tokens in tiles of 4 (AVX2) or 8 (AVX-512), so
    // 5 tokens cost a tile of 4 and one of 1 on AVX2 (9 tokens one of 8 and one of 1 on AVX-512), a step
    // that a line between 4 and 6 would price too low, and small trees are what rounds mostly send.
    std::vector<int> grid;
    for (int T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 24, 32, 48, 64, 96, 128})
        if (T < cap) grid.push_back(T);
    grid.push_back(cap);
    // A pass runs slower for several passes after a larger one (a CPU's clock recovering from the
    // heavier load), so each T is
    // timed as it runs in a row: the best of two passes, the first bringing the machine to that T's
    // state, with the grid walked from the largest T down (each T after its neighbour, the plain step
    // last, after the 2-token pass). Sweep 0, upward, only finds the useful end of the grid: a round
    // commits at most max_commit tokens, so a verify costing more can never beat plain steps. Then
    // `sweeps` downward sweeps, interleaved so that every T sees the same machine conditions; per T the
    // median of the sweeps.
    const int sweeps = 3;
    const double t1 = latency_s + time_verify(m, tree_toks, 1, 2);  // its first pass warms caches and the pool
    for (size_t g = 1; g < grid.size(); g++)
        if (latency_s + time_verify(m, tree_toks, grid[g], 1) >= max_commit * t1) {
            grid.resize(g + 1);
            break;
        }
    std::vector<std::vector<double>> t(grid.size());
    for (int r = 0; r < sweeps; r++)
        for (size_t g = grid.size(); g-- > 0;) t[g].push_back(latency_s + time_verify(m, tree_toks, grid[g], 2));
    std::vector<double> med(grid.size());
    for (size_t g = 0; g < grid.size(); g++) {
        std::sort(t[g].begin(), t[g].end());
        med[g] = t[g][t[g].size() / 2];
    }
    cap = grid.back();
    m.truncate(0);
    std::vector<double> cost(cap + 1, 1.0);
    for (size_t g = 0; g + 1 < grid.size(); g++)
        for (int T = grid[g]; T <= grid[g + 1]; T++) {
            double f = (double)(T - grid[g]) / (grid[g + 1] - grid[g]);
            cost[T] = ((1 - f) * med[g] + f * med[g + 1]) / med[0];
        }
    for (int T = 2; T <= cap; T++) cost[T] = std::max(cost[T], cost[T - 1]);  // timing noise
    return cost;
}

}  // namespace beagle
