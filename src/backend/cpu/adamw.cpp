// adamw.cpp: the optimizer step (ops.h): sumsq (the global gradient norm, in double over fixed
// blocks) and the AdamW update, for CpuOps and CpuOps64.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "../../core/common.h"
#include "../../core/threadpool.h"
#include "../ops.h"
#include "cpu_ops.h"
#include "ops_f64.h"

namespace beagle {
namespace {

template <class R>
double sumsq_t(ThreadPool& pool, const R* x, size_t n) {
    const size_t BLK = 1 << 14;
    size_t nb = (n + BLK - 1) / BLK;
    std::vector<double> part(nb);
    pool.parallel_for((int64_t)nb, [&](int64_t b, int64_t e, int) {
        for (int64_t k = b; k < e; k++) {
            double s = 0;
            for (size_t i = k * BLK; i < std::min(n, (k + 1) * BLK); i++) s += (double)x[i] * (double)x[i];
            part[k] = s;
        }
    });
    double s = 0;
    for (double p : part) s += p;
    return s;
}

template <class R>
void adamw_t(ThreadPool& pool, R* w, R* m, R* v, const R* g, size_t n, const AdamWParams& p) {
    R b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps, gs = p.grad_scale;
    R bc1 = R(1) - (R)std::pow((double)p.beta1, p.step), bc2 = R(1) - (R)std::pow((double)p.beta2, p.step);
    R decay = R(1) - lr * (R)p.weight_decay;
    pool.parallel_for((int64_t)((n + 4095) / 4096), [&](int64_t b, int64_t e, int) {
        for (size_t i = (size_t)b * 4096; i < std::min(n, (size_t)e * 4096); i++) {
            R gi = g[i] * gs;
            m[i] = b1 * m[i] + (R(1) - b1) * gi;
            v[i] = b2 * v[i] + (R(1) - b2) * gi * gi;
            w[i] *= decay;
            w[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
        }
    });
}

}  // namespace

double CpuOps::sumsq(const float* x, size_t n) { return sumsq_t(pool_, x, n); }
void CpuOps::adamw(float* w, float* m, float* v, const float* g, size_t n, const AdamWParams& p) {
    adamw_t(pool_, w, m, v, g, n, p);
}

double CpuOps64::sumsq(const double* x, size_t n) { return sumsq_t(pool_, x, n); }
void CpuOps64::adamw(double* w, double* m, double* v, const double* g, size_t n, const AdamWParams& p) {
    adamw_t(pool_, w, m, v, g, n, p);
}

}  // namespace beagle
