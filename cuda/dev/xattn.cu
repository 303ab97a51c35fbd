// xattn.cu: the draft's cross-attention, forward and backward, from one thread per (query, head) to
// the shipped kernels (cuda/xattn.cu xattn_fwd_kernel, xattn_bwd_dq_kernel, xattn_bwd_dkdv_kernel).
// Read last (after attention.cu). Build and run: `make cuda-dev`, or on a GPU
// `nvcc -O2 -arch=sm_80 cuda/dev/xattn.cu -o xattn`.
//
// Queries attend over two key sets, set 0 (true states) then set 1 (predicted states), with the mask
// given by parameters (kernels.cuh XAttnArgs; the rule is src/train/masks.h xattn_sees, on the device
// xattn.cu xattn_sees_dev, which every version here calls). Checked on a PREFIX mask (inference:
// all of set 0 plus per-query set-1 bits) and a BLOCK mask (training stage 2: windows of w = 4 rows,
// n_pred = 2, where the first query sees nothing: out 0, lse -inf). The forward also writes
// lse = m + log l per (query, head); the backward, given dout, out and lse, computes
//   D = dout . out,  p_j = exp(s_j - lse),  ds_j = p_j (dout . v_j - D),
//   dq = scale sum_j ds_j k_j (assigned),  dv_j += p_j dout,  dk_j += scale ds_j q (accumulated).
//
// A MODEL (derived, not measured) for one training step of the SmolLM2 draft at stage 2: 2048 query rows x 9
// heads, head_dim 64, 3 kv heads, each query seeing ~1000 keys on average. Forward q.k and p v:
// 2 x 2 x 2048 x 9 x 1000 x 64 = 4.7 GFLOP; backward ~2.5x that. K/V: 2 sets x 2048 x 3 x 64 x 4 B x 2
// = 6.3 MB, re-read per query unless tiles are shared.
//
// forward
// version 1: one thread per (query, head), two passes over the keys (the max, then exp, sum and the
//   weighted V sum, recomputing the scores instead of storing them); the output row lives in global
//   memory while it accumulates. Few threads (18 K), every one reading whole K/V rows alone.
// version 2: one warp per (query, head), lanes split head_dim: a key's score is the warp sum of the
//   lanes' partial dots (K and V rows read as consecutive floats: coalesced), and the softmax is
//   online, key by key in key order (the order the shipped kernel keeps for batch invariance). Each
//   key now costs 5 shuffle steps, and each query head still reads K/V from global memory.
// version 3 (shipped, cuda/xattn.cu xattn_fwd_kernel, on attn_common.cuh like the target's attention):
//   query tiles: a block per (10 queries, kv head), a warp per (query, head) task (30 tasks on 8
//   warps); 32-key K/V tiles staged once in shared memory for all 30 (30x less K/V traffic than a
//   block per (query, head), 10x less than a block per query), lane j scores key j of the tile from
//   shared memory (no shuffles per key; a ballot gives the visible keys), then the key-by-key online
//   update. Same bits as v2's order of updates, not its score sums.
// backward
// version 1: one thread per (query, head): D, then per visible key p, ds, its dq term, and atomicAdd of
//   p dout into dv_j and scale ds q into dk_j. Every (query, head) that sees key j adds to the same 64
//   floats: heavy contention on hot rows, and float atomics land in whatever order the hardware
//   picks, so dk/dv change in their last bits from run to run (the CPU backend cannot be matched).
// version 2: no atomics, two kernels. dq: a warp per (query, head) as forward v2 (also writes D).
//   dk/dv: a thread per key row, which walks the queries in order and owns its row's accumulation:
//   deterministic. Each thread re-reads every query row (q, dout) it sees from global memory.
// version 3 (shipped, xattn_bwd_dq_kernel + xattn_bwd_dkdv_kernel): dq as the forward (tiles in shared
//   memory). dk/dv in tiles: a block per 32-key tile, 8 threads per key each owning 8 of its 64 dims,
//   so k_j, v_j and the dk_j, dv_j accumulators live in registers (K/V read once, coalesced 32-byte
//   pieces; v2's thread re-read its whole key row with a 256-byte stride between lanes). Queries are
//   staged in shared memory in tiles of bq (here 15: 16 KiB of q, dout, lse, D for the group's 3
//   heads) and read as broadcasts by all 256 threads, 2 barriers per tile instead of per query; a
//   tile that sees none of the keys is skipped after one __syncthreads_or. The dot products q . k_j
//   and dout . v_j are split over the 8 slices and meet in a fixed xor butterfly. Fixed order, no
//   atomics: deterministic like the CPU backend.
//
// Tolerances (per element, against a double reference from the same fp32 inputs; u = 2^-24,
// gamma_n = n u / (1 - n u)): scores are hd-term chains, off by e_j = gamma_hd scale sum|q k| + u |s_j|.
//   out: (2 E + (4 n + 16) u) max|v| (E = max e_j over the n visible keys), as in attention.cu;
//   lse: E + (2 n + 8) u + 2 u |lse|.
//   backward: p_j has relative error e_j + u |s_j - lse| + 3u; dout . v_j and D are off by
//   gamma_hd sum|dout v_j| and gamma_hd sum|dout out|; so ds_j is off by
//   eds_j = p_j (gamma_hd (sum|dout v_j| + sum|dout out|) + |dout . v_j - D| (e_j + u |s_j - lse| + 7u)).
//   dq: scale sum_j eds_j |k_j| + gamma_(n+2) scale sum_j |ds_j k_j|; dv_j: sum p_j (relative error) |dout|
//   + gamma_(N+2) (|dv_j start| + sum |p dout|), dk_j likewise with scale eds q, N = queries x group
//   (atomics or not, an N-term sum in any order stays within gamma_N of the sum of magnitudes).
#include "dev.cuh"
#include "../xattn.cu"

