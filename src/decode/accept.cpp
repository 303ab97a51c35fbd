// accept.cpp: the acceptance rule (see accept.h). At each node, from the root, with p the target's
// distribution after that node (sampling: warped by temperature, top-k, top-p as plain sampling is):
//   greedy:   y = argmax p; the child whose token is y is accepted and the walk goes on from it; no
//             such child: stop, the bonus token is y. The committed tokens are plain greedy decoding's.
//   sampling: children x (drafted from q, or chosen deterministically: q a point mass at x) are tried
//             in turn; x is accepted with probability min(1, p(x) / q(x)); on its rejection p becomes
//             the residual norm(max(0, p - q)) before the next sibling (SpecInfer / EAGLE multi-candidate
//             rule). A point mass gives min(1, p(x)) and the residual p with x removed, renormalised.
//             No child accepted (or a leaf): the bonus token is drawn from the current p. The committed
//             tokens are distributed exactly as the target's own samples (test_spec_sampling checks it).
#include "accept.h"

#include <algorithm>
#include <cmath>

namespace beagle {

// A draw from p (unnormalised, p >= 0) with the coin in [0, 1).
static int sample_dense(const std::vector<float>& p, float coin) {
    float total = 0;
    for (float v : p) total += v;
    float r = coin * total, cdf = 0;
    int last = 0;
    for (size_t i = 0; i < p.size(); i++) {
        if (p[i] <= 0) continue;
        cdf += p[i];
        last = (int)i;
        if (r < cdf) return (int)i;
    }
    return last;
}

// A candidate x drawn from q is accepted with probability min(1, p(x) / q(x)).
static float accept_prob(float px, float qx) { return qx > 0 ? std::min(1.0f, px / qx) : 0.0f; }

// After candidate x's rejection: p <- norm(max(0, p - q)), q a point mass at x when null. False (p left
// unnormalised: the caller restores it) when nothing is left: p == q exactly, which cannot follow a rejection.
static bool residual(std::vector<float>* pv, const float* q, int x) {
    std::vector<float>& p = *pv;
    const int V = (int)p.size();
    double sum = 0;
    if (q) {
        for (int i = 0; i < V; i++) { p[i] = std::max(0.0f, p[i] - q[i]); sum += p[i]; }
    } else {
        p[x] = 0;
        for (int i = 0; i < V; i++) sum += p[i];
    }
    if (sum <= 0) return false;
    for (int i = 0; i < V; i++) p[i] = (float)(p[i] / sum);
    return true;
}

std::vector<int> accept_path(const DraftTree& tree, const LogitsRow& row, int V, const SamplingParams& sp, Rng& rng,
                             int* bonus) {
    if (sp.temperature <= 0) {
        std::vector<int> y(tree.size());
        for (int i = 0; i < tree.size(); i++) y[i] = argmax(row(i), V);
        return accept_greedy(tree, y.data(), bonus);
    }
    std::vector<std::vector<int>> kids = tree.children();
    std::vector<int> path(1, 0);
    int cur = 0;
    std::vector<float> p, p0;
    for (;;) {
        warp_dense(row(cur), V, sp, &p);
        p0 = p;
        int next = -1;
        for (int c : kids[cur]) {
            int x = tree.token[c];
            const float* q = tree.q[c];
            if (rng.next_f32() < (q ? accept_prob(p[x], q[x]) : p[x])) { next = c; break; }
            if (!residual(&p, q, x)) p = p0;
        }
        if (next < 0) { *bonus = sample_dense(p, rng.next_f32()); return path; }
        path.push_back(next);
        cur = next;
    }
}

std::vector<int> accept_chain(const DraftTree& tree, const float* px, const float* qx, const ChainRows& fetch, Rng& rng,
                              int* bonus) {
    const int n = tree.size() - 1;
    std::vector<int> path(1, 0);
    std::vector<float> p, q;
    for (int k = 0; k < n; k++) {
        if (rng.next_f32() < accept_prob(px[k], qx[k])) {
            path.push_back(k + 1);
            continue;
        }
        fetch(k, &p, &q);  // node k's p and child k + 1's q: the residual's
        const std::vector<float> p0 = p;
        if (!residual(&p, q.data(), tree.token[k + 1])) p = p0;
        *bonus = sample_dense(p, rng.next_f32());
        return path;
    }
    fetch(n, &p, nullptr);  // the leaf's p: the bonus token's
    *bonus = sample_dense(p, rng.next_f32());
    return path;
}

std::vector<int> accept_typical(const DraftTree& tree, const LogitsRow& row, int V, const SamplingParams& sp, Rng&,
                                int* bonus) {
    const std::vector<std::vector<int>> kids = tree.children();
    std::vector<char> pass(tree.size(), 0);
    std::vector<double> p(V);
    for (int i = 0; i < tree.size(); i++) {
        if (kids[i].empty()) continue;
        const float* z = row(i);
        double mx = -INFINITY, sum = 0, zsum = 0;
        for (int v = 0; v < V; v++) mx = std::max(mx, (double)z[v] / sp.temperature);
        for (int v = 0; v < V; v++) {
            const double y = (double)z[v] / sp.temperature - mx;
            p[v] = std::exp(y);
            sum += p[v];
            zsum += p[v] * y;
        }
        const double entropy = std::log(sum) - zsum / sum;  // H = -sum p log p, p = e^y / sum
        const double threshold = std::min(kTypicalEpsilon, kTypicalDelta * std::exp(-entropy));
        for (int c : kids[i]) pass[c] = p[tree.token[c]] / sum > threshold;
    }
    // len[i]: the longest chain of passing nodes under i; best[i]: its first node (-1: none)
    std::vector<int> len(tree.size(), 0), best(tree.size(), -1);
    for (int i = tree.size() - 1; i >= 0; i--)
        for (int c : kids[i])
            if (pass[c] && 1 + len[c] > len[i]) len[i] = 1 + len[c], best[i] = c;
    std::vector<int> path(1, 0);
    while (best[path.back()] >= 0) path.push_back(best[path.back()]);
    *bonus = argmax(row(path.back()), V);
    return path;
}

std::vector<int> accept_greedy(const DraftTree& tree, const int* y, int* bonus) {
    std::vector<std::vector<int>> kids = tree.children();
    std::vector<int> path(1, 0);
    for (int cur = 0;;) {
        int next = -1;
        for (int c : kids[cur])
            if (tree.token[c] == y[cur]) { next = c; break; }
        if (next < 0) { *bonus = y[cur]; return path; }
        path.push_back(next);
        cur = next;
    }
}

}  // namespace beagle
