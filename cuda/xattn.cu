// xattn.cu: the Beagle draft's cross-attention (SPEC 3) over two key sets - set 0 the true states,
// set 1 the predicted states - with the mask given by parameters (kernels.cuh XAttnArgs = ops.h
// XAttnMask; the rule is xattn_sees() in src/backend/xattn_mask.h): PREFIX (inference: every set-0 row, plus
// the set-1 rows whose bit is set per query; "diagonal masked" because the keys are strictly earlier
// states), BLOCK (training: the query at sequence row q in window [b, b + w) sees set-0 rows j < b -
// the stage-1 inverse-block windows (w, offset) - and set-1 rows b <= r < min(q, b + n_pred) - the
// stage-2 simulation step's in-place predicted states). Visible keys in order: set 0 ascending, then
// set 1 ascending. Forward and backward. Launched (launch_* at the end) by the CUDA backend (src/backend/gpu/: xattn,
// xattn_bwd); tested by test/kernels/cuda_emu_kernels_attention.cpp.
//
// xattn_fwd_kernel: as attn_fwd_kernel (attention.cu): grid (n_q, n_kv_heads), a warp per query head,
//   K/V tiles in shared memory, online softmax key by key (attn_common.cuh), over the two segments.
//   Also writes lse = m + log(l) per (query, head) for the backward (-inf, and out = 0, if no key).
// xattn_bwd_dq_kernel: same grid. Per (query, head): D = dout . out (warp butterfly), then for every
//   visible key in order p = exp(s - lse), ds = p (dout . v - D), dq += scale ds k. dq assigned; D saved
//   for the next kernel.
// xattn_bwd_dkdv_kernel: grid (tiles0 32-key tiles of set 0 - 0 skips set 0 - then those of set 1;
//   n_kv_heads), 32 threads, thread j owns key row j: dk_j, dv_j accumulate in shared memory
//   (starting from their global values) over the queries t = 0..n_q-1 in order and the group's heads
//   in order (staged in shared memory one query at a time; a query that sees none of the tile is
//   skipped after one __syncthreads_or): dv_j += p dout, dk_j += scale ds q. Fixed order, no
//   atomics: deterministic like the CPU backend.
// Run-tested under the emulator against a double reference (forward, lse, dq, dk, dv of both sets) for
// PREFIX masks with and without set-1 bits, BLOCK masks of stage 1 (n_pred 0) and stage 2 (n_pred 1, 2),
// several (w, offset), GQA groups, queries that see nothing, poisoned shared memory and shuffled thread
// orders; and the backward against central finite differences of the forward. No PTX paths.
#include "attn_common.cuh"

__device__ __forceinline__ int xattn_window_start(int q, int w, int offset) {
    return q < offset ? 0 : offset + (q - offset) / w * w;
}

// The two visible segments of query t: set 0 rows [0, hi0); set 1 rows [lo1, hi1) (PREFIX: bit test).
struct XSegs {
    int hi0, lo1, hi1;
    const uint64_t* bits;  // PREFIX set-1 bit row of the query (null: all of [lo1, hi1) visible)
};
__device__ __forceinline__ XSegs xattn_segments(const XAttnArgs& a, int t) {
    XSegs s;
    if (a.kind == 1) {  // BLOCK
        const int q = a.qrow[t];
        const int b = xattn_window_start(q, a.w, a.offset);
        s.hi0 = min(b, a.n0);
        s.lo1 = b;
        s.hi1 = min(min(q, b + a.n_pred), a.n1);
        s.bits = nullptr;
    } else {            // PREFIX
        s.hi0 = a.n0;
        s.lo1 = 0;
        s.hi1 = a.set1_bits ? a.n1 : 0;
        s.bits = a.set1_bits ? a.set1_bits + (long long)t * a.set1_words : nullptr;
    }
    if (s.hi1 < s.lo1) s.hi1 = s.lo1;
    return s;
}
__device__ __forceinline__ bool xattn_sees_dev(const XAttnArgs& a, int t, int set, int j) {
    const XSegs s = xattn_segments(a, t);
    if (set == 0) return j < s.hi0;
    if (j < s.lo1 || j >= s.hi1) return false;
    return !s.bits || ((s.bits[j / 64] >> (j % 64)) & 1u);
}

struct AllVisible {
    __device__ bool operator()(int) const { return true; }
};
struct BitVisible {
    const uint64_t* bits;
    __device__ bool operator()(int j) const { return !bits || ((bits[j / 64] >> (j % 64)) & 1u); }
};

