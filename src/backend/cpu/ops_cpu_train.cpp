// ops_cpu_train.cpp: the CPU training ops of the Beagle draft (the "training ops" section of
// src/backend/ops.h): dense matmul fwd/bwd, rmsnorm fwd/bwd, RoPE rotate, cross-attention fwd/bwd
// with the parametric mask of src/backend/xattn_mask.h, swiglu bwd, chunked cross-entropy, SmoothL1, AdamW.
//
// Every kernel is written ONCE as a template over the scalar type R and instantiated twice: for
// float in the CpuOps overrides (training and draft inference) and for double in CpuOps64
// (ops_f64.h, used only by the gradient check). Only the innermost primitives differ:
// float uses AVX2 (dot products in 8 lanes, tiled matmuls), double uses plain scalar loops. Each
// output element has one fixed reduction order whatever T, the tiling or the thread count:
//   matmul_f32   y[t,o]  = hsum8(8-lane fma over i) then scalar fma tail     (float; double: sequential)
//   matmul_f32_bwd_x dx[t,i] = fma chain over o = 0..n_out-1                      (both)
//   matmul_f32_bwd_w dW[o,i] = fma chain over t = 0..T-1, starting from dW         (both)
// so a row's result does not depend on which other rows are computed with it (batch invariance).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../../core/common.h"
#include "../../core/threadpool.h"
#include "../ops.h"
#include "../xattn_mask.h"
#include "cpu_ops.h"
#include "ops_f64.h"
#include "simd.h"

