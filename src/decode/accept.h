// accept.h: the acceptance rule of speculative decoding (SPEC section 1): which path of a verified
// draft tree is committed, and the target's token after it. Greedy: token-identical to plain greedy
// decoding; sampling: lossless rejection sampling (accept.cpp has the math).
#pragma once
#include <vector>

#include "sampling.h"
#include "tree.h"

namespace beagle {

// Walks the tree from the root; returns the accepted path (node indices, root first) and the target's
// token after it in *bonus. logits: the target's logits, one row of V per tree node (row i: the
// distribution of the token after node i). sp.temperature 0: greedy; otherwise sampled with rng.
// break_residual (TESTS ONLY): keep p after a rejection, the wrong rule, so a test can show it is caught.
std::vector<int> accept_path(const DraftTree& tree, const float* logits, int V, const SamplingParams& sp, Rng& rng,
                             int* bonus, bool break_residual = false);
// The greedy rule from the target's greedy tokens alone: y[i] = argmax of node i's logits (computed
// where the logits are, Llama::argmax_last), so the logits never have to reach the host.
std::vector<int> accept_greedy(const DraftTree& tree, const int* y, int* bonus);

}  // namespace beagle
