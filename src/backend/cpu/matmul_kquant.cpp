// matmul_kquant.cpp: the CPU matmul kernel of the 5-bit and k-quant weight types (Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K; layouts in dtype.h), with int16 activations (quantize.h), AVX2 code used by both ISA paths.
//
// Every one of these types stores, per sub-block of 32 (or 16, Q6_K) weights, x = A * q + B with q a
// small integer (|q| <= 32), A an exact float32 (a half times a small integer) and B an exact float32
// (zero for Q5_0 and Q6_K, whose q is made signed: q - 16, q - 32). Per weight row, once for all T
// tokens, the row is unpacked into
//   w16[32 b + p]: the int16 q of element q16_element(p) of activation block b (the nibble order of the
//                  int16 activations, so one madd pairs each weight with its activation),
//   av[8 b + i]:   A of lanes i < 4 (elements 0..15 of the block: Q6_K sub-block 2b' ) and i >= 4
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

namespace beagle {

namespace {

inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float half(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

// One row of nb activation blocks unpacked as described above. Returns whether the type has B terms.
bool unpack_row(DType dt, const uint8_t* row, int64_t nb, int64_t nb_pad, int16_t* w16, float* av, float* mv) {
    int pos_elem[32];
    for (int p = 0; p < 32; p++) pos_elem[p] = q16_element(p);
    for (int64_t b = 0; b < nb_pad; b++) mv[b] = 0.0f;
    switch (dt) {
        case DType::Q5_0:
        case DType::Q5_1: {
            const uint64_t bs = dtype_block_bytes(dt);
            const int qoff = dt == DType::Q5_1 ? 4 : 2;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t* blk = row + b * bs;
                const float d = half(blk);
                const int off = dt == DType::Q5_0 ? 16 : 0;
                for (int p = 0; p < 32; p++) w16[32 * b + p] = (int16_t)(q5_value(blk + qoff, blk + qoff + 4, pos_elem[p]) - off);
                for (int i = 0; i < 8; i++) av[8 * b + i] = d;
                if (dt == DType::Q5_1) mv[b] = half(blk + 2);
            }
            return dt == DType::Q5_1;
        }
        case DType::Q4_K:
        case DType::Q5_K: {
            const uint64_t bs = dtype_block_bytes(dt);
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t* blk = row + (b / 8) * bs;
                const int j = (int)(b % 8);
                const float d = half(blk), dmin = half(blk + 2);
                int sc, mn;
                kquant_scale_min(blk + 4, j, &sc, &mn);
                const uint8_t* qh = blk + 16;
                const uint8_t* qs = blk + (dt == DType::Q5_K ? 48 : 16);
                for (int p = 0; p < 32; p++) {
                    const int e = 32 * j + pos_elem[p];
                    w16[32 * b + p] = (int16_t)(dt == DType::Q5_K ? q5k_value(qh, qs, e) : q4k_value(qs, e));
                }
                const float a = d * (float)sc;
                for (int i = 0; i < 8; i++) av[8 * b + i] = a;
                mv[b] = -(dmin * (float)mn);
            }
            return true;
        }
        case DType::Q6_K: {
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t* blk = row + (b / 8) * sizeof(BlockQ6_K);
                const int j = (int)(b % 8);
                const uint8_t* ql = blk;
                const uint8_t* qh = blk + 128;
                const int8_t* scales = (const int8_t*)(blk + 192);
                const float d = half(blk + 208);
                for (int p = 0; p < 32; p++) w16[32 * b + p] = (int16_t)(q6k_value(ql, qh, 32 * j + pos_elem[p]) - 32);
                const float lo = d * (float)scales[2 * j], hi = d * (float)scales[2 * j + 1];
                for (int i = 0; i < 4; i++) av[8 * b + i] = lo, av[8 * b + 4 + i] = hi;
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
