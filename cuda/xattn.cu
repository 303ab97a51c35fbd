// xattn.cu: the Beagle draft's cross-attention (docs/method.md section 3) over two key sets - set 0 the true states,
// set 1 the predicted states - with the mask given by parameters (kernels.cuh XAttnArgs = ops.h
// XAttnMask; the rule is xattn_sees() in src/backend/xattn_mask.h): PREFIX (inference: every set-0 row, plus
// the set-1 rows whose bit is set per query; "diagonal masked" because the keys are strictly earlier
// states; with set0_qrow only set-0 rows j < qrow[t]: the EAGLE draft's training-time test), BLOCK (training: the query at sequence row q in window [b, b + w) sees set-0 rows j < b -
// the stage-1 inverse-block windows (w, offset) - and set-1 rows b <= r < min(q, b + n_pred) - the
// stage-2 simulation step's in-place predicted states). Visible keys in order: set 0 ascending, then
// set 1 ascending. Forward and backward. Launched (launch_* at the end) by the CUDA backend (src/backend/gpu/: xattn,
// xattn_bwd); tested by test/kernels/cuda_emu_kernels_attention.cpp.
//
// xattn_fwd_kernel: query-tiled as attention.cu attn_fwd_tiled_kernel (attn_common.cuh attn_tiled_walk):
//   grid (cdiv(n_q, nq), n_kv_heads), nq queries x the group's heads per block (up to 32 tasks on 8
//   warps), each 32-key tile of set 0, then of set 1, staged once in shared memory for all of them;
//   per task the online softmax key by key, set 0 ascending then set 1 ascending (no slices: the
//   draft's key sets are short), so a query's bits do not depend on its batch or its tile. Also
//   writes lse = m + log(l) per (query, head) for the backward (-inf, and out = 0, if no key).
// xattn_bwd_dq_kernel: grid (n_q, n_kv_heads), a warp per query head, K/V tiles in shared memory
//   (attn_common.cuh attn_bwd_dq_segment). Per (query, head): D = dout . out (warp butterfly), then for every
//   visible key in order p = exp(s - lse), ds = p (dout . v - D), dq += scale ds k. dq assigned; D saved
//   for the next kernel.
// xattn_bwd_dkdv_kernel: grid (tiles0 32-key tiles of set 0 - 0 skips set 0 - then those of set 1;
//   n_kv_heads), 256 threads: key j of the tile x 8 dim slices (thread (j, s) owns dims s, s + 8, ...).
//   A thread keeps its slice of k_j, v_j and of the accumulators dk_j, dv_j (starting from their
//   global values) in registers: the tile's K/V rows are read once, no shared memory for them. The
//   queries come in tiles of bq (as many as fit 16 KiB: bq x group heads of q, dout, lse, D staged in
//   shared memory, read as broadcasts, 2 barriers per tile; a tile none of whose queries sees any key
//   of the block is skipped after one __syncthreads_or). Per visible (query, head) in order: the
//   slices' parts of q . k_j and dout . v_j meet in a fixed xor butterfly over the key's 8 lanes (all
//   8 get the same bits), then p = exp(s - lse), ds = p (dout . v - D), and every slice adds its dims:
//   dv_j += p dout, dk_j += scale ds q. Fixed order (queries ascending, heads ascending), no atomics:
//   deterministic like the CPU backend.
// Run-tested under the emulator against a double reference (forward, lse, dq, dk, dv of both sets) for
// PREFIX masks with and without set-1 bits and with set0_qrow, BLOCK masks of stage 1 (n_pred 0) and stage 2 (n_pred 1, 2),
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
    } else {            // PREFIX (set0_qrow: set 0 only up to the query's row; n0 from the device in a captured step)
        const int n0 = a.n0_dev ? a.n0_dev[1] : a.n0;
        s.hi0 = a.set0_qrow ? max(min(a.qrow[t], n0), 0) : n0;
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

__global__ void xattn_fwd_kernel(XAttnArgs a, int nq, int tpw) {
    DYN_SMEM(float, smem);
    const int kvh = blockIdx.y, t0 = blockIdx.x * nq;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
    const long long q_dim = (long long)a.n_heads * hd, kv_dim = (long long)a.n_kv_heads * hd;
    const int nt = min(nq, a.n_q - t0), ntasks = nt * group;
    const AttnTiledSmem sm = attn_tiled_smem(smem, hd, nq * group);
    const AttnTile tl = sm.tile;
    float *qs = sm.qs, *sc = sm.sc;  // qs[task][hd], this warp's scores
    // the block's key ranges: set 0 [0, hi0), set 1 [lo1, hi1), unions over its queries
    int hi0 = 0, lo1 = 0x7fffffff, hi1 = 0;
    for (int i = 0; i < nt; i++) {
        const XSegs g = xattn_segments(a, t0 + i);
        hi0 = max(hi0, g.hi0);
        if (g.hi1 > g.lo1) {
            lo1 = min(lo1, g.lo1);
            hi1 = max(hi1, g.hi1);
        }
    }
    // this warp's tasks: k = warp + nw r -> query t0 + k / group, head kvh * group + k % group
    XSegs seg[ATTN_QT_TPW];
    OnlineSoftmax st[ATTN_QT_TPW];
    UNROLL for (int r = 0; r < ATTN_QT_TPW; r++) {
        const int k = warp + nw * r;
        softmax_reset(st[r]);
        if (r >= tpw || k >= ntasks) continue;
        seg[r] = xattn_segments(a, t0 + k / group);
        const float* qrow = a.q + (t0 + k / group) * q_dim + (long long)(kvh * group + k % group) * hd;
        for (int d = lane; d < hd; d += 32) qs[k * hd + d] = qrow[d];
    }
    auto step = [&](int r, float s, const float* vrow) { softmax_step(st[r], s, vrow, hd); };
    const long long start0 = a.n0_dev ? a.n0_dev[0] * kv_dim : 0;  // a window's first row (captured steps)
    attn_tiled_walk(tl, a.k0 + start0 + kvh * hd, a.v0 + start0 + kvh * hd, kv_dim, 0, hi0, tpw, ntasks, qs, sc, hd, a.scale,
                    [&](int r, int j) { return j < seg[r].hi0; }, step);
    attn_tiled_walk(tl, a.k1 + kvh * hd, a.v1 + kvh * hd, kv_dim, lo1, hi1, tpw, ntasks, qs, sc, hd, a.scale,
                    [&](int r, int j) {
                        return j >= seg[r].lo1 && j < seg[r].hi1 &&
                               (!seg[r].bits || ((seg[r].bits[j / 64] >> (j % 64)) & 1u));
                    },
                    step);
    UNROLL for (int r = 0; r < ATTN_QT_TPW; r++) {
        const int k = warp + nw * r;
        if (r >= tpw || k >= ntasks) break;
        const int t = t0 + k / group, h = kvh * group + k % group;
        const float inv = st[r].l > 0.0f ? 1.0f / st[r].l : 0.0f;
        for (int i = 0; i < ATTN_MAX_HD / 32; i++) {
            const int d = lane + 32 * i;
            if (d < hd) a.out[t * q_dim + (long long)h * hd + d] = st[r].o[i] * inv;
        }
        if (lane == 0) a.lse[(long long)t * a.n_heads + h] = st[r].l > 0.0f ? st[r].m + logf(st[r].l) : -INFINITY;
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

__global__ void xattn_bwd_dkdv_kernel(XAttnArgs a, int bq) {
    DYN_SMEM(float, smem);
    constexpr int S = XATTN_SLICES, ND = ATTN_MAX_HD / XATTN_SLICES;
    const int kvh = blockIdx.y, tid = threadIdx.x, lane = tid % 32;
    const int kl = tid / S, sl = tid % S;  // key kl of the tile, dims sl, sl + S, sl + 2 S, ...
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
    const long long q_dim = (long long)a.n_heads * hd, kv_dim = (long long)a.n_kv_heads * hd;
    const unsigned gmask = 0xFFu << (lane & ~(S - 1));  // the S lanes of this key
    // which set and rows this block owns
    const int tiles0 = a.tiles0;
    const int set = (int)blockIdx.x < tiles0 ? 0 : 1;
    const int j0 = (set == 0 ? (int)blockIdx.x : (int)blockIdx.x - tiles0) * XATTN_BKEYS;
    const int n_set = set == 0 ? a.n0 : a.n1;
    const int j = j0 + kl;
    const bool mine = j < n_set;
    const long long row_j = (long long)j * kv_dim + kvh * hd;
    // the key's k, v and its dk, dv accumulators (from their global values): registers, dims of this slice
    float kr[ND], vr[ND], dk[ND], dv[ND];
    {
        const float* Kb = set == 0 ? a.k0 : a.k1;
        const float* Vb = set == 0 ? a.v0 : a.v1;
        const float* dK = set == 0 ? a.dk0 : a.dk1;
        const float* dV = set == 0 ? a.dv0 : a.dv1;
        for (int i = 0; i < ND; i++) {
            const int d = sl + S * i;
            const bool in = mine && d < hd;
            kr[i] = in ? Kb[row_j + d] : 0.0f;
            vr[i] = in ? Vb[row_j + d] : 0.0f;
            dk[i] = in ? dK[row_j + d] : 0.0f;
            dv[i] = in ? dV[row_j + d] : 0.0f;
        }
    }
    float* qst = smem;                       // [bq][group][hd]: the staged queries' heads
    float* dost = qst + bq * group * hd;     // [bq][group][hd]
    float* Lst = dost + bq * group * hd;     // [bq][group]
    float* Dst = Lst + bq * group;           // [bq][group]
    for (int t0 = 0; t0 < a.n_q; t0 += bq) {
        const int nt = min(bq, a.n_q - t0);
        unsigned vis = 0;  // the tile's queries that see key j (the same in the key's S threads)
        for (int i = 0; i < nt; i++)
            if (mine && xattn_sees_dev(a, t0 + i, set, j)) vis |= 1u << i;
        if (!__syncthreads_or(vis != 0)) continue;  // also: the previous tile's staging has been consumed
        for (int idx = tid; idx < nt * group * hd; idx += blockDim.x) {
            const int i = idx / (group * hd), r = idx % (group * hd);
            const long long row = (t0 + i) * q_dim + (long long)kvh * group * hd + r;
            qst[idx] = a.q[row];
            dost[idx] = a.dout[row];
        }
        for (int idx = tid; idx < nt * group; idx += blockDim.x) {
            const long long th = (long long)(t0 + idx / group) * a.n_heads + kvh * group + idx % group;
            Lst[idx] = a.lse[th];
            Dst[idx] = a.D[th];
        }
        __syncthreads();
        for (int i = 0; i < nt; i++) {
            if (!((vis >> i) & 1u)) continue;  // uniform over the key's S lanes
            for (int g = 0; g < group; g++) {
                const float* qg = qst + (i * group + g) * hd;
                const float* dg = dost + (i * group + g) * hd;
                float s = 0.0f, pv = 0.0f;  // this slice's part of q . k and dout . v
                for (int ii = 0; ii < ND; ii++) {
                    const int d = sl + S * ii;
                    if (d < hd) {
                        s = fmaf(qg[d], kr[ii], s);
                        pv = fmaf(dg[d], vr[ii], pv);
                    }
                }
                for (int o = S / 2; o > 0; o >>= 1) {  // xor butterfly over the S slices: every lane the same bits
                    s += __shfl_xor_sync(gmask, s, o, S);
                    pv += __shfl_xor_sync(gmask, pv, o, S);
                }
                const float p = expf(s * a.scale - Lst[i * group + g]);
                const float ds = p * (pv - Dst[i * group + g]) * a.scale;
                for (int ii = 0; ii < ND; ii++) {
                    const int d = sl + S * ii;
                    if (d < hd) {
                        dv[ii] = fmaf(p, dg[d], dv[ii]);
                        dk[ii] = fmaf(ds, qg[d], dk[ii]);
                    }
                }
            }
        }
    }
    if (mine) {
        float* dK = set == 0 ? a.dk0 : a.dk1;
        float* dV = set == 0 ? a.dv0 : a.dv1;
        for (int i = 0; i < ND; i++) {
            const int d = sl + S * i;
            if (d < hd) {
                dK[row_j + d] = dk[i];
                dV[row_j + d] = dv[i];
            }
        }
    }
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
static void xattn_check(const XAttnArgs& a, KernelRunner& kr) {
    kcheck(kr, a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "xattn: n_heads %d not a multiple of n_kv_heads %d",
           a.n_heads, a.n_kv_heads);
    kcheck(kr, a.head_dim > 0 && a.head_dim <= ATTN_MAX_HD, "xattn: head_dim %d outside 1..%d (CUDA backend)", a.head_dim,
           ATTN_MAX_HD);
    kcheck(kr, a.n_heads / a.n_kv_heads <= ATTN_QT_WARPS * ATTN_QT_TPW, "xattn: GQA group of %d heads is larger than %d",
           a.n_heads / a.n_kv_heads, ATTN_QT_WARPS * ATTN_QT_TPW);
    kcheck(kr, !a.set0_qrow || a.qrow != nullptr, "xattn: a PREFIX mask with set0_qrow needs the query rows (qrow)");
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
    const AttnTiling L = attn_tiling(a.n_q, a.n_heads, a.n_kv_heads, a.head_dim);
    KRUN(kr, dim3(cdiv(a.n_q, L.nq), a.n_kv_heads), 32 * L.warps, L.smem, xattn_fwd_kernel, a, L.nq, L.tpw);
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
    const XAttnDkdvLaunch L = xattn_dkdv_launch(a.head_dim, a.n_heads / a.n_kv_heads);
    kcheck(kr, L.smem <= 48 * 1024, "xattn_bwd: head_dim %d with a GQA group of %d needs %zu bytes of shared memory",
           a.head_dim, a.n_heads / a.n_kv_heads, L.smem);
    if (tiles > 0) KRUN(kr, dim3(tiles, a.n_kv_heads), L.threads, L.smem, xattn_bwd_dkdv_kernel, a, L.bq);
}
