// quantize.cpp: AVX2 quantizer of activation rows to int16 or int8 blocks (layout and math in
// quantize.h). Called by cpu_matmul for both ISAs, so AVX2 and AVX-512 kernels see the same q, d, s.
#include "quantize.h"

#include <immintrin.h>

#include <cstring>

#include "../../core/common.h"

namespace beagle {

void quant_acts_layout(QuantActs& a, int64_t cols, int bits, bool interleaved, bool with_corr) {
    if (bits != 8 && bits != 16) fail("quant_acts_layout: activation bits must be 8 or 16, found %d", bits);
    if (bits == 16 && with_corr) fail("quant_acts_layout: the corr option exists for 8-bit activations only");
    a.bits = bits;
    a.cols = cols;
    a.nb = cols / 32;
    a.nb_pad = (a.nb + 31) / 32 * 32;
    a.qbytes = (size_t)(a.nb + 1) / 2 * (bits == 16 ? 128 : 64);  // whole block pairs
    size_t off = a.qbytes;
    a.off_d = off;
    off += (size_t)a.nb_pad * 4;
    a.off_s = off;
    off += (size_t)a.nb_pad * 4;
    a.interleaved = interleaved;
    a.off_corr = 0;
    if (with_corr) {
        a.off_corr = off;
        off += a.qbytes;  // cols / 4 int32 = cols bytes, padded like q
    }
    a.stride = off;  // every part is a multiple of 64 bytes
}

// Largest |v| over 32 floats (exact: max does not round, so the order does not matter), or NaN if
// any v is NaN (max_ps alone may drop a NaN; then the block's d is NaN and so is every y it touches).
static inline float absmax32(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    __m256 nan = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(v0, v0, _CMP_UNORD_Q), _mm256_cmp_ps(v1, v1, _CMP_UNORD_Q)),
                              _mm256_or_ps(_mm256_cmp_ps(v2, v2, _CMP_UNORD_Q), _mm256_cmp_ps(v3, v3, _CMP_UNORD_Q)));
    return _mm256_movemask_ps(nan) ? __builtin_nanf("") : _mm_cvtss_f32(m4);
}

// Exact integer sum of the 32 values in 4 int32 vectors.
static inline int sum32_epi32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    __m256i isum = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(isum), _mm256_extracti128_si256(isum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s4);
}

// One block of 32 activations x rounded to integers: d = amax / qmax, i[k] = rint(x[8k .. 8k + 8) / d)
// (round half to even, the MXCSR default; |i| <= qmax; d = 0: all zero). Returns the exact sum of the 32.
static inline int round_block(const float* x, float qmax, __m256i i[4], float* d) {
    __m256 v[4];
    for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
    *d = absmax32(v[0], v[1], v[2], v[3]) / qmax;
    const __m256 vid = _mm256_set1_ps(*d != 0.0f ? 1.0f / *d : 0.0f);
    for (int k = 0; k < 4; k++) i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));
    return sum32_epi32(i[0], i[1], i[2], i[3]);
}

// int16 blocks in nibble order (quantize.h): d = amax / 32767, q = rint(x / d), blocks [b0, b1) of row t.
static void quantize_blocks_q16(const QuantActs& a, const float* x, int64_t t, int64_t b0, int64_t b1) {
    int16_t* q = qa_q16(a, t);
    float* d = qa_d(a, t);
    float* s = qa_s(a, t);
    const __m256i evens_odds = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (int64_t b = b0; b < b1; b++) {
        __m256i i[4];
        float db;
        const int qsum = round_block(x + b * 32, 32767.0f, i, &db);  // |values| <= 32767 (quantize.h)
        // [e0 e2 e4 e6 e1 e3 e5 e7] per 8, then packs (per 128-bit lane) -> [evens 0..15 | odds 0..15]
        __m256i p01 = _mm256_packs_epi32(_mm256_permutevar8x32_epi32(i[0], evens_odds),
                                         _mm256_permutevar8x32_epi32(i[1], evens_odds));
        __m256i p23 = _mm256_packs_epi32(_mm256_permutevar8x32_epi32(i[2], evens_odds),
                                         _mm256_permutevar8x32_epi32(i[3], evens_odds));
        // groups k = 0..3: evens 0..15, evens 16..31, odds 0..15, odds 16..31
        _mm256_store_si256((__m256i*)(q + b * 32), _mm256_permute2x128_si256(p01, p23, 0x20));
        _mm256_store_si256((__m256i*)(q + b * 32 + 16), _mm256_permute2x128_si256(p01, p23, 0x31));
        d[b] = db;
        s[b] = db * (float)qsum;
    }
}

