// loss.cpp: the draft's losses (ops.h): the online logsumexp over vocabulary chunks, the soft- and
// token-label cross-entropy chunks (loss and dz together) and SmoothL1, for CpuOps and CpuOps64.
// One row per job. CpuOps64 sums each row in index order; CpuOps's logsumexp and soft-label chunks take
// eight vocabulary entries at a time (exp8_neg, eight lane sums added in one fixed tree at the row's end),
// so a row's result does not depend on the rows beside it or on the ISA path.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../../core/common.h"
#include "../../core/threadpool.h"
#include "../ops.h"
#include "cpu_ops.h"
#include "ops_f64.h"
#include "simd.h"  // exp8_neg, hsum8, hmax8, tail_mask8

namespace beagle {
namespace {

template <class R>
void lse_update_t(ThreadPool& pool, R* m, R* s, const R* z, int n, int C) {
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            const R* zr = z + r * C;
            R mx = m[r];
            for (int c = 0; c < C; c++) mx = std::max(mx, zr[c]);
            R sum = m[r] == -INFINITY ? R(0) : s[r] * std::exp(m[r] - mx);
            for (int c = 0; c < C; c++) sum += std::exp(zr[c] - mx);
            m[r] = mx;
            s[r] = sum;
        }
    });
}

// f32: the row's exp sum over its chunk in eight lanes
void lse_update_t(ThreadPool& pool, float* m, float* s, const float* z, int n, int C) {
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            const float* zr = z + r * C;
            float mx = m[r];
            for (int c = 0; c < C; c++) mx = std::max(mx, zr[c]);
            const __m256 vmx = _mm256_set1_ps(mx);
            __m256 acc = _mm256_setzero_ps();
            for (int c = 0; c < C; c += 8) {
                const __m256i lanes = tail_mask8(C - c);
                const __m256 ez = exp8_neg(_mm256_sub_ps(_mm256_maskload_ps(zr + c, lanes), vmx));
                acc = _mm256_add_ps(acc, _mm256_and_ps(ez, _mm256_castsi256_ps(lanes)));
            }
            float sum = m[r] == -INFINITY ? 0.0f : s[r] * std::exp(m[r] - mx);
            m[r] = mx;
            s[r] = sum + hsum8(acc);
        }
    });
}

template <class R>
void ce_soft_chunk_t(ThreadPool& pool, R* dz, R* loss, const R* zt, const R* zd, const R* m_t, const R* s_t,
                     const R* m_d, const R* s_d, int n, int C, R scale) {
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            R lt = m_t[r] + std::log(s_t[r]), ld = m_d[r] + std::log(s_d[r]), acc = 0;
            for (int c = 0; c < C; c++) {
                int64_t k = r * C + c;
                R p = std::exp(zt[k] - lt), logq = zd[k] - ld;
                acc += p * logq;
                dz[k] = scale * (std::exp(logq) - p);
            }
            loss[r] += -scale * acc;
        }
    });
}

// f32: eight entries at a time; the masked tail lanes add nothing and store nothing
void ce_soft_chunk_t(ThreadPool& pool, float* dz, float* loss, const float* zt, const float* zd, const float* m_t,
                     const float* s_t, const float* m_d, const float* s_d, int n, int C, float scale) {
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        const __m256 vscale = _mm256_set1_ps(scale);
        for (int64_t r = b; r < e; r++) {
            const __m256 lt = _mm256_set1_ps(m_t[r] + std::log(s_t[r])), ld = _mm256_set1_ps(m_d[r] + std::log(s_d[r]));
            __m256 acc = _mm256_setzero_ps();
            for (int c = 0; c < C; c += 8) {
                const int64_t k = r * C + c;
                const __m256i lanes = tail_mask8(C - c);
                const __m256 p = _mm256_and_ps(exp8_neg(_mm256_sub_ps(_mm256_maskload_ps(zt + k, lanes), lt)),
                                               _mm256_castsi256_ps(lanes));
                const __m256 logq = _mm256_sub_ps(_mm256_maskload_ps(zd + k, lanes), ld);
                acc = _mm256_fmadd_ps(p, logq, acc);
                _mm256_maskstore_ps(dz + k, lanes, _mm256_mul_ps(vscale, _mm256_sub_ps(exp8_neg(logq), p)));
            }
            loss[r] += -scale * hsum8(acc);
        }
    });
}

