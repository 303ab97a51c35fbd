// matmul_groups_avx2.cpp: the AVX2 kernel of cpu_matmul for quantized weights packed in row groups of
// 8 (cpu_pack_weight(W, 8), layout in matmul.h): 8 output rows per 256-bit vector, one int32 lane per
// row, so a block's 8 x C dot products need no horizontal sum and one float step scales 8 rows. The
// AVX2 twin of matmul_groups_avx512.cpp (vpmaddwd + vpaddd in place of vpdpwssd), same float steps.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "../../core/common.h"
#include "matmul.h"

namespace beagle {

namespace {

// An empty asm that says it changes v, so v is a register at this point: without it GCC re-associates
// a block's integer sums (legal for integers) into one tree over all 8 x C madd results, computes them
// all first and spills most to the stack (16 ymm registers), which halves the kernel's speed.
inline void in_register(__m256i& v) { asm("" : "+x"(v)); }

constexpr int G = 8;   // rows per group: one int32 lane each in a 256-bit vector
// Token tiles of up to 4 (groups_run, matmul.h): 4 int + 4 float accumulators + 3 weight vectors +
// broadcasts fit the 16 ymm registers.

// y[t0 + c, 8 g + l] = acc[c] lane l, for the group's rows that exist.
template <int C>
inline void store_tile(const MatmulJob& j, int64_t g, int t0, const __m256* acc) {
    const int64_t left = j.rows - (int64_t)g * G;
    float* yg = j.y + g * G;
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        if (left >= G)
            _mm256_storeu_ps(yg + (int64_t)(t0 + c) * j.rows, acc[c]);
        else
            _mm256_maskstore_ps(yg + (int64_t)(t0 + c) * j.rows,
                                _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                                acc[c]);
    }
}

// y[t0 + c, 8 g + l] for c < C, lanes l < 8 (rows past the end are not stored). Per block b, token c:
//   I = sum over the block's 16 position pairs p of madd(w_p (8 rows x 2 int16), x pair p broadcast)
//     (vpmaddwd: per lane w0 x0 + w1 x1, exact in int32; the pair sums are added in int32, exact, so
//     the order of the integer additions does not matter)
//   acc = fma(float(I), d_w * d_x[b], acc);  Q4, Q5: acc = fma(m_w, s_x[b], acc)
// These float steps per (row, token) are the same whatever C, the lane or the thread (batch
// invariant), and the same as matmul_groups_avx512.cpp's (the two packed paths agree bit for bit).
// Why it is fast: each weight byte is loaded and widened once per 4 tokens, two integer ops per 16
// multiply-adds, no per-row scale gathers and no horizontal sums; the weight stream of a thread is one
// contiguous run of its groups (hardware prefetch). K: the packed layout (matmul.h): Q4 (Q4_0, Q4_1),
// Q8 (Q8_0); Q5 is group_tile_q5.
template <PackKind K, int C>
inline void group_tile(const MatmulJob& j, int64_t g, int t0) {
    const GroupTileInputs<C> in(j, G, g, t0);
    const int64_t nb = j.acts.nb;
    const int32_t* const* xq = in.xq;
    const float* const* xd = in.xd;
    const float* const* xs = in.xs;
    __m256 acc[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t* blk = in.w + (uint64_t)b * in.block_bytes;
        prefetch_packed(blk, in.block_bytes);
        constexpr bool Q4 = K != PackKind::Q8;  // the nibble layouts
        const uint8_t* q = blk + (Q4 ? 4 * G : 2 * G);
        __m256i isum[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) isum[c] = _mm256_setzero_si256();
        if constexpr (Q4) {
            const __m256i low4 = _mm256_set1_epi16(0x0F);
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {  // chunk k: positions 4k, 4k+1 (low nibbles), 4k+2, 4k+3 (high)
                const __m256i z = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(q + 2 * G * k)));
                const __m256i wlo = _mm256_and_si256(z, low4);
                const __m256i whi = _mm256_srli_epi16(z, 4);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) {
                    const int32_t* xp = xq[c] + 16 * b + 2 * k;
                    const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(wlo, _mm256_set1_epi32(xp[0])),
                                                       _mm256_madd_epi16(whi, _mm256_set1_epi32(xp[1])));
                    isum[c] = _mm256_add_epi32(isum[c], p);
                    in_register(isum[c]);
                }
            }
        } else {
#pragma GCC unroll 8
            for (int p = 0; p < 16; p += 2) {  // chunks p, p + 1: positions 2p .. 2p + 3
                const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(q + 2 * G * p)));
                const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(q + 2 * G * (p + 1))));
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) {
                    const int32_t* xp = xq[c] + 16 * b + p;
                    const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_set1_epi32(xp[0])),
                                                       _mm256_madd_epi16(w1, _mm256_set1_epi32(xp[1])));
                    isum[c] = _mm256_add_epi32(isum[c], s);
                    in_register(isum[c]);
                }
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)blk));
        __m256 mw = _mm256_setzero_ps();
        if constexpr (Q4) mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(blk + 2 * G)));
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(xd[c][b]));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), sc, acc[c]);
            if constexpr (Q4) acc[c] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xs[c][b]), acc[c]);
        }
    }
    store_tile<C>(j, g, t0, acc);
}

