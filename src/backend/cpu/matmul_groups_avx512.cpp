// matmul_groups_avx512.cpp: the AVX-512 VNNI kernel of cpu_matmul for quantized weights packed in
// row groups of 16 (cpu_pack_weight(W, 16), layout in matmul.h): 16 output rows per 512-bit vector, one int32 lane
// per row, so a block's 16 dot products need no horizontal sum and one float step scales 16 rows.
// Compiled with AVX-512 flags; reached only after cpu_has_avx512_vnni() (internal linkage, as in
// matmul_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

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

// y[t0 + c, 16 g + l] for c < C, lanes l < n_rows. Per block b, for each token c:
//   I = sum over the block's 16 position pairs of vpdpwssd(w_pair (16 rows x 2 int16), x_pair broadcast)
//     (exact; split over NA integer accumulators, integer addition is associative so the split is free)
//   acc = fma(float(I), d_w * d_x[b], acc);  Q4: acc = fma(m_w, s_x[b], acc)
// The float steps per (row, token) are the same whatever C, the lane or the thread: batch invariant.
// Q4: Q4_0 and Q4_1 (packed alike: Q4_0's offset is its m = -8 d), else Q8_0.
template <bool Q4, int C>
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
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)blk));
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
    const int64_t left = j.rows - (int64_t)g * G;
    const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(j.y + (int64_t)(t0 + c) * j.rows + g * G, m, acc[c]);
}

template <bool Q4, int C>
struct GroupTile {
    static void run(const MatmulJob& j, int64_t g, int t0) { group_tile<Q4, C>(j, g, t0); }
};

}  // namespace

void matmul_groups_avx512(const MatmulJob& j, int64_t g0, int64_t g1) { groups_run<GroupTile, TILE_TOKENS>(j, g0, g1, "matmul_groups_avx512"); }

}  // namespace beagle
