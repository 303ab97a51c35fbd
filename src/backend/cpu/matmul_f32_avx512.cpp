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

// The two backward passes are one rank-1 update over 32 lanes: rows r < R of out (row stride ld_out),
//   out[r, 0 .. 32) = (from_zero ? 0 : out[r, ..]) + sum over k in [k0, k1), in order, of s[r s_r + k s_k] m[k, 0 .. 32)
// (m's row stride ld_m): to x, rows t, k = o, s = dy (s_r = n_out, s_k = 1), m = W; to W, rows o, k = t,
// s = dy (s_r = 1, s_k = n_out), m = x.
template <int R>
inline void rank1_tile(float* out, int64_t ld_out, bool from_zero, const float* m, int64_t ld_m, const float* s,
                       int64_t s_r, int64_t s_k, int k0, int k1) {
    constexpr int NV = 2;
    __m512 acc[R][NV];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[r][v] = from_zero ? _mm512_setzero_ps() : _mm512_loadu_ps(out + r * ld_out + 16 * v);
    for (int k = k0; k < k1; k++) {
        __m512 mv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) mv[v] = _mm512_loadu_ps(m + k * ld_m + 16 * v);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 b = _mm512_set1_ps(s[r * s_r + k * s_k]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(b, mv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(out + r * ld_out + 16 * v, acc[r][v]);
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
    float* out = dx + (int64_t)t0 * n_in + i0;
    const float* s = dy + (int64_t)t0 * n_out;
    if (mt == 4)
        rank1_tile<4>(out, n_in, first, W + i0, n_in, s, n_out, 1, oa, ob);
    else
        rank1_tile<1>(out, n_in, first, W + i0, n_in, s, n_out, 1, oa, ob);
}

void matmul_f32_bwd_w_tile_avx512(int mo, float* dW, const float* dy, const float* x, int o0, int i0, int ta, int tb,
                                  int n_in, int n_out) {
    float* out = dW + (int64_t)o0 * n_in + i0;
    if (mo == 4)
        rank1_tile<4>(out, n_in, false, x + i0, n_in, dy + o0, 1, n_out, ta, tb);
    else
        rank1_tile<1>(out, n_in, false, x + i0, n_in, dy + o0, 1, n_out, ta, tb);
}

}  // namespace beagle