template <class R>
void ce_hard_chunk_t(ThreadPool& pool, R* dz, R* loss, const R* zd, const R* m_d, const R* s_d, const int* labels,
                     int v0, int n, int C, R scale) {
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            R ld = m_d[r] + std::log(s_d[r]);
            for (int c = 0; c < C; c++) {
                int64_t k = r * C + c;
                dz[k] = scale * (std::exp(zd[k] - ld) - (v0 + c == labels[r] ? R(1) : R(0)));
            }
            int c = labels[r] - v0;
            if (c >= 0 && c < C) loss[r] += scale * (ld - zd[r * C + c]);
        }
    });
}

// PyTorch SmoothL1Loss(beta): l(d) = 0.5 d^2 / beta if |d| < beta else |d| - 0.5 beta.
template <class R>
void smoothl1_t(ThreadPool& pool, R* dx, R* loss, const R* x, const R* target, int n, int dim, R beta, R scale) {
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; r++) {
            R acc = 0, k = scale / (R)dim;
            for (int i = 0; i < dim; i++) {
                int64_t idx = r * dim + i;
                R d = x[idx] - target[idx], ad = std::fabs(d);
                if (ad < beta) {
                    acc += R(0.5) * d * d / beta;
                    dx[idx] += k * d / beta;
                } else {
                    acc += ad - R(0.5) * beta;
                    dx[idx] += k * (d > 0 ? R(1) : R(-1));
                }
            }
            loss[r] += scale * acc / (R)dim;
        }
    });
}

}  // namespace

void CpuOps::lse_update(float* m, float* s, const float* z, int n, int C) { lse_update_t(pool_, m, s, z, n, C); }
void CpuOps::ce_soft_chunk(float* dz, float* loss, const float* zt, const float* zd, const float* m_t, const float* s_t,
                           const float* m_d, const float* s_d, int n, int C, float scale) {
    ce_soft_chunk_t(pool_, dz, loss, zt, zd, m_t, s_t, m_d, s_d, n, C, scale);
}
void CpuOps::ce_hard_chunk(float* dz, float* loss, const float* zd, const float* m_d, const float* s_d,
                           const int* labels, int v0, int n, int C, float scale) {
    ce_hard_chunk_t(pool_, dz, loss, zd, m_d, s_d, labels, v0, n, C, scale);
}
void CpuOps::smoothl1(float* dx, float* loss, const float* x, const float* target, int n, int dim, float beta,
                      float scale) {
    smoothl1_t(pool_, dx, loss, x, target, n, dim, beta, scale);
}

void CpuOps64::lse_update(double* m, double* s, const double* z, int n, int C) { lse_update_t(pool_, m, s, z, n, C); }
void CpuOps64::ce_soft_chunk(double* dz, double* loss, const double* zt, const double* zd, const double* m_t,
                             const double* s_t, const double* m_d, const double* s_d, int n, int C, float scale) {
    ce_soft_chunk_t(pool_, dz, loss, zt, zd, m_t, s_t, m_d, s_d, n, C, (double)scale);
}
void CpuOps64::ce_hard_chunk(double* dz, double* loss, const double* zd, const double* m_d, const double* s_d,
                             const int* labels, int v0, int n, int C, float scale) {
    ce_hard_chunk_t(pool_, dz, loss, zd, m_d, s_d, labels, v0, n, C, (double)scale);
}
void CpuOps64::smoothl1(double* dx, double* loss, const double* x, const double* target, int n, int dim, float beta,
                        float scale) {
    smoothl1_t(pool_, dx, loss, x, target, n, dim, (double)beta, (double)scale);
}

}  // namespace beagle
