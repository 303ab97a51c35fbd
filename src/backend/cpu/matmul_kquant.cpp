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
// (Up to 4 tokens skip w16 / av: each block is unpacked into registers and used by every token at once.)
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

// An f16 scale as float (F16C: the same exact value as dtype.h's f16_to_f32, in one instruction).
inline float half(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// The 32 values of one activation block as int8 in natural order (element e in byte e) -> the two int16
// vectors of the nibble order (w16[0..32) when stored): the even elements (positions 0..15) are the low
// bytes of the 16 words, the odd ones (positions 16..31) the high bytes, both sign-extended.
inline void nibble_order(__m256i v, __m256i* lo, __m256i* hi) {
    *lo = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8);
    *hi = _mm256_srai_epi16(v, 8);
}

inline void store_nibble_order(__m256i v, int16_t* w) {
    __m256i lo, hi;
    nibble_order(v, &lo, &hi);
    _mm256_store_si256((__m256i*)w, lo);
    _mm256_store_si256((__m256i*)(w + 16), hi);
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

// Activation block b of one weight row: its 32 q as int8 in natural order (*v), its A for lanes 0..7 (*a)
// and its B (*m; 0 for the types without one).
// A template on the type, so that the kernels below compile one loop per type with this inlined.
template <DType dt>
__attribute__((always_inline)) inline void unpack_block(const uint8_t* row, int64_t b, __m256i* v, __m256* a,
                                                        float* m) {
    const __m256i low4 = _mm256_set1_epi8(15);
    *m = 0.0f;
    switch (dt) {
        case DType::Q5_0:
        case DType::Q5_1: {
            const uint8_t* blk = row + b * dtype_block_bytes(dt);
            const int qoff = dt == DType::Q5_1 ? 4 : 2;
            const __m128i qs = _mm_loadu_si128((const __m128i*)(blk + qoff + 4));
            // [qs & 15 | qs >> 4 & 15] = elements 0..15, 16..31
            const __m256i lohi = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), low4);
            *v = _mm256_sub_epi8(_mm256_or_si256(lohi, q5_high_bits(blk + qoff)),
                                 _mm256_set1_epi8(dt == DType::Q5_0 ? 16 : 0));
            *a = _mm256_set1_ps(half(blk));
            if (dt == DType::Q5_1) *m = half(blk + 2);
            return;
        }
        case DType::Q4_K:
        case DType::Q5_K: {
            const uint8_t* blk = row + (b / 8) * dtype_block_bytes(dt);
            const int j = (int)(b % 8);
            const float d = half(blk), dmin = half(blk + 2);
            int sc, mn;
            kquant_scale_min(blk + 4, j, &sc, &mn);
            const uint8_t* qs = blk + (dt == DType::Q5_K ? 48 : 16);
            __m256i q = _mm256_loadu_si256((const __m256i*)(qs + 32 * (j / 2)));
            q = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(q, 4) : q, low4);
            if (dt == DType::Q5_K) {  // bit j of qh[l] -> 16
                const __m256i qh = _mm256_loadu_si256((const __m256i*)(blk + 16));
                const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
                q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 4));
            }
            *v = q;
            *a = _mm256_set1_ps(d * (float)sc);
            *m = -(dmin * (float)mn);
            return;
        }
        case DType::Q6_K: {
            const uint8_t* blk = row + (b / 8) * sizeof(BlockQ6_K);
            const int j = (int)(b % 8), h = j / 4, k = j % 4;  // elements 128 h + 32 k + l
            const int8_t* scales = (const int8_t*)(blk + 192);
            const float d = half(blk + 208);
            __m256i lo = _mm256_loadu_si256((const __m256i*)(blk + 64 * h + 32 * (k & 1)));
            lo = _mm256_and_si256(k >> 1 ? _mm256_srli_epi16(lo, 4) : lo, low4);
            const __m256i qh = _mm256_loadu_si256((const __m256i*)(blk + 128 + 32 * h));
            const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3));
            *v = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
            const float lo_s = d * (float)scales[2 * j], hi_s = d * (float)scales[2 * j + 1];
            *a = _mm256_setr_ps(lo_s, lo_s, lo_s, lo_s, hi_s, hi_s, hi_s, hi_s);
            return;
        }
    }
}

constexpr bool has_min_term(DType dt) { return dt == DType::Q5_1 || dt == DType::Q4_K || dt == DType::Q5_K; }

// One row of nb activation blocks unpacked as described above (for many tokens: unpacked once, read T times).
template <DType dt>
void unpack_row(const uint8_t* row, int64_t nb, int64_t nb_pad, int16_t* w16, float* av, float* mv) {
    for (int64_t b = nb; b < nb_pad; b++) mv[b] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        __m256i v;
        __m256 a;
        unpack_block<dt>(row, b, &v, &a, mv + b);
        store_nibble_order(v, w16 + 32 * b);
        _mm256_store_ps(av + 8 * b, a);
    }
}

