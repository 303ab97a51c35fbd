// matmul_avx512.cpp: AVX-512 (F, BW, VL, VNNI) kernels of cpu_matmul; compiled with AVX-512 flags by
// the Makefile and only reached through matmul.cpp after cpu_has_avx512_vnni().
// Everything here has internal linkage and uses no inline/template function of a shared header, so the
// linker can never hand an AVX-512-compiled copy of a common function to the AVX2 path.
//
// Same structure as the AVX2 kernels in matmul.cpp (tiles of up to 4 rows x 4 tokens, one accumulator
// per (row, token) with a fixed instruction sequence, zero padding for tails), but 16 lanes: quantized
// weights with int16 activations take one block of 32 per 512-bit vpdpwssd; with int8 activations two
// blocks at a time (interleaved lanes, see quantize.h) per vpdpbusd.
// GCC 12 warns falsely about _mm512_undefined_*() inside its own intrinsic headers (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "../../core/common.h"
#include "matmul.h"

namespace beagle {

namespace {

constexpr int RT = 4;  // rows per tile
constexpr int CT = 4;  // tokens per tile
static_assert(RT <= 4 && CT <= 4, "matmul_scratch_floats (matmul.cpp) assumes tiles of at most 4 x 4");

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// The one horizontal sum of the AVX-512 path: (lo256 + hi256), (lo128 + hi128), pairs, last two.
inline float hsum16(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

constexpr int KB = 32;  // blocks per chunk of precomputed scales (quantize.h pads nb_pad to a multiple)

// Sum of each of 16 accumulators a[4q + l] with exactly hsum16's pairing (lanes i + i+8, then i + i+4,
// i + i+2, i + i+1; float addition is commutative, so the bits are hsum16's), all at once. Result
// element 4l + q = sum of a[4q + l].
inline __m512 reduce16(const __m512* a) {
    __m512 c[8], e[4], g[2];
    for (int k = 0; k < 8; k++)  // [a(2k) lanes i + i+8 | a(2k+1) ...]
        c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int k = 0; k < 4; k++)  // 128-bit lane l = a(4k + l) lanes i + i+4
        e[k] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int k = 0; k < 2; k++)  // lane l = [a(8k + l) x2, a(8k + 4 + l) x2], pairs i + i+2
        g[k] = _mm512_add_ps(_mm512_shuffle_ps(e[2 * k], e[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(e[2 * k], e[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // lane l = [a(l), a(4 + l), a(8 + l), a(12 + l)], pairs i + i+1
    return _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(g[0], g[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// y[t0 + c, r0 + r] = sum of acc[r][c]: a full 4 x 4 tile through reduce16 (element 4c + r, so each
// 128-bit lane is 4 consecutive outputs of one token), anything else through hsum16 - the same bits.
template <int R, int C>
inline void store_sums(const MatmulJob& j, int64_t r0, int t0, __m512 (&acc)[R][C]) {
    if constexpr (R == 4 && C == 4) {
        __m512 a[16];
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 4; c++) a[4 * r + c] = acc[r][c];
        alignas(64) float s[16];
        _mm512_store_ps(s, reduce16(a));
        for (int c = 0; c < 4; c++) _mm_storeu_ps(j.y + (int64_t)(t0 + c) * j.rows + r0, _mm_load_ps(s + 4 * c));
    } else {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) j.y[(int64_t)(t0 + c) * j.rows + r0 + r] = hsum16(acc[r][c]);
    }
}

// ---------------------------------------------------------------------------------------------
// Float weights: acc[r][c] (16 lanes) += w[16 i..] * x[16 i..]; the last partial chunk is loaded with
// zero masking (adding 0 * 0 = +0 leaves any accumulator unchanged).

template <DType DT>
inline __m512 load16_w(const uint8_t* p) {
    if (DT == DType::F32) return _mm512_loadu_ps((const float*)p);
    __m256i h = _mm256_loadu_si256((const __m256i*)p);
    if (DT == DType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // BF16
}

template <DType DT>
inline __m512 load16_w_tail(const uint8_t* p, __mmask16 m) {
    if (DT == DType::F32) return _mm512_maskz_loadu_ps(m, (const float*)p);
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if (DT == DType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <DType DT>
struct FloatKernel {
    static constexpr int ES = DT == DType::F32 ? 4 : 2;
    static void prepare(const MatmulJob&, int64_t, int, float*) {}

    template <int R, int C>
    static void tile(const MatmulJob& j, int64_t r0, int t0, float*) {
        const uint8_t* wr[R];
        const float* xc[C];
        for (int r = 0; r < R; r++) wr[r] = j.w + (uint64_t)(r0 + r) * j.row_bytes;
        for (int c = 0; c < C; c++) xc[c] = j.x + (int64_t)(t0 + c) * j.cols;
        __m512 acc[R][C];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
        const int64_t n16 = j.cols / 16 * 16;
        for (int64_t i = 0; i < n16; i += 16) {
            __m512 w[R];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                if (C == 1)  // decode streams the weights once: prefetch the rows two tiles ahead
                    _mm_prefetch((const char*)(wr[r] + 2 * RT * j.row_bytes + i * ES), _MM_HINT_T0);
                w[r] = load16_w<DT>(wr[r] + i * ES);
            }
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                __m512 xv = _mm512_loadu_ps(xc[c] + i);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) acc[r][c] = _mm512_fmadd_ps(w[r], xv, acc[r][c]);
            }
        }
        const int rem = (int)(j.cols - n16);
        if (rem) {
            const __mmask16 m = (__mmask16)((1u << rem) - 1);
            __m512 w[R];
            for (int r = 0; r < R; r++) w[r] = load16_w_tail<DT>(wr[r] + n16 * ES, m);
            for (int c = 0; c < C; c++) {
                __m512 xv = _mm512_maskz_loadu_ps(m, xc[c] + n16);
                for (int r = 0; r < R; r++) acc[r][c] = _mm512_fmadd_ps(w[r], xv, acc[r][c]);
            }
        }
        store_sums<R, C>(j, r0, t0, acc);
    }
};

// ---------------------------------------------------------------------------------------------
// Quantized weights, int16 activations (BITS = 16), a pair of blocks (2k, 2k+1) per step, in the
// interleaved int16 layout of quantize.h (x of the pair = P1, P2 = 512-bit unpacklo/hi_epi32 of the
// nibble-order blocks A = 2k, B = 2k+1). Each weight block is widened to int16 in nibble order without
// shuffles:
//   Q4_0/Q4_1: the 16 bytes of nibbles broadcast to the 4 lanes, lane k shifted right by 4k (as dwords)
//              and masked with 0x000F000F (zero extension of one nibble per word);
//   Q8_0:      the 32 int8 broadcast to both 256-bit halves; words of the low half shifted left by 8,
//              then all words arithmetic-shifted right by 8: low half = even elements (groups 0, 1),
//              high half = odd elements (groups 2, 3), sign-extended;
// then paired like x: W1 = unpacklo_epi32(WA, WB), W2 = unpackhi_epi32(WA, WB). So
// I = vpdpwssd(vpdpwssd(0, W1, P1), W2, P2): int32 lane l is the exact sum of 4 products of block
// 2k + (l & 1) with |q_w q_x| <= 128 * 32767 (Q8_0; Q4: 15 * 32767), |I| <= 16,776,704 < 2^24: no
// overflow and float(I) is exact. Then acc = fma([sc[2k], sc[2k+1]] x 8, float(I), acc) as below.
//
// Quantized weights, int8 activations (BITS = 8), a pair of blocks (2k, 2k+1) per step, in the
// interleaved int8 layout of quantize.h:
// int32 lane l holds 4 products of block 2k + (l & 1). Integer part per lane (exact):
//   Q4_0/Q4_1: I = vpdpbusd(0, nibbles (unsigned), q_x)
//   Q8_0:      I = vpdpbusd(corr_x, q_w + 128 (unsigned), q_x), corr_x = -128 * (sum of the lane's 4 q_x)
// then acc = fma([sc[2k], sc[2k+1]] x 8, float(I), acc), sc[b] = d_w[b] * d_x[b] computed 16 blocks at
// a time for each chunk of KB blocks. An odd last block pairs with zeros (activations and sc padding are 0).
// Q4_1/Q4_0 then add sum_b m[b] * s_x[b] (m = -8 d for Q4_0) into the same accumulator, 16 blocks per
// FMA. Result = hsum16(acc) (or reduce16, the same bits).
// Scratch (floats, nbp = nb_pad): dbuf[RT][nbp], mbuf[RT][nbp] from prepare(), sc[R * C][KB] per chunk.

template <DType DT, int BITS>
struct QuantKernel {
    static constexpr int BS = DT == DType::Q8_0 ? 34 : DT == DType::Q4_0 ? 18 : 20;  // block bytes
    static constexpr int QOFF = DT == DType::Q4_1 ? 4 : 2;                          // offset of qs

    // dbuf[r * nb_pad + b] = d_w, mbuf[...] = m_w (zero padded), 16 blocks per gather.
    static void prepare(const MatmulJob& j, int64_t r0, int n, float* scratch) {
        const int64_t nb = j.acts.nb, nbp = j.acts.nb_pad;
        float* dbuf = scratch;
        float* mbuf = scratch + RT * nbp;
        const __m512i offs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32(BS));
        for (int r = 0; r < n; r++) {
            const uint8_t* row = j.w + (uint64_t)(r0 + r) * j.row_bytes;
            for (int64_t b = (nb + 15) / 16 * 16; b < nbp; b++) dbuf[r * nbp + b] = mbuf[r * nbp + b] = 0.0f;
            for (int64_t b = 0; b < nb; b += 16) {
                int64_t left = nb - b;
                __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
                // 4 bytes at the start of each block: d (low half) and m or the first qs (high half)
                __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, offs, row + b * BS, 1);
                __m512 d16 = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
                _mm512_store_ps(dbuf + r * nbp + b, d16);
                if (DT == DType::Q4_1)
                    _mm512_store_ps(mbuf + r * nbp + b, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16))));
                if (DT == DType::Q4_0) _mm512_store_ps(mbuf + r * nbp + b, _mm512_mul_ps(d16, _mm512_set1_ps(-8.0f)));
            }
        }
    }

    // The 64 unsigned weight bytes of blocks (2k, 2k+1) in the interleaved order; `second` = false for
    // an odd last block (block 2k is then repeated; its partner activations are zero).
    static inline __m512i load_pair(const uint8_t* blk0, bool second) {
        const uint8_t* blk1 = second ? blk0 + BS : blk0;
        if (DT == DType::Q8_0) {
            const __m512i idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            __m512i A = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(blk0 + QOFF)));
            __m512i B = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(blk1 + QOFF)));
            return _mm512_xor_si512(_mm512_permutex2var_epi32(A, idx, B), _mm512_set1_epi8((char)0x80));
        }
        // [qs0 | qs1] -> groups [qs0.0 qs1.0 qs0.1 qs1.1 qs0.2 qs1.2 qs0.3 qs1.3] twice; low nibbles in the
        // first 256 bits (elements 0..15), high nibbles in the second (elements 16..31)
        const __m512i idx = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 0, 4, 1, 5, 2, 6, 3, 7);
        __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)(blk0 + QOFF))),
                                            _mm_loadu_si128((const __m128i*)(blk1 + QOFF)), 1);
        __m512i w = _mm512_permutexvar_epi32(idx, _mm512_castsi256_si512(v));
        w = _mm512_mask_srli_epi16(w, (__mmask32)0xFFFF0000u, w, 4);
        return _mm512_and_si512(w, _mm512_set1_epi8(0x0F));
    }

    // The 32 int16 weights of block blk in the nibble order of quantize.h (see above).
    static inline __m512i load_block16(const uint8_t* blk) {
        if (DT == DType::Q8_0) {
            const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i*)(blk + QOFF)));
            return _mm512_srai_epi16(_mm512_mask_slli_epi16(v, (__mmask32)0x0000FFFFu, v, 8), 8);
        }
        const __m512i shifts = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
        const __m512i raw = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(blk + QOFF)));
        return _mm512_and_si512(_mm512_srlv_epi32(raw, shifts), _mm512_set1_epi32(0x000F000F));
    }

    // acc[r][c] += [sc[2k], sc[2k+1]] * float(I) for the block pairs of [b0, bend), int16 activations.
    template <int R, int C>
    static inline void blocks16(const MatmulJob& j, const uint8_t* const* wr, const int16_t* const* xq, int64_t b0,
                                int64_t bend, int64_t nb, const float* sc, __m512 (&acc)[R][C]) {
        const int64_t kend = (bend + 1) / 2;
        for (int64_t k = b0 / 2; k < kend; k++) {
            if (C == 1) {  // decode streams the weights once: prefetch the tile two tiles ahead
                const char* pf = (const char*)(wr[0] + 2 * RT * j.row_bytes + k * (RT * 2 * BS));
                _mm_prefetch(pf, _MM_HINT_T0);
                _mm_prefetch(pf + 64, _MM_HINT_T0);
                _mm_prefetch(pf + 128, _MM_HINT_T0);
            }
            const bool second = 2 * k + 1 < nb;  // else block 2k pairs with itself; its x partner is zero
            __m512i w1[R], w2[R];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const __m512i wa = load_block16(wr[r] + 2 * k * BS);
                const __m512i wb = second ? load_block16(wr[r] + (2 * k + 1) * BS) : wa;
                w1[r] = _mm512_unpacklo_epi32(wa, wb);
                w2[r] = _mm512_unpackhi_epi32(wa, wb);
            }
            const float* sck = sc + (2 * k - b0);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const __m512i x1 = _mm512_load_si512((const void*)(xq[c] + 64 * k));
                const __m512i x2 = _mm512_load_si512((const void*)(xq[c] + 64 * k + 32));
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const __m512i isum = _mm512_dpwssd_epi32(_mm512_madd_epi16(w1[r], x1), w2[r], x2);
                    const __m512 s2 = _mm512_castpd_ps(_mm512_broadcastsd_pd(
                        _mm_load_sd((const double*)(sck + (r * C + c) * KB))));  // [sc[2k], sc[2k+1]] x 8
                    acc[r][c] = _mm512_fmadd_ps(s2, _mm512_cvtepi32_ps(isum), acc[r][c]);
                }
            }
        }
    }

    // acc[r][c] += [sc[2k], sc[2k+1]] * float(I) for the block pairs of [b0, bend), int8 activations.
    template <int R, int C>
    static inline void blocks8(const MatmulJob& j, const uint8_t* const* wr, const int8_t* const* xq,
                               const int32_t* const* xc, int64_t b0, int64_t bend, int64_t nb, const float* sc,
                               __m512 (&acc)[R][C]) {
        const int64_t kend = (bend + 1) / 2;
        for (int64_t k = b0 / 2; k < kend; k++) {
            if (C == 1) {  // decode streams the weights once: prefetch the tile two tiles ahead
                const char* pf = (const char*)(wr[0] + 2 * RT * j.row_bytes + k * (RT * 2 * BS));
                _mm_prefetch(pf, _MM_HINT_T0);
                _mm_prefetch(pf + 64, _MM_HINT_T0);
                _mm_prefetch(pf + 128, _MM_HINT_T0);
            }
            const bool second = 2 * k + 1 < nb;
            __m512i wq[R];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) wq[r] = load_pair(wr[r] + 2 * k * BS, second);
            const float* sck = sc + (2 * k - b0);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const __m512i xv = _mm512_load_si512((const void*)(xq[c] + 64 * k));
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    __m512i init = DT == DType::Q8_0 ? _mm512_load_si512((const void*)(xc[c] + 16 * k))
                                                     : _mm512_setzero_si512();
                    __m512i isum = _mm512_dpbusd_epi32(init, wq[r], xv);
                    const __m512 s2 = _mm512_castpd_ps(_mm512_broadcastsd_pd(
                        _mm_load_sd((const double*)(sck + (r * C + c) * KB))));  // [sc[2k], sc[2k+1]] x 8
                    acc[r][c] = _mm512_fmadd_ps(s2, _mm512_cvtepi32_ps(isum), acc[r][c]);
                }
            }
        }
    }

    template <int R, int C>
    static void tile(const MatmulJob& j, int64_t r0, int t0, float* scratch) {
        const QuantActs& a = j.acts;
        const int64_t nb = a.nb, nbp = a.nb_pad;
        const float* dbuf = scratch;
        const float* mbuf = scratch + RT * nbp;
        float* sc = scratch + 2 * RT * nbp;  // sc[(r * C + c) * KB + i] = d_w * d_x of block b0 + i
        const uint8_t* wr[R];
        const int8_t* xq[C];
        const int16_t* xq16[C];
        const int32_t* xc[C];
        const float* xd[C];
        for (int r = 0; r < R; r++) wr[r] = j.w + (uint64_t)(r0 + r) * j.row_bytes;
        for (int c = 0; c < C; c++) {
            xq[c] = qa_q(a, t0 + c);
            xq16[c] = qa_q16(a, t0 + c);
            xc[c] = DT == DType::Q8_0 && BITS == 8 ? qa_corr(a, t0 + c) : nullptr;
            xd[c] = qa_d(a, t0 + c);
        }
        __m512 acc[R][C];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();

        for (int64_t b0 = 0; b0 < nb; b0 += KB) {  // chunks of KB blocks (nb_pad is a multiple of KB)
            for (int r = 0; r < R; r++)
                for (int c = 0; c < C; c++)
                    for (int i = 0; i < KB; i += 16)
                        _mm512_store_ps(sc + (r * C + c) * KB + i, _mm512_mul_ps(_mm512_load_ps(dbuf + r * nbp + b0 + i),
                                                                                  _mm512_load_ps(xd[c] + b0 + i)));
            const int64_t bend = min64(nb, b0 + KB);
            if constexpr (BITS == 16)
                blocks16<R, C>(j, wr, xq16, b0, bend, nb, sc, acc);
            else
                blocks8<R, C>(j, wr, xq, xc, b0, bend, nb, sc, acc);
        }
        if (DT != DType::Q8_0) {  // + sum_b m[b] * s_x[b], into the same accumulator
            const int64_t nb16 = (nb + 15) / 16 * 16;
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const float* xs = qa_s(a, t0 + c);
                for (int64_t b = 0; b < nb16; b += 16) {
                    const __m512 sv = _mm512_load_ps(xs + b);
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++)
                        acc[r][c] = _mm512_fmadd_ps(_mm512_load_ps(mbuf + r * nbp + b), sv, acc[r][c]);
                }
            }
        }
        store_sums<R, C>(j, r0, t0, acc);
    }
};