namespace beagle {
namespace {

// ---------------------------------------------------------------------------------------------
// Primitives: dot product (fixed order) and y += a * x.
template <class R>
struct Prim;

template <>
struct Prim<float> {
    static float dot(const float* a, const float* b, int n) {
        __m256 acc = _mm256_setzero_ps();
        int i = 0;
        for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
        float s = hsum8(acc);
        for (; i < n; i++) s = fmaf(a[i], b[i], s);
        return s;
    }
    static void axpy(float* y, float a, const float* x, int n) {
        __m256 va = _mm256_set1_ps(a);
        int i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
    }
};

template <>
struct Prim<double> {
    static double dot(const double* a, const double* b, int n) {
        double s = 0;
        for (int i = 0; i < n; i++) s = std::fma(a[i], b[i], s);
        return s;
    }
    static void axpy(double* y, double a, const double* x, int n) {
        for (int i = 0; i < n; i++) y[i] = std::fma(a, x[i], y[i]);
    }
};

inline float fma_r(float a, float b, float c) { return fmaf(a, b, c); }
inline double fma_r(double a, double b, double c) { return std::fma(a, b, c); }

// Jobs of a 2-D tiling: (n1 / b1 rounded up) x (n2 / b2 rounded up), run over the pool.
template <class Fn>
void tiles_2d(ThreadPool& pool, int n1, int b1, int n2, int b2, Fn fn) {
    int64_t j1 = (n1 + b1 - 1) / b1, j2 = (n2 + b2 - 1) / b2;
    pool.parallel_for(j1 * j2, [&](int64_t b, int64_t e, int) {
        for (int64_t job = b; job < e; job++) {
            int a0 = (int)(job / j2) * b1, c0 = (int)(job % j2) * b2;
            fn(a0, std::min(a0 + b1, n1), c0, std::min(c0 + b2, n2));
        }
    });
}

// ---------------------------------------------------------------------------------------------
// matmul_f32: y[t, o] = sum_i W[o, i] x[t, i]
template <int MT, int MO>
inline void mm_fwd_tile_f32(float* y, const float* x, const float* W, int t0, int o0, int n_in, int n_out) {
    __m256 acc[MT][MO];
    _Pragma("GCC unroll 8") for (int a = 0; a < MT; a++)
        _Pragma("GCC unroll 8") for (int c = 0; c < MO; c++) acc[a][c] = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n_in; i += 8) {
        __m256 wv[MO];
        _Pragma("GCC unroll 8") for (int c = 0; c < MO; c++) wv[c] = _mm256_loadu_ps(W + (int64_t)(o0 + c) * n_in + i);
        _Pragma("GCC unroll 8") for (int a = 0; a < MT; a++) {
            __m256 xv = _mm256_loadu_ps(x + (int64_t)(t0 + a) * n_in + i);
            _Pragma("GCC unroll 8") for (int c = 0; c < MO; c++) acc[a][c] = _mm256_fmadd_ps(xv, wv[c], acc[a][c]);
        }
    }
    _Pragma("GCC unroll 8") for (int a = 0; a < MT; a++)
        _Pragma("GCC unroll 8") for (int c = 0; c < MO; c++) {
            const float* xr = x + (int64_t)(t0 + a) * n_in;
            const float* wr = W + (int64_t)(o0 + c) * n_in;
            float s = hsum8(acc[a][c]);
            for (int k = i; k < n_in; k++) s = fmaf(xr[k], wr[k], s);
            y[(int64_t)(t0 + a) * n_out + o0 + c] = s;
        }
}

template <int MT>
inline void mm_fwd_tile_mo(int mo, float* y, const float* x, const float* W, int t0, int o0, int n_in, int n_out) {
    switch (mo) {
        case 3: mm_fwd_tile_f32<MT, 3>(y, x, W, t0, o0, n_in, n_out); break;
        case 2: mm_fwd_tile_f32<MT, 2>(y, x, W, t0, o0, n_in, n_out); break;
        default: mm_fwd_tile_f32<MT, 1>(y, x, W, t0, o0, n_in, n_out); break;
    }
}

void mm_fwd_impl(ThreadPool& pool, float* y, const float* x, const float* W, int T, int n_in, int n_out) {
    tiles_2d(pool, T, 32, n_out, 48, [&](int ta, int tb, int oa, int ob) {
        for (int o = oa; o < ob; o += 3) {
            int mo = std::min(3, ob - o);
            int t = ta;
            for (; t + 4 <= tb; t += 4) mm_fwd_tile_mo<4>(mo, y, x, W, t, o, n_in, n_out);
            for (; t < tb; t++) mm_fwd_tile_mo<1>(mo, y, x, W, t, o, n_in, n_out);
        }
    });
}

void mm_fwd_impl(ThreadPool& pool, double* y, const double* x, const double* W, int T, int n_in, int n_out) {
    tiles_2d(pool, T, 32, n_out, 48, [&](int ta, int tb, int oa, int ob) {
        for (int t = ta; t < tb; t++)
            for (int o = oa; o < ob; o++)
                y[(int64_t)t * n_out + o] = Prim<double>::dot(x + (int64_t)t * n_in, W + (int64_t)o * n_in, n_in);
    });
}

// ---------------------------------------------------------------------------------------------
// matmul_f32_bwd_x: dx[t, i] (+)= sum_o dy[t, o] W[o, i], as the fma chain over o = 0..n_out-1. The chain
// is cut into blocks of o (so a block of W stays in cache) and resumed from dx: same bits.
template <int MT, int NV>
inline void mm_bwd_x_tile_f32(float* dx, const float* dy, const float* W, int t0, int i0, int oa, int ob, int n_in,
                              int n_out, bool first) {
    __m256 acc[MT][NV];
    _Pragma("GCC unroll 8") for (int a = 0; a < MT; a++)
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++)
            acc[a][v] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(dx + (int64_t)(t0 + a) * n_in + i0 + 8 * v);
    for (int o = oa; o < ob; o++) {
        __m256 wv[NV];
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) wv[v] = _mm256_loadu_ps(W + (int64_t)o * n_in + i0 + 8 * v);
        _Pragma("GCC unroll 8") for (int a = 0; a < MT; a++) {
            __m256 b = _mm256_set1_ps(dy[(int64_t)(t0 + a) * n_out + o]);
            _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) acc[a][v] = _mm256_fmadd_ps(b, wv[v], acc[a][v]);
        }
    }
    _Pragma("GCC unroll 8") for (int a = 0; a < MT; a++)
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++)
            _mm256_storeu_ps(dx + (int64_t)(t0 + a) * n_in + i0 + 8 * v, acc[a][v]);
}

template <class R>
inline void mm_bwd_x_scalar(R* dx, const R* dy, const R* W, int t, int i, int oa, int ob, int n_in, int n_out,
                            bool first) {
    R acc = first ? R(0) : dx[(int64_t)t * n_in + i];
    for (int o = oa; o < ob; o++) acc = fma_r(dy[(int64_t)t * n_out + o], W[(int64_t)o * n_in + i], acc);
    dx[(int64_t)t * n_in + i] = acc;
}