// The int32 lanes I of one block: madd of the weights (two int16 vectors) with the activations.
inline __m256i block_dot(__m256i w0, __m256i w1, const int16_t* xq) {
    return _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_load_si256((const __m256i*)xq)),
                            _mm256_madd_epi16(w1, _mm256_load_si256((const __m256i*)(xq + 16))));
}

// The B terms and the horizontal sum of one (row, token), after its blocks.
inline float finish_row(__m256 acc, bool has_min, const float* mv, const float* xs, int64_t nb) {
    if (has_min)
        for (int64_t b = 0; b < nb; b += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(mv + b), _mm256_load_ps(xs + b), acc);
    return hsum8(acc);
}

// Rows for NT tokens (NT <= 4: decode and short verifies): each block is unpacked into registers and used
// by every token at once, with no trip through memory; the B values are kept for the end. The float
// steps of each (row, token) are those of the many-token path: the same bits.
template <DType dt, int NT>
void rows_few_tokens(const MatmulJob& j, int64_t r0, int64_t r1, float* mv) {
    const QuantActs& a = j.acts;
    const int64_t nb = a.nb;
    constexpr bool has_min = has_min_term(dt);
    for (int64_t b = nb; b < a.nb_pad; b++) mv[b] = 0.0f;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t* row = j.w + (uint64_t)r * j.row_bytes;
        __m256 acc[NT];
        for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            __m256i v, w0, w1;
            __m256 av;
            unpack_block<dt>(row, b, &v, &av, mv + b);
            nibble_order(v, &w0, &w1);
            for (int t = 0; t < NT; t++) {
                const __m256i p = block_dot(w0, w1, qa_q16(a, t) + 32 * b);
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(av, _mm256_broadcast_ss(qa_d(a, t) + b)), _mm256_cvtepi32_ps(p), acc[t]);
            }
        }
        for (int t = 0; t < NT; t++) j.y[(int64_t)t * j.rows + r] = finish_row(acc[t], has_min, mv, qa_s(a, t), nb);
    }
}

// Rows [r0, r1) for j.T tokens, type dt.
template <DType dt>
void rows_kquant(const MatmulJob& j, int64_t r0, int64_t r1, float* scratch) {
    const QuantActs& a = j.acts;
    const int64_t nb = a.nb, nbp = a.nb_pad;
    int16_t* w16 = (int16_t*)scratch;
    float* av = scratch + 16 * nbp;
    float* mv = av + 8 * nbp;
    switch (j.T) {
        case 1: return rows_few_tokens<dt, 1>(j, r0, r1, mv);
        case 2: return rows_few_tokens<dt, 2>(j, r0, r1, mv);
        case 3: return rows_few_tokens<dt, 3>(j, r0, r1, mv);
        case 4: return rows_few_tokens<dt, 4>(j, r0, r1, mv);
    }
    for (int64_t r = r0; r < r1; r++) {
        unpack_row<dt>(j.w + (uint64_t)r * j.row_bytes, nb, nbp, w16, av, mv);
        for (int t = 0; t < j.T; t++) {
            const int16_t* xq = qa_q16(a, t);
            const float* xd = qa_d(a, t);
            __m256 acc = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const __m256i* wv = (const __m256i*)(w16 + 32 * b);
                const __m256i p = block_dot(_mm256_load_si256(wv), _mm256_load_si256(wv + 1), xq + 32 * b);
                const __m256 sc = _mm256_mul_ps(_mm256_load_ps(av + 8 * b), _mm256_broadcast_ss(xd + b));
                acc = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(p), acc);
            }
            j.y[(int64_t)t * j.rows + r] = finish_row(acc, has_min_term(dt), mv, qa_s(a, t), nb);
        }
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
    if (j.acts.bits != 16 || j.acts.interleaved) fail("matmul_rows_kquant: expected plain int16 activations");
    switch (j.dtype) {
        case DType::Q5_0: return rows_kquant<DType::Q5_0>(j, r0, r1, scratch);
        case DType::Q5_1: return rows_kquant<DType::Q5_1>(j, r0, r1, scratch);
        case DType::Q4_K: return rows_kquant<DType::Q4_K>(j, r0, r1, scratch);
        case DType::Q5_K: return rows_kquant<DType::Q5_K>(j, r0, r1, scratch);
        case DType::Q6_K: return rows_kquant<DType::Q6_K>(j, r0, r1, scratch);
        default: fail("matmul_rows_kquant: dtype %s is not a 5-bit or k-quant type", dtype_name(j.dtype));
    }
}

}  // namespace beagle
