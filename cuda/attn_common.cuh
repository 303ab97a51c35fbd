// attn_common.cuh: the flash-style attention steps shared by attention.cu (the target's self-attention)
// and xattn.cu (the draft's cross-attention): K/V tiles in shared memory and, per query head (one
// warp), an online softmax that visits the visible keys ONE AT A TIME in increasing key order.
//
// Why key by key: the running max / sum / output of a query then depend only on the sequence of keys
// it sees, not on where the tile boundaries fall or on which other queries share the block. So a
// query's output is bit-identical in a decode step, a prefill chunk or a tree-verify pass (where its
// ancestors sit at other cache rows): the batch invariance that makes greedy speculative decoding
// exact (docs/method.md "Exactness is a kernel property").
//
// Shared memory (floats, dynamic): Ks[ATTN_BK][hd + 1], Vs[ATTN_BK][hd + 1] (the +1 pad makes the
// lane-per-key reads of Ks conflict-free), then per warp: qs[hd], dos[hd] (backward), sc[ATTN_BK].
#pragma once
#include "kernels.cuh"

struct AttnTile {
    float* Ks;
    float* Vs;
    int ld;  // head_dim + 1
};

// Per-warp state of one query head: running max m, running sum l, output o (lane owns dims lane + 32 i).
struct OnlineSoftmax {
    float m, l;
    float o[ATTN_MAX_HD / 32];
};

__device__ __forceinline__ void softmax_reset(OnlineSoftmax& st) {
    st.m = -INFINITY;
    st.l = 0.0f;
    UNROLL for (int i = 0; i < ATTN_MAX_HD / 32; i++) st.o[i] = 0.0f;
}

// One key's update of the warp's state: score s, value row vr (lane owns dims lane + 32 i).
__device__ __forceinline__ void softmax_step(OnlineSoftmax& st, float s, const float* vr, int hd) {
    const int lane = threadIdx.x % 32;
    const float m_new = fmaxf(st.m, s);
    const float alpha = expf(st.m - m_new);  // 0 for the first key (m = -inf)
    const float p = expf(s - m_new);
    st.l = fmaf(st.l, alpha, p);
    UNROLL for (int i = 0; i < ATTN_MAX_HD / 32; i++) {
        const int d = lane + 32 * i;
        if (d < hd) st.o[i] = fmaf(st.o[i], alpha, p * vr[d]);
    }
    st.m = m_new;
}

// acc <- acc merged with the state (mp, lp, op) of a later, non-empty slice of keys (flash-decoding's
// combine). ONE formula for every kernel that merges slices (attention.cu: the query-tiled kernel in
// registers, the split-KV combine kernel from global memory), so both give the same bits. op[i] is
// the slice's unnormalised output at dim lane + 32 i. From the empty state (m = -inf, l = 0, o = 0)
// the merge returns the slice exactly (alpha = 0, beta = 1).
__device__ __forceinline__ void softmax_merge(OnlineSoftmax& acc, float mp, float lp, const float* op, int hd) {
    const int lane = threadIdx.x % 32;
    const float m_new = fmaxf(acc.m, mp);
    const float alpha = expf(acc.m - m_new), beta = expf(mp - m_new);
    acc.l = fmaf(acc.l, alpha, lp * beta);
    UNROLL for (int i = 0; i < ATTN_MAX_HD / 32; i++)
        if (lane + 32 * i < hd) acc.o[i] = fmaf(acc.o[i], alpha, op[i] * beta);
    acc.m = m_new;
}

// Stage rows [k0, k0 + nk) of K and V (row stride kv_stride, already offset to the kv head) into the
// tile. Every thread of the block calls it (it has barriers).
__device__ __forceinline__ void attn_load_tile(const AttnTile& tl, const float* K, const float* V, long long kv_stride,
                                               int k0, int nk, int hd) {
    __syncthreads();  // the previous tile has been consumed
    for (int idx = threadIdx.x; idx < nk * hd; idx += blockDim.x) {
        const int j = idx / hd, d = idx % hd;
        tl.Ks[j * tl.ld + d] = K[(long long)(k0 + j) * kv_stride + d];
        tl.Vs[j * tl.ld + d] = V[(long long)(k0 + j) * kv_stride + d];
    }
    __syncthreads();
}

// Score of tile key j (lane = j) against the warp's query: fma chain over d in order, times scale.
__device__ __forceinline__ float attn_score(const AttnTile& tl, const float* qs, int j, int hd, float scale) {
    float s = 0.0f;
    const float* kr = tl.Ks + j * tl.ld;
    for (int d = 0; d < hd; d++) s = fmaf(qs[d], kr[d], s);
    return s * scale;
}

// Forward over one key segment [lo, hi) of K/V with visibility vis(key) (a functor; the same for the
// whole warp). Block-uniform loop: every thread calls it with the same lo, hi; `active` says whether
// this warp has a query head in the current round.
template <class Vis>
__device__ void attn_fwd_segment(const AttnTile& tl, const float* K, const float* V, long long kv_stride, int lo,
                                 int hi, Vis vis, const float* qs, float* sc, int hd, float scale, bool active,
                                 OnlineSoftmax& st) {
    const int lane = threadIdx.x % 32;
    for (int k0 = lo; k0 < hi; k0 += ATTN_BK) {
        const int nk = min(ATTN_BK, hi - k0);
        attn_load_tile(tl, K, V, kv_stride, k0, nk, hd);
        if (!active) continue;
        const bool seen = lane < nk && vis(k0 + lane);
        if (seen) sc[lane] = attn_score(tl, qs, lane, hd, scale);
        const unsigned vmask = __ballot_sync(0xffffffffu, seen);
        __syncwarp();
        for (int j = 0; j < nk; j++)
            if ((vmask >> j) & 1u) softmax_step(st, sc[j], tl.Vs + j * tl.ld, hd);
        __syncwarp();  // sc is rewritten by the next tile
    }
}