template <class K, int R>
void tokens_loop(const MatmulJob& j, int64_t r0, float* scratch) {
    int t = 0;
    for (; t + CT <= j.T; t += CT) K::template tile<R, CT>(j, r0, t, scratch);
    switch (j.T - t) {
        case 1: K::template tile<R, 1>(j, r0, t, scratch); break;
        case 2: K::template tile<R, 2>(j, r0, t, scratch); break;
        case 3: K::template tile<R, 3>(j, r0, t, scratch); break;
        default: break;
    }
}

template <class K>
void rows_loop(const MatmulJob& j, int64_t r0, int64_t r1, float* scratch) {
    for (int64_t r = r0; r < r1; r += RT) {
        int n = (int)min64(RT, r1 - r);
        K::prepare(j, r, n, scratch);
        switch (n) {
            case 4: tokens_loop<K, 4>(j, r, scratch); break;
            case 3: tokens_loop<K, 3>(j, r, scratch); break;
            case 2: tokens_loop<K, 2>(j, r, scratch); break;
            default: tokens_loop<K, 1>(j, r, scratch); break;
        }
    }
}

}  // namespace

void matmul_rows_avx512(const MatmulJob& j, int64_t r0, int64_t r1, float* scratch) {
    switch (j.dtype) {
        case DType::F32: rows_loop<FloatKernel<DType::F32>>(j, r0, r1, scratch); break;
        case DType::F16: rows_loop<FloatKernel<DType::F16>>(j, r0, r1, scratch); break;
        case DType::BF16: rows_loop<FloatKernel<DType::BF16>>(j, r0, r1, scratch); break;
        case DType::Q8_0:
            if (j.acts.bits == 16) rows_loop<QuantKernel<DType::Q8_0, 16>>(j, r0, r1, scratch);
            else rows_loop<QuantKernel<DType::Q8_0, 8>>(j, r0, r1, scratch);
            break;
        case DType::Q4_0:
            if (j.acts.bits == 16) rows_loop<QuantKernel<DType::Q4_0, 16>>(j, r0, r1, scratch);
            else rows_loop<QuantKernel<DType::Q4_0, 8>>(j, r0, r1, scratch);
            break;
        case DType::Q4_1:
            if (j.acts.bits == 16) rows_loop<QuantKernel<DType::Q4_1, 16>>(j, r0, r1, scratch);
            else rows_loop<QuantKernel<DType::Q4_1, 8>>(j, r0, r1, scratch);
            break;
        default: fail("matmul_rows_avx512: unsupported weight dtype (code %d)", (int)j.dtype);
    }
}

}  // namespace beagle
