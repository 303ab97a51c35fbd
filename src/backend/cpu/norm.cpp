// norm.cpp: RMSNorm: rmsnorm of a model Weight (inference) and rmsnorm_f32 / rmsnorm_f32_bwd on
// plain buffers (the draft; rstd saved for the backward), for CpuOps and CpuOps64 (ops.h). One row
// per job, one fixed reduction order per row (batch invariant).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../../core/common.h"
#include "../../core/threadpool.h"
#include "../ops.h"
#include "cpu_ops.h"
#include "ops_f64.h"
#include "prim.h"
#include "simd.h"

namespace beagle {
namespace {

template <class R>
void rmsnorm_f32_t(ThreadPool& pool, R* y, R* rstd, const R* x, const R* w, int T, int dim, float eps) {
    pool.parallel_for(T, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; t++) {
            const R* xr = x + t * dim;
            R* yr = y + t * dim;
            R ms = Prim<R>::dot(xr, xr, dim) / (R)dim + (R)eps;
            R r = R(1) / std::sqrt(ms);
            rstd[t] = r;
            for (int i = 0; i < dim; i++) yr[i] = w[i] * (r * xr[i]);
        }
    });
}

// y_i = w_i x_i r, r = (mean x^2 + eps)^-1/2:  dx_i = r g_i - x_i r^3 (g . x) / dim with g = dy * w;
// dw_i = sum_t dy_i x_i r.
template <class R>
void rmsnorm_f32_bwd_t(ThreadPool& pool, R* dx, R* dw, const R* dy, const R* x, const R* w, const R* rstd, int T, int dim) {
    if (dx)
        pool.parallel_for(T, [&](int64_t b, int64_t e, int) {
            for (int64_t t = b; t < e; t++) {
                const R *xr = x + t * dim, *dyr = dy + t * dim;
                R r = rstd[t], gx = 0;
                for (int i = 0; i < dim; i++) gx += dyr[i] * w[i] * xr[i];
                R c = r * r * r * gx / (R)dim;
                R* dxr = dx + t * dim;
                for (int i = 0; i < dim; i++) dxr[i] += r * (dyr[i] * w[i]) - c * xr[i];
            }
        });
    if (dw)
        pool.parallel_for((dim + 63) / 64, [&](int64_t b, int64_t e, int) {
            for (int64_t blk = b; blk < e; blk++) {
                int i0 = (int)blk * 64, i1 = std::min(dim, i0 + 64);
                for (int i = i0; i < i1; i++) {
                    R acc = dw[i];
                    for (int t = 0; t < T; t++) acc += dy[(int64_t)t * dim + i] * x[(int64_t)t * dim + i] * rstd[t];
                    dw[i] = acc;
                }
            }
        });
}

}  // namespace

// One row of rmsnorm of a model Weight g: y = g * (x / rms(x)).
static inline void rmsnorm_row(float* yr, const float* xr, const float* g, int dim, float eps) {
    float ss = sumsq_f32(xr, dim) / dim + eps;
    float inv = 1.0f / sqrtf(ss);
    for (int i = 0; i < dim; i++) yr[i] = g[i] * (inv * xr[i]);
}

void CpuOps::rmsnorm(float* y, const float* x, const Weight& w, int T, int dim, float eps) {
    BEAGLE_CHECK(w.dtype == DType::F32, "rmsnorm weight must be F32, got %s", dtype_name(w.dtype));
    const float* g = (const float*)w.data;
    pool_.parallel_for(T, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; t++) rmsnorm_row(y + t * dim, x + t * dim, g, dim, eps);
    }, 3 * dim);
}

// The residual add and the next norm row by row (the row is in L1 for its norm): the same floats as
// add then rmsnorm, one pass over x fewer. (A verify pass runs it 60 times on SmolLM2, on the caller alone.)
void CpuOps::add_rmsnorm(float* y, float* x, const float* dx, const Weight& w, int T, int dim, float eps) {
    BEAGLE_CHECK(w.dtype == DType::F32, "rmsnorm weight must be F32, got %s", dtype_name(w.dtype));
    const float* g = (const float*)w.data;
    pool_.parallel_for(T, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; t++) {
            add(x + t * dim, dx + t * dim, (size_t)dim);
            rmsnorm_row(y + t * dim, x + t * dim, g, dim, eps);
        }
    }, 4 * dim);
}

void CpuOps::rmsnorm_f32(float* y, float* rstd, const float* x, const float* w, int T, int dim, float eps) {
    rmsnorm_f32_t(pool_, y, rstd, x, w, T, dim, eps);
}
void CpuOps::rmsnorm_f32_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd, int T,
                             int dim) {
    rmsnorm_f32_bwd_t(pool_, dx, dw, dy, x, w, rstd, T, dim);
}

void CpuOps64::rmsnorm_f32(double* y, double* rstd, const double* x, const double* w, int T, int dim, float eps) {
    rmsnorm_f32_t(pool_, y, rstd, x, w, T, dim, eps);
}
void CpuOps64::rmsnorm_f32_bwd(double* dx, double* dw, const double* dy, const double* x, const double* w,
                               const double* rstd, int T, int dim) {
    rmsnorm_f32_bwd_t(pool_, dx, dw, dy, x, w, rstd, T, dim);
}

}  // namespace beagle
