// prim.h: what the CPU op files share: the innermost primitives of the kernels written once as a
// template over the scalar type R (float for CpuOps, double for CpuOps64 of ops_f64.h, used by the
// gradient check): dot and axpy in one fixed order (float: AVX2 8 lanes, then the lane sum, then a
// scalar fma tail; double: sequential fma), and the 2-D tiling of a job over the thread pool.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../../core/threadpool.h"
#include "simd.h"

namespace beagle {

// dot product (fixed order) and y += a * x.
template <class R>
struct Prim;

template <>
struct Prim<float> {
    static float dot(const float* a, const float* b, int n) {
        __m256 acc = _mm256_setzero_ps();
        int i = 0;
        for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
        float s = hsum8(acc);
        for (; i < n; i++) s = fmaf(a[i], b[i], s);
        return s;
    }
    static void axpy(float* y, float a, const float* x, int n) {
        __m256 va = _mm256_set1_ps(a);
        int i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
    }
};

template <>
struct Prim<double> {
    static double dot(const double* a, const double* b, int n) {
        double s = 0;
        for (int i = 0; i < n; i++) s = std::fma(a[i], b[i], s);
        return s;
    }
    static void axpy(double* y, double a, const double* x, int n) {
        for (int i = 0; i < n; i++) y[i] = std::fma(a, x[i], y[i]);
    }
};

inline float fma_r(float a, float b, float c) { return fmaf(a, b, c); }
inline double fma_r(double a, double b, double c) { return std::fma(a, b, c); }

// Jobs of a 2-D tiling: (n1 / b1 rounded up) x (n2 / b2 rounded up), run over the pool.
template <class Fn>
void tiles_2d(ThreadPool& pool, int n1, int b1, int n2, int b2, Fn fn) {
    int64_t j1 = (n1 + b1 - 1) / b1, j2 = (n2 + b2 - 1) / b2;
    pool.parallel_for(j1 * j2, [&](int64_t b, int64_t e, int) {
        for (int64_t job = b; job < e; job++) {
            int a0 = (int)(job / j2) * b1, c0 = (int)(job % j2) * b2;
            fn(a0, std::min(a0 + b1, n1), c0, std::min(c0 + b2, n2));
        }
    });
}

}  // namespace beagle
