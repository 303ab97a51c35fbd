// accept.h: the acceptance rule of speculative decoding (docs/method.md): which path of a verified
// draft tree is committed, and the target's token after it. Greedy: token-identical to plain greedy
// decoding; sampling: lossless rejection sampling (accept.cpp has the math).
#pragma once
#include <functional>
#include <vector>

#include "sampling.h"
#include "tree.h"

namespace beagle {

// The target's logits row of tree node i (V floats: the distribution of the token after node i), valid
// until the next call: a host array's row, or a row brought down from the backend when it is asked for.
using LogitsRow = std::function<const float*(int node)>;

// Walks the tree from the root; returns the accepted path (node indices, root first) and the target's
// token after it in *bonus. row(i): the target's logits of node i. sp.temperature 0: greedy (every row
// read); otherwise sampled with rng, reading only the rows of the path, in order: the root's, then each
// accepted child's (a rejection's residual is built from its parent's row, already read).
std::vector<int> accept_path(const DraftTree& tree, const LogitsRow& row, int V, const SamplingParams& sp, Rng& rng,
                             int* bonus);
// A rule with accept_path's contract: what the engine (SpecDecoder) applies to a sampled tree's rows.
using AcceptRule = std::vector<int> (*)(const DraftTree& tree, const LogitsRow& row, int V, const SamplingParams& sp,
                                        Rng& rng, int* bonus);
// A sampled chain drawn on the backend (DraftTree::backend_q): the walk of accept_path over the chain, reading
// only what it needs. px[k] = p_k(x_{k+1}), node k's warped target distribution at child k + 1's token, and
// qx[k] = q(x_{k+1}), for k < n = tree.size() - 1. Where the walk ends, fetch(k, p, q) fills node k's warped
// p row (V floats) and, after child k + 1's rejection (q not null), that child's q row over the target's
// vocabulary. Given the same p and q floats it takes accept_path's decisions and draws, seed for seed.
using ChainRows = std::function<void(int k, std::vector<float>* p, std::vector<float>* q)>;
std::vector<int> accept_chain(const DraftTree& tree, const float* px, const float* qx, const ChainRows& fetch, Rng& rng,
                              int* bonus);
// Medusa-2's typical acceptance (LOSSY: the committed tokens are not distributed as the target's samples; never
// a default, `--accept typical`). With p_i = softmax(logits_i / temperature) the target's distribution after node
// i (no top-k / top-p cut) and H(p_i) its entropy, a child x of node i passes if
//     p_i(x) > min(kTypicalEpsilon, kTypicalDelta exp(-H(p_i))).
// The accepted path is the longest chain of passing nodes from the root (ties: the lower node index, the drafter's
// preference); the token after it is the target's argmax there (Medusa takes its own model's first token greedily
// and always accepts it). rng is not used: given the tree the result is deterministic. At temperature 0 p is a
// point mass and only the argmax passes: the greedy rule (callers refuse it there).
constexpr double kTypicalEpsilon = 0.09, kTypicalDelta = 0.3;  // Medusa's posterior_threshold, posterior_alpha
std::vector<int> accept_typical(const DraftTree& tree, const LogitsRow& row, int V, const SamplingParams& sp, Rng& rng,
                                int* bonus);
// The greedy rule from the target's greedy tokens alone: y[i] = argmax of node i's logits (computed
// where the logits are, Llama::argmax_last), so the logits never have to reach the host.
std::vector<int> accept_greedy(const DraftTree& tree, const int* y, int* bonus);

}  // namespace beagle
