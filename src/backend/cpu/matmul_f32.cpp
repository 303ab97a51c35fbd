// matmul_f32.cpp: the dense f32 products of a linear layer y = x W^T and their backward (ops.h
// matmul_f32, matmul_f32_bwd_x, matmul_f32_bwd_w) for CpuOps (AVX2 register tiles) and CpuOps64
// (scalar double). Each output element has one fixed reduction order whatever T, the tiling or the
// thread count:
//   matmul_f32       y[t,o]  = hsum8(8-lane fma over i) then scalar fma tail  (float; double: sequential)
//   matmul_f32_bwd_x dx[t,i] = fma chain over o = 0..n_out-1                   (both)
//   matmul_f32_bwd_w dW[o,i] = fma chain over t = 0..T-1, starting from dW      (both)
// so a row's result does not depend on which other rows are computed with it (batch invariance). On the
// AVX-512 path (cpu_matmul_isa()) the float tiles go to matmul_f32_avx512.cpp, which keeps these chains (the
// same bits, twice the multiply-adds per instruction); what is left over (edges) stays on the AVX2 tiles.
// The quantized matmul of model Weights is matmul.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../../core/common.h"
#include "../../core/threadpool.h"
#include "../ops.h"
#include "cpu_ops.h"
#include "matmul.h"
#include "matmul_f32_avx512.h"
#include "ops_f64.h"
#include "prim.h"
#include "simd.h"