// Q5_0, Q5_1 (the Q5 triples of matmul.h): group_tile's float steps, block by block, with the integer sums
// taken from vectors of three 5-bit slots: slot f of vector v is (V >> 5f) & 31 (the top slot needs no
// mask), the weights of position pair s = 3v + f of the triple for the 8 rows. Per three slots: one load,
// four integer ops, then as Q4 a vpmaddwd and a vpaddd per slot and token.
template <int C>
inline void group_tile_q5(const MatmulJob& j, int64_t g, int t0) {
    constexpr uint64_t TB = pack_q5_triple_bytes(G);
    const GroupTileInputs<C> in(j, G, g, t0);
    const int64_t nb = j.acts.nb;
    const __m256i low5 = _mm256_set1_epi16(31);
    __m256 acc[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 3) {
        const uint8_t* tri = in.w + (uint64_t)(b0 / 3) * TB;
        prefetch_packed(tri, TB);
        const int nvalid = (int)std::min<int64_t>(3, nb - b0);  // blocks in this triple
        __m256i isum[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 16
        for (int v = 0; v < 16; v++) {
            const __m256i V = _mm256_loadu_si256((const __m256i*)(tri + 12 * G + 4 * G * v));
            const __m256i w[3] = {_mm256_and_si256(V, low5), _mm256_and_si256(_mm256_srli_epi16(V, 5), low5),
                                  _mm256_srli_epi16(V, 10)};
#pragma GCC unroll 3
            for (int f = 0; f < 3; f++) {
                const int s = 3 * v + f, bi = s / 16;
                if (s % 16 == 0 && bi >= nvalid) goto next_triple;  // the last triple may hold 1 or 2 blocks
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) {
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(w[f], _mm256_set1_epi32(in.xq[c][16 * b0 + s])));
                    in_register(isum[c]);
                }
                if (s % 16 == 15) {  // block b0 + bi is complete: its float steps, as group_tile's
                    const int64_t b = b0 + bi;
                    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(tri + 2 * G * bi)));
                    const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(tri + 6 * G + 2 * G * bi)));
#pragma GCC unroll 4
                    for (int c = 0; c < C; c++) {
                        const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(in.xd[c][b]));
                        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), sc, acc[c]);
                        acc[c] = _mm256_fmadd_ps(mw, _mm256_set1_ps(in.xs[c][b]), acc[c]);
                        isum[c] = _mm256_setzero_si256();
                    }
                }
            }
        }
    next_triple:;
    }
    store_tile<C>(j, g, t0, acc);
}

// The words of chunk k of a k-quant block (matmul_groups_avx512.cpp's kquant_chunk, 8 rows).
template <PackKind K>
inline void kquant_chunk(const uint8_t* q, __m256i p0, __m256i p1, int k, __m256i* wlo, __m256i* whi) {
    const __m256i z = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(q + 2 * G * k)));
    __m256i lo = _mm256_and_si256(z, _mm256_set1_epi16(0x0F)), hi = _mm256_srli_epi16(z, 4);
    if constexpr (K == PackKind::Q5K) {  // bit s = 2k (low), 2k + 1 (high) of each word of p0 to bit 4
        const __m256i bit4 = _mm256_set1_epi16(0x10);
        lo = _mm256_or_si256(lo, _mm256_and_si256(2 * k <= 4 ? _mm256_slli_epi16(p0, 4 - 2 * k) : _mm256_srli_epi16(p0, 2 * k - 4), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(2 * k + 1 <= 4 ? _mm256_slli_epi16(p0, 3 - 2 * k) : _mm256_srli_epi16(p0, 2 * k - 3), bit4));
    }
    if constexpr (K == PackKind::Q6K) {  // bits 4j, 4j + 1 (low), 4j + 2, 4j + 3 (high) of plane k / 4 to bits 4-5
        const __m256i H = k < 4 ? p0 : p1, bits45 = _mm256_set1_epi16(0x30), m32 = _mm256_set1_epi16(32);
        const int j = k % 4;
        lo = _mm256_or_si256(lo, _mm256_and_si256(j <= 1 ? _mm256_slli_epi16(H, 4 - 4 * j) : _mm256_srli_epi16(H, 4 * j - 4), bits45));
        hi = _mm256_or_si256(hi, _mm256_and_si256(j == 0 ? _mm256_slli_epi16(H, 2) : _mm256_srli_epi16(H, 4 * j - 2), bits45));
        lo = _mm256_sub_epi16(lo, m32);
        hi = _mm256_sub_epi16(hi, m32);
    }
    *wlo = lo;
    *whi = hi;
}

