// xattn.cpp: the draft's cross-attention over two key sets (true and predicted states) with the
// parametric mask of ../xattn_mask.h, forward and flash-style backward (ops.h xattn, xattn_bwd), for
// CpuOps and CpuOps64. Visible keys in order: set 0 ascending, then set 1 ascending.
#include <cmath>
#include <cstdint>
#include <vector>

#include "../../core/common.h"
#include "../../core/threadpool.h"
#include "../ops.h"
#include "../xattn_mask.h"
#include "cpu_ops.h"
#include "ops_f64.h"
#include "prim.h"

namespace beagle {
namespace {

template <class R>
inline const R* key_row(const R* set0, const R* set1, int n0, int key, int kv_dim, int off) {
    return key < n0 ? set0 + (int64_t)key * kv_dim + off : set1 + (int64_t)(key - n0) * kv_dim + off;
}

template <class R>
void xattn_t(ThreadPool& pool, R* out, R* lse, const R* q, const int* qrow, int n_q, const XAttnKeysT<R>& K,
             int n_heads, int n_kv_heads, int hd, const XAttnMask& mask) {
    BEAGLE_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "xattn: n_heads %d not a multiple of n_kv_heads %d",
                 n_heads, n_kv_heads);
    int kv_dim = n_kv_heads * hd, q_dim = n_heads * hd, group = n_heads / n_kv_heads;
    R scale = R(1) / std::sqrt((R)hd);
    int nmax = K.n0 + K.n1;
    pool.parallel_for((int64_t)n_q * n_heads, [&](int64_t b, int64_t e, int) {
        std::vector<int> keys(nmax + 1);
        std::vector<R> sc(nmax + 1);
        int cur_t = -1, nk = 0;
        for (int64_t job = b; job < e; job++) {
            int t = (int)(job / n_heads), h = (int)(job % n_heads), off = (h / group) * hd;
            if (t != cur_t) {
                nk = xattn_visible(mask, t, qrow ? qrow[t] : t, K.n0, K.n1, keys.data());
                cur_t = t;
            }
            const R* qr = q + (int64_t)t * q_dim + h * hd;
            R* o = out + (int64_t)t * q_dim + h * hd;
            for (int d = 0; d < hd; d++) o[d] = 0;
            if (nk == 0) {
                lse[(int64_t)t * n_heads + h] = -INFINITY;
                continue;
            }
            R mx = -INFINITY;
            for (int i = 0; i < nk; i++) {
                R s = Prim<R>::dot(qr, key_row(K.k0, K.k1, K.n0, keys[i], kv_dim, off), hd) * scale;
                sc[i] = s;
                if (s > mx) mx = s;
            }
            R sum = 0;
            for (int i = 0; i < nk; i++) {
                sc[i] = std::exp(sc[i] - mx);
                sum += sc[i];
            }
            R inv = R(1) / sum;
            for (int i = 0; i < nk; i++) Prim<R>::axpy(o, sc[i] * inv, key_row(K.v0, K.v1, K.n0, keys[i], kv_dim, off), hd);
            lse[(int64_t)t * n_heads + h] = mx + std::log(sum);
        }
    });
}

// p = exp(s - lse), D = dout . out, ds = p (dout . v - D):  dq = scale sum_j ds k_j,
// dk_j += scale ds q, dv_j += p dout. Pass 1 per (query, head) writes dq; pass 2 per (key row,
// kv head) walks the queries in order, so every accumulation has a fixed order.
template <class R>
void xattn_bwd_t(ThreadPool& pool, R* dq, const XAttnGradsT<R>& G, const R* dout, const R* out, const R* lse,
                 const R* q, const int* qrow, int n_q, const XAttnKeysT<R>& K, int n_heads, int n_kv_heads, int hd,
                 const XAttnMask& mask) {
    int kv_dim = n_kv_heads * hd, q_dim = n_heads * hd, group = n_heads / n_kv_heads;
    R scale = R(1) / std::sqrt((R)hd);
    int nmax = K.n0 + K.n1;
    std::vector<R> D((size_t)n_q * n_heads);
    pool.parallel_for((int64_t)n_q * n_heads, [&](int64_t b, int64_t e, int) {
        std::vector<int> keys(nmax + 1);
        int cur_t = -1, nk = 0;
        for (int64_t job = b; job < e; job++) {
            int t = (int)(job / n_heads), h = (int)(job % n_heads), off = (h / group) * hd;
            if (t != cur_t) {
                nk = xattn_visible(mask, t, qrow ? qrow[t] : t, K.n0, K.n1, keys.data());
                cur_t = t;
            }
            const R* qr = q + (int64_t)t * q_dim + h * hd;
            const R* dor = dout + (int64_t)t * q_dim + h * hd;
            R* dqr = dq + (int64_t)t * q_dim + h * hd;
            for (int d = 0; d < hd; d++) dqr[d] = 0;
            R Dth = Prim<R>::dot(dor, out + (int64_t)t * q_dim + h * hd, hd);
            D[job] = Dth;
            R L = lse[job];
            for (int i = 0; i < nk; i++) {
                const R* kr = key_row(K.k0, K.k1, K.n0, keys[i], kv_dim, off);
                const R* vr = key_row(K.v0, K.v1, K.n0, keys[i], kv_dim, off);
                R p = std::exp(Prim<R>::dot(qr, kr, hd) * scale - L);
                R ds = p * (Prim<R>::dot(dor, vr, hd) - Dth);
                Prim<R>::axpy(dqr, ds * scale, kr, hd);
            }
        }
    });
    // A BLOCK mask over non-decreasing query rows (the trainer's): the queries that see key row j are one run
    // of t, found by bisection (set 0: those whose window starts after j; set 1: from the first row after j
    // while they see it). The walk over that run is the full walk's, in the same order: the same sums.
    bool runs = mask.kind == XAttnMask::BLOCK && qrow;
    for (int t = 1; runs && t < n_q; t++) runs = qrow[t] >= qrow[t - 1];
    auto first_seeing = [&](int set, int j) {
        int lo = 0, hi = n_q;
        while (lo < hi) {
            const int mid = (lo + hi) / 2, qm = qrow[mid];
            if (set == 0 ? window_start(qm, mask.w, mask.offset) > j : qm > j) hi = mid;
            else lo = mid + 1;
        }
        return lo;
    };
    for (int set = 0; set < 2; set++) {
        int n = set == 0 ? K.n0 : K.n1;
        R* dk = set == 0 ? G.dk0 : G.dk1;
        R* dv = set == 0 ? G.dv0 : G.dv1;
        const R* kb = set == 0 ? K.k0 : K.k1;
        const R* vb = set == 0 ? K.v0 : K.v1;
        if (n == 0 || !dk || !dv) continue;
        pool.parallel_for((int64_t)n * n_kv_heads, [&](int64_t b, int64_t e, int) {
            for (int64_t job = b; job < e; job++) {
                int j = (int)(job / n_kv_heads), kvh = (int)(job % n_kv_heads), off = kvh * hd;
                const R* kr = kb + (int64_t)j * kv_dim + off;
                const R* vr = vb + (int64_t)j * kv_dim + off;
                R* dkr = dk + (int64_t)j * kv_dim + off;
                R* dvr = dv + (int64_t)j * kv_dim + off;
                for (int t = runs ? first_seeing(set, j) : 0; t < n_q; t++) {
                    if (!xattn_sees(mask, t, qrow ? qrow[t] : t, set, j)) {
                        if (runs) break;  // past the run
                        continue;
                    }
                    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                        const R* qr = q + (int64_t)t * q_dim + h * hd;
                        const R* dor = dout + (int64_t)t * q_dim + h * hd;
                        R p = std::exp(Prim<R>::dot(qr, kr, hd) * scale - lse[(int64_t)t * n_heads + h]);
                        R ds = p * (Prim<R>::dot(dor, vr, hd) - D[(int64_t)t * n_heads + h]);
                        Prim<R>::axpy(dvr, p, dor, hd);
                        Prim<R>::axpy(dkr, ds * scale, qr, hd);
                    }
                }
            }
        });
    }
}

}  // namespace

