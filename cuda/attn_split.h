// attn_split.h: the target attention's fixed split of every query's keys into slices (cuda/attention.cu)
// and the bytes of its split-KV partials, in plain C++: kernels.cuh takes the constants from here, and the
// memory plan (src/cli/plan.cpp) counts the partials CudaOps::reserve allocates with the same formula.
#pragma once
#include <cstddef>

// The fixed split of every query's visible keys into slices of attn_split() keys (by visible index, never
// by T): the reduction order of a query's softmax, the same in every attention kernel (attention.cu).
// ATTN_SPLIT is the default; BEAGLE_CUDA_ATTN_SPLIT (a multiple of ATTN_BK) sets another for the whole
// process, read once. 32 is one K/V tile per slice: the most blocks a decode step can get, which a
// small model's decode step (a few blocks per layer otherwise) needs to fill the GPU; scripts/gpu_knobs.sh
// compares other lengths (docs/gpu.md).
// Another slice length is another reduction order (other bits, the same in every kernel and batch size).
constexpr int ATTN_SPLIT = 32;
// Split-KV (a block per query tile, KV head and slice) for passes of at most ATTN_SPLIT_MAX_T queries; one
// block per query tile and KV head above (prefill chunks). 64 covers every verify pass of a tree of 60: a
// verify pass has too few query tiles to fill the GPU, so it splits the keys as well. Both launches reduce
// a query's keys in the same slices, so the choice moves time, not bits.
constexpr int ATTN_SPLIT_MAX_T = 64;

// Bytes of the split-KV partials of T query rows over n_past + T keys in slices of `split` keys: per (row,
// query head, slice) the state m, l, the key count and o[head_dim], floats.
inline size_t attn_partials_bytes(int T, int n_heads, int head_dim, int n_past, int split) {
    const size_t slices = (size_t)(n_past + T + split - 1) / split;
    return (size_t)T * n_heads * slices * (head_dim + 3) * sizeof(float);
}