// The k-quants (Q4_K, Q5_K, Q6_K): matmul_groups_avx512.cpp's group_tile_k for 8 rows, the same float steps.
template <PackKind K, int C>
inline void group_tile_k(const MatmulJob& j, int64_t g, int t0) {
    constexpr bool Q6 = K == PackKind::Q6K;
    constexpr uint64_t HB = pack_header_bytes(K, G), BB = pack_block_bytes(K, G), SB = HB + 8 * BB;
    const GroupTileInputs<C> in(j, G, g, t0);
    const int64_t nb = j.acts.nb;
    __m256 acc[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    __m256 d = _mm256_setzero_ps(), dmin = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const int jb = (int)(b % 8);
        const uint8_t* sb = in.w + (uint64_t)(b / 8) * SB;
        if (jb == 0) {
            d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)sb));
            if constexpr (!Q6) dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(sb + 2 * G)));
        }
        const uint8_t* q = sb + HB + jb * BB;
        prefetch_packed(q, BB);
        __m256i p0 = _mm256_setzero_si256(), p1 = _mm256_setzero_si256();  // the high-bit planes
        if constexpr (K != PackKind::Q4K) p0 = _mm256_loadu_si256((const __m256i*)(q + 16 * G));
        if constexpr (Q6) p1 = _mm256_loadu_si256((const __m256i*)(q + 20 * G));
        auto block_sums = [&](const int* ks, int nk, __m256i* I) {
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) I[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int i = 0; i < nk; i++) {
                const int k = ks[i];
                __m256i wlo, whi;
                kquant_chunk<K>(q, p0, p1, k, &wlo, &whi);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) {
                    const int32_t* xp = in.xq[c] + 16 * b + 2 * k;
                    const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(wlo, _mm256_set1_epi32(xp[0])),
                                                       _mm256_madd_epi16(whi, _mm256_set1_epi32(xp[1])));
                    I[c] = _mm256_add_epi32(I[c], p);
                    in_register(I[c]);
                }
            }
        };
        __m256i I[C];
        if constexpr (Q6) {
            static const int halves[2][4] = {{0, 1, 4, 5}, {2, 3, 6, 7}};
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                block_sums(halves[h], 4, I);
                const __m256 dw = _mm256_mul_ps(
                    d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(sb + 2 * G + (2 * jb + h) * G)))));
#pragma GCC unroll 4
                for (int c = 0; c < C; c++)
                    acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[c]), _mm256_mul_ps(dw, _mm256_set1_ps(in.xd[c][b])), acc[c]);
            }
        } else {
            static const int all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
            block_sums(all, 8, I);
            const __m256 dw = _mm256_mul_ps(
                d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(sb + 4 * G + jb * G)))));
            const __m256 mw = _mm256_sub_ps(_mm256_setzero_ps(),
                _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(sb + 12 * G + jb * G))))));
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[c]), _mm256_mul_ps(dw, _mm256_set1_ps(in.xd[c][b])), acc[c]);
                acc[c] = _mm256_fmadd_ps(mw, _mm256_set1_ps(in.xs[c][b]), acc[c]);
            }
        }
    }
    store_tile<C>(j, g, t0, acc);
}

template <PackKind K, int C>
struct GroupTile {
    static void run(const MatmulJob& j, int64_t g, int t0) {
        if constexpr (pack_is_kquant(K))
            group_tile_k<K, C>(j, g, t0);
        else if constexpr (K == PackKind::Q5)
            group_tile_q5<C>(j, g, t0);
        else
            group_tile<K, C>(j, g, t0);
    }
};

}  // namespace

void matmul_groups_avx2(const MatmulJob& j, int64_t g0, int64_t g1) { groups_run<GroupTile, 4>(j, g0, g1, "matmul_groups_avx2"); }

}  // namespace beagle
