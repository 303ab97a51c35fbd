// simd.h: small AVX2 helpers shared by the CPU backend's ops. Each helper has ONE fixed reduction
// order (8 lanes, tail in scalar after the lane sum), so results never depend on the caller's batch.
#pragma once
#include <immintrin.h>

namespace beagle {

static inline float hsum8(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
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

// sum_i x[i]^2
static inline float sumsq_f32(const float* x, int n) { return dot_f32(x, x, n); }

}  // namespace beagle
