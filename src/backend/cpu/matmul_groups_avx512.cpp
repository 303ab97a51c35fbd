// matmul_groups_avx512.cpp: the AVX-512 VNNI kernel of cpu_matmul for quantized weights packed in
// row groups of 16 (cpu_pack_weight(W, 16), layout in matmul.h): 16 output rows per 512-bit vector, one int32 lane
// per row, so a block's 16 dot products need no horizontal sum and one float step scales 16 rows.
// Compiled with AVX-512 flags; reached only after cpu_has_avx512_vnni() (internal linkage, as in
// matmul_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "../../core/common.h"
#include "matmul.h"

namespace beagle {

namespace {

constexpr int G = 16;  // rows per group: one int32 lane each in a 512-bit vector
// Tokens per weight load (groups_tiles, matmul.h): a tile of 8 holds 8 float + 8 int accumulators, the
// widened weights and their scales in 32 zmm registers (no spills). A 5-7 token verify runs as one tile
// instead of 4 + 1..3, which would re-widen every weight for the last few tokens (tiles of 4 make a 5-8
// token verify forward 10-25% slower; test/tools/tool_verify_loop times it). Beyond that the tile is
// vpdpwssd-bound: 16 per token and block, whatever C.
constexpr int TILE_TOKENS = 8;

// y[t0 + c, 16 g + l] = acc[c] lane l, for the group's rows that exist.
template <int C>
inline void store_tile(const MatmulJob& j, int64_t g, int t0, const __m512* acc) {
    const int64_t left = j.rows - (int64_t)g * G;
    const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(j.y + (int64_t)(t0 + c) * j.rows + g * G, m, acc[c]);
}

// y[t0 + c, 16 g + l] for c < C, lanes l < n_rows. Per block b, for each token c:
//   I = sum over the block's 16 position pairs of vpdpwssd(w_pair (16 rows x 2 int16), x_pair broadcast)
//     (exact; split over NA integer accumulators, integer addition is associative so the split is free)
//   acc = fma(float(I), d_w * d_x[b], acc);  Q4, Q5: acc = fma(m_w, s_x[b], acc)
// The float steps per (row, token) are the same whatever C, the lane or the thread: batch invariant.
// K: the packed layout (matmul.h): Q4 (Q4_0, Q4_1; Q4_0's offset is its m = -8 d), Q8 (Q8_0); Q5 is
// group_tile_q5.
template <PackKind K, int C>
inline void group_tile(const MatmulJob& j, int64_t g, int t0) {
    constexpr int NA = C == 1 ? 4 : C <= 4 ? 2 : 1;  // independent dpwssd chains per token (latency; C > 4: registers)
    const GroupTileInputs<C> in(j, G, g, t0);
    const int64_t nb = j.acts.nb;
    const int32_t* const* xq = in.xq;
    const float* const* xd = in.xd;
    const float* const* xs = in.xs;
    __m512 acc[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t* blk = in.w + (uint64_t)b * in.block_bytes;
        prefetch_packed(blk, in.block_bytes);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)blk));
        constexpr bool Q4 = K != PackKind::Q8;  // the nibble layouts
        const uint8_t* q = blk + (Q4 ? 64 : 32);
        __m512i isum[C][NA];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
#pragma GCC unroll 4
            for (int a = 0; a < NA; a++) isum[c][a] = _mm512_setzero_si512();
        if constexpr (Q4) {
            const __m512i low4 = _mm512_set1_epi16(0x0F);
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {  // chunk k: positions 4k, 4k+1 (low nibbles), 4k+2, 4k+3 (high)
                const __m512i z = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)(q + 32 * k)));
                const __m512i wlo = _mm512_and_si512(z, low4);
                const __m512i whi = _mm512_srli_epi16(z, 4);
#pragma GCC unroll 8
                for (int c = 0; c < C; c++) {
                    const int32_t* xp = xq[c] + 16 * b + 2 * k;
                    isum[c][(2 * k) % NA] = _mm512_dpwssd_epi32(isum[c][(2 * k) % NA], wlo, _mm512_set1_epi32(xp[0]));
                    isum[c][(2 * k + 1) % NA] =
                        _mm512_dpwssd_epi32(isum[c][(2 * k + 1) % NA], whi, _mm512_set1_epi32(xp[1]));
                }
            }
        } else {
#pragma GCC unroll 16
            for (int p = 0; p < 16; p++) {  // chunk p: positions 2p, 2p+1
                const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(q + 32 * p)));
#pragma GCC unroll 8
                for (int c = 0; c < C; c++)
                    isum[c][p % NA] = _mm512_dpwssd_epi32(isum[c][p % NA], w, _mm512_set1_epi32(xq[c][16 * b + p]));
            }
        }
        __m512 mw = _mm512_setzero_ps();
        if constexpr (Q4) mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(blk + 32)));
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            __m512i I = isum[c][0];
            if constexpr (NA >= 2) I = _mm512_add_epi32(I, isum[c][1]);
            if constexpr (NA == 4) I = _mm512_add_epi32(I, _mm512_add_epi32(isum[c][2], isum[c][3]));
            const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(xd[c][b]));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), sc, acc[c]);
            if constexpr (Q4) acc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xs[c][b]), acc[c]);
        }
    }
    store_tile<C>(j, g, t0, acc);
}

