// tree.cu: one depth of the drafter's EAGLE-2 dynamic tree on the GPU, so a tree round needs no host round
// trip between depths (docs/gpu.md "The device-resident loop"). Launched (launch_tree_expand at the end) by the CUDA
// backend (src/backend/gpu/ops_cuda.cu: CudaOps::tree_expand, after topk_kernel and row_lse_kernel wrote the
// depth's top-k and logsumexps); tested by test/kernels/cuda_emu_kernels_tree.cpp against the drafter's
// host expansion (stable sort of the frontier by score) on random scores with ties.
//
// tree_expand_kernel, math: query row i < n expands node p_i = rows[i] (the root at depth 0) into k
//   children c = n_nodes + i k + j with tok = idx_ij, parent = p_i, score = score(p_i) + (val_ij - lse_i)
//   (float, in that order: the host's bits), live = live(p_i) and (depth == 0 or not score(p_i) <
//   min_score) (the host pops rows below min_score before expanding them; here they run and their children
//   are marked dead). Then the next depth's queries: the n_next best children by key = live ? score : -inf
//   (NaN as -inf), ties to the lower index: the host's stable sort over creation order. Query rank r gets
//   rows_next[r] = c, ids_next[r] = max(tok, 0) (the id the next forward embeds; a dead -1 pad embeds row
//   0 and is never live) and mask_next[r] = mask[i] | bit (base + i) (the parent row's predicted-key bits,
//   its ancestors', plus the parent's own kept prediction).
// Layout: nodes is n_max x 4 ints (tok, parent, score as float bits, live: ops.h TreeNode), creation order;
//   idx, val: n x k row-major (topk_kernel), lse: n; mask, mask_next: rows x words uint64 (double-buffered
//   by the caller: row i of mask is read while row r of mask_next is written).
// Grid: one block (m = n k children: at most topk^2, 100 for the defaults); thread t handles children t,
//   t + blockDim, ... in both phases, a __syncthreads between them (phase 2 reads every child's key).
// Why it is fast enough: m is small, so a rank count (each child counts the children that precede it in
//   (key desc, index asc), O(m^2 / threads) compares, 40 per thread at m = 100 with 256 threads) replaces a
//   sort: no shared memory, no atomics, and the ranks are distinct because the pairs are. Its cost is one
//   launch, a few microseconds, against the host round trip (a blocking copy and the CPU's expansion) it
//   replaces at every depth.
#include "kernels.cuh"

__device__ __forceinline__ float tree_key(const int* nodes, int c) {
    const float s = __int_as_float(nodes[4 * c + 2]);
    return nodes[4 * c + 3] && !isnan(s) ? s : -INFINITY;
}

__global__ void tree_expand_kernel(TreeExpandKArgs a) {
    const int m = a.n * a.k;
    const float min_score = a.min_score_dev ? *a.min_score_dev : a.min_score;
    for (int e = threadIdx.x; e < m; e += blockDim.x) {
        const int i = e / a.k, p = a.depth == 0 ? 0 : a.rows[i];
        const float ps = a.depth == 0 ? 0.0f : __int_as_float(a.nodes[4 * p + 2]);
        const int alive = a.depth == 0 ? 1 : (a.nodes[4 * p + 3] && !(ps < min_score));
        int* c = a.nodes + 4 * (long long)(a.n_nodes + e);
        c[0] = a.idx[e];
        c[1] = p;
        c[2] = __float_as_int(ps + (a.val[e] - a.lse[i]));
        c[3] = alive;
    }
    __syncthreads();
    if (a.n_next == 0) return;
    for (int e = threadIdx.x; e < m; e += blockDim.x) {
        const float ke = tree_key(a.nodes, a.n_nodes + e);
        int rank = 0;
        for (int f = 0; f < m; f++) {
            const float kf = tree_key(a.nodes, a.n_nodes + f);
            rank += kf > ke || (kf == ke && f < e);
        }
        if (rank >= a.n_next) continue;
        const int i = e / a.k, tok = a.nodes[4 * (a.n_nodes + e)];
        a.rows_next[rank] = a.n_nodes + e;
        a.ids_next[rank] = tok > 0 ? tok : 0;
        for (int w = 0; w < a.words; w++) {
            uint64_t bits = a.mask ? a.mask[(long long)i * a.words + w] : 0;
            if (a.base >= 0 && (a.base + i) / 64 == w) bits |= 1ULL << ((a.base + i) % 64);
            a.mask_next[(long long)rank * a.words + w] = bits;
        }
    }
}

// ---- launcher (kernels.cuh) --------------------------------------------------------------------
void launch_tree_expand(const TreeExpandKArgs& a, KernelRunner& kr) {
    kcheck(kr, a.n >= 1 && a.k >= 1 && a.n_next >= 0 && a.n_next <= a.n * a.k, "tree_expand: n %d k %d n_next %d",
           a.n, a.k, a.n_next);
    kcheck(kr, a.depth == 0 ? a.n == 1 : a.rows != nullptr, "tree_expand: depth %d with %d rows and no row list",
           a.depth, a.n);
    kcheck(kr, a.n_next == 0 || (a.rows_next && a.ids_next && (a.words == 0 || a.mask_next)),
           "tree_expand: the next depth's buffers are missing");
    KRUN(kr, 1, 256, 0, tree_expand_kernel, a);
}
