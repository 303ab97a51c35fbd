// simd.h: small AVX2 helpers shared by the CPU backend's ops. Each helper has ONE fixed reduction
// order (8 lanes, tail in scalar after the lane sum), so results never depend on the caller's batch.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>

namespace beagle {

static inline float hsum8(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

// The largest of the 8 lanes (a NaN lane never wins: std::max keeps its first argument then).
static inline float hmax8(__m256 v) {
    alignas(32) float m8[8];
    _mm256_store_ps(m8, v);
    float mx = -INFINITY;
    for (int j = 0; j < 8; j++) mx = std::max(mx, m8[j]);
    return mx;
}

// sum_i a[i] * b[i]
static inline float dot_f32(const float* a, const float* b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = hsum8(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

// y[i] += a * x[i]
static inline void axpy_f32(float* y, float a, const float* x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

// e^x in 8 lanes for x <= 0 (softmax weights after subtracting the maximum): x = n ln2 + r with
// |r| <= ln2/2 (Cody-Waite, two-part ln2), e^r by Cephes' degree-7 expf polynomial (relative error
// ~2 ulp), times 2^n built in the exponent bits. x is clamped below at -87.3 (2^n stays normal; e^-87.3
// ~ 1e-38 is negligible next to the maximum's weight 1). A NaN stays NaN.
static inline __m256 exp8_neg(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-87.3f), x);  // NaN in x is returned by max's second operand
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Lanes 0 .. rem - 1 set (a mask for maskload / maskstore of a tail of rem < 8 elements; all 8 if rem >= 8).
static inline __m256i tail_mask8(int rem) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// sum_i x[i]^2
static inline float sumsq_f32(const float* x, int n) { return dot_f32(x, x, n); }

// Scores of one query q against 8 keys k[0..8) of 8 ND floats each: lane l of key j accumulates
// q[8c + l] k_j[8c + l] by FMA for c = 0..ND-1, then the 8 lanes are summed in one fixed tree
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), the same for every j: a key's score does not
// depend on the keys it is computed with. Eight independent FMA chains instead of one per key.
template <int ND>
static inline __m256 dot8_keys(const float* q, const float* const* k) {
    __m256 acc[8];  // loops unrolled by force so that acc[] stays in registers
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) acc[j] = _mm256_mul_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(k[j]));
#pragma GCC unroll 16
    for (int c = 1; c < ND; c++) {
        const __m256 qc = _mm256_loadu_ps(q + 8 * c);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) acc[j] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k[j] + 8 * c), acc[j]);
    }
    const __m256 t0 = _mm256_hadd_ps(acc[0], acc[1]), t1 = _mm256_hadd_ps(acc[2], acc[3]);
    const __m256 t2 = _mm256_hadd_ps(acc[4], acc[5]), t3 = _mm256_hadd_ps(acc[6], acc[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

}  // namespace beagle