__global__ void xattn_fwd_kernel(XAttnArgs a) {
    DYN_SMEM(float, smem);
    const int t = blockIdx.x, kvh = blockIdx.y;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
    const long long q_dim = (long long)a.n_heads * hd, kv_dim = (long long)a.n_kv_heads * hd;
    const AttnSmem sm = attn_smem(smem, hd);
    const XSegs seg = xattn_segments(a, t);
    for (int r = 0; r < group; r += nw) {
        const int hg = r + warp;
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
        attn_fwd_segment(sm.tile, a.k0 + kvh * hd, a.v0 + kvh * hd, kv_dim, 0, seg.hi0, AllVisible{}, sm.qs, sm.sc,
                         hd, a.scale, active, st);
        if (seg.hi1 > seg.lo1)
            attn_fwd_segment(sm.tile, a.k1 + kvh * hd, a.v1 + kvh * hd, kv_dim, seg.lo1, seg.hi1, BitVisible{seg.bits},
                             sm.qs, sm.sc, hd, a.scale, active, st);
        if (active) {
            const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
            for (int i = 0; i < ATTN_MAX_HD / 32; i++) {
                const int d = lane + 32 * i;
                if (d < hd) a.out[t * q_dim + (long long)h * hd + d] = st.o[i] * inv;
            }
            if (lane == 0) a.lse[(long long)t * a.n_heads + h] = st.l > 0.0f ? st.m + logf(st.l) : -INFINITY;
            __syncwarp();
        }
    }
}

__global__ void xattn_bwd_dq_kernel(XAttnArgs a) {
    DYN_SMEM(float, smem);
    const int t = blockIdx.x, kvh = blockIdx.y;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
    const long long q_dim = (long long)a.n_heads * hd, kv_dim = (long long)a.n_kv_heads * hd;
    const AttnSmem sm = attn_smem(smem, hd);
    const XSegs seg = xattn_segments(a, t);
    for (int r = 0; r < group; r += nw) {
        const int hg = r + warp;
        const bool active = hg < group;
        const int h = kvh * group + hg;
        const long long row = t * q_dim + (long long)h * hd;
        float D = 0.0f, L = 0.0f;
        if (active) {
            float part = 0.0f;
            for (int d = lane; d < hd; d += 32) {
                sm.qs[d] = a.q[row + d];
                sm.dos[d] = a.dout[row + d];
                part = fmaf(a.dout[row + d], a.o[row + d], part);
            }
            D = warp_sum(part);
            L = a.lse[(long long)t * a.n_heads + h];
            if (lane == 0) a.D[(long long)t * a.n_heads + h] = D;
            __syncwarp();
        }
        float dq[ATTN_MAX_HD / 32];
        for (int i = 0; i < ATTN_MAX_HD / 32; i++) dq[i] = 0.0f;
        attn_bwd_dq_segment(sm.tile, a.k0 + kvh * hd, a.v0 + kvh * hd, kv_dim, 0, seg.hi0, AllVisible{}, sm.qs, sm.dos,
                            sm.sc, hd, a.scale, L, D, active, dq);
        if (seg.hi1 > seg.lo1)
            attn_bwd_dq_segment(sm.tile, a.k1 + kvh * hd, a.v1 + kvh * hd, kv_dim, seg.lo1, seg.hi1,
                                BitVisible{seg.bits}, sm.qs, sm.dos, sm.sc, hd, a.scale, L, D, active, dq);
        if (active) {
            for (int i = 0; i < ATTN_MAX_HD / 32; i++) {
                const int d = lane + 32 * i;
                if (d < hd) a.dq[row + d] = dq[i];
            }
            __syncwarp();
        }
    }
}

