// matmul_f32_avx512.cpp: the AVX-512 tiles of the draft's dense f32 products (matmul_f32.cpp: forward,
// backward to x, backward to W). Each computes exactly the fma chains of its AVX2 twin, so the bits are
// the same on both ISA paths (test_matmul_f32_isa); it does twice the multiply-adds per instruction.
//
//   forward  y[t, o] = hsum8(lane j: fma chain over i = j, j + 8, ...) then the scalar tail. AVX2 keeps
//            one output per 256-bit accumulator; here a 512-bit accumulator holds two outputs, o and o + 1,
//            one in each half: W rows o and o + 1 side by side, x's 8 floats broadcast to both halves.
//            The halves are reduced apart, by the same hsum8.
//   bwd_x    dx[t, i] = fma chain over o, across i: 16 lanes of i instead of 8.
//   bwd_w    dW[o, i] = fma chain over t from dW, across i: 16 lanes of i instead of 8.
// Compiled with AVX-512 flags, reached only on the AVX-512 path; the helpers have internal linkage (an
// inline function shared with the AVX2 files could be linked in their place). GCC 12 warns about the
// undefined upper halves inside the cast / extract intrinsics: false positives.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "matmul_f32_avx512.h"
#include "simd.h"

namespace beagle {

namespace {

// y[t0 + a, o0 + 2p + h] for a < MT, pairs p < 3, halves h: 4 x 6 outputs in 12 accumulators (AVX2: 4 x 3).
template <int MT>
inline void fwd_tile(float* y, const float* x, const float* W, int t0, int o0, int n_in, int n_out) {
    constexpr int NP = 3;
    __m512 acc[MT][NP];
#pragma GCC unroll 4
    for (int a = 0; a < MT; a++)
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++) acc[a][p] = _mm512_setzero_ps();
    int i = 0;
    for (; i + 8 <= n_in; i += 8) {
        __m512 wv[NP];
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++) {
            const float* w0 = W + (int64_t)(o0 + 2 * p) * n_in + i;
            wv[p] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(w0)), _mm256_loadu_ps(w0 + n_in), 1);
        }
#pragma GCC unroll 4
        for (int a = 0; a < MT; a++) {
            const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + (int64_t)(t0 + a) * n_in + i));
#pragma GCC unroll 4
            for (int p = 0; p < NP; p++) acc[a][p] = _mm512_fmadd_ps(xv, wv[p], acc[a][p]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < MT; a++) {
        const float* xr = x + (int64_t)(t0 + a) * n_in;
#pragma GCC unroll 4
        for (int p = 0; p < NP; p++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int o = o0 + 2 * p + h;
                const float* wr = W + (int64_t)o * n_in;
                float s = hsum8(h ? _mm512_extractf32x8_ps(acc[a][p], 1) : _mm512_castps512_ps256(acc[a][p]));
                for (int k = i; k < n_in; k++) s = fmaf(xr[k], wr[k], s);
                y[(int64_t)(t0 + a) * n_out + o] = s;
            }
    }
}

// dx[t0 + a, i0 .. i0 + 32) over o in [oa, ob), resumed from dx unless first.
template <int MT>
inline void bwd_x_tile(float* dx, const float* dy, const float* W, int t0, int i0, int oa, int ob, int n_in, int n_out,
                       bool first) {
    constexpr int NV = 2;
    __m512 acc[MT][NV];
#pragma GCC unroll 4
    for (int a = 0; a < MT; a++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[a][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(dx + (int64_t)(t0 + a) * n_in + i0 + 16 * v);
    for (int o = oa; o < ob; o++) {
        __m512 wv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) wv[v] = _mm512_loadu_ps(W + (int64_t)o * n_in + i0 + 16 * v);
#pragma GCC unroll 4
        for (int a = 0; a < MT; a++) {
            const __m512 b = _mm512_set1_ps(dy[(int64_t)(t0 + a) * n_out + o]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[a][v] = _mm512_fmadd_ps(b, wv[v], acc[a][v]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < MT; a++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(dx + (int64_t)(t0 + a) * n_in + i0 + 16 * v, acc[a][v]);
}

// dW[o0 + c, i0 .. i0 + 32) += sum over t in [ta, tb) of dy[t, o0 + c] x[t, i0 ..].
template <int MO>
inline void bwd_w_tile(float* dW, const float* dy, const float* x, int o0, int i0, int ta, int tb, int n_in, int n_out) {
    constexpr int NV = 2;
    __m512 acc[MO][NV];
#pragma GCC unroll 4
    for (int c = 0; c < MO; c++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[c][v] = _mm512_loadu_ps(dW + (int64_t)(o0 + c) * n_in + i0 + 16 * v);
    for (int t = ta; t < tb; t++) {
        __m512 xv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) xv[v] = _mm512_loadu_ps(x + (int64_t)t * n_in + i0 + 16 * v);
#pragma GCC unroll 4
        for (int c = 0; c < MO; c++) {
            const __m512 b = _mm512_set1_ps(dy[(int64_t)t * n_out + o0 + c]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[c][v] = _mm512_fmadd_ps(b, xv[v], acc[c][v]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < MO; c++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(dW + (int64_t)(o0 + c) * n_in + i0 + 16 * v, acc[c][v]);
}

}  // namespace

void matmul_f32_fwd_tile_avx512(int mt, float* y, const float* x, const float* W, int t0, int o0, int n_in, int n_out) {
    if (mt == 4)
        fwd_tile<4>(y, x, W, t0, o0, n_in, n_out);
    else
        fwd_tile<1>(y, x, W, t0, o0, n_in, n_out);
}

void matmul_f32_bwd_x_tile_avx512(int mt, float* dx, const float* dy, const float* W, int t0, int i0, int oa, int ob,
                                  int n_in, int n_out, bool first) {
    if (mt == 4)
        bwd_x_tile<4>(dx, dy, W, t0, i0, oa, ob, n_in, n_out, first);
    else
        bwd_x_tile<1>(dx, dy, W, t0, i0, oa, ob, n_in, n_out, first);
}

void matmul_f32_bwd_w_tile_avx512(int mo, float* dW, const float* dy, const float* x, int o0, int i0, int ta, int tb,
                                  int n_in, int n_out) {
    if (mo == 4)
        bwd_w_tile<4>(dW, dy, x, o0, i0, ta, tb, n_in, n_out);
    else
        bwd_w_tile<1>(dW, dy, x, o0, i0, ta, tb, n_in, n_out);
}

}  // namespace beagle