// ---- the two key sets as one list: r < n0 is set-0 row r, else set-1 row r - n0 ---------------------
struct XRow {
    int set, j;
    long long off;  // offset of the row's kv head slice in K, V, dK, dV of its set
};
__device__ __forceinline__ XRow xattn_row(const XAttnArgs& a, int r, int kvh) {
    XRow x;
    x.set = r < a.n0 ? 0 : 1;
    x.j = x.set ? r - a.n0 : r;
    x.off = (long long)x.j * a.n_kv_heads * a.head_dim + kvh * a.head_dim;
    return x;
}
__device__ __forceinline__ float xattn_dot(const float* x, const float* y, int n) {
    float s = 0.0f;
    for (int d = 0; d < n; d++) s = fmaf(x[d], y[d], s);
    return s;
}

// ---- CPU reference ------------------------------------------------------------------------------------
struct XCase {
    int n_q, n0, n1, n_heads, n_kv_heads, hd;
    int kind;                    // 0 PREFIX, 1 BLOCK
    std::vector<int> qrow;       // BLOCK: sequence row of each query
    std::vector<uint64_t> bits;  // PREFIX: n_q x words set-1 bits
    int words, w, offset, n_pred;
    std::vector<float> q, k0, v0, k1, v1, dout, dk0, dv0, dk1, dv1;  // dk*, dv*: start values
};
// The mask rule of src/train/masks.h (xattn_sees), restated.
static bool ref_sees(const XCase& c, int t, int set, int j) {
    if (c.kind == 0) return set == 0 || ((c.bits[(size_t)t * c.words + j / 64] >> (j % 64)) & 1);
    const int q = c.qrow[t], b = q < c.offset ? 0 : c.offset + (q - c.offset) / c.w * c.w;
    return set == 0 ? j < b : (j >= b && j < q && j < b + c.n_pred);
}
struct XRef {  // reference values and tolerances of every output, in the order the versions report them
    std::vector<double> out, lse, tol_out, tol_lse;
    std::vector<float> out_f, lse_f;  // the forward rounded to fp32: the backward's inputs
    std::vector<double> grads, tol_grads;  // dq, dk0, dv0, dk1, dv1 concatenated
};
static void xattn_cpu(const XCase& c, XRef& R) {
    const int hd = c.hd, group = c.n_heads / c.n_kv_heads, q_dim = c.n_heads * hd, kv_dim = c.n_kv_heads * hd;
    const double scale = 1.0 / sqrt((double)hd), u = DEV_U32, gh = dev_gamma(hd);
    const size_t nq = (size_t)c.n_q * q_dim, n0 = (size_t)c.n0 * kv_dim, n1 = (size_t)c.n1 * kv_dim;
    R.out.assign(nq, 0.0);
    R.tol_out.assign(nq, 1e-30);
    R.lse.assign((size_t)c.n_q * c.n_heads, -INFINITY);
    R.tol_lse.assign((size_t)c.n_q * c.n_heads, 1e-30);
    // gradients: value, sum of magnitudes, propagated error (dq, dk0, dv0, dk1, dv1 at these offsets)
    const size_t o_dk0 = nq, o_dv0 = o_dk0 + n0, o_dk1 = o_dv0 + n0, o_dv1 = o_dk1 + n1, total = o_dv1 + n1;
    std::vector<double> g(total, 0.0), gabs(total, 0.0), gerr(total, 0.0);
    const std::vector<float>* start[4] = {&c.dk0, &c.dv0, &c.dk1, &c.dv1};
    const size_t at[4] = {o_dk0, o_dv0, o_dk1, o_dv1};
    for (int i = 0; i < 4; i++)
        for (size_t e = 0; e < start[i]->size(); e++) {
            g[at[i] + e] = (*start[i])[e];
            gabs[at[i] + e] = fabs((*start[i])[e]);
        }
    for (int pass = 0; pass < 2; pass++) {  // 0: forward, 1: backward (needs the fp32 forward of all rows)
        for (int t = 0; t < c.n_q; t++)
            for (int h = 0; h < c.n_heads; h++) {
                const int kvh = h / group;
                const size_t row = (size_t)t * q_dim + h * hd, hl = (size_t)t * c.n_heads + h;
                const float* qr = &c.q[row];
                std::vector<int> set, jj;
                std::vector<double> s, e;
                double m = -INFINITY, E = 0;
                for (int st = 0; st < 2; st++)
                    for (int j = 0; j < (st ? c.n1 : c.n0); j++) {
                        if (!ref_sees(c, t, st, j)) continue;
                        double da;
                        const double sj = dev_dot(qr, &(st ? c.k1 : c.k0)[(size_t)j * kv_dim + kvh * hd], hd, &da) * scale;
                        set.push_back(st);
                        jj.push_back(j);
                        s.push_back(sj);
                        e.push_back(gh * scale * da + u * fabs(sj));
                        m = fmax(m, sj);
                        E = fmax(E, e.back());
                    }
                const int n = (int)s.size();
                auto vrow = [&](int i) { return &(set[i] ? c.v1 : c.v0)[(size_t)jj[i] * kv_dim + kvh * hd]; };
                auto krow = [&](int i) { return &(set[i] ? c.k1 : c.k0)[(size_t)jj[i] * kv_dim + kvh * hd]; };
                if (pass == 0) {
                    if (n == 0) continue;
                    double l = 0;
                    for (int i = 0; i < n; i++) l += exp(s[i] - m);
                    for (int d = 0; d < hd; d++) {
                        double o = 0, vmax = 0;
                        for (int i = 0; i < n; i++) {
                            o += exp(s[i] - m) / l * vrow(i)[d];
                            vmax = fmax(vmax, fabs(vrow(i)[d]));
                        }
                        R.out[row + d] = o;
                        R.tol_out[row + d] = (2 * E + (4.0 * n + 16) * u) * vmax + 1e-30;
                    }
                    R.lse[hl] = m + log(l);
                    R.tol_lse[hl] = E + (2.0 * n + 8) * u + 2 * u * fabs(R.lse[hl]);
                    continue;
                }
                const float* dor = &c.dout[row];
                const double L = R.lse_f[hl];
                double Dabs;
                const double D = dev_dot(dor, &R.out_f[row], hd, &Dabs);
                for (int i = 0; i < n; i++) {
                    double pvabs;
                    const double pv = dev_dot(dor, vrow(i), hd, &pvabs);
                    const double p = exp(s[i] - L), ep = e[i] + u * fabs(s[i] - L) + 3 * u;
                    const double ds = p * (pv - D);
                    const double eds = p * (gh * (pvabs + Dabs) + fabs(pv - D) * (ep + 4 * u));
                    const size_t dk = (set[i] ? o_dk1 : o_dk0) + (size_t)jj[i] * kv_dim + kvh * hd;
                    const size_t dv = (set[i] ? o_dv1 : o_dv0) + (size_t)jj[i] * kv_dim + kvh * hd;
                    for (int d = 0; d < hd; d++) {
                        const double kd = krow(i)[d], qd = qr[d], od = dor[d];
                        g[row + d] += scale * ds * kd;
                        gabs[row + d] += scale * fabs(ds * kd);
                        gerr[row + d] += scale * eds * fabs(kd);
                        g[dv + d] += p * od;
                        gabs[dv + d] += fabs(p * od);
                        gerr[dv + d] += p * ep * fabs(od);
                        g[dk + d] += scale * ds * qd;
                        gabs[dk + d] += scale * fabs(ds * qd);
                        gerr[dk + d] += scale * eds * fabs(qd);
                    }
                }
                for (int d = 0; d < hd; d++) gerr[row + d] += dev_gamma(n + 2) * gabs[row + d];
            }
        if (pass == 0) {
            R.out_f.assign(R.out.begin(), R.out.end());
            R.lse_f.assign(R.lse.begin(), R.lse.end());
        }
    }
    const double gN = dev_gamma(c.n_q * group + 2);
    for (size_t i = nq; i < total; i++) gerr[i] += gN * gabs[i];
    R.grads = g;
    R.tol_grads.resize(total);
    for (size_t i = 0; i < total; i++) R.tol_grads[i] = gerr[i] + 1e-30;
}

