// attention.cu: the target's causal / tree attention over its KV cache (forward), from one thread per
// (query, head) to the shipped kernels (cuda/attention.cu: attn_fwd_tiled_kernel, whole or split over key
// slices, and attn_combine_kernel). Read after the two matmuls. Build and run: `make cuda-dev`, or on a GPU `nvcc -O2 -arch=sm_80 cuda/dev/attention.cu -o attention`.
//
// out[t, h] = sum_j softmax_j(scale q[t, h] . k[j, kvh]) v[j, kvh] over the cache rows j that query t
// sees: every row below n_past, then among the T new rows either the causal prefix (rows n_past..
// n_past + t) or, for a tree-verify pass, the query's ancestors and itself (a bitmask per query).
// GQA: head h reads kv head kvh = h / group. All versions take kernels.cuh AttnArgs (the shipped
// interface) and are checked on a causal and on a tree mask.
//
// A MODEL (derived, not measured) for a 64-node tree-verify step of SmolLM2-135M (9 query heads, 3 kv heads,
// head_dim 64) over a 1024-token cache: n = 1088 keys, T = 64 queries. K and V of one kv head are
// 1088 x 64 x 4 B = 279 KB each, 1.7 MB for the layer; q.k and p v are 2 x 2 T 9 n 64 = 160 MFLOP.
// Reading K/V once makes 96 FLOP/byte; if every (query, head) re-reads them it drops to 0.5.
//
// version 1: one thread per (query, head), three passes over the keys through a global score row
//   (llm.c's first attention): scores and their max, then exp and the sum, then the weighted sum of
//   V. Every thread reads all of K and V itself (T x 9 = 576 threads x 557 KB = 320 MB requested),
//   lanes read rows 256 bytes apart (uncoalesced), the score row costs T x heads x n floats of
//   memory and traffic, and only 576 threads exist: a few warps per SM on a 132-SM GPU.
// version 2: one warp per (query, head). Lanes score keys j = lane, lane + 32, ... in parallel; the
//   max and the sum are warp shuffles (common.cuh warp_max / warp_sum); for the output, lane owns dims
//   lane and lane + 32, so the 32 lanes read a V row as consecutive floats (coalesced). 32x the
//   threads and coalesced V reads, but still the n-float score row per query and two passes.
// version 3: online softmax (one pass, no score row). Keys go by tiles of 32: lane j scores key j of
//   the tile, the warp takes the tile max m' and sum l', rescales its running (m, l, o) by exp(m - m')
//   and adds the tile. State per query is O(head_dim), any cache length works, K/V are read once per
//   query head. The K reads are still lane-per-row (uncoalesced), and the 3 heads of a kv group each
//   read the same K/V tiles from global memory.
// version 4: grid (T, kv heads), one warp per query head of the group. Each 32-key tile of K and V
//   is staged ONCE in shared memory by the whole block (consecutive threads read consecutive floats:
//   coalesced) and serves all the group's heads (3x less K/V traffic for SmolLM2's GQA); the +1 row
//   padding makes the lane-per-key reads of Ks conflict-free. The softmax update runs key by key in
//   key order (attn_common.cuh): a query's output then depends only on the keys it sees, not on tile
//   boundaries or its batch, so a token gets the same bits in decode, prefill and tree verify (greedy
//   speculative decoding is exact). That costs two expf per key instead of one per tile, and a serial
//   update: the price of batch invariance. K/V requests: T x 3 kv heads x 557 KB = 107 MB, served by
//   L2 (the 1.7 MB of K/V stay resident); DRAM sees them about once.
// version 5 (shipped for prefill, cuda/attention.cu attn_fwd_tiled_kernel unsplit): flash-attention's query
//   tiles. A block owns nq queries x the group's heads (SmolLM2: 10 queries x 3 heads = 30 tasks on 8 warps,
//   states in registers), so one staged K/V tile serves 30 (query, head) pairs instead of 3: K/V requests
//   drop to cdiv(64, 10) x 3 x 557 KB = 11.7 MB for the step. The order stays key by key per query, with
//   one change that makes split-KV possible (v6, v7): the visible keys of a query form fixed slices of
//   ATTN_SPLIT keys (attn_split.h; by visible index, never chosen from T), each reduced from the empty
//   state, and the slice states are merged in order (attn_common.cuh softmax_merge).
// version 6: flash-decoding for decode and short verify passes over long caches. T x kv heads blocks
//   are too few to fill a GPU (SmolLM2 decode: 3 blocks for 132 SMs); one block per (query, kv head,
//   key slice) writes the slice's (m, l, o) and a one-warp combine (the shipped attn_combine_kernel)
//   merges the slices in order with the same formula: bit-identical to v5 (test/kernels/cuda_emu_kernels_attention.cpp checks it),
//   so a backend may pick by T freely and stays batch invariant. A 4096-token 7B decode with 32-key
//   slices: 128 slices x 8 kv heads = 1024 blocks instead of 8. But a verify pass of T tokens now reads
//   the cache T times (one block per query): 64 x 279 KB x 6 for this step, 107 MB again.
// version 7 (shipped for decode and verify, attn_fwd_tiled_kernel split over gridDim.z + the combine):
//   v5's query tiles, each block one key slice of its tile's tasks. The slices of a tree node past
//   n_past are known only by counting its ancestors (attention.cu attn_restrict), so the last blocks
//   walk the new rows and count; the cache is read once per query tile (11.7 MB as v5) by
//   cdiv(64, 10) x 3 x 35 = 735 blocks, and decode (one query) gets v6's grid.
// Tolerance (per output element, against a double two-pass reference): a score is an hd-term fp32
// chain, off by at most e = gamma_hd scale sum_d |q k| + u |s|; a softmax weight then moves by at most
// 2 E (E the largest e over the visible keys), and the sums, rescalings, exp and division add at most
// (4 n + 16) u (n visible keys), all times V = the largest |v[j][d]| the output mixes:
// tol = (2 E + (4 n + 16) u) V.
#include "dev.cuh"
#include "../attention.cu"