template <int MT>
inline void mm_bwd_x_rows_f32(float* dx, const float* dy, const float* W, int t0, int ia, int ib, int oa, int ob,
                              int n_in, int n_out, bool first) {
    int i = ia;
    for (; i + 16 <= ib; i += 16) mm_bwd_x_tile_f32<MT, 2>(dx, dy, W, t0, i, oa, ob, n_in, n_out, first);
    for (; i + 8 <= ib; i += 8) mm_bwd_x_tile_f32<MT, 1>(dx, dy, W, t0, i, oa, ob, n_in, n_out, first);
    for (; i < ib; i++)
        for (int a = 0; a < MT; a++) mm_bwd_x_scalar(dx, dy, W, t0 + a, i, oa, ob, n_in, n_out, first);
}

static const int kRedBlock = 256;  // reduction-dimension block of the backward matmuls

void mm_bwd_x_impl(ThreadPool& pool, float* dx, const float* dy, const float* W, int T, int n_in, int n_out,
                   bool accumulate) {
    tiles_2d(pool, T, 64, n_in, 64, [&](int ta, int tb, int ia, int ib) {
        for (int oa = 0; oa < n_out || oa == 0; oa += kRedBlock) {
            int ob = std::min(n_out, oa + kRedBlock);
            bool first = oa == 0 && !accumulate;
            int t = ta;
            for (; t + 4 <= tb; t += 4) mm_bwd_x_rows_f32<4>(dx, dy, W, t, ia, ib, oa, ob, n_in, n_out, first);
            for (; t < tb; t++) mm_bwd_x_rows_f32<1>(dx, dy, W, t, ia, ib, oa, ob, n_in, n_out, first);
            if (n_out == 0) break;
        }
    });
}

void mm_bwd_x_impl(ThreadPool& pool, double* dx, const double* dy, const double* W, int T, int n_in, int n_out,
                   bool accumulate) {
    tiles_2d(pool, T, 32, n_in, 128, [&](int ta, int tb, int ia, int ib) {
        for (int t = ta; t < tb; t++)
            for (int i = ia; i < ib; i++) mm_bwd_x_scalar(dx, dy, W, t, i, 0, n_out, n_in, n_out, !accumulate);
    });
}

// ---------------------------------------------------------------------------------------------
// matmul_f32_bwd_w: dW[o, i] += sum_t dy[t, o] x[t, i], as the fma chain over t = 0..T-1 starting from dW
// (cut into blocks of t and resumed from dW: same bits).
template <int MO, int NV>
inline void mm_bwd_w_tile_f32(float* dW, const float* dy, const float* x, int o0, int i0, int ta, int tb, int n_in,
                              int n_out) {
    __m256 acc[MO][NV];
    _Pragma("GCC unroll 8") for (int c = 0; c < MO; c++)
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++)
            acc[c][v] = _mm256_loadu_ps(dW + (int64_t)(o0 + c) * n_in + i0 + 8 * v);
    for (int t = ta; t < tb; t++) {
        __m256 xv[NV];
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) xv[v] = _mm256_loadu_ps(x + (int64_t)t * n_in + i0 + 8 * v);
        _Pragma("GCC unroll 8") for (int c = 0; c < MO; c++) {
            __m256 b = _mm256_set1_ps(dy[(int64_t)t * n_out + o0 + c]);
            _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) acc[c][v] = _mm256_fmadd_ps(b, xv[v], acc[c][v]);
        }
    }
    _Pragma("GCC unroll 8") for (int c = 0; c < MO; c++)
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++)
            _mm256_storeu_ps(dW + (int64_t)(o0 + c) * n_in + i0 + 8 * v, acc[c][v]);
}

template <class R>
inline void mm_bwd_w_scalar(R* dW, const R* dy, const R* x, int o, int i, int ta, int tb, int n_in, int n_out) {
    R acc = dW[(int64_t)o * n_in + i];
    for (int t = ta; t < tb; t++) acc = fma_r(dy[(int64_t)t * n_out + o], x[(int64_t)t * n_in + i], acc);
    dW[(int64_t)o * n_in + i] = acc;
}