// ---- forward version 1: one thread per (query, head), two passes ----------------------------------------
__global__ void xattn_fwd_v1_kernel(XAttnArgs a) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= a.n_q * a.n_heads) return;
    const int t = idx / a.n_heads, h = idx % a.n_heads, hd = a.head_dim, kvh = h / (a.n_heads / a.n_kv_heads);
    const float* q = a.q + (long long)t * a.n_heads * hd + h * hd;
    float* out = a.out + (long long)t * a.n_heads * hd + h * hd;
    float m = -INFINITY;
    for (int r = 0; r < a.n0 + a.n1; r++) {  // pass 1: the max score
        const XRow x = xattn_row(a, r, kvh);
        if (xattn_sees_dev(a, t, x.set, x.j)) m = fmaxf(m, xattn_dot(q, (x.set ? a.k1 : a.k0) + x.off, hd) * a.scale);
    }
    for (int d = 0; d < hd; d++) out[d] = 0.0f;
    float l = 0.0f;
    for (int r = 0; r < a.n0 + a.n1; r++) {  // pass 2: the scores again, exp, sum and V
        const XRow x = xattn_row(a, r, kvh);
        if (!xattn_sees_dev(a, t, x.set, x.j)) continue;
        const float p = expf(xattn_dot(q, (x.set ? a.k1 : a.k0) + x.off, hd) * a.scale - m);
        const float* v = (x.set ? a.v1 : a.v0) + x.off;
        l += p;
        for (int d = 0; d < hd; d++) out[d] = fmaf(p, v[d], out[d]);
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < hd; d++) out[d] *= inv;
    a.lse[(long long)t * a.n_heads + h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// ---- version 2: one warp per (query, head), lanes split head_dim (dims lane + 32 i) ---------------------
// The warp's partial dot of two rows, summed over the lanes (every lane gets it).
__device__ __forceinline__ float xattn_warp_dot(const float* x, const float* y, int hd) {
    const int lane = threadIdx.x % 32;
    float part = 0.0f;
    for (int d = lane; d < hd; d += 32) part = fmaf(x[d], y[d], part);
    return warp_sum(part);
}

__global__ void xattn_fwd_v2_kernel(XAttnArgs a) {
    const int lane = threadIdx.x % 32, idx = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= a.n_q * a.n_heads) return;  // whole warps
    const int t = idx / a.n_heads, h = idx % a.n_heads, hd = a.head_dim, kvh = h / (a.n_heads / a.n_kv_heads);
    const float* q = a.q + (long long)t * a.n_heads * hd + h * hd;
    float m = -INFINITY, l = 0.0f, o[ATTN_MAX_HD / 32];
    for (int i = 0; i < ATTN_MAX_HD / 32; i++) o[i] = 0.0f;
    for (int r = 0; r < a.n0 + a.n1; r++) {  // key by key, in key order (warp-uniform branch)
        const XRow x = xattn_row(a, r, kvh);
        if (!xattn_sees_dev(a, t, x.set, x.j)) continue;
        const float s = xattn_warp_dot(q, (x.set ? a.k1 : a.k0) + x.off, hd) * a.scale;
        const float m_new = fmaxf(m, s), alpha = expf(m - m_new), p = expf(s - m_new);
        const float* v = (x.set ? a.v1 : a.v0) + x.off;
        l = fmaf(l, alpha, p);
        for (int i = 0; i < ATTN_MAX_HD / 32; i++)
            if (lane + 32 * i < hd) o[i] = fmaf(o[i], alpha, p * v[lane + 32 * i]);
        m = m_new;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int i = 0; i < ATTN_MAX_HD / 32; i++)
        if (lane + 32 * i < hd) a.out[(long long)t * a.n_heads * hd + h * hd + lane + 32 * i] = o[i] * inv;
    if (lane == 0) a.lse[(long long)t * a.n_heads + h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// ---- backward version 1: one thread per (query, head), atomics into dk/dv -------------------------------
__global__ void xattn_bwd_v1_kernel(XAttnArgs a) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= a.n_q * a.n_heads) return;
    const int t = idx / a.n_heads, h = idx % a.n_heads, hd = a.head_dim, kvh = h / (a.n_heads / a.n_kv_heads);
    const long long row = (long long)t * a.n_heads * hd + h * hd;
    const float *q = a.q + row, *dout = a.dout + row;
    float* dq = a.dq + row;
    const float D = xattn_dot(dout, a.o + row, hd), L = a.lse[(long long)t * a.n_heads + h];
    for (int d = 0; d < hd; d++) dq[d] = 0.0f;
    for (int r = 0; r < a.n0 + a.n1; r++) {
        const XRow x = xattn_row(a, r, kvh);
        if (!xattn_sees_dev(a, t, x.set, x.j)) continue;
        const float *k = (x.set ? a.k1 : a.k0) + x.off, *v = (x.set ? a.v1 : a.v0) + x.off;
        float *dk = (x.set ? a.dk1 : a.dk0) + x.off, *dv = (x.set ? a.dv1 : a.dv0) + x.off;
        const float p = expf(xattn_dot(q, k, hd) * a.scale - L);
        const float g = p * (xattn_dot(dout, v, hd) - D) * a.scale;  // scale ds
        for (int d = 0; d < hd; d++) {
            dq[d] = fmaf(g, k[d], dq[d]);
            atomicAdd(&dv[d], p * dout[d]);
            atomicAdd(&dk[d], g * q[d]);
        }
    }
}

