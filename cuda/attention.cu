// attention.cu: the target's self-attention over its KV cache (forward only: the target is frozen),
// flash-style with the mask given compactly (kernels.cuh AttnArgs = ops.h AttnMask): causal with a KV
// cache (query t sees cache rows [0, n_past + t]), tree verify (rows [0, n_past) plus the new rows
// whose bit is set in the query's ancestor bitmask), or independent sequences (query t sees exactly
// rows [kv_start[t], kv_start[t] + kv_len[t])). No T x T matrix anywhere. GQA: the query heads of one
// kv head share its K/V tiles. Launched (launch_attention at the end) by the CUDA backend
// (src/backend/gpu/ops_cuda.cu: attention); tested by test/kernels/cuda_emu_kernels_attention.cpp.
//
// The reduction order (batch invariance, docs/method.md "Exactness is a kernel property"): number the keys a
// query sees 0, 1, 2, ... in increasing cache row (its visible index: the row itself for a causal
// query, row - kv_start for a sequence, n_past + rank among its ancestors for a tree node). Keys
// [S s, S s + S) form slice s, S = attn_split() (attn_split.h ATTN_SPLIT unless BEAGLE_CUDA_ATTN_SPLIT
// says otherwise: one value for the whole process, never chosen from T, the batch or the cache length).
// Inside a slice the online softmax runs key by key in order from the empty state
// (attn_common.cuh softmax_step); the slices' states (m, l, o) are then merged in slice order
// (softmax_merge). A query's output is a function of its visible key sequence alone: the same bits
// in a decode step, a prefill chunk of any size, a tree-verify pass (its ancestors at other cache
// rows have the same visible indices as after compaction), computed by either kernel below.
//
// attn_fwd_tiled_kernel (prefill, verify, the target forward of training): grid (cdiv(T, nq),
//   n_kv_heads). A block owns nq consecutive queries x the group's heads = nq * group (query, head)
//   tasks, spread over up to 8 warps, up to 4 tasks per warp (states in registers, queries in shared
//   memory). The block walks the union of its queries' key ranges in 32-key tiles of K and V staged
//   ONCE in shared memory (coalesced) for all its tasks: K/V traffic drops by the factor nq x group
//   against one pass per (query, head) (SmolLM2 group 3: nq = 10, 30 tasks; 7B hd 128, group 4:
//   nq = 7). Per task and tile: lane j scores key j (fma chain over head_dim, +1-padded Ks rows:
//   conflict-free), a ballot gives the visible keys, then the warp's state takes them in order,
//   merging at every ATTN_SPLIT-th visible key.
// attn_split_kernel + attn_combine_kernel (flash-decoding; decode and short verify over long caches,
//   where T x n_kv_heads blocks cannot fill a GPU: SmolLM2 decode is 3 blocks): grid (T, n_kv_heads,
//   n_slices), one block per slice of one query, a warp per query head (rounds of 8 for larger
//   groups); the block starts at the slice's first row (a tree node's ancestors beyond n_past are
//   counted on the way) and writes the slice's (m, l, key count, o) to a.partial. The combine kernel
//   (grid (T, n_heads), one warp, lane owns dims lane + 32 i) merges the non-empty slices in order
//   with the same softmax_merge and writes out = o / l. A query that sees no key gets 0 (both).
// head_dim <= 128. Run-tested under the emulator against a double two-pass softmax reference for every
// mask kind, GQA groups 1..8 (and 32), head_dim 8..128, caches of several slices, poisoned shared
// memory and reverse/random thread orders; bit-identity of the two kernels for every query tiling; and
// batch invariance (a query alone == in a batch; a tree node == the same keys decoded causally at other
// cache rows, across a slice boundary). No PTX paths.
#include <cstdlib>

#include "attn_common.cuh"

