// attention.cu: the target's self-attention over its KV cache (forward only: the target is frozen),
// flash-style with the mask given compactly (kernels.cuh AttnArgs = ops.h AttnMask): causal with a KV
// cache (query t sees cache rows [0, n_past + t]), tree verify (rows [0, n_past) plus the new rows
// whose bit is set in the query's ancestor bitmask), or independent sequences (query t sees exactly
// rows [kv_start[t], kv_start[t] + kv_len[t])). No T x T matrix anywhere. GQA: the query heads of one
// kv head share its K/V tiles. Launched (launch_* at the end) by the CUDA backend
// (src/backend/gpu/ops_cuda.cu: attention);
// tested by test/kernels/cuda_emu_kernels_attention.cpp.
//
// attn_fwd_kernel: grid (T, n_kv_heads), one warp per query head of the group (warps loop over the
//   group's heads in rounds when the group is larger). K/V tiles of 32 rows go through shared memory;
//   lane j scores key j of the tile (fma chain over head_dim), then the warp runs the online softmax
//   over the visible keys one at a time in key order (attn_common.cuh: bit-identical results whatever
//   T, the tiling or the cache row of each visible key). out = o / l; a query that sees no key
//   gets 0. head_dim <= 128 (4 dims per lane).
// Run-tested under the emulator against a double two-pass softmax reference for every mask kind
// (causal with n_past, tree bitmasks over two 64-bit words, per-query key ranges), GQA groups 1..8,
// head_dim 8..128, poisoned shared memory and reverse/random thread orders; and for batch invariance
// (a query's row is bit-identical computed alone or in a batch, and at other cache rows in a tree).
// No PTX paths.
#include "attn_common.cuh"

struct AttnVis {  // visibility of cache row j to query t when there is a tree mask
    const uint64_t* bits;  // the query's mask row, or null (causal: every row below hi is visible)
    int n_past;
    __device__ bool operator()(int j) const {
        if (!bits || j < n_past) return true;
        const int b = j - n_past;
        return (bits[b / 64] >> (b % 64)) & 1u;
    }
};

__global__ void attn_fwd_kernel(AttnArgs a) {
    DYN_SMEM(float, smem);
    const int t = blockIdx.x, kvh = blockIdx.y;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
    const long long q_dim = (long long)a.n_heads * hd, kv_dim = (long long)a.n_kv_heads * hd;
    const AttnSmem sm = attn_smem(smem, hd);
    // the visible key range [lo, hi) of this query, and the predicate inside it
    int lo = 0, hi;
    AttnVis vis{nullptr, a.n_past};
    if (a.kv_start) {
        lo = a.kv_start[t];
        hi = lo + a.kv_len[t];
    } else if (a.tree) {
        hi = a.n_past + a.T;
        vis.bits = a.tree + (long long)t * a.mask_words;
    } else {
        hi = a.n_past + t + 1;
    }
    const float* K = a.k + kvh * hd;
    const float* V = a.v + kvh * hd;
    for (int r = 0; r < group; r += nw) {  // rounds of nw heads
        const int hg = r + warp;           // head index inside the group
        const bool active = hg < group;
        const int h = kvh * group + hg;
        if (active) {
            for (int d = lane; d < hd; d += 32) sm.qs[d] = a.q[t * q_dim + (long long)h * hd + d];
            __syncwarp();
        }
        OnlineSoftmax st;
        st.m = -INFINITY;
        st.l = 0.0f;
        for (int i = 0; i < ATTN_MAX_HD / 32; i++) st.o[i] = 0.0f;
        attn_fwd_segment(sm.tile, K, V, kv_dim, lo, hi, vis, sm.qs, sm.sc, hd, a.scale, active, st);
        if (active) {
            const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
            for (int i = 0; i < ATTN_MAX_HD / 32; i++) {
                const int d = lane + 32 * i;
                if (d < hd) a.out[t * q_dim + (long long)h * hd + d] = st.o[i] * inv;
            }
            __syncwarp();  // qs is rewritten in the next round
        }
    }
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
void launch_attention(const AttnArgs& a, KernelRunner& kr) {
    if (a.T <= 0) return;
    kcheck(kr, a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "attention: n_heads %d not a multiple of n_kv_heads %d",
           a.n_heads, a.n_kv_heads);
    kcheck(kr, a.head_dim > 0 && a.head_dim <= ATTN_MAX_HD, "attention: head_dim %d outside 1..%d (CUDA backend)",
           a.head_dim, ATTN_MAX_HD);
    kcheck(kr, !a.tree || a.mask_words * 64 >= a.T, "attention: tree mask of %d words cannot cover %d tokens",
           a.mask_words, a.T);
    const int group = a.n_heads / a.n_kv_heads, warps = group < 4 ? group : 4;
    const size_t smem = (size_t)attn_smem_floats(a.head_dim, warps) * sizeof(float);
    KRUN(kr, dim3(a.T, a.n_kv_heads), 32 * warps, smem, attn_fwd_kernel, a);
}
