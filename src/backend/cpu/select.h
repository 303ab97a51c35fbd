// select.h: choosing entries of a row of scores on the host: argmax, the k largest, logsumexp, the sampling
// distribution (warp) and a draw from it. The CPU backend's topk_rows and warp_rows (ops.h) are these per
// row; sampling (src/decode/sampling.h) and the drafters use them on host logits. The CUDA backend's
// topk_rows (cuda/topk.cu) follows the same order.
#pragma once
#include <vector>

#include "../ops.h"  // WarpParams

namespace beagle {

int argmax(const float* logits, int n);                     // lowest index wins ties; NaN never wins
float log_sum_exp(const float* x, int n);                   // log sum_i e^x[i], max-shifted (vectorized exp)
double log_sum_exp_f64(const float* x, int n);             // the same in double, exp of each term in double (perplexity's NLL)
void top_k_indices(const float* x, int n, int k, int* out);  // the min(k, n) largest, descending; ties: lower index first

// The sampling distribution after temperature/top-k/top-p (WarpParams), as candidates sorted by decreasing
// probability (ties: lower id first) with probabilities summing to `total` (not renormalised, as run.c
// draws coin * total). The softmax and top-p walk mirror run.c's sample()/sample_topp().
struct Candidates {
    std::vector<int> ids;
    std::vector<float> probs;
    float total = 0.0f;
};
void warp(const float* logits, int n, const WarpParams& wp, Candidates* out);
// Dense normalised distribution over the vocabulary (zeros outside the kept candidates): Ops::warp_rows's row.
void warp_dense(const float* logits, int n, const WarpParams& wp, std::vector<float>* p);
int sample_candidates(const Candidates& c, float coin);
// Ops::warp_rows's draw: the first i whose running sum p[0] + ... + p[i] exceeds coin; none (rounding): the
// last i with p[i] > 0 (0 if none).
int draw_dense(const float* p, int n, float coin);

}  // namespace beagle
