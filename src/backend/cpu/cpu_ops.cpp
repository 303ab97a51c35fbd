// cpu_ops.cpp: the CPU backend's class glue (cpu_ops.h, ops_f64.h): memory, weights as views,
// the residual add, and make_cpu_ops(). Every op has its own file: matmul.cpp / matmul_f32.cpp,
// norm.cpp, rope.cpp, rows.cpp, attention.cpp, xattn.cpp, swiglu.cpp, loss.cpp, adamw.cpp.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "../../core/common.h"
#include "../ops.h"
#include "cpu_ops.h"
#include "ops_f64.h"

namespace beagle {

CpuOps::CpuOps(int n_threads) : pool_(n_threads), scratch_(pool_.size()) {
    const char* e = getenv("BEAGLE_ATTN");
    if (e && strcmp(e, "per-query") == 0) attention_per_query_ = true;
    else if (e && *e && strcmp(e, "per-kv-head") != 0)
        fail("BEAGLE_ATTN: expected per-kv-head or per-query, found '%s'", e);
}

float* CpuOps::alloc(size_t n) {
    void* p;
    size_t bytes = (n ? n : 1) * sizeof(float);
    bytes = (bytes + 63) / 64 * 64;
    p = alloc_large(bytes);  // KV caches and other large buffers: 2 MiB pages where the kernel gives them
    memset(p, 0, bytes);
    return (float*)p;
}
void CpuOps::release(float* p) { free(p); }
void CpuOps::upload(float* dst, const float* src, size_t n) {
    if (n) memcpy(dst, src, n * sizeof(float));
}
void CpuOps::download(float* dst, const float* src, size_t n) {
    if (n) memcpy(dst, src, n * sizeof(float));
}
void CpuOps::copy(float* dst, const float* src, size_t n) {
    if (n) memmove(dst, src, n * sizeof(float));
}

Weight CpuOps::weight(const Tensor& t) {
    Weight w;
    w.host = &t;
    w.data = t.data;
    w.dtype = t.dtype;
    w.rows = t.rows();
    w.cols = t.cols();
    return w;
}
void CpuOps::zero(float* p, size_t n) {
    if (n) memset(p, 0, n * sizeof(float));  // a tensor of 0 elements (an EAGLE-only one in a Beagle draft) may be null
}

// 8 at a time (GCC -O2 leaves the plain loop scalar: y and x may overlap), then a scalar tail; the same
// float adds either way. With a period, that per row of y against the one row x.
void CpuOps::add(float* y, const float* x, size_t n, size_t period) {
    const size_t w = period ? period : n;
    BEAGLE_CHECK(n % (w ? w : 1) == 0, "add: %zu floats are not rows of period %zu", n, period);
    for (size_t r = 0; r < n; r += w) {
        float* yr = y + r;
        const float* xr = period ? x : x + r;
        size_t i = 0;
        for (; i + 8 <= w; i += 8) _mm256_storeu_ps(yr + i, _mm256_add_ps(_mm256_loadu_ps(yr + i), _mm256_loadu_ps(xr + i)));
        for (; i < w; i++) yr[i] += xr[i];
    }
}

std::unique_ptr<Ops> make_cpu_ops(int n_threads) { return std::unique_ptr<Ops>(new CpuOps(n_threads)); }

double* CpuOps64::alloc(size_t n) {
    double* p = (double*)calloc(n ? n : 1, sizeof(double));
    if (!p) fail("out of memory allocating %zu doubles", n);
    return p;
}
void CpuOps64::release(double* p) { free(p); }
void CpuOps64::upload(double* dst, const double* src, size_t n) { memcpy(dst, src, n * sizeof(double)); }
void CpuOps64::download(double* dst, const double* src, size_t n) { memcpy(dst, src, n * sizeof(double)); }
void CpuOps64::copy(double* dst, const double* src, size_t n) { memmove(dst, src, n * sizeof(double)); }
void CpuOps64::add(double* y, const double* x, size_t n, size_t period) {
    for (size_t i = 0; i < n; i++) y[i] += x[period ? i % period : i];
}
void CpuOps64::zero(double* p, size_t n) { memset(p, 0, n * sizeof(double)); }

}  // namespace beagle