// ---- backward version 2: dq by a warp per (query, head); dk/dv by a thread per key row -----------------
__global__ void xattn_bwd_dq_v2_kernel(XAttnArgs a) {
    const int lane = threadIdx.x % 32, idx = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= a.n_q * a.n_heads) return;
    const int t = idx / a.n_heads, h = idx % a.n_heads, hd = a.head_dim, kvh = h / (a.n_heads / a.n_kv_heads);
    const long long row = (long long)t * a.n_heads * hd + h * hd;
    const float *q = a.q + row, *dout = a.dout + row;
    const float D = xattn_warp_dot(dout, a.o + row, hd), L = a.lse[(long long)t * a.n_heads + h];
    if (lane == 0) a.D[(long long)t * a.n_heads + h] = D;  // for the dk/dv kernel
    float dq[ATTN_MAX_HD / 32];
    for (int i = 0; i < ATTN_MAX_HD / 32; i++) dq[i] = 0.0f;
    for (int r = 0; r < a.n0 + a.n1; r++) {
        const XRow x = xattn_row(a, r, kvh);
        if (!xattn_sees_dev(a, t, x.set, x.j)) continue;
        const float *k = (x.set ? a.k1 : a.k0) + x.off, *v = (x.set ? a.v1 : a.v0) + x.off;
        const float p = expf(xattn_warp_dot(q, k, hd) * a.scale - L);
        const float g = p * (xattn_warp_dot(dout, v, hd) - D) * a.scale;
        for (int i = 0; i < ATTN_MAX_HD / 32; i++)
            if (lane + 32 * i < hd) dq[i] = fmaf(g, k[lane + 32 * i], dq[i]);
    }
    for (int i = 0; i < ATTN_MAX_HD / 32; i++)
        if (lane + 32 * i < hd) a.dq[row + lane + 32 * i] = dq[i];
}