// Which cache rows query t sees (v1 - v3 test keys one by one; the shipped kernel turns the same mask
// into a key range plus a bit test).
__device__ __forceinline__ bool attn_sees(const AttnArgs& a, int t, int j) {
    if (j < a.n_past) return true;
    const int b = j - a.n_past;  // new row b of this pass
    if (!a.tree) return b <= t;
    return (a.tree[(long long)t * a.mask_words + b / 64] >> (b % 64)) & 1u;
}

// Scaled score of cache row j for the query row q under kv head kvh: an fma chain over head_dim.
__device__ __forceinline__ float attn_score_row(const AttnArgs& a, const float* q, int kvh, int j) {
    const float* k = a.k + (long long)j * a.n_kv_heads * a.head_dim + kvh * a.head_dim;
    float dot = 0.0f;
    for (int d = 0; d < a.head_dim; d++) dot = fmaf(q[d], k[d], dot);
    return dot * a.scale;
}

// ---- CPU reference ----------------------------------------------------------------------------------
struct AttnCase {
    int T, n_past, n_heads, n_kv_heads, hd;
    std::vector<int> parent;  // tree: parent node of each new token (-1: child of the cache); empty: causal
    std::vector<float> q, k, v;
    std::vector<uint64_t> bits;  // tree: T x words ancestor-or-self bitmask (what the kernels read)
    int words;
};
static bool ref_sees(const AttnCase& c, int t, int j) {
    if (j < c.n_past) return true;
    const int b = j - c.n_past;
    if (c.parent.empty()) return b <= t;
    for (int u = t; u >= 0; u = c.parent[u])  // walk up from the query to the root
        if (u == b) return true;
    return false;
}
static void attention_cpu(const AttnCase& c, std::vector<double>& ref, std::vector<double>& tol) {
    const int n = c.n_past + c.T, group = c.n_heads / c.n_kv_heads, hd = c.hd;
    const int q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
    const double scale = 1.0 / sqrt((double)hd), gamma = dev_gamma(hd);
    ref.assign((size_t)c.T * q_dim, 0.0);
    tol.assign((size_t)c.T * q_dim, 0.0);
    std::vector<double> s(n);
    for (int t = 0; t < c.T; t++)
        for (int h = 0; h < c.n_heads; h++) {
            const float* qr = &c.q[(size_t)t * q_dim + h * hd];
            const int kvh = h / group;
            double m = -INFINITY, E = 0;
            int nvis = 0;
            for (int j = 0; j < n; j++) {
                if (!ref_sees(c, t, j)) continue;
                double da;
                s[j] = dev_dot(qr, &c.k[(size_t)j * kv_dim + kvh * hd], hd, &da) * scale;
                m = fmax(m, s[j]);
                E = fmax(E, gamma * scale * da + DEV_U32 * fabs(s[j]));
                nvis++;
            }
            double l = 0;
            for (int j = 0; j < n; j++)
                if (ref_sees(c, t, j)) l += exp(s[j] - m);
            for (int i = 0; i < hd; i++) {
                double o = 0, vmax = 0;
                for (int j = 0; j < n; j++) {
                    if (!ref_sees(c, t, j)) continue;
                    const double vj = c.v[(size_t)j * kv_dim + kvh * hd + i];
                    o += exp(s[j] - m) / l * vj;
                    vmax = fmax(vmax, fabs(vj));
                }
                ref[(size_t)t * q_dim + h * hd + i] = o;
                tol[(size_t)t * q_dim + h * hd + i] = (2 * E + (4.0 * nvis + 16) * DEV_U32) * vmax + 1e-30;
            }
        }
}