template <int MO>
inline void mm_bwd_w_rows_f32(float* dW, const float* dy, const float* x, int o0, int ia, int ib, int ta, int tb,
                              int n_in, int n_out) {
    int i = ia;
    for (; i + 16 <= ib; i += 16) mm_bwd_w_tile_f32<MO, 2>(dW, dy, x, o0, i, ta, tb, n_in, n_out);
    for (; i + 8 <= ib; i += 8) mm_bwd_w_tile_f32<MO, 1>(dW, dy, x, o0, i, ta, tb, n_in, n_out);
    for (; i < ib; i++)
        for (int c = 0; c < MO; c++) mm_bwd_w_scalar(dW, dy, x, o0 + c, i, ta, tb, n_in, n_out);
}

void mm_bwd_w_impl(ThreadPool& pool, float* dW, const float* dy, const float* x, int T, int n_in, int n_out) {
    tiles_2d(pool, n_out, 32, n_in, 64, [&](int oa, int ob, int ia, int ib) {
        for (int ta = 0; ta < T; ta += kRedBlock) {
            int tb = std::min(T, ta + kRedBlock);
            int o = oa;
            for (; o + 4 <= ob; o += 4) mm_bwd_w_rows_f32<4>(dW, dy, x, o, ia, ib, ta, tb, n_in, n_out);
            for (; o < ob; o++) mm_bwd_w_rows_f32<1>(dW, dy, x, o, ia, ib, ta, tb, n_in, n_out);
        }
    });
}

void mm_bwd_w_impl(ThreadPool& pool, double* dW, const double* dy, const double* x, int T, int n_in, int n_out) {
    tiles_2d(pool, n_out, 16, n_in, 128, [&](int oa, int ob, int ia, int ib) {
        for (int o = oa; o < ob; o++)
            for (int i = ia; i < ib; i++) mm_bwd_w_scalar(dW, dy, x, o, i, 0, T, n_in, n_out);
    });
}

// ---------------------------------------------------------------------------------------------
// Row-wise and element-wise kernels, one template each.

template <class R>
void rows_gather_t(R* dst, const R* src, const int* idx, int n, int width) {
    for (int i = 0; i < n; i++) memcpy(dst + (int64_t)i * width, src + (int64_t)idx[i] * width, width * sizeof(R));
}

template <class R>
void rows_scatter_t(R* dst, const R* src, const int* idx, int n, int width, bool accumulate) {
    for (int i = 0; i < n; i++) {
        R* d = dst + (int64_t)idx[i] * width;
        const R* s = src + (int64_t)i * width;
        if (accumulate)
            for (int k = 0; k < width; k++) d[k] += s[k];
        else
            memcpy(d, s, width * sizeof(R));
    }
}

template <class R>
void rmsnorm_fwd_t(ThreadPool& pool, R* y, R* rstd, const R* x, const R* w, int T, int dim, float eps) {
    pool.parallel_for(T, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; t++) {
            const R* xr = x + t * dim;
            R* yr = y + t * dim;
            R ms = Prim<R>::dot(xr, xr, dim) / (R)dim + (R)eps;
            R r = R(1) / std::sqrt(ms);
            rstd[t] = r;
            for (int i = 0; i < dim; i++) yr[i] = w[i] * (r * xr[i]);
        }
    });
}

// y_i = w_i x_i r, r = (mean x^2 + eps)^-1/2:  dx_i = r g_i - x_i r^3 (g . x) / dim with g = dy * w;
// dw_i = sum_t dy_i x_i r.
template <class R>
void rmsnorm_bwd_t(ThreadPool& pool, R* dx, R* dw, const R* dy, const R* x, const R* w, const R* rstd, int T, int dim) {
    if (dx)
        pool.parallel_for(T, [&](int64_t b, int64_t e, int) {
            for (int64_t t = b; t < e; t++) {
                const R *xr = x + t * dim, *dyr = dy + t * dim;
                R r = rstd[t], gx = 0;
                for (int i = 0; i < dim; i++) gx += dyr[i] * w[i] * xr[i];
                R c = r * r * r * gx / (R)dim;
                R* dxr = dx + t * dim;
                for (int i = 0; i < dim; i++) dxr[i] += r * (dyr[i] * w[i]) - c * xr[i];
            }
        });
    if (dw)
        pool.parallel_for((dim + 63) / 64, [&](int64_t b, int64_t e, int) {
            for (int64_t blk = b; blk < e; blk++) {
                int i0 = (int)blk * 64, i1 = std::min(dim, i0 + 64);
                for (int i = i0; i < i1; i++) {
                    R acc = dw[i];
                    for (int t = 0; t < T; t++) acc += dy[(int64_t)t * dim + i] * x[(int64_t)t * dim + i] * rstd[t];
                    dw[i] = acc;
                }
            }
        });
}