// The keys query t sees: rows [lo, hi); inside them rows >= n_past are tested against the tree bits
// (when there are bits). n_pre: how many rows from lo on are visible without a test, so that the key
// at row lo + i (i < n_pre) has visible index i.
struct AttnQuery {
    int lo, hi, n_pre, n_past;
    const uint64_t* bits;
    __device__ bool sees(int j) const {
        if (j < lo || j >= hi) return false;
        if (!bits || j < n_past) return true;
        const int b = j - n_past;
        return (bits[b / 64] >> (b % 64)) & 1u;
    }
};
// n_past from the device when a.n_past_dev is set (a captured decode step: the launch arguments stay fixed
// from step to step, a.n_past then bounds it and sizes the split-KV grid; slices past the keys are empty).
__device__ __forceinline__ AttnQuery attn_query(const AttnArgs& a, int t) {
    AttnQuery q;
    const int n_past = a.n_past_dev ? *a.n_past_dev : a.n_past;
    q.lo = 0;
    q.n_past = n_past;
    q.bits = nullptr;
    if (a.kv_start) {
        q.lo = a.kv_start[t];
        q.hi = q.lo + a.kv_len[t];
        q.n_pre = a.kv_len[t];
    } else if (a.tree) {
        q.hi = n_past + a.T;
        q.bits = a.tree + (long long)t * a.mask_words;
        q.n_pre = n_past;
    } else {
        q.hi = n_past + t + 1;
        q.n_pre = q.hi;
    }
    return q;
}

// out row of (t, h) = o / l (0 when the query saw no key).
__device__ __forceinline__ void attn_write(const AttnArgs& a, int t, int h, const OnlineSoftmax& st) {
    const int lane = threadIdx.x % 32, hd = a.head_dim;
    const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
    float* out = a.out + (long long)t * a.n_heads * hd + (long long)h * hd;
    for (int i = 0; i < ATTN_MAX_HD / 32; i++)
        if (lane + 32 * i < hd) out[lane + 32 * i] = st.o[i] * inv;
}

// ---- query-tiled flash attention ----------------------------------------------------------------
__global__ void attn_fwd_tiled_kernel(AttnArgs a, int nq, int tpw) {
    DYN_SMEM(float, smem);
    const int kvh = blockIdx.y, t0 = blockIdx.x * nq;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
    const long long q_dim = (long long)a.n_heads * hd, kv_dim = (long long)a.n_kv_heads * hd;
    const int nt = min(nq, a.T - t0), ntasks = nt * group;
    const AttnTiledSmem sm = attn_tiled_smem(smem, hd, nq * group);
    const AttnTile tl = sm.tile;
    float *qs = sm.qs, *sc = sm.sc;  // qs[task][hd], this warp's scores
    // the block's key range: the union of its queries' ranges
    int blo = 0x7fffffff, bhi = 0;
    for (int i = 0; i < nt; i++) {
        const AttnQuery q = attn_query(a, t0 + i);
        if (q.hi > q.lo) {
            blo = min(blo, q.lo);
            bhi = max(bhi, q.hi);
        }
    }
    // this warp's tasks: k = warp + nw r -> query t0 + k / group, head kvh * group + k % group
    AttnQuery tq[ATTN_QT_TPW];
    OnlineSoftmax cur[ATTN_QT_TPW], acc[ATTN_QT_TPW];
    int nvis[ATTN_QT_TPW];
    UNROLL for (int r = 0; r < ATTN_QT_TPW; r++) {
        const int k = warp + nw * r;
        softmax_reset(cur[r]);
        softmax_reset(acc[r]);
        nvis[r] = 0;
        if (r >= tpw || k >= ntasks) continue;
        tq[r] = attn_query(a, t0 + k / group);
        const float* qrow = a.q + (t0 + k / group) * q_dim + (long long)(kvh * group + k % group) * hd;
        for (int d = lane; d < hd; d += 32) qs[k * hd + d] = qrow[d];
    }
    attn_tiled_walk(tl, a.k + kvh * hd, a.v + kvh * hd, kv_dim, blo, bhi, tpw, ntasks, qs, sc, hd, a.scale,
                    [&](int r, int j) { return tq[r].sees(j); },
                    [&](int r, float s, const float* vrow) {
                        if (nvis[r] > 0 && nvis[r] % a.split == 0) {  // a slice is complete: merge, restart
                            softmax_merge(acc[r], cur[r].m, cur[r].l, cur[r].o, hd);
                            softmax_reset(cur[r]);
                        }
                        softmax_step(cur[r], s, vrow, hd);
                        nvis[r]++;
                    });
    UNROLL for (int r = 0; r < ATTN_QT_TPW; r++) {
        const int k = warp + nw * r;
        if (r >= tpw || k >= ntasks) break;
        if (nvis[r] > 0) softmax_merge(acc[r], cur[r].m, cur[r].l, cur[r].o, hd);
        attn_write(a, t0 + k / group, kvh * group + k % group, acc[r]);
    }
}