// ---- version 1: one thread per (query, head), three passes through a global score row ----------------
__global__ void attention_v1_kernel(AttnArgs a, float* att) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= a.T * a.n_heads) return;
    const int t = idx / a.n_heads, h = idx % a.n_heads, hd = a.head_dim, n = a.n_past + a.T;
    const int kvh = h / (a.n_heads / a.n_kv_heads), kv_dim = a.n_kv_heads * hd;
    const float* q = a.q + (long long)t * a.n_heads * hd + h * hd;
    float* s = att + (long long)idx * n;  // this (query, head)'s score row
    float m = -INFINITY;
    for (int j = 0; j < n; j++) {  // pass 1: scores and their max
        if (!attn_sees(a, t, j)) continue;
        s[j] = attn_score_row(a, q, kvh, j);
        m = fmaxf(m, s[j]);
    }
    float l = 0.0f;
    for (int j = 0; j < n; j++) {  // pass 2: exponentials and their sum
        if (!attn_sees(a, t, j)) continue;
        s[j] = expf(s[j] - m);
        l += s[j];
    }
    float* out = a.out + (long long)t * a.n_heads * hd + h * hd;
    for (int d = 0; d < hd; d++) {  // pass 3: the weighted sum of V
        float o = 0.0f;
        for (int j = 0; j < n; j++)
            if (attn_sees(a, t, j)) o = fmaf(s[j], a.v[(long long)j * kv_dim + kvh * hd + d], o);
        out[d] = l > 0.0f ? o / l : 0.0f;
    }
}

// ---- version 2: one warp per (query, head), keys across lanes, warp reductions -----------------------
__global__ void attention_v2_kernel(AttnArgs a, float* att) {
    const int lane = threadIdx.x % 32, idx = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= a.T * a.n_heads) return;  // whole warps
    const int t = idx / a.n_heads, h = idx % a.n_heads, hd = a.head_dim, n = a.n_past + a.T;
    const int kvh = h / (a.n_heads / a.n_kv_heads), kv_dim = a.n_kv_heads * hd;
    const float* q = a.q + (long long)t * a.n_heads * hd + h * hd;
    float* s = att + (long long)idx * n;
    float m = -INFINITY;
    for (int j = lane; j < n; j += 32) {  // lane j scores keys j, j + 32, ...
        if (!attn_sees(a, t, j)) continue;
        s[j] = attn_score_row(a, q, kvh, j);
        m = fmaxf(m, s[j]);
    }
    m = warp_max(m);
    float l = 0.0f;
    for (int j = lane; j < n; j += 32)
        if (attn_sees(a, t, j)) {
            s[j] = expf(s[j] - m);
            l += s[j];
        }
    l = warp_sum(l);
    __syncwarp();  // the score row written by every lane is read by every lane below
    float* out = a.out + (long long)t * a.n_heads * hd + h * hd;
    for (int d = lane; d < hd; d += 32) {  // lane owns dims lane, lane + 32, ...: coalesced V reads
        float o = 0.0f;
        for (int j = 0; j < n; j++)
            if (attn_sees(a, t, j)) o = fmaf(s[j], a.v[(long long)j * kv_dim + kvh * hd + d], o);
        out[d] = l > 0.0f ? o / l : 0.0f;
    }
}