// Q5_0, Q5_1 (the Q5 triples of matmul.h): group_tile's float steps, block by block, with the integer sums
// taken from vectors of three 5-bit slots: slot f of vector v is (V >> 5f) & 31 (the top slot needs no
// mask), the weights of position pair s = 3v + f of the triple for the 16 rows. Per three slots: one
// load, four integer ops and a vpdpwssd per slot and token (the nibbles-and-planes layout took a widening,
// two shifts and two ternary logic ops per two slots besides).
template <int C>
inline void group_tile_q5(const MatmulJob& j, int64_t g, int t0) {
    constexpr int NA = C == 1 ? 4 : C <= 4 ? 2 : 1;  // independent dpwssd chains per token, as group_tile
    constexpr uint64_t TB = pack_q5_triple_bytes(G);
    const GroupTileInputs<C> in(j, G, g, t0);
    const int64_t nb = j.acts.nb;
    const __m512i low5 = _mm512_set1_epi16(31);
    __m512 acc[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 3) {
        const uint8_t* tri = in.w + (uint64_t)(b0 / 3) * TB;
        prefetch_packed(tri, TB);
        const int nvalid = (int)std::min<int64_t>(3, nb - b0);  // blocks in this triple
        __m512i isum[C][NA];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
#pragma GCC unroll 4
            for (int a = 0; a < NA; a++) isum[c][a] = _mm512_setzero_si512();
#pragma GCC unroll 16
        for (int v = 0; v < 16; v++) {
            const __m512i V = _mm512_loadu_si512((const void*)(tri + 12 * G + 4 * G * v));
            const __m512i w[3] = {_mm512_and_si512(V, low5), _mm512_and_si512(_mm512_srli_epi16(V, 5), low5),
                                  _mm512_srli_epi16(V, 10)};
#pragma GCC unroll 3
            for (int f = 0; f < 3; f++) {
                const int s = 3 * v + f, bi = s / 16;
                if (s % 16 == 0 && bi >= nvalid) goto next_triple;  // the last triple may hold 1 or 2 blocks
#pragma GCC unroll 8
                for (int c = 0; c < C; c++)
                    isum[c][s % NA] = _mm512_dpwssd_epi32(isum[c][s % NA], w[f], _mm512_set1_epi32(in.xq[c][16 * b0 + s]));
                if (s % 16 == 15) {  // block b0 + bi is complete: its float steps, as group_tile's
                    const int64_t b = b0 + bi;
                    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(tri + 2 * G * bi)));
                    const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(tri + 6 * G + 2 * G * bi)));
#pragma GCC unroll 8
                    for (int c = 0; c < C; c++) {
                        __m512i I = isum[c][0];
                        if constexpr (NA >= 2) I = _mm512_add_epi32(I, isum[c][1]);
                        if constexpr (NA == 4) I = _mm512_add_epi32(I, _mm512_add_epi32(isum[c][2], isum[c][3]));
                        const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(in.xd[c][b]));
                        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), sc, acc[c]);
                        acc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(in.xs[c][b]), acc[c]);
#pragma GCC unroll 4
                        for (int a = 0; a < NA; a++) isum[c][a] = _mm512_setzero_si512();
                    }
                }
            }
        }
    next_triple:;
    }
    store_tile<C>(j, g, t0, acc);
}

// The words of chunk k of a k-quant block: the low 4 bits of positions 4k, 4k+1 (*wlo) and 4k+2, 4k+3
// (*whi) per row lane, with bit 4 from the plane p0 (Q5_K), or bits 4-5 from the plane of the chunk (Q6_K:
// p0 for chunks 0-3, p1 for 4-7, one 2-bit field per position, then q - 32).
template <PackKind K>
inline void kquant_chunk(const uint8_t* q, __m512i p0, __m512i p1, int k, __m512i* wlo, __m512i* whi) {
    const __m512i z = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)(q + 32 * k)));
    __m512i lo = _mm512_and_si512(z, _mm512_set1_epi16(0x0F)), hi = _mm512_srli_epi16(z, 4);
    if constexpr (K == PackKind::Q5K) {  // bit s = 2k (low), 2k + 1 (high) of each word of p0 to bit 4
        const __m512i bit4 = _mm512_set1_epi16(0x10);
        lo = _mm512_or_si512(lo, _mm512_and_si512(2 * k <= 4 ? _mm512_slli_epi16(p0, 4 - 2 * k) : _mm512_srli_epi16(p0, 2 * k - 4), bit4));
        hi = _mm512_or_si512(hi, _mm512_and_si512(2 * k + 1 <= 4 ? _mm512_slli_epi16(p0, 3 - 2 * k) : _mm512_srli_epi16(p0, 2 * k - 3), bit4));
    }
    if constexpr (K == PackKind::Q6K) {  // bits 4j, 4j + 1 (low), 4j + 2, 4j + 3 (high) of plane k / 4 to bits 4-5
        const __m512i H = k < 4 ? p0 : p1, bits45 = _mm512_set1_epi16(0x30), m32 = _mm512_set1_epi16(32);
        const int j = k % 4;
        lo = _mm512_or_si512(lo, _mm512_and_si512(j <= 1 ? _mm512_slli_epi16(H, 4 - 4 * j) : _mm512_srli_epi16(H, 4 * j - 4), bits45));
        hi = _mm512_or_si512(hi, _mm512_and_si512(j == 0 ? _mm512_slli_epi16(H, 2) : _mm512_srli_epi16(H, 4 * j - 2), bits45));
        lo = _mm512_sub_epi16(lo, m32);
        hi = _mm512_sub_epi16(hi, m32);
    }
    *wlo = lo;
    *whi = hi;
}

