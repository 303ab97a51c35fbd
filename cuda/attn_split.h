// attn_split.h: the target attention's fixed split of every query's keys into slices (cuda/attention.cu)
// and the bytes of its split-KV partials, in plain C++: kernels.cuh takes the constants from here, and the
// memory plan (src/cli/plan.cpp) counts the partials CudaOps::reserve allocates with the same formula.
#pragma once
#include <cstddef>

// The fixed split of every query's visible keys into slices of attn_split() keys (by visible index, never
// by T): the reduction order of a query's softmax, the same in every attention kernel (attention.cu).
// ATTN_SPLIT is the default; BEAGLE_CUDA_ATTN_SPLIT (a multiple of ATTN_BK) sets another for the whole
// process, read once. 32 (one K/V tile per slice: the most blocks a decode step can get), measured on the
// H100 (2026-11-27, scripts/gpu_knobs.sh, 256-token prompt): decode 227 -> 686 tok/s on a SmolLM2-shaped
// model (64: 538, 128: 368), 1423 -> 2332 tok/s on the 7B-shaped 2-layer one; real SmolLM2 274 -> 690 tok/s.
// Another slice length is another reduction order (other bits, the same in every kernel and batch size).
constexpr int ATTN_SPLIT = 32;
// Split-KV (a block per query, KV head and slice) for passes of at most ATTN_SPLIT_MAX_T queries; the
// query-tiled kernel above (prefill chunks). 64 covers every verify pass of a tree of 60, measured on the
// H200 (2026-11-27, scripts/gpu_knobs.sh and bench-sd, real SmolLM2): against 16, verify T = 24 / 64
// 12.9 / 15.3 -> 4.1 / 6.3 ms, prefill 7,148 -> 14,650 tok/s, decode unchanged (681 / 670 tok/s), and
// bench-sd tree-60 0.32x -> 0.59x (0 mismatches). Both kernels reduce a query's keys in the same slices,
// so the choice moves time, not bits.
constexpr int ATTN_SPLIT_MAX_T = 64;

// Bytes of the split-KV partials of T query rows over n_past + T keys in slices of `split` keys: per (row,
// query head, slice) the state m, l, the key count and o[head_dim], floats.
inline size_t attn_partials_bytes(int T, int n_heads, int head_dim, int n_past, int split) {
    const size_t slices = (size_t)(n_past + T + split - 1) / split;
    return (size_t)T * n_heads * slices * (head_dim + 3) * sizeof(float);
}
