// tree.h: a draft token tree for one verify pass. Node 0 is the root (the token the target already
// chose, whose K/V are not cached yet); every other node is a draft candidate with a parent of lower
// index (nodes are in topological order, so a node's ancestors precede it). A chain is a tree where
// each node has one child.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace beagle {

struct DraftTree {
    std::vector<int> token, parent, depth;
    std::vector<float> score;              // drafter's cumulative log-probability (ranking only)
    std::vector<const float*> q;           // per node: draft distribution it was SAMPLED from, or
                                           // nullptr = chosen deterministically (point mass)
    // A chain drawn on the backend (BeagleDrafter, Draft::sample_ids): node k + 1 was drawn from row k of
    // rows (cols floats each, a backend buffer), at column col[k]; column j is target token d2t[j] (d2t
    // null: j). The host walk (SpecDecoder) fetches only what it reads; q[] of those nodes stays null.
    struct BackendQ {
        const float* rows = nullptr;
        int cols = 0;
        const int32_t* d2t = nullptr;
        std::vector<int> col;
        // A downloaded row (cols floats) over the target's vocabulary of V tokens (zeros elsewhere).
        void to_target(const float* row, int V, std::vector<float>* q) const {
            q->assign(V, 0.0f);
            for (int j = 0; j < cols; j++) (*q)[d2t ? d2t[j] : j] = row[j];
        }
    } backend_q;

    void reset(int root_token) {
        token.assign(1, root_token);
        parent.assign(1, -1);
        depth.assign(1, 0);
        score.assign(1, 0.0f);
        q.assign(1, nullptr);
        backend_q.rows = nullptr;
        backend_q.col.clear();
    }
    int add(int par, int tok, float sc, const float* qdist = nullptr) {
        token.push_back(tok);
        parent.push_back(par);
        depth.push_back(depth[par] + 1);
        score.push_back(sc);
        q.push_back(qdist);
        return (int)token.size() - 1;
    }
    int size() const { return (int)token.size(); }
    int words() const { return (size() + 63) / 64; }
    // Visibility mask for Llama::forward: row i has the bits of i and its ancestors.
    void mask(std::vector<uint64_t>* m) const {
        int W = words();
        m->assign((size_t)size() * W, 0);
        for (int i = 0; i < size(); i++)
            for (int j = i; j >= 0; j = parent[j]) (*m)[(size_t)i * W + j / 64] |= 1ULL << (j % 64);
    }
    // Children of each node in index order (index order = the drafter's preference order).
    std::vector<std::vector<int>> children() const {
        std::vector<std::vector<int>> c(size());
        for (int i = 1; i < size(); i++) c[parent[i]].push_back(i);
        return c;
    }
    // Keep only the first n nodes (all ancestors of a kept node are kept: topological order).
    void truncate(int n) {
        if (n >= size()) return;
        token.resize(n);
        parent.resize(n);
        depth.resize(n);
        score.resize(n);
        q.resize(n);
        if (backend_q.col.size() > (size_t)n - 1) backend_q.col.resize(n - 1);
    }
};

}  // namespace beagle