__global__ void xattn_bwd_dkdv_v2_kernel(XAttnArgs a) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x, kvh = blockIdx.y;
    if (r >= a.n0 + a.n1) return;
    const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads;
    const XRow x = xattn_row(a, r, kvh);
    const float *k = (x.set ? a.k1 : a.k0) + x.off, *v = (x.set ? a.v1 : a.v0) + x.off;
    float *dk = (x.set ? a.dk1 : a.dk0) + x.off, *dv = (x.set ? a.dv1 : a.dv0) + x.off;
    for (int t = 0; t < a.n_q; t++) {  // queries in order, then the group's heads: a fixed order
        if (!xattn_sees_dev(a, t, x.set, x.j)) continue;
        for (int h = kvh * group; h < (kvh + 1) * group; h++) {
            const long long row = (long long)t * a.n_heads * hd + h * hd, hl = (long long)t * a.n_heads + h;
            const float *q = a.q + row, *dout = a.dout + row;
            const float p = expf(xattn_dot(q, k, hd) * a.scale - a.lse[hl]);
            const float g = p * (xattn_dot(dout, v, hd) - a.D[hl]) * a.scale;
            for (int d = 0; d < hd; d++) {
                dv[d] = fmaf(p, dout[d], dv[d]);
                dk[d] = fmaf(g, q[d], dk[d]);
            }
        }
    }
}

