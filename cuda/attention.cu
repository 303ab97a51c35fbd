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
// rows have the same visible indices as after compaction), split across blocks or not.
//
// attn_fwd_tiled_kernel: grid (cdiv(T, nq), n_kv_heads, n_slices). A block owns nq consecutive queries x
//   the group's heads = nq * group (query, head) tasks, spread over up to 8 warps, up to 4 tasks per warp
//   (states in registers, queries in shared memory). The block walks the union of its tasks' key ranges
//   in 32-key tiles of K and V staged ONCE in shared memory (coalesced) for all its tasks: K/V traffic
//   drops by the factor nq x group against one pass per (query, head) (SmolLM2 group 3: nq = 10, 30
//   tasks; 7B hd 128, group 4: nq = 7). Per task and tile: lane j scores key j (fma chain over head_dim,
//   +1-padded Ks rows: conflict-free), a ballot gives the visible keys, then the warp's state takes them
//   in order. n_slices = 1 (prefill, the target forward of training): a task visits all its keys,
//   merging at every ATTN_SPLIT-th visible key, and writes out. n_slices > 1 (split-KV, flash-decoding:
//   decode and verify passes over long caches, where cdiv(T, nq) x n_kv_heads blocks cannot fill a GPU,
//   SmolLM2 decode is 3 blocks): block z takes slice z of every task, rows narrowed to the slice
//   (attn_restrict: a tree node's ancestors beyond n_past are counted on the way), and writes the
//   slice's (m, l, key count, o) to a.partial. So a verify of T tokens reads the cache cdiv(T, nq) times
//   however it is split, not T times as a block per query would (cuda/dev/attention.cu version 6).
// attn_combine_kernel (after a split launch): grid (T, n_heads), one warp, lane owns dims lane + 32 i;
//   merges the non-empty slices in order with the same softmax_merge and writes out = o / l.
// A query that sees no key gets 0 (both ways).
// head_dim <= 128. Run-tested under the emulator against a double two-pass softmax reference for every
// mask kind, GQA groups 1..8 (and 32), head_dim 8..128, caches of several slices, poisoned shared
// memory and reverse/random thread orders; bit-identity of split and unsplit launches for every query tiling; and
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

// Narrows q to the rows that can hold its visible indices [v0, v1) and returns the visible index of the new
// first row. Rows below lo + n_pre map to visible indices directly; past them (a tree node's new rows) the
// index is known only by counting the visible keys on the way, so the range then runs to the query's end.
__device__ __forceinline__ int attn_restrict(AttnQuery& q, int v0, int v1) {
    const int c0 = min(v0, q.n_pre);
    if (v1 <= q.n_pre) q.hi = min(q.hi, q.lo + v1);
    q.lo += c0;
    return c0;
}

// out row of (t, h) = o / l (0 when the query saw no key).
__device__ __forceinline__ void attn_write(const AttnArgs& a, int t, int h, const OnlineSoftmax& st) {
    const int lane = threadIdx.x % 32, hd = a.head_dim;
    const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
    float* out = a.out + (long long)t * a.n_heads * hd + (long long)h * hd;
    for (int i = 0; i < ATTN_MAX_HD / 32; i++)
        if (lane + 32 * i < hd) out[lane + 32 * i] = st.o[i] * inv;
}

// Partial state of (t, h, slice): [m, l, n (keys, as float), o[0..hd)] (stride hd + 3 floats).
__device__ __forceinline__ float* attn_partial(const AttnArgs& a, int t, int h, int slice, int n_slices) {
    return a.partial + (((long long)t * a.n_heads + h) * n_slices + slice) * (a.head_dim + 3);
}

