// matmul_kquant.cpp: the CPU matmul kernel of the 5-bit and k-quant weight types (Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K; layouts in dtype.h), with int16 activations (quantize.h), AVX2 code used by both ISA paths.
//
// Every one of these types stores, per sub-block of 32 (or 16, Q6_K) weights, x = A * q + B with q a
// small integer (|q| <= 32), A an exact float32 (a half times a small integer) and B an exact float32
// (zero for Q5_0 and Q6_K, whose q is made signed: q - 16, q - 32). Per weight row, once for all T
// tokens, the row is unpacked into
//   w16[32 b + p]: the int16 q of element q16_element(p) of activation block b (the nibble order of the
//                  int16 activations, so one madd pairs each weight with its activation),
//   av[8 b + i]:   A of lanes i < 4 (elements 0..15 of the block, Q6_K's first sub-block of 16) and i >= 4
//                  (elements 16..31); one value for the 32-element sub-blocks,
//   mv[b]:         B (zero padded to nb_pad).
// Then per (row, token): acc (8 float lanes) = 0; for each block b in order,
//   I = madd(w[0..15], x[0..15]) + madd(w[16..31], x[16..31])   (int32 lane i: 4 exact products; lanes
//       0..3 belong to elements 0..15, lanes 4..7 to 16..31; |I| <= 4 * 32 * 32767 < 2^24, float(I) exact)
//   acc = fma(fl(av[8b..] * d_x[b]), float(I), acc)
// then acc = fma(mv[b..b+8), s_x[b..b+8), acc) over the blocks 8 at a time (types with B), and
// y = the fixed horizontal sum. The float steps of one (row, token) do not depend on T, the thread split
// or the ISA: batch invariant, and the AVX2 and AVX-512 paths give the same bits.
#include <immintrin.h>

#include <cstring>

#include "../../core/common.h"
#include "../../core/tensor.h"
#include "matmul.h"
#include "simd.h"

namespace beagle {

namespace {

inline float half(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

// The 32 values of one activation block as int8 in natural order (element e in byte e) -> w16[0..32) in
// the int16 nibble order: the even elements (positions 0..15) are the low bytes of the 16 words, the odd
// ones (positions 16..31) the high bytes, both sign-extended.
inline void store_nibble_order(__m256i v, int16_t* w) {
    _mm256_store_si256((__m256i*)w, _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8));
    _mm256_store_si256((__m256i*)(w + 16), _mm256_srai_epi16(v, 8));
}

// Bit e of the 32-bit qh as byte e: 16 where set, else 0 (the fifth bit of Q5_0 / Q5_1).
inline __m256i q5_high_bits(const uint8_t* qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                              _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
                                                                 0x0303030303030303ll));  // byte e = qh byte e / 8
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);              // 1 << (e % 8)
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(16));
}