// ---- launchers ----------------------------------------------------------------------------------------
static void xattn_fwd_run(int version, const XAttnArgs& a) {
    const int rows = a.n_q * a.n_heads;
    switch (version) {
        case 1: KLAUNCH(cdiv(rows, 128), 128, 0, 0, xattn_fwd_v1_kernel)(a); break;
        case 2: KLAUNCH(cdiv(rows, 4), 128, 0, 0, xattn_fwd_v2_kernel)(a); break;
        case 3: {  // the shipped launch: cuda/xattn.cu launch_xattn
            const AttnTiling L = attn_tiling(a.n_q, a.n_heads, a.n_kv_heads, a.head_dim);
            KLAUNCH(dim3(cdiv(a.n_q, L.nq), a.n_kv_heads), 32 * L.warps, L.smem, 0, xattn_fwd_kernel)(a, L.nq, L.tpw);
            break;
        }
    }
    dev_launched("xattn_fwd");
}

static void xattn_bwd_run(int version, XAttnArgs a) {
    const int rows = a.n_q * a.n_heads;
    switch (version) {
        case 1: KLAUNCH(cdiv(rows, 128), 128, 0, 0, xattn_bwd_v1_kernel)(a); break;
        case 2:
            KLAUNCH(cdiv(rows, 4), 128, 0, 0, xattn_bwd_dq_v2_kernel)(a);
            dev_launched("xattn_bwd dq");
            KLAUNCH(dim3(cdiv(a.n0 + a.n1, 64), a.n_kv_heads), 64, 0, 0, xattn_bwd_dkdv_v2_kernel)(a);
            break;
        case 3: {  // the shipped launches: src/backend/gpu/ops_cuda.cu CudaOps::xattn_bwd
            const DevAttnLaunch L = dev_attn_launch(a.n_heads, a.n_kv_heads, a.head_dim);
            KLAUNCH(dim3(a.n_q, a.n_kv_heads), L.threads, L.smem, 0, xattn_bwd_dq_kernel)(a);
            dev_launched("xattn_bwd dq");
            a.tiles0 = cdiv(a.n0, XATTN_BKEYS);  // both sets have gradients here
            const int tiles = a.tiles0 + cdiv(a.n1, XATTN_BKEYS);
            const XAttnDkdvLaunch L2 = xattn_dkdv_launch(a.head_dim, a.n_heads / a.n_kv_heads);
            KLAUNCH(dim3(tiles, a.n_kv_heads), L2.threads, L2.smem, 0, xattn_bwd_dkdv_kernel)(a, L2.bq);
            break;
        }
    }
    dev_launched("xattn_bwd");
}

