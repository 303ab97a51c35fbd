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

// sum_i x[i]^2
static inline float sumsq_f32(const float* x, int n) { return dot_f32(x, x, n); }

}  // namespace beagle