__global__ void xattn_bwd_dkdv_kernel(XAttnArgs a) {
    DYN_SMEM(float, smem);
    const int kvh = blockIdx.y, tid = threadIdx.x;
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads, ld = hd + 1;
    const long long q_dim = (long long)a.n_heads * hd, kv_dim = (long long)a.n_kv_heads * hd;
    // which set and rows this block owns
    const int tiles0 = a.tiles0;
    const int set = (int)blockIdx.x < tiles0 ? 0 : 1;
    const int j0 = (set == 0 ? (int)blockIdx.x : (int)blockIdx.x - tiles0) * XATTN_BKEYS;
    const int n_set = set == 0 ? a.n0 : a.n1;
    const float* Kb = (set == 0 ? a.k0 : a.k1) + kvh * hd;
    const float* Vb = (set == 0 ? a.v0 : a.v1) + kvh * hd;
    float* dK = (set == 0 ? a.dk0 : a.dk1) + kvh * hd;
    float* dV = (set == 0 ? a.dv0 : a.dv1) + kvh * hd;
    float* dks = smem;                            // [XATTN_BKEYS][ld]
    float* dvs = dks + XATTN_BKEYS * ld;          // [XATTN_BKEYS][ld]
    float* qst = dvs + XATTN_BKEYS * ld;          // [group][hd]: the staged query's heads
    float* dost = qst + group * hd;               // [group][hd]
    float* Lst = dost + group * hd;               // [group]
    float* Dst = Lst + group;                     // [group]
    const int j = j0 + tid;
    const bool mine = tid < XATTN_BKEYS && j < n_set;
    if (mine)
        for (int d = 0; d < hd; d++) {
            dks[tid * ld + d] = dK[(long long)j * kv_dim + d];
            dvs[tid * ld + d] = dV[(long long)j * kv_dim + d];
        }
    const float* kr = Kb + (long long)j * kv_dim;
    const float* vr = Vb + (long long)j * kv_dim;
    for (int t = 0; t < a.n_q; t++) {
        const bool vis = mine && xattn_sees_dev(a, t, set, j);
        if (!__syncthreads_or(vis)) continue;  // also: the previous query's staging has been consumed
        const long long row = t * q_dim + (long long)kvh * group * hd;
        for (int idx = tid; idx < group * hd; idx += blockDim.x) {
            qst[idx] = a.q[row + idx];
            dost[idx] = a.dout[row + idx];
        }
        for (int g = tid; g < group; g += blockDim.x) {
            Lst[g] = a.lse[(long long)t * a.n_heads + kvh * group + g];
            Dst[g] = a.D[(long long)t * a.n_heads + kvh * group + g];
        }
        __syncthreads();
        if (!vis) continue;
        for (int g = 0; g < group; g++) {
            const float* qg = qst + g * hd;
            const float* dg = dost + g * hd;
            float s = 0.0f, pv = 0.0f;
            for (int d = 0; d < hd; d++) s = fmaf(qg[d], kr[d], s);
            for (int d = 0; d < hd; d++) pv = fmaf(dg[d], vr[d], pv);
            const float p = expf(s * a.scale - Lst[g]);
            const float ds = p * (pv - Dst[g]) * a.scale;
            for (int d = 0; d < hd; d++) {
                dvs[tid * ld + d] = fmaf(p, dg[d], dvs[tid * ld + d]);
                dks[tid * ld + d] = fmaf(ds, qg[d], dks[tid * ld + d]);
            }
        }
    }
    if (mine)
        for (int d = 0; d < hd; d++) {
            dK[(long long)j * kv_dim + d] = dks[tid * ld + d];
            dV[(long long)j * kv_dim + d] = dvs[tid * ld + d];
        }
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
static void xattn_check(const XAttnArgs& a, KernelRunner& kr) {
    kcheck(kr, a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "xattn: n_heads %d not a multiple of n_kv_heads %d",
           a.n_heads, a.n_kv_heads);
    kcheck(kr, a.head_dim > 0 && a.head_dim <= ATTN_MAX_HD, "xattn: head_dim %d outside 1..%d (CUDA backend)", a.head_dim,
           ATTN_MAX_HD);
    kcheck(kr, a.n_heads / a.n_kv_heads <= 64, "xattn: GQA group of %d heads is larger than 64", a.n_heads / a.n_kv_heads);
    if (a.kind == 1) {
        kcheck(kr, a.qrow != nullptr, "xattn: a BLOCK mask needs the query rows (qrow)");
        kcheck(kr, a.w >= 1 && a.offset >= 0, "xattn: BLOCK mask needs w >= 1 and offset >= 0 (w %d, offset %d)", a.w,
               a.offset);
    }
}

static size_t xattn_query_smem(const XAttnArgs& a, int* warps) {
    const int group = a.n_heads / a.n_kv_heads;
    *warps = group < 4 ? group : 4;
    return (size_t)attn_smem_floats(a.head_dim, *warps) * sizeof(float);
}

void launch_xattn(const XAttnArgs& a, KernelRunner& kr) {
    if (a.n_q <= 0) return;
    xattn_check(a, kr);
    int warps;
    const size_t smem = xattn_query_smem(a, &warps);
    KRUN(kr, dim3(a.n_q, a.n_kv_heads), 32 * warps, smem, xattn_fwd_kernel, a);
}

void launch_xattn_bwd(const XAttnArgs& args, KernelRunner& kr) {
    if (args.n_q <= 0) return;
    xattn_check(args, kr);
    XAttnArgs a = args;
    int warps;
    const size_t smem = xattn_query_smem(a, &warps);
    KRUN(kr, dim3(a.n_q, a.n_kv_heads), 32 * warps, smem, xattn_bwd_dq_kernel, a);
    const bool set0 = a.dk0 && a.dv0 && a.n0 > 0;
    const bool set1 = a.dk1 && a.dv1 && a.n1 > 0;
    a.tiles0 = set0 ? cdiv(a.n0, XATTN_BKEYS) : 0;
    const int tiles = a.tiles0 + (set1 ? cdiv(a.n1, XATTN_BKEYS) : 0);
    const int group = a.n_heads / a.n_kv_heads;
    const size_t smem2 = (size_t)xattn_dkdv_smem_floats(a.head_dim, group) * sizeof(float);
    kcheck(kr, smem2 <= 48 * 1024, "xattn_bwd: head_dim %d with a GQA group of %d needs %zu bytes of shared memory",
           a.head_dim, group, smem2);
    if (tiles > 0) KRUN(kr, dim3(tiles, a.n_kv_heads), XATTN_BKEYS, smem2, xattn_bwd_dkdv_kernel, a);
}