// RoPE inverse frequencies in precision R (same formula as CpuOps::rope_freqs).
template <class R>
void rope_freqs_t(const RopeParams& rp, R* freq) {
    int hd = rp.head_dim;
    for (int i = 0; i < hd / 2; i++) {
        R f = R(1) / std::pow((R)rp.theta, (R)(2 * i) / (R)hd);
        if (rp.llama3_scaling) {
            R wavelen = R(2) * (R)M_PI / f;
            R low_wavelen = (R)rp.orig_max_pos / (R)rp.low_freq_factor;
            R high_wavelen = (R)rp.orig_max_pos / (R)rp.high_freq_factor;
            if (wavelen > low_wavelen) f = f / (R)rp.factor;
            else if (wavelen >= high_wavelen) {
                R smooth = ((R)rp.orig_max_pos / wavelen - (R)rp.low_freq_factor) /
                           ((R)rp.high_freq_factor - (R)rp.low_freq_factor);
                f = (R(1) - smooth) * f / (R)rp.factor + smooth * f;
            }
        }
        freq[i] = f;
    }
}

template <class R>
void rope_rotate_t(R* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) {
    int hd = rp.head_dim, half = hd / 2;
    std::vector<R> freq(half);
    rope_freqs_t(rp, freq.data());
    for (int t = 0; t < T; t++) {
        R* xr = x + (int64_t)t * n_heads * hd;
        for (int i = 0; i < half; i++) {
            R val = (R)pos[t] * freq[i];
            R c = std::cos(val), s = std::sin(val);
            if (inverse) s = -s;
            for (int h = 0; h < n_heads; h++) {
                R* v = xr + h * hd + 2 * i;
                R v0 = v[0], v1 = v[1];
                v[0] = v0 * c - v1 * s;
                v[1] = v0 * s + v1 * c;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cross-attention over two key sets with the parametric mask.
template <class R>
inline const R* key_row(const R* set0, const R* set1, int n0, int key, int kv_dim, int off) {
    return key < n0 ? set0 + (int64_t)key * kv_dim + off : set1 + (int64_t)(key - n0) * kv_dim + off;
}

template <class R>
void xattn_fwd_t(ThreadPool& pool, R* out, R* lse, const R* q, const int* qrow, int n_q, const XAttnKeysT<R>& K,
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
                for (int t = 0; t < n_q; t++) {
                    if (!xattn_sees(mask, t, qrow ? qrow[t] : t, set, j)) continue;
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

// ---------------------------------------------------------------------------------------------
template <class R>
void swiglu_t(R* out, const R* gate, const R* up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        R g = gate[i];
        out[i] = g * (R(1) / (R(1) + std::exp(-g))) * up[i];
    }
}

// out = silu(g) u:  dup = dout silu(g);  dgate = dout u sig(g) (1 + g (1 - sig(g)))
template <class R>
void swiglu_bwd_t(R* dgate, R* dup, const R* dout, const R* gate, const R* up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        R g = gate[i], sig = R(1) / (R(1) + std::exp(-g));
        dup[i] = dout[i] * g * sig;
        dgate[i] = dout[i] * up[i] * sig * (R(1) + g * (R(1) - sig));
    }
}

template <class R>
void lse_update_t(ThreadPool& pool, R* m, R* s, const R* z, int n, int C) {
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            const R* zr = z + r * C;
            R mx = m[r];
            for (int c = 0; c < C; c++) mx = std::max(mx, zr[c]);
            R sum = m[r] == -INFINITY ? R(0) : s[r] * std::exp(m[r] - mx);
            for (int c = 0; c < C; c++) sum += std::exp(zr[c] - mx);
            m[r] = mx;
            s[r] = sum;
        }
    });
}

template <class R>
void ce_soft_chunk_t(ThreadPool& pool, R* dz, R* loss, const R* zt, const R* zd, const R* m_t, const R* s_t,
                     const R* m_d, const R* s_d, int n, int C, R scale) {
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            R lt = m_t[r] + std::log(s_t[r]), ld = m_d[r] + std::log(s_d[r]), acc = 0;
            for (int c = 0; c < C; c++) {
                int64_t k = r * C + c;
                R p = std::exp(zt[k] - lt), logq = zd[k] - ld;
                acc += p * logq;
                dz[k] = scale * (std::exp(logq) - p);
            }
            loss[r] += -scale * acc;
        }
    });
}