// ---- query-tiled flash attention, whole or split over key slices ----------------------------------------
__global__ void attn_fwd_tiled_kernel(AttnArgs a, int nq, int tpw, int n_slices) {
    DYN_SMEM(float, smem);
    const int kvh = blockIdx.y, t0 = blockIdx.x * nq;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
    const long long q_dim = (long long)a.n_heads * hd, kv_dim = (long long)a.n_kv_heads * hd;
    const int nt = min(nq, a.T - t0), ntasks = nt * group;
    // the visible indices [v0, v1) this block reduces: slice blockIdx.z of a split launch, else all
    const int v0 = n_slices > 1 ? blockIdx.z * a.split : 0;
    const int v1 = n_slices > 1 ? v0 + a.split : 0x7fffffff;
    const AttnTiledSmem sm = attn_tiled_smem(smem, hd, nq * group);
    const AttnTile tl = sm.tile;
    float *qs = sm.qs, *sc = sm.sc;  // qs[task][hd], this warp's scores
    // the block's key range: the union of its queries' ranges
    int blo = 0x7fffffff, bhi = 0;
    for (int i = 0; i < nt; i++) {
        AttnQuery q = attn_query(a, t0 + i);
        attn_restrict(q, v0, v1);
        if (q.hi > q.lo) {
            blo = min(blo, q.lo);
            bhi = max(bhi, q.hi);
        }
    }
    // this warp's tasks: k = warp + nw r -> query t0 + k / group, head kvh * group + k % group
    AttnQuery tq[ATTN_QT_TPW];
    OnlineSoftmax cur[ATTN_QT_TPW], acc[ATTN_QT_TPW];
    int c[ATTN_QT_TPW];  // visible index of the task's next visible key
    UNROLL for (int r = 0; r < ATTN_QT_TPW; r++) {
        const int k = warp + nw * r;
        softmax_reset(cur[r]);
        softmax_reset(acc[r]);
        c[r] = 0;
        if (r >= tpw || k >= ntasks) continue;
        tq[r] = attn_query(a, t0 + k / group);
        c[r] = attn_restrict(tq[r], v0, v1);
        const float* qrow = a.q + (t0 + k / group) * q_dim + (long long)(kvh * group + k % group) * hd;
        for (int d = lane; d < hd; d += 32) qs[k * hd + d] = qrow[d];
    }
    attn_tiled_walk(tl, a.k + kvh * hd, a.v + kvh * hd, kv_dim, blo, bhi, tpw, ntasks, qs, sc, hd, a.scale,
                    [&](int r, int j) { return tq[r].sees(j); },
                    [&](int r, float s, const float* vrow) {
                        if (c[r] >= v0 && c[r] < v1) {
                            if (c[r] > v0 && (c[r] - v0) % a.split == 0) {  // a slice is complete: merge, restart
                                softmax_merge(acc[r], cur[r].m, cur[r].l, cur[r].o, hd);
                                softmax_reset(cur[r]);
                            }
                            softmax_step(cur[r], s, vrow, hd);
                        }
                        c[r]++;
                    });
    UNROLL for (int r = 0; r < ATTN_QT_TPW; r++) {
        const int k = warp + nw * r;
        if (r >= tpw || k >= ntasks) break;
        const int t = t0 + k / group, h = kvh * group + k % group;
        const int n = max(0, min(c[r], v1) - v0);  // keys taken
        if (n > 0) softmax_merge(acc[r], cur[r].m, cur[r].l, cur[r].o, hd);  // exact from the empty state
        if (n_slices == 1) {
            attn_write(a, t, h, acc[r]);
            continue;
        }
        float* p = attn_partial(a, t, h, blockIdx.z, n_slices);
        if (lane == 0) {
            p[0] = acc[r].m;
            p[1] = acc[r].l;
            p[2] = (float)n;
        }
        for (int i = 0; i < ATTN_MAX_HD / 32; i++)
            if (lane + 32 * i < hd) p[3 + lane + 32 * i] = acc[r].o[i];
    }
}

// ---- split-KV combine -------------------------------------------------------------------------------------
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
    const bool split = a.partial && !a.kv_start && a.T <= attn_split_max_t() && n_slices > 1;
    const AttnTiling L = attn_tiling(a.T, a.n_heads, a.n_kv_heads, a.head_dim);
    KRUN(kr, dim3(cdiv(a.T, L.nq), a.n_kv_heads, split ? n_slices : 1), 32 * L.warps, L.smem, attn_fwd_tiled_kernel, a,
         L.nq, L.tpw, split ? n_slices : 1);
    if (split) KRUN(kr, dim3(a.T, a.n_heads), 32, 0, attn_combine_kernel, a, n_slices);
}