// ---- version 3: online softmax over tiles of 32 keys, one pass, no score row ------------------------
__global__ void attention_v3_kernel(AttnArgs a) {
    const int lane = threadIdx.x % 32, idx = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= a.T * a.n_heads) return;
    const int t = idx / a.n_heads, h = idx % a.n_heads, hd = a.head_dim, n = a.n_past + a.T;
    const int kvh = h / (a.n_heads / a.n_kv_heads), kv_dim = a.n_kv_heads * hd;
    const float* q = a.q + (long long)t * a.n_heads * hd + h * hd;
    float m = -INFINITY, l = 0.0f, o[ATTN_MAX_HD / 32];  // running max, sum, output (dims lane + 32 i)
    for (int i = 0; i < ATTN_MAX_HD / 32; i++) o[i] = 0.0f;
    for (int k0 = 0; k0 < n; k0 += 32) {
        const int j = k0 + lane;
        float s = -INFINITY;
        if (j < n && attn_sees(a, t, j)) s = attn_score_row(a, q, kvh, j);
        const float m_tile = warp_max(s);
        if (m_tile == -INFINITY) continue;  // nothing visible in this tile (warp-uniform)
        const float m_new = fmaxf(m, m_tile), alpha = expf(m - m_new);  // alpha = 0 on the first tile
        const float p = expf(s - m_new);                                 // 0 for unseen keys
        l = fmaf(l, alpha, warp_sum(p));
        for (int i = 0; i < ATTN_MAX_HD / 32; i++) o[i] *= alpha;
        for (int jj = 0; jj < 32 && k0 + jj < n; jj++) {
            const float pj = __shfl_sync(0xffffffffu, p, jj);  // key jj's weight, from lane jj
            const float* v = a.v + (long long)(k0 + jj) * kv_dim + kvh * hd;
            for (int i = 0; i < ATTN_MAX_HD / 32; i++)
                if (lane + 32 * i < hd) o[i] = fmaf(pj, v[lane + 32 * i], o[i]);
        }
        m = m_new;
    }
    float* out = a.out + (long long)t * a.n_heads * hd + h * hd;
    for (int i = 0; i < ATTN_MAX_HD / 32; i++)
        if (lane + 32 * i < hd) out[lane + 32 * i] = l > 0.0f ? o[i] / l : 0.0f;
}

// ---- version 4: a block per (query, kv head), K/V tiles shared by the group's heads -------------------
__global__ void attention_v4_kernel(AttnArgs a) {
    DYN_SMEM(float, smem);
    const int t = blockIdx.x, kvh = blockIdx.y;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
    const long long q_dim = (long long)a.n_heads * hd, kv_dim = (long long)a.n_kv_heads * hd;
    const AttnSmem sm = attn_smem(smem, hd);
    struct Vis {  // cache rows below n_past, then the tree bits (or the causal prefix)
        const AttnArgs* a;
        int t;
        __device__ bool operator()(int j) const { return attn_sees(*a, t, j); }
    };
    const int hi = a.tree ? a.n_past + a.T : a.n_past + t + 1;
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
        attn_fwd_segment(sm.tile, a.k + kvh * hd, a.v + kvh * hd, kv_dim, 0, hi, Vis{&a, t}, sm.qs, sm.sc, hd,
                         a.scale, active, st);
        if (active) {
            const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
            for (int i = 0; i < ATTN_MAX_HD / 32; i++)
                if (lane + 32 * i < hd) a.out[t * q_dim + (long long)h * hd + lane + 32 * i] = st.o[i] * inv;
            __syncwarp();  // qs is rewritten in the next round
        }
    }
}