template <class R>
void ce_hard_chunk_t(ThreadPool& pool, R* dz, R* loss, const R* zd, const R* m_d, const R* s_d, const int* labels,
                     int v0, int n, int C, R scale) {
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            R ld = m_d[r] + std::log(s_d[r]);
            for (int c = 0; c < C; c++) {
                int64_t k = r * C + c;
                dz[k] = scale * (std::exp(zd[k] - ld) - (v0 + c == labels[r] ? R(1) : R(0)));
            }
            int c = labels[r] - v0;
            if (c >= 0 && c < C) loss[r] += scale * (ld - zd[r * C + c]);
        }
    });
}

// PyTorch SmoothL1Loss(beta): l(d) = 0.5 d^2 / beta if |d| < beta else |d| - 0.5 beta.
template <class R>
void smoothl1_t(ThreadPool& pool, R* dx, R* loss, const R* x, const R* target, int n, int dim, R beta, R scale) {
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            R acc = 0, k = scale / (R)dim;
            for (int i = 0; i < dim; i++) {
                int64_t idx = r * dim + i;
                R d = x[idx] - target[idx], ad = std::fabs(d);
                if (ad < beta) {
                    acc += R(0.5) * d * d / beta;
                    dx[idx] += k * d / beta;
                } else {
                    acc += ad - R(0.5) * beta;
                    dx[idx] += k * (d > 0 ? R(1) : R(-1));
                }
            }
            loss[r] += scale * acc / (R)dim;
        }
    });
}

template <class R>
double sumsq_t(ThreadPool& pool, const R* x, size_t n) {
    const size_t BLK = 1 << 14;
    size_t nb = (n + BLK - 1) / BLK;
    std::vector<double> part(nb);
    pool.parallel_for((int64_t)nb, [&](int64_t b, int64_t e, int) {
        for (int64_t k = b; k < e; k++) {
            double s = 0;
            for (size_t i = k * BLK; i < std::min(n, (k + 1) * BLK); i++) s += (double)x[i] * (double)x[i];
            part[k] = s;
        }
    });
    double s = 0;
    for (double p : part) s += p;
    return s;
}