static XCase make_case(DevRng& rng, int kind) {
    XCase c;
    c.kind = kind;
    c.n_heads = 6;  // a GQA group of 3 and head_dim 64, as SmolLM2
    c.n_kv_heads = 2;
    c.hd = 64;
    c.words = 1;
    c.w = 4;
    c.offset = 1;
    c.n_pred = 2;
    if (kind == 0) {  // PREFIX: 9 tree queries over 37 true states and 9 predicted ones
        c.n_q = 9;
        c.n0 = 37;
        c.n1 = 9;
        for (int t = 0; t < c.n_q; t++) c.bits.push_back(t == 2 ? 0 : rng.next() & 0x1FF);  // query 2: no set-1 row
    } else {          // BLOCK, stage 2: every row of a 20-row sequence is a query
        c.n_q = c.n0 = c.n1 = 20;
        for (int t = 0; t < c.n_q; t++) c.qrow.push_back(t);
    }
    const int q_dim = c.n_heads * c.hd, kv_dim = c.n_kv_heads * c.hd;
    c.q = dev_rand(rng, (size_t)c.n_q * q_dim);
    c.dout = dev_rand(rng, (size_t)c.n_q * q_dim);
    std::vector<float>* kv[4] = {&c.k0, &c.v0, &c.dk0, &c.dv0};
    std::vector<float>* kv1[4] = {&c.k1, &c.v1, &c.dk1, &c.dv1};
    for (int i = 0; i < 4; i++) {
        *kv[i] = dev_rand(rng, (size_t)c.n0 * kv_dim, i < 2 ? 1.0f : 0.1f);  // dk, dv start values: accumulate
        *kv1[i] = dev_rand(rng, (size_t)c.n1 * kv_dim, i < 2 ? 1.0f : 0.1f);
    }
    return c;
}

static std::vector<float>& append(std::vector<float>& to, const std::vector<float>& from) {
    to.insert(to.end(), from.begin(), from.end());
    return to;
}
static void append(std::vector<double>& to, const std::vector<double>& from) { to.insert(to.end(), from.begin(), from.end()); }