// ---- version 6: a block per (query, kv head, key slice), partials merged by the combine kernel ----------
__global__ void attention_v6_kernel(AttnArgs a, int n_slices) {
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

// ---- launchers ---------------------------------------------------------------------------------------
static void attention_run(int version, const AttnArgs& a, float* att) {
    const int rows = a.T * a.n_heads;  // (query, head) pairs
    switch (version) {
        case 1: KLAUNCH(cdiv(rows, 128), 128, 0, 0, attention_v1_kernel)(a, att); break;
        case 2: KLAUNCH(cdiv(rows, 4), 128, 0, 0, attention_v2_kernel)(a, att); break;
        case 3: KLAUNCH(cdiv(rows, 4), 128, 0, 0, attention_v3_kernel)(a); break;
        case 4: {
            const DevAttnLaunch L = dev_attn_launch(a.n_heads, a.n_kv_heads, a.head_dim);
            KLAUNCH(dim3(a.T, a.n_kv_heads), L.threads, L.smem, 0, attention_v4_kernel)(a);
            break;
        }
        case 5: {  // the shipped unsplit launch (cuda/attention.cu launch_attention for prefill)
            const AttnTiling L = attn_tiling(a.T, a.n_heads, a.n_kv_heads, a.head_dim);
            KLAUNCH(dim3(cdiv(a.T, L.nq), a.n_kv_heads), 32 * L.warps, L.smem, 0, attn_fwd_tiled_kernel)(a, L.nq, L.tpw,
                                                                                                       1);
            break;
        }
        case 6: {  // a block per query and slice (a.partial: attn_split_scratch_bytes), the shipped combine
            const int n_slices = attn_slices(a.n_past, a.T), warps = min(a.n_heads / a.n_kv_heads, ATTN_QT_WARPS);
            const size_t smem = (size_t)attn_smem_floats(a.head_dim, warps) * sizeof(float);
            KLAUNCH(dim3(a.T, a.n_kv_heads, n_slices), 32 * warps, smem, 0, attention_v6_kernel)(a, n_slices);
            KLAUNCH(dim3(a.T, a.n_heads), 32, 0, 0, attn_combine_kernel)(a, n_slices);
            break;
        }
        case 7: {  // the shipped split launch (launch_attention for decode and verify)
            const AttnTiling L = attn_tiling(a.T, a.n_heads, a.n_kv_heads, a.head_dim);
            const int n_slices = attn_slices(a.n_past, a.T);
            KLAUNCH(dim3(cdiv(a.T, L.nq), a.n_kv_heads, n_slices), 32 * L.warps, L.smem, 0, attn_fwd_tiled_kernel)(
                a, L.nq, L.tpw, n_slices);
            KLAUNCH(dim3(a.T, a.n_heads), 32, 0, 0, attn_combine_kernel)(a, n_slices);
            break;
        }
    }
    dev_launched("attention");
}

static AttnCase make_case(DevRng& rng, bool tree) {
    AttnCase c;
    c.T = 11;
    c.n_past = 300;  // 311 keys: ten 32-key tiles, the last partial; several slices
    c.n_heads = 6;  // GQA group of 3, as SmolLM2 (9 / 3); head_dim 64 as SmolLM2
    c.n_kv_heads = 2;
    c.hd = 64;
    const int n = c.n_past + c.T;
    c.q = dev_rand(rng, (size_t)c.T * c.n_heads * c.hd);
    c.k = dev_rand(rng, (size_t)n * c.n_kv_heads * c.hd);
    c.v = dev_rand(rng, (size_t)n * c.n_kv_heads * c.hd);
    c.words = 1;
    if (tree) {  // a random tree: node i's parent is an earlier node, node 0 hangs off the cache
        c.parent.resize(c.T);
        c.bits.assign((size_t)c.T * c.words, 0);
        for (int i = 0; i < c.T; i++) {
            c.parent[i] = i == 0 ? -1 : (int)(rng.next() % i);
            c.bits[i] = (i == 0 ? 0 : c.bits[c.parent[i]]) | (1ull << i);
        }
    }
    return c;
}

int main(int argc, char** argv) {
    const int versions = 7;
    DevRng rng(3);
    const AttnCase cases[2] = {make_case(rng, false), make_case(rng, true)};
    std::vector<float> got[versions + 1];
    std::vector<double> ref, tol;  // both cases, concatenated
    for (const AttnCase& c : cases) {
        std::vector<double> r, e;
        attention_cpu(c, r, e);
        ref.insert(ref.end(), r.begin(), r.end());
        tol.insert(tol.end(), e.begin(), e.end());
        AttnArgs a{};
        a.T = c.T;
        a.n_heads = c.n_heads;
        a.n_kv_heads = c.n_kv_heads;
        a.head_dim = c.hd;
        a.scale = 1.0f / sqrtf((float)c.hd);
        a.n_past = c.n_past;
        a.q = dev_upload(c.q);
        a.k = dev_upload(c.k);
        a.v = dev_upload(c.v);
        a.tree = c.parent.empty() ? nullptr : dev_upload(c.bits);
        a.mask_words = c.words;
        a.partial = dev_zeros<float>(attn_split_scratch_bytes(c.T, c.n_heads, c.hd, c.n_past) / sizeof(float));
        a.split = attn_split();  // versions 5 to 7 launch the shipped kernels directly
        const size_t n_out = (size_t)c.T * c.n_heads * c.hd;
        float* att = dev_zeros<float>((size_t)c.T * c.n_heads * (c.n_past + c.T));
        for (int v = 1; v <= versions; v++) {
            if (!dev_want(argc, argv, v)) continue;
            a.out = dev_zeros<float>(n_out);
            attention_run(v, a, att);
            const std::vector<float> o = dev_download(a.out, n_out);
            got[v].insert(got[v].end(), o.begin(), o.end());
            DEV_CHECK(cudaFree(a.out));
        }
    }
    for (int v = 1; v <= versions; v++)
        if (dev_want(argc, argv, v))
            dev_compare("attention", v, got[v], ref, tol, v == versions && dev_planted("attention"));
    return g_dev_failures ? 1 : 0;
}