// Zero the padding of row t past its nb blocks: q up to qbytes, d and s up to nb_pad (int16 layout).
static void pad_row_q16(const QuantActs& a, int64_t t) {
    int16_t* q = qa_q16(a, t);
    float* d = qa_d(a, t);
    float* s = qa_s(a, t);
    memset(q + a.nb * 32, 0, a.qbytes - (size_t)a.nb * 64);
    for (int64_t b = a.nb; b < a.nb_pad; b++) d[b] = s[b] = 0.0f;
}

void quantize_act_blocks(const QuantActs& a, const float* x, int64_t t, int64_t b0, int64_t b1) {
    if (a.bits != 16 || a.interleaved)
        fail("quantize_act_blocks: expected the plain int16 layout, found %d-bit%s", a.bits,
             a.interleaved ? " interleaved" : "");
    quantize_blocks_q16(a, x, t, b0, b1);
    if (b1 == a.nb) pad_row_q16(a, t);
}

static void quantize_row_q16(const QuantActs& a, const float* x, int64_t t) {
    int16_t* q = qa_q16(a, t);
    quantize_blocks_q16(a, x, t, 0, a.nb);
    pad_row_q16(a, t);

    if (a.interleaved) {
        for (int64_t k = 0; k < (a.nb + 1) / 2; k++) {  // blocks 2k (A) and 2k+1 (B, or padding zeros)
            __m256i* p = (__m256i*)(q + 64 * k);        // A = p[0..1], B = p[2..3]; 256-bit halves of the
            __m256i A0 = _mm256_load_si256(p), A1 = _mm256_load_si256(p + 1);  // 512-bit unpacks
            __m256i B0 = _mm256_load_si256(p + 2), B1 = _mm256_load_si256(p + 3);
            _mm256_store_si256(p, _mm256_unpacklo_epi32(A0, B0));
            _mm256_store_si256(p + 1, _mm256_unpacklo_epi32(A1, B1));
            _mm256_store_si256(p + 2, _mm256_unpackhi_epi32(A0, B0));
            _mm256_store_si256(p + 3, _mm256_unpackhi_epi32(A1, B1));
        }
    }
}

void quantize_act_row(const QuantActs& a, const float* x, int64_t t) {
    if (a.bits == 16) {
        quantize_row_q16(a, x, t);
        return;
    }
    int8_t* q = qa_q(a, t);
    float* d = qa_d(a, t);
    float* s = qa_s(a, t);
    const __m256i unpack = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < a.nb; b++) {
        __m256i i[4];
        float db;
        const int qsum = round_block(x + b * 32, 127.0f, i, &db);
        // pack int32 -> int8 (values are in [-127, 127]); packs interleave 128-bit lanes, undo it
        __m256i p01 = _mm256_packs_epi32(i[0], i[1]), p23 = _mm256_packs_epi32(i[2], i[3]);
        __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), unpack);
        _mm256_store_si256((__m256i*)(q + b * 32), p);
        d[b] = db;
        s[b] = db * (float)qsum;
    }
    memset(q + a.nb * 32, 0, a.qbytes - (size_t)a.nb * 32);
    for (int64_t b = a.nb; b < a.nb_pad; b++) d[b] = s[b] = 0.0f;

    if (a.interleaved) {
        for (int64_t k = 0; k < (a.nb + 1) / 2; k++) {  // q of blocks 2k (A) and 2k+1 (B, or padding zeros)
            __m256i A = _mm256_load_si256((const __m256i*)(q + 64 * k));
            __m256i B = _mm256_load_si256((const __m256i*)(q + 64 * k + 32));
            __m256i lo = _mm256_unpacklo_epi32(A, B), hi = _mm256_unpackhi_epi32(A, B);  // [A0 B0 A1 B1 | A4 B4 A5 B5]
            _mm256_store_si256((__m256i*)(q + 64 * k), _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_store_si256((__m256i*)(q + 64 * k + 32), _mm256_permute2x128_si256(lo, hi, 0x31));
        }
    }
    if (a.off_corr) {
        int32_t* corr = qa_corr(a, t);
        const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
        for (size_t i = 0; i < a.qbytes; i += 32) {  // padding q is zero, so its corr is zero
            __m256i qv = _mm256_load_si256((const __m256i*)(q + i));
            __m256i g4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qv), ones16);  // sums of 4 q
            _mm256_store_si256((__m256i*)(corr + i / 4), _mm256_sub_epi32(_mm256_setzero_si256(),
                                                                           _mm256_slli_epi32(g4, 7)));
        }
    }
}

}  // namespace beagle
