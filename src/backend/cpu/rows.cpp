// rows.cpp: whole-row ops (ops.h): embed (rows of a stored table, dequantized), gather_rows,
// scatter_rows (copy or ordered accumulate: the KV-cache append and the gather's backward) and
// move_rows (in-place KV-cache compaction), for CpuOps and CpuOps64.
#include <cstdint>
#include <cstring>

#include "../../core/common.h"
#include "../../core/threadpool.h"
#include "../ops.h"
#include "cpu_ops.h"
#include "ops_f64.h"

namespace beagle {
namespace {

template <class R>
void gather_rows_t(R* dst, const R* src, const int* idx, int n, int width) {
    for (int i = 0; i < n; i++) memcpy(dst + (int64_t)i * width, src + (int64_t)idx[i] * width, width * sizeof(R));
}

template <class R>
void scatter_rows_t(R* dst, const R* src, const int* idx, int n, int width, bool accumulate) {
    for (int i = 0; i < n; i++) {
        R* d = dst + (int64_t)idx[i] * width;
        const R* s = src + (int64_t)i * width;
        if (accumulate)
            for (int k = 0; k < width; k++) d[k] += s[k];
        else
            memcpy(d, s, width * sizeof(R));
    }
}

}  // namespace

// Backend buffers are host memory here: ids on the backend are read as host ids (through map if given).
void CpuOps::embed(float* x, const Weight& E, const int* tokens, int T, bool on_backend, const int* map) {
    BEAGLE_CHECK(on_backend || !map, "embed: a map is for ids on the backend");
    int64_t dim = E.cols;
    uint64_t rb = dtype_row_bytes(E.dtype, (uint64_t)dim);
    for (int t = 0; t < T; t++) {
        const int id = map ? map[tokens[t]] : tokens[t];
        BEAGLE_CHECK(id >= 0 && id < E.rows, "token id %d out of range [0, %lld)", id, (long long)E.rows);
        dequantize_row(E.dtype, (const uint8_t*)E.data + (uint64_t)id * rb, x + (int64_t)t * dim, dim);
    }
}

void CpuOps::gather_rows(float* dst, const float* src, const int* idx, int n, int width) {
    gather_rows_t(dst, src, idx, n, width);
}
void CpuOps::scatter_rows(float* dst, const float* src, const int* idx, int n, int width, bool accumulate) {
    scatter_rows_t(dst, src, idx, n, width, accumulate);
}
void CpuOps::move_rows(float* buf, const int* src, const int* dst, int n, int width) {
    for (int i = 0; i < n; i++)
        if (src[i] != dst[i]) memmove(buf + (int64_t)dst[i] * width, buf + (int64_t)src[i] * width, width * sizeof(float));
}

void CpuOps64::gather_rows(double* dst, const double* src, const int* idx, int n, int width) {
    gather_rows_t(dst, src, idx, n, width);
}
void CpuOps64::scatter_rows(double* dst, const double* src, const int* idx, int n, int width, bool accumulate) {
    scatter_rows_t(dst, src, idx, n, width, accumulate);
}

}  // namespace beagle