// ---- split-KV (flash-decoding) ------------------------------------------------------------------
// Partial state of (t, h, slice): [m, l, n (keys, as float), o[0..hd)] (stride hd + 3 floats).
__device__ __forceinline__ float* attn_partial(const AttnArgs& a, int t, int h, int slice, int n_slices) {
    return a.partial + (((long long)t * a.n_heads + h) * n_slices + slice) * (a.head_dim + 3);
}

__global__ void attn_split_kernel(AttnArgs a, int n_slices) {
    DYN_SMEM(float, smem);
    const int t = blockIdx.x, kvh = blockIdx.y, z = blockIdx.z;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
    const long long q_dim = (long long)a.n_heads * hd, kv_dim = (long long)a.n_kv_heads * hd;
    const AttnSmem sm = attn_smem(smem, hd);
    const AttnQuery q = attn_query(a, t);
    const int v0 = z * a.split, v1 = v0 + a.split;  // the slice's visible indices [v0, v1)
    // Start at the slice's first row when the visible indices map to rows directly, else at the end of
    // the directly visible rows (a tree node's ancestors: counted on the way).
    const int c0 = min(v0, q.n_pre);
    const float* K = a.k + kvh * hd;
    const float* V = a.v + kvh * hd;
    for (int r = 0; r < group; r += nw) {  // rounds of nw heads
        const int hg = r + warp;
        const bool active = hg < group;
        const int h = kvh * group + hg;
        if (active) {
            for (int d = lane; d < hd; d += 32) sm.qs[d] = a.q[t * q_dim + (long long)h * hd + d];
            __syncwarp();
        }
        OnlineSoftmax st;
        softmax_reset(st);
        int c = c0;  // visible index of the next visible key (the same in every warp: block-uniform)
        for (int k0 = q.lo + c0; k0 < q.hi && c < v1; k0 += ATTN_BK) {
            const int nk = min(ATTN_BK, q.hi - k0);
            attn_load_tile(sm.tile, K, V, kv_dim, k0, nk, hd);
            const bool seen = lane < nk && q.sees(k0 + lane);
            const unsigned vmask = __ballot_sync(0xffffffffu, seen);
            if (active && seen) sm.sc[lane] = attn_score(sm.tile, sm.qs, lane, hd, a.scale);
            __syncwarp();
            for (int j = 0; j < nk; j++) {
                if (!((vmask >> j) & 1u)) continue;
                if (active && c >= v0 && c < v1) softmax_step(st, sm.sc[j], sm.tile.Vs + j * sm.tile.ld, hd);
                c++;
            }
            __syncwarp();  // sc is rewritten by the next tile
        }
        if (active) {
            float* p = attn_partial(a, t, h, z, n_slices);
            const int n = max(0, min(c, v1) - v0);
            if (lane == 0) {
                p[0] = st.m;
                p[1] = st.l;
                p[2] = (float)n;
            }
            for (int i = 0; i < ATTN_MAX_HD / 32; i++)
                if (lane + 32 * i < hd) p[3 + lane + 32 * i] = st.o[i];
            __syncwarp();  // qs is rewritten in the next round
        }
    }
}