// The k-quants (Q4_K, Q5_K, Q6_K; layout in matmul.h): as group_tile, with per block b of super-block s
//   Q4_K / Q5_K: d_w = d_s sc_b, m = -(dmin_s mn_b) (exact), I over the block's 32 products
//   Q6_K:        d_w = d_s sc (one per half block), I over each half (chunks 0, 1, 4, 5: elements 0..15;
//                2, 3, 6, 7: 16..31), acc = fma(float(I_half), d_w,half * d_x[b], acc), first half first.
template <PackKind K, int C>
inline void group_tile_k(const MatmulJob& j, int64_t g, int t0) {
    constexpr bool Q6 = K == PackKind::Q6K;
    constexpr uint64_t HB = pack_header_bytes(K, G), BB = pack_block_bytes(K, G), SB = HB + 8 * BB;
    const GroupTileInputs<C> in(j, G, g, t0);
    const int64_t nb = j.acts.nb;
    __m512 acc[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    __m512 d = _mm512_setzero_ps(), dmin = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const int jb = (int)(b % 8);
        const uint8_t* sb = in.w + (uint64_t)(b / 8) * SB;
        if (jb == 0) {
            d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)sb));
            if constexpr (!Q6) dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(sb + 2 * G)));
        }
        const uint8_t* q = sb + HB + jb * BB;
        prefetch_packed(q, BB);
        __m512i p0 = _mm512_setzero_si512(), p1 = _mm512_setzero_si512();  // the high-bit planes
        if constexpr (K != PackKind::Q4K) p0 = _mm512_loadu_si512((const void*)(q + 16 * G));
        if constexpr (Q6) p1 = _mm512_loadu_si512((const void*)(q + 20 * G));
        // the chunks of one I: all 8 (Q4_K, Q5_K), or those of one half block (Q6_K)
        auto block_sums = [&](const int* ks, int nk, __m512i* I) {
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) I[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int i = 0; i < nk; i++) {
                const int k = ks[i];
                __m512i wlo, whi;
                kquant_chunk<K>(q, p0, p1, k, &wlo, &whi);
#pragma GCC unroll 8
                for (int c = 0; c < C; c++) {
                    const int32_t* xp = in.xq[c] + 16 * b + 2 * k;
                    I[c] = _mm512_dpwssd_epi32(I[c], wlo, _mm512_set1_epi32(xp[0]));
                    I[c] = _mm512_dpwssd_epi32(I[c], whi, _mm512_set1_epi32(xp[1]));
                }
            }
        };
        __m512i I[C];
        if constexpr (Q6) {
            static const int halves[2][4] = {{0, 1, 4, 5}, {2, 3, 6, 7}};
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                block_sums(halves[h], 4, I);
                const __m512 dw = _mm512_mul_ps(
                    d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(sb + 2 * G + (2 * jb + h) * G)))));
#pragma GCC unroll 8
                for (int c = 0; c < C; c++)
                    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[c]), _mm512_mul_ps(dw, _mm512_set1_ps(in.xd[c][b])), acc[c]);
            }
        } else {
            static const int all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
            block_sums(all, 8, I);
            const __m512 dw = _mm512_mul_ps(
                d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(sb + 4 * G + jb * G)))));
            const __m512 mw = _mm512_sub_ps(_mm512_setzero_ps(),
                _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(sb + 12 * G + jb * G))))));
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) {
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[c]), _mm512_mul_ps(dw, _mm512_set1_ps(in.xd[c][b])), acc[c]);
                acc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(in.xs[c][b]), acc[c]);
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

void matmul_groups_avx512(const MatmulJob& j, int64_t g0, int64_t g1) { groups_run<GroupTile, TILE_TOKENS>(j, g0, g1, "matmul_groups_avx512"); }

}  // namespace beagle