// One row of nb activation blocks unpacked as described above. Returns whether the type has B terms.
bool unpack_row(DType dt, const uint8_t* row, int64_t nb, int64_t nb_pad, int16_t* w16, float* av, float* mv) {
    const __m256i low4 = _mm256_set1_epi8(15);
    for (int64_t b = 0; b < nb_pad; b++) mv[b] = 0.0f;
    switch (dt) {
        case DType::Q5_0:
        case DType::Q5_1: {
            const uint64_t bs = dtype_block_bytes(dt);
            const int qoff = dt == DType::Q5_1 ? 4 : 2;
            const __m256i off = _mm256_set1_epi8(dt == DType::Q5_0 ? 16 : 0);
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t* blk = row + b * bs;
                const __m128i qs = _mm_loadu_si128((const __m128i*)(blk + qoff + 4));
                // [qs & 15 | qs >> 4 & 15] = elements 0..15, 16..31
                const __m256i lohi = _mm256_and_si256(
                    _mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), low4);
                const __m256i v = _mm256_sub_epi8(_mm256_or_si256(lohi, q5_high_bits(blk + qoff)), off);
                store_nibble_order(v, w16 + 32 * b);
                const __m256 d = _mm256_set1_ps(half(blk));
                _mm256_store_ps(av + 8 * b, d);
                if (dt == DType::Q5_1) mv[b] = half(blk + 2);
            }
            return dt == DType::Q5_1;
        }
        case DType::Q4_K:
        case DType::Q5_K: {
            const uint64_t bs = dtype_block_bytes(dt);
            const __m256i one = _mm256_set1_epi8(1);
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t* blk = row + (b / 8) * bs;
                const int j = (int)(b % 8);
                const float d = half(blk), dmin = half(blk + 2);
                int sc, mn;
                kquant_scale_min(blk + 4, j, &sc, &mn);
                const uint8_t* qs = blk + (dt == DType::Q5_K ? 48 : 16);
                __m256i v = _mm256_loadu_si256((const __m256i*)(qs + 32 * (j / 2)));
                v = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(v, 4) : v, low4);
                if (dt == DType::Q5_K) {  // bit j of qh[l] -> 16
                    const __m256i qh = _mm256_loadu_si256((const __m256i*)(blk + 16));
                    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j)), one);
                    v = _mm256_or_si256(v, _mm256_slli_epi16(hb, 4));
                }
                store_nibble_order(v, w16 + 32 * b);
                _mm256_store_ps(av + 8 * b, _mm256_set1_ps(d * (float)sc));
                mv[b] = -(dmin * (float)mn);
            }
            return true;
        }
        case DType::Q6_K: {
            const __m256i three = _mm256_set1_epi8(3), c32 = _mm256_set1_epi8(32);
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t* blk = row + (b / 8) * sizeof(BlockQ6_K);
                const int j = (int)(b % 8), h = j / 4, k = j % 4;  // elements 128 h + 32 k + l
                const int8_t* scales = (const int8_t*)(blk + 192);
                const float d = half(blk + 208);
                __m256i lo = _mm256_loadu_si256((const __m256i*)(blk + 64 * h + 32 * (k & 1)));
                lo = _mm256_and_si256(k >> 1 ? _mm256_srli_epi16(lo, 4) : lo, low4);
                const __m256i qh = _mm256_loadu_si256((const __m256i*)(blk + 128 + 32 * h));
                const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), three);
                const __m256i v = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), c32);
                store_nibble_order(v, w16 + 32 * b);
                const float lo_s = d * (float)scales[2 * j], hi_s = d * (float)scales[2 * j + 1];
                _mm256_store_ps(av + 8 * b, _mm256_setr_ps(lo_s, lo_s, lo_s, lo_s, hi_s, hi_s, hi_s, hi_s));
            }
            return false;
        }
        default: fail("matmul_rows_kquant: dtype %s is not a 5-bit or k-quant type", dtype_name(dt));
    }
}

}  // namespace

bool cpu_is_kquant(DType t) {
    return t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

int64_t matmul_kquant_scratch_floats(const MatmulJob& job) {
    // w16 (16 floats per block), av (8), mv (nb_pad)
    return 24 * job.acts.nb_pad + job.acts.nb_pad + 16;
}

void matmul_rows_kquant(const MatmulJob& j, int64_t r0, int64_t r1, float* scratch) {
    const QuantActs& a = j.acts;
    if (a.bits != 16 || a.interleaved) fail("matmul_rows_kquant: expected plain int16 activations");
    const int64_t nb = a.nb, nbp = a.nb_pad;
    int16_t* w16 = (int16_t*)scratch;
    float* av = scratch + 16 * nbp;
    float* mv = av + 8 * nbp;
    for (int64_t r = r0; r < r1; r++) {
        const bool has_min = unpack_row(j.dtype, j.w + (uint64_t)r * j.row_bytes, nb, nbp, w16, av, mv);
        for (int t = 0; t < j.T; t++) {
            const int16_t* xq = qa_q16(a, t);
            const float* xd = qa_d(a, t);
            __m256 acc = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const __m256i* wv = (const __m256i*)(w16 + 32 * b);
                const __m256i* xv = (const __m256i*)(xq + 32 * b);
                const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_load_si256(wv), _mm256_load_si256(xv)),
                                                   _mm256_madd_epi16(_mm256_load_si256(wv + 1), _mm256_load_si256(xv + 1)));
                const __m256 sc = _mm256_mul_ps(_mm256_load_ps(av + 8 * b), _mm256_broadcast_ss(xd + b));
                acc = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(p), acc);
            }
            if (has_min) {
                const float* xs = qa_s(a, t);
                for (int64_t b = 0; b < nb; b += 8)
                    acc = _mm256_fmadd_ps(_mm256_loadu_ps(mv + b), _mm256_load_ps(xs + b), acc);
            }
            j.y[(int64_t)t * j.rows + r] = hsum8(acc);
        }
    }
}

}  // namespace beagle