template <class R>
void adamw_t(ThreadPool& pool, R* w, R* m, R* v, const R* g, size_t n, const AdamWParams& p) {
    R b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps, gs = p.grad_scale;
    R bc1 = R(1) - (R)std::pow((double)p.beta1, p.step), bc2 = R(1) - (R)std::pow((double)p.beta2, p.step);
    R decay = R(1) - lr * (R)p.weight_decay;
    pool.parallel_for((int64_t)((n + 4095) / 4096), [&](int64_t b, int64_t e, int) {
        for (size_t i = (size_t)b * 4096; i < std::min(n, (size_t)e * 4096); i++) {
            R gi = g[i] * gs;
            m[i] = b1 * m[i] + (R(1) - b1) * gi;
            v[i] = b2 * v[i] + (R(1) - b2) * gi * gi;
            w[i] *= decay;
            w[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
        }
    });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CpuOps (float) overrides
void CpuOps::zero(float* p, size_t n) { memset(p, 0, n * sizeof(float)); }
void CpuOps::gather_rows(float* dst, const float* src, const int* idx, int n, int width) {
    rows_gather_t(dst, src, idx, n, width);
}
void CpuOps::scatter_rows(float* dst, const float* src, const int* idx, int n, int width, bool accumulate) {
    rows_scatter_t(dst, src, idx, n, width, accumulate);
}
void CpuOps::matmul_f32(float* y, const float* x, const float* W, int T, int n_in, int n_out) {
    mm_fwd_impl(pool_, y, x, W, T, n_in, n_out);
}
void CpuOps::matmul_f32_bwd_x(float* dx, const float* dy, const float* W, int T, int n_in, int n_out, bool accumulate) {
    mm_bwd_x_impl(pool_, dx, dy, W, T, n_in, n_out, accumulate);
}
void CpuOps::matmul_f32_bwd_w(float* dW, const float* dy, const float* x, int T, int n_in, int n_out) {
    mm_bwd_w_impl(pool_, dW, dy, x, T, n_in, n_out);
}
void CpuOps::rmsnorm_f32(float* y, float* rstd, const float* x, const float* w, int T, int dim, float eps) {
    rmsnorm_fwd_t(pool_, y, rstd, x, w, T, dim, eps);
}
void CpuOps::rmsnorm_f32_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd, int T,
                         int dim) {
    rmsnorm_bwd_t(pool_, dx, dw, dy, x, w, rstd, T, dim);
}
void CpuOps::rope(float* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) {
    rope_rotate_t(x, pos, T, n_heads, rp, inverse);
}
void CpuOps::xattn(float* out, float* lse, const float* q, const int* qrow, int n_q, const XAttnKeys& keys,
                       int n_heads, int n_kv_heads, int head_dim, const XAttnMask& mask) {
    xattn_fwd_t(pool_, out, lse, q, qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask);
}
void CpuOps::xattn_bwd(float* dq, const XAttnGrads& dkeys, const float* dout, const float* out, const float* lse,
                       const float* q, const int* qrow, int n_q, const XAttnKeys& keys, int n_heads, int n_kv_heads,
                       int head_dim, const XAttnMask& mask) {
    xattn_bwd_t(pool_, dq, dkeys, dout, out, lse, q, qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask);
}
void CpuOps::swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t n) {
    swiglu_bwd_t(dgate, dup, dout, gate, up, n);
}
void CpuOps::lse_update(float* m, float* s, const float* z, int n, int C) { lse_update_t(pool_, m, s, z, n, C); }
void CpuOps::ce_soft_chunk(float* dz, float* loss, const float* zt, const float* zd, const float* m_t, const float* s_t,
                           const float* m_d, const float* s_d, int n, int C, float scale) {
    ce_soft_chunk_t(pool_, dz, loss, zt, zd, m_t, s_t, m_d, s_d, n, C, scale);
}
void CpuOps::ce_hard_chunk(float* dz, float* loss, const float* zd, const float* m_d, const float* s_d,
                           const int* labels, int v0, int n, int C, float scale) {
    ce_hard_chunk_t(pool_, dz, loss, zd, m_d, s_d, labels, v0, n, C, scale);
}
void CpuOps::smoothl1(float* dx, float* loss, const float* x, const float* target, int n, int dim, float beta,
                      float scale) {
    smoothl1_t(pool_, dx, loss, x, target, n, dim, beta, scale);
}
double CpuOps::sumsq(const float* x, size_t n) { return sumsq_t(pool_, x, n); }
void CpuOps::adamw(float* w, float* m, float* v, const float* g, size_t n, const AdamWParams& p) {
    adamw_t(pool_, w, m, v, g, n, p);
}