void CpuOps::xattn(float* out, float* lse, const float* q, const int* qrow, int n_q, const XAttnKeys& keys,
                   int n_heads, int n_kv_heads, int head_dim, const XAttnMask& mask) {
    xattn_t(pool_, out, lse, q, qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask);
}
void CpuOps::xattn_bwd(float* dq, const XAttnGrads& dkeys, const float* dout, const float* out, const float* lse,
                       const float* q, const int* qrow, int n_q, const XAttnKeys& keys, int n_heads, int n_kv_heads,
                       int head_dim, const XAttnMask& mask) {
    xattn_bwd_t(pool_, dq, dkeys, dout, out, lse, q, qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask);
}

void CpuOps64::xattn(double* out, double* lse, const double* q, const int* qrow, int n_q,
                     const XAttnKeysT<double>& keys, int n_heads, int n_kv_heads, int head_dim,
                     const XAttnMask& mask) {
    xattn_t(pool_, out, lse, q, qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask);
}
void CpuOps64::xattn_bwd(double* dq, const XAttnGradsT<double>& dkeys, const double* dout, const double* out,
                         const double* lse, const double* q, const int* qrow, int n_q, const XAttnKeysT<double>& keys,
                         int n_heads, int n_kv_heads, int head_dim, const XAttnMask& mask) {
    xattn_bwd_t(pool_, dq, dkeys, dout, out, lse, q, qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask);
}

}  // namespace beagle