int main(int argc, char** argv) {
    const int versions = 3;
    DevRng rng(4);
    const XCase cases[2] = {make_case(rng, 0), make_case(rng, 1)};
    std::vector<float> fwd[versions + 1], bwd[versions + 1];
    std::vector<double> fwd_ref, fwd_tol, bwd_ref, bwd_tol;
    for (const XCase& c : cases) {
        XRef R;
        xattn_cpu(c, R);
        append(fwd_ref, R.out);
        append(fwd_ref, R.lse);
        append(fwd_tol, R.tol_out);
        append(fwd_tol, R.tol_lse);
        append(bwd_ref, R.grads);
        append(bwd_tol, R.tol_grads);
        XAttnArgs a{};
        a.q = dev_upload(c.q);
        a.qrow = c.kind == 1 ? dev_upload(c.qrow) : nullptr;
        a.n_q = c.n_q;
        a.k0 = dev_upload(c.k0);
        a.v0 = dev_upload(c.v0);
        a.n0 = c.n0;
        a.k1 = dev_upload(c.k1);
        a.v1 = dev_upload(c.v1);
        a.n1 = c.n1;
        a.n_heads = c.n_heads;
        a.n_kv_heads = c.n_kv_heads;
        a.head_dim = c.hd;
        a.scale = 1.0f / sqrtf((float)c.hd);
        a.kind = c.kind;
        a.set1_bits = c.kind == 0 ? dev_upload(c.bits) : nullptr;
        a.set1_words = c.words;
        a.w = c.w;
        a.offset = c.offset;
        a.n_pred = c.n_pred;
        const size_t n_out = (size_t)c.n_q * c.n_heads * c.hd, n_lse = (size_t)c.n_q * c.n_heads;
        for (int v = 1; v <= versions; v++) {
            if (!dev_want(argc, argv, v)) continue;
            a.out = dev_zeros<float>(n_out);
            a.lse = dev_zeros<float>(n_lse);
            xattn_fwd_run(v, a);
            append(append(fwd[v], dev_download(a.out, n_out)), dev_download(a.lse, n_lse));
            DEV_CHECK(cudaFree(a.out));
            DEV_CHECK(cudaFree(a.lse));
            a.out = a.lse = nullptr;  // no dangling pointer in the backward's arguments
        }
        // backward, from the reference forward rounded to fp32
        a.lse = dev_upload(R.lse_f);
        a.o = dev_upload(R.out_f);
        a.dout = dev_upload(c.dout);
        for (int v = 1; v <= versions; v++) {
            if (!dev_want(argc, argv, v)) continue;
            a.dq = dev_zeros<float>(n_out);
            a.D = dev_zeros<float>(n_lse);
            a.dk0 = dev_upload(c.dk0);
            a.dv0 = dev_upload(c.dv0);
            a.dk1 = dev_upload(c.dk1);
            a.dv1 = dev_upload(c.dv1);
            xattn_bwd_run(v, a);
            append(bwd[v], dev_download(a.dq, n_out));
            append(bwd[v], dev_download(a.dk0, c.dk0.size()));
            append(bwd[v], dev_download(a.dv0, c.dv0.size()));
            append(bwd[v], dev_download(a.dk1, c.dk1.size()));
            append(bwd[v], dev_download(a.dv1, c.dv1.size()));
            for (float* p : {a.dq, a.D, a.dk0, a.dv0, a.dk1, a.dv1}) DEV_CHECK(cudaFree(p));
        }
    }
    for (int v = 1; v <= versions; v++)
        if (dev_want(argc, argv, v))
            dev_compare("xattn_fwd", v, fwd[v], fwd_ref, fwd_tol, v == versions && dev_planted("xattn_fwd"));
    for (int v = 1; v <= versions; v++)
        if (dev_want(argc, argv, v))
            dev_compare("xattn_bwd", v, bwd[v], bwd_ref, bwd_tol, v == versions && dev_planted("xattn_bwd"));
    return g_dev_failures ? 1 : 0;
}