// Backward (dq) over one key segment: with p = exp(s - L) and ds = p (dout . v - D),
// dq += scale * ds * k for the visible keys in increasing order (lane j scores key j, then the lanes
// owning the dims accumulate the keys one by one).
template <class Vis>
__device__ void attn_bwd_dq_segment(const AttnTile& tl, const float* K, const float* V, long long kv_stride, int lo,
                                    int hi, Vis vis, const float* qs, const float* dos, float* sc, int hd, float scale,
                                    float L, float D, bool active, float* dq) {
    const int lane = threadIdx.x % 32;
    for (int k0 = lo; k0 < hi; k0 += ATTN_BK) {
        const int nk = min(ATTN_BK, hi - k0);
        attn_load_tile(tl, K, V, kv_stride, k0, nk, hd);
        if (!active) continue;
        const bool seen = lane < nk && vis(k0 + lane);
        if (seen) {
            const float s = attn_score(tl, qs, lane, hd, scale);
            float pv = 0.0f;
            const float* vr = tl.Vs + lane * tl.ld;
            for (int d = 0; d < hd; d++) pv = fmaf(dos[d], vr[d], pv);
            const float p = expf(s - L);
            sc[lane] = p * (pv - D);
        }
        const unsigned vmask = __ballot_sync(0xffffffffu, seen);
        __syncwarp();
        for (int j = 0; j < nk; j++) {
            if (!((vmask >> j) & 1u)) continue;
            const float g = sc[j] * scale;
            const float* kr = tl.Ks + j * tl.ld;
            for (int i = 0; i < ATTN_MAX_HD / 32; i++) {
                const int d = lane + 32 * i;
                if (d < hd) dq[i] = fmaf(g, kr[d], dq[i]);
            }
        }
        __syncwarp();
    }
}

// Query-tiled pass of one block over keys [lo, hi) of K/V (row stride kv_stride, offset to the kv
// head): 32-key tiles staged once in shared memory for all the block's (query, head) tasks; task k
// = warp + nw r (r < tpw <= ATTN_QT_TPW, k < ntasks) has its query row at qs + k hd. The loop over r
// is unrolled, so vis(r, .) and step(r, ...) see a constant r and index their per-task state in
// registers (callers loop over r the same way). For each tile and task: lane j
// scores key j if vis(r, row) says the task sees it, a ballot gives the visible keys, and
// step(r, s, v_row) takes them in increasing row order. Every thread of the block calls it.
template <class Vis, class Step>
__device__ void attn_tiled_walk(const AttnTile& tl, const float* K, const float* V, long long kv_stride, int lo, int hi,
                                int tpw, int ntasks, const float* qs, float* sc, int hd, float scale, Vis vis,
                                Step step) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int k0 = lo; k0 < hi; k0 += ATTN_BK) {
        const int nk = min(ATTN_BK, hi - k0);
        attn_load_tile(tl, K, V, kv_stride, k0, nk, hd);  // its first barrier also publishes qs
        UNROLL for (int r = 0; r < ATTN_QT_TPW; r++) {    // r a constant in each copy: the callers'
            const int k = warp + nw * r;                  // per-task arrays stay in registers
            if (r >= tpw || k >= ntasks) break;           // warp-uniform
            const bool seen = lane < nk && vis(r, k0 + lane);
            if (seen) sc[lane] = attn_score(tl, qs + k * hd, lane, hd, scale);
            const unsigned vmask = __ballot_sync(0xffffffffu, seen);
            __syncwarp();
            for (int j = 0; j < nk; j++)
                if ((vmask >> j) & 1u) step(r, sc[j], tl.Vs + j * tl.ld);
            __syncwarp();  // sc is rewritten by the next task
        }
    }
}

// Dynamic shared memory carve-up of the query-tiled forward kernels (attn_fwd_tiled_kernel,
// xattn_fwd_kernel): the K and V tiles (ATTN_BK rows of hd + 1 floats: the +1 keeps a column's reads
// conflict-free), the block's staged queries qs[task][hd] for up to `tasks` (query, head) tasks, then
// each warp's ATTN_BK scores sc.
struct AttnTiledSmem {
    AttnTile tile;
    float* qs;  // [task][hd]
    float* sc;  // this warp's ATTN_BK scores
};
__device__ __forceinline__ AttnTiledSmem attn_tiled_smem(float* base, int hd, int tasks) {
    AttnTiledSmem s;
    s.tile.ld = hd + 1;
    s.tile.Ks = base;
    s.tile.Vs = base + ATTN_BK * s.tile.ld;
    s.qs = s.tile.Vs + ATTN_BK * s.tile.ld;
    s.sc = s.qs + (long long)tasks * hd + (threadIdx.x / 32) * ATTN_BK;
    return s;
}

// Dynamic shared memory carve-up for `warps` warps.
struct AttnSmem {
    AttnTile tile;
    float* qs;   // this warp's query row
    float* dos;  // this warp's dout row (backward)
    float* sc;   // this warp's ATTN_BK scores
};
__device__ __forceinline__ AttnSmem attn_smem(float* base, int hd) {
    AttnSmem s;
    const int ld = hd + 1, warp = threadIdx.x / 32;
    s.tile.Ks = base;
    s.tile.Vs = base + ATTN_BK * ld;
    s.tile.ld = ld;
    float* w = base + 2 * ATTN_BK * ld + warp * (2 * hd + ATTN_BK);
    s.qs = w;
    s.dos = w + hd;
    s.sc = w + 2 * hd;
    return s;
}