__global__ void attn_combine_kernel(AttnArgs a, int n_slices) {
    const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x, hd = a.head_dim;
    OnlineSoftmax acc;
    softmax_reset(acc);
    for (int z = 0; z < n_slices; z++) {
        const float* p = attn_partial(a, t, h, z, n_slices);
        if (p[2] == 0.0f) break;  // slice z holds visible indices [z S, z S + S): once one is empty, so are the rest
        float op[ATTN_MAX_HD / 32];
        for (int i = 0; i < ATTN_MAX_HD / 32; i++) op[i] = lane + 32 * i < hd ? p[3 + lane + 32 * i] : 0.0f;
        softmax_merge(acc, p[0], p[1], op, hd);
    }
    attn_write(a, t, h, acc);
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
static int g_attn_split = 0;  // 0: not read yet

int attn_split() {
    if (g_attn_split == 0) {
        const char* s = getenv("BEAGLE_CUDA_ATTN_SPLIT");
        const int v = s ? atoi(s) : 0;
        g_attn_split = v >= ATTN_BK && v % ATTN_BK == 0 ? v : ATTN_SPLIT;
    }
    return g_attn_split;
}

void attn_set_split(int keys) { g_attn_split = keys; }

static int g_attn_split_max_t = 0;  // 0: not read yet

int attn_split_max_t() {
    if (g_attn_split_max_t == 0) g_attn_split_max_t = env_positive("BEAGLE_CUDA_ATTN_SPLIT_MAX_T", ATTN_SPLIT_MAX_T);
    return g_attn_split_max_t;
}

size_t attn_split_scratch_bytes(int T, int n_heads, int head_dim, int n_past) {
    return attn_partials_bytes(T, n_heads, head_dim, n_past, attn_split());
}

void launch_attention(const AttnArgs& args, KernelRunner& kr) {
    if (args.T <= 0) return;
    AttnArgs a = args;
    a.split = attn_split();
    kcheck(kr, a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "attention: n_heads %d not a multiple of n_kv_heads %d",
           a.n_heads, a.n_kv_heads);
    kcheck(kr, a.head_dim > 0 && a.head_dim <= ATTN_MAX_HD, "attention: head_dim %d outside 1..%d (CUDA backend)",
           a.head_dim, ATTN_MAX_HD);
    kcheck(kr, !a.tree || a.mask_words * 64 >= a.T, "attention: tree mask of %d words cannot cover %d tokens",
           a.mask_words, a.T);
    const int group = a.n_heads / a.n_kv_heads;
    kcheck(kr, group <= ATTN_QT_WARPS * ATTN_QT_TPW, "attention: GQA group of %d heads is larger than %d", group,
           ATTN_QT_WARPS * ATTN_QT_TPW);
    const int n_slices = attn_slices(a.n_past, a.T);
    if (a.partial && !a.kv_start && a.T <= attn_split_max_t() && n_slices > 1) {
        const int warps = min(group, ATTN_QT_WARPS);
        const size_t smem = (size_t)attn_smem_floats(a.head_dim, warps) * sizeof(float);
        KRUN(kr, dim3(a.T, a.n_kv_heads, n_slices), 32 * warps, smem, attn_split_kernel, a, n_slices);
        KRUN(kr, dim3(a.T, a.n_heads), 32, 0, attn_combine_kernel, a, n_slices);
        return;
    }
    const AttnTiling L = attn_tiling(a.T, a.n_heads, a.n_kv_heads, a.head_dim);
    KRUN(kr, dim3(cdiv(a.T, L.nq), a.n_kv_heads), 32 * L.warps, L.smem, attn_fwd_tiled_kernel, a, L.nq, L.tpw);
}