// ---------------------------------------------------------------------------------------------
// CpuOps64 (double): the same templates.
double* CpuOps64::alloc(size_t n) {
    double* p = (double*)calloc(n ? n : 1, sizeof(double));
    if (!p) fail("out of memory allocating %zu doubles", n);
    return p;
}
void CpuOps64::release(double* p) { free(p); }
void CpuOps64::upload(double* dst, const double* src, size_t n) { memcpy(dst, src, n * sizeof(double)); }
void CpuOps64::download(double* dst, const double* src, size_t n) { memcpy(dst, src, n * sizeof(double)); }
void CpuOps64::copy(double* dst, const double* src, size_t n) { memmove(dst, src, n * sizeof(double)); }
void CpuOps64::add(double* y, const double* x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}
void CpuOps64::swiglu(double* out, const double* gate, const double* up, size_t n) { swiglu_t(out, gate, up, n); }
void CpuOps64::zero(double* p, size_t n) { memset(p, 0, n * sizeof(double)); }
void CpuOps64::gather_rows(double* dst, const double* src, const int* idx, int n, int width) {
    rows_gather_t(dst, src, idx, n, width);
}
void CpuOps64::scatter_rows(double* dst, const double* src, const int* idx, int n, int width, bool accumulate) {
    rows_scatter_t(dst, src, idx, n, width, accumulate);
}
void CpuOps64::matmul_f32(double* y, const double* x, const double* W, int T, int n_in, int n_out) {
    mm_fwd_impl(pool_, y, x, W, T, n_in, n_out);
}
void CpuOps64::matmul_f32_bwd_x(double* dx, const double* dy, const double* W, int T, int n_in, int n_out, bool accumulate) {
    mm_bwd_x_impl(pool_, dx, dy, W, T, n_in, n_out, accumulate);
}
void CpuOps64::matmul_f32_bwd_w(double* dW, const double* dy, const double* x, int T, int n_in, int n_out) {
    mm_bwd_w_impl(pool_, dW, dy, x, T, n_in, n_out);
}
void CpuOps64::rmsnorm_f32(double* y, double* rstd, const double* x, const double* w, int T, int dim, float eps) {
    rmsnorm_fwd_t(pool_, y, rstd, x, w, T, dim, eps);
}
void CpuOps64::rmsnorm_f32_bwd(double* dx, double* dw, const double* dy, const double* x, const double* w,
                           const double* rstd, int T, int dim) {
    rmsnorm_bwd_t(pool_, dx, dw, dy, x, w, rstd, T, dim);
}
void CpuOps64::rope(double* x, const int* pos, int T, int n_heads, const RopeParams& rp, bool inverse) {
    rope_rotate_t(x, pos, T, n_heads, rp, inverse);
}
void CpuOps64::xattn(double* out, double* lse, const double* q, const int* qrow, int n_q,
                         const XAttnKeysT<double>& keys, int n_heads, int n_kv_heads, int head_dim,
                         const XAttnMask& mask) {
    xattn_fwd_t(pool_, out, lse, q, qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask);
}
void CpuOps64::xattn_bwd(double* dq, const XAttnGradsT<double>& dkeys, const double* dout, const double* out,
                         const double* lse, const double* q, const int* qrow, int n_q, const XAttnKeysT<double>& keys,
                         int n_heads, int n_kv_heads, int head_dim, const XAttnMask& mask) {
    xattn_bwd_t(pool_, dq, dkeys, dout, out, lse, q, qrow, n_q, keys, n_heads, n_kv_heads, head_dim, mask);
}
void CpuOps64::swiglu_bwd(double* dgate, double* dup, const double* dout, const double* gate, const double* up,
                          size_t n) {
    swiglu_bwd_t(dgate, dup, dout, gate, up, n);
}
void CpuOps64::lse_update(double* m, double* s, const double* z, int n, int C) { lse_update_t(pool_, m, s, z, n, C); }
void CpuOps64::ce_soft_chunk(double* dz, double* loss, const double* zt, const double* zd, const double* m_t,
                             const double* s_t, const double* m_d, const double* s_d, int n, int C, float scale) {
    ce_soft_chunk_t(pool_, dz, loss, zt, zd, m_t, s_t, m_d, s_d, n, C, (double)scale);
}
void CpuOps64::ce_hard_chunk(double* dz, double* loss, const double* zd, const double* m_d, const double* s_d,
                             const int* labels, int v0, int n, int C, float scale) {
    ce_hard_chunk_t(pool_, dz, loss, zd, m_d, s_d, labels, v0, n, C, (double)scale);
}
void CpuOps64::smoothl1(double* dx, double* loss, const double* x, const double* target, int n, int dim, float beta,
                        float scale) {
    smoothl1_t(pool_, dx, loss, x, target, n, dim, (double)beta, (double)scale);
}
double CpuOps64::sumsq(const double* x, size_t n) { return sumsq_t(pool_, x, n); }
void CpuOps64::adamw(double* w, double* m, double* v, const double* g, size_t n, const AdamWParams& p) {
    adamw_t(pool_, w, m, v, g, n, p);
}

}  // namespace beagle
