// select.h: choosing entries of a row of scores on the host: argmax, the k largest, logsumexp. The CPU
// backend's topk_rows (ops.h) is these per row; sampling (src/decode/sampling.h) and the drafters
// use them on host logits. The CUDA backend's topk_rows (cuda/topk.cu) follows the same order.
#pragma once

namespace beagle {

int argmax(const float* logits, int n);                     // lowest index wins ties; NaN never wins
float log_sum_exp(const float* x, int n);                   // log sum_i e^x[i], max-shifted (vectorized exp)
void top_k_indices(const float* x, int n, int k, int* out);  // the min(k, n) largest, descending; ties: lower index first

}  // namespace beagle