namespace beagle {
namespace {

// matmul_f32: y[t, o] = sum_i W[o, i] x[t, i]
template <int MT, int MO>
inline void matmul_f32_tile(float* y, const float* x, const float* W, int t0, int o0, int n_in, int n_out) {
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
inline void matmul_f32_tile_mo(int mo, float* y, const float* x, const float* W, int t0, int o0, int n_in, int n_out) {
    switch (mo) {
        case 3: matmul_f32_tile<MT, 3>(y, x, W, t0, o0, n_in, n_out); break;
        case 2: matmul_f32_tile<MT, 2>(y, x, W, t0, o0, n_in, n_out); break;
        default: matmul_f32_tile<MT, 1>(y, x, W, t0, o0, n_in, n_out); break;
    }
}

void matmul_f32_impl(ThreadPool& pool, float* y, const float* x, const float* W, int T, int n_in, int n_out) {
    const bool avx512 = cpu_isa_avx512();
    tiles_2d(pool, T, 32, n_out, 48, [&](int ta, int tb, int oa, int ob) {
        int o = oa;
        if (avx512)
            for (; o + 6 <= ob; o += 6) {  // 6 outputs a tile: 3 pairs, one per 512-bit accumulator
                int t = ta;
                for (; t + 4 <= tb; t += 4) matmul_f32_fwd_tile_avx512(4, y, x, W, t, o, n_in, n_out);
                for (; t < tb; t++) matmul_f32_fwd_tile_avx512(1, y, x, W, t, o, n_in, n_out);
            }
        for (; o < ob; o += 3) {
            int mo = std::min(3, ob - o);
            int t = ta;
            for (; t + 4 <= tb; t += 4) matmul_f32_tile_mo<4>(mo, y, x, W, t, o, n_in, n_out);
            for (; t < tb; t++) matmul_f32_tile_mo<1>(mo, y, x, W, t, o, n_in, n_out);
        }
    });
}

void matmul_f32_impl(ThreadPool& pool, double* y, const double* x, const double* W, int T, int n_in, int n_out) {
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
inline void matmul_f32_bwd_x_tile(float* dx, const float* dy, const float* W, int t0, int i0, int oa, int ob, int n_in,
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
inline void matmul_f32_bwd_x_scalar(R* dx, const R* dy, const R* W, int t, int i, int oa, int ob, int n_in, int n_out,
                            bool first) {
    R acc = first ? R(0) : dx[(int64_t)t * n_in + i];
    for (int o = oa; o < ob; o++) acc = fma_r(dy[(int64_t)t * n_out + o], W[(int64_t)o * n_in + i], acc);
    dx[(int64_t)t * n_in + i] = acc;
}

template <int MT>
inline void matmul_f32_bwd_x_rows(float* dx, const float* dy, const float* W, int t0, int ia, int ib, int oa, int ob,
                              int n_in, int n_out, bool first, bool avx512) {
    int i = ia;
    if (avx512)
        for (; i + 32 <= ib; i += 32) matmul_f32_bwd_x_tile_avx512(MT, dx, dy, W, t0, i, oa, ob, n_in, n_out, first);
    for (; i + 16 <= ib; i += 16) matmul_f32_bwd_x_tile<MT, 2>(dx, dy, W, t0, i, oa, ob, n_in, n_out, first);
    for (; i + 8 <= ib; i += 8) matmul_f32_bwd_x_tile<MT, 1>(dx, dy, W, t0, i, oa, ob, n_in, n_out, first);
    for (; i < ib; i++)
        for (int a = 0; a < MT; a++) matmul_f32_bwd_x_scalar(dx, dy, W, t0 + a, i, oa, ob, n_in, n_out, first);
}

static const int kRedBlock = 256;  // reduction-dimension block of the backward matmuls

void matmul_f32_bwd_x_impl(ThreadPool& pool, float* dx, const float* dy, const float* W, int T, int n_in, int n_out,
                           bool accumulate) {
    const bool avx512 = cpu_isa_avx512();
    tiles_2d(pool, T, 64, n_in, 64, [&](int ta, int tb, int ia, int ib) {
        for (int oa = 0; oa < n_out || oa == 0; oa += kRedBlock) {
            int ob = std::min(n_out, oa + kRedBlock);
            bool first = oa == 0 && !accumulate;
            int t = ta;
            for (; t + 4 <= tb; t += 4) matmul_f32_bwd_x_rows<4>(dx, dy, W, t, ia, ib, oa, ob, n_in, n_out, first, avx512);
            for (; t < tb; t++) matmul_f32_bwd_x_rows<1>(dx, dy, W, t, ia, ib, oa, ob, n_in, n_out, first, avx512);
            if (n_out == 0) break;
        }
    });
}

void matmul_f32_bwd_x_impl(ThreadPool& pool, double* dx, const double* dy, const double* W, int T, int n_in, int n_out,
                           bool accumulate) {
    tiles_2d(pool, T, 32, n_in, 128, [&](int ta, int tb, int ia, int ib) {
        for (int t = ta; t < tb; t++)
            for (int i = ia; i < ib; i++) matmul_f32_bwd_x_scalar(dx, dy, W, t, i, 0, n_out, n_in, n_out, !accumulate);
    });
}

// ---------------------------------------------------------------------------------------------
// matmul_f32_bwd_w: dW[o, i] += sum_t dy[t, o] x[t, i], as the fma chain over t = 0..T-1 starting from dW
// (cut into blocks of t and resumed from dW: same bits).
template <int MO, int NV>
inline void matmul_f32_bwd_w_tile(float* dW, const float* dy, const float* x, int o0, int i0, int ta, int tb, int n_in,
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
inline void matmul_f32_bwd_w_scalar(R* dW, const R* dy, const R* x, int o, int i, int ta, int tb, int n_in, int n_out) {
    R acc = dW[(int64_t)o * n_in + i];
    for (int t = ta; t < tb; t++) acc = fma_r(dy[(int64_t)t * n_out + o], x[(int64_t)t * n_in + i], acc);
    dW[(int64_t)o * n_in + i] = acc;
}

template <int MO>
inline void matmul_f32_bwd_w_rows(float* dW, const float* dy, const float* x, int o0, int ia, int ib, int ta, int tb,
                              int n_in, int n_out, bool avx512) {
    int i = ia;
    if (avx512)
        for (; i + 32 <= ib; i += 32) matmul_f32_bwd_w_tile_avx512(MO, dW, dy, x, o0, i, ta, tb, n_in, n_out);
    for (; i + 16 <= ib; i += 16) matmul_f32_bwd_w_tile<MO, 2>(dW, dy, x, o0, i, ta, tb, n_in, n_out);
    for (; i + 8 <= ib; i += 8) matmul_f32_bwd_w_tile<MO, 1>(dW, dy, x, o0, i, ta, tb, n_in, n_out);
    for (; i < ib; i++)
        for (int c = 0; c < MO; c++) matmul_f32_bwd_w_scalar(dW, dy, x, o0 + c, i, ta, tb, n_in, n_out);
}

void matmul_f32_bwd_w_impl(ThreadPool& pool, float* dW, const float* dy, const float* x, int T, int n_in, int n_out) {
    const bool avx512 = cpu_isa_avx512();
    tiles_2d(pool, n_out, 32, n_in, 64, [&](int oa, int ob, int ia, int ib) {
        for (int ta = 0; ta < T; ta += kRedBlock) {
            int tb = std::min(T, ta + kRedBlock);
            int o = oa;
            for (; o + 4 <= ob; o += 4) matmul_f32_bwd_w_rows<4>(dW, dy, x, o, ia, ib, ta, tb, n_in, n_out, avx512);
            for (; o < ob; o++) matmul_f32_bwd_w_rows<1>(dW, dy, x, o, ia, ib, ta, tb, n_in, n_out, avx512);
        }
    });
}

void matmul_f32_bwd_w_impl(ThreadPool& pool, double* dW, const double* dy, const double* x, int T, int n_in, int n_out) {
    tiles_2d(pool, n_out, 16, n_in, 128, [&](int oa, int ob, int ia, int ib) {
        for (int o = oa; o < ob; o++)
            for (int i = ia; i < ib; i++) matmul_f32_bwd_w_scalar(dW, dy, x, o, i, 0, T, n_in, n_out);
    });
}

}  // namespace

void CpuOps::matmul_f32(float* y, const float* x, const float* W, int T, int n_in, int n_out) {
    matmul_f32_impl(pool_, y, x, W, T, n_in, n_out);
}
void CpuOps::matmul_f32_bwd_x(float* dx, const float* dy, const float* W, int T, int n_in, int n_out, bool accumulate) {
    matmul_f32_bwd_x_impl(pool_, dx, dy, W, T, n_in, n_out, accumulate);
}
void CpuOps::matmul_f32_bwd_w(float* dW, const float* dy, const float* x, int T, int n_in, int n_out) {
    matmul_f32_bwd_w_impl(pool_, dW, dy, x, T, n_in, n_out);
}

void CpuOps64::matmul_f32(double* y, const double* x, const double* W, int T, int n_in, int n_out) {
    matmul_f32_impl(pool_, y, x, W, T, n_in, n_out);
}
void CpuOps64::matmul_f32_bwd_x(double* dx, const double* dy, const double* W, int T, int n_in, int n_out, bool accumulate) {
    matmul_f32_bwd_x_impl(pool_, dx, dy, W, T, n_in, n_out, accumulate);
}
void CpuOps64::matmul_f32_bwd_w(double* dW, const double* dy, const double* x, int T, int n_in, int n_out) {
    matmul_f32_bwd_w_impl(pool_, dW, dy, x, T, n_in, n_out);
}

}  // namespace beagle
