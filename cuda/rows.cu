// rows.cu: moving whole rows: gather (dst[i] = src[idx[i]]), its backward the ordered scatter-add
// (dst[idx[i]] += src[i], also the embedding's backward), and the in-place row move of KV-cache
// compaction after a verify step. Launched (launch_* at the end) by the CUDA backend (src/backend/gpu/: gather_rows,
// scatter_rows, move_rows); tested by test/kernels/cuda_emu_kernels_rows.cpp.
//
// rows_gather_kernel: grid (n rows, column tiles); independent copies.
// rows_scatter_kernel: one thread per column walks i = 0..n-1 IN ORDER, so duplicate indices sum in
//   index order (accumulate) or the last one wins (copy), deterministically and without atomics.
// move_rows_kernel: one thread per column walks i in order: buf[dst[i]] = buf[src[i]]. Columns are
//   independent, so per-column order is the op's required order (src[i] >= dst[i]; a row may be a
//   later row's source after it was moved - exactly as the sequential CPU loop).
// Run-tested under the emulator (duplicates, overlapping moves, odd widths) against a sequential
// reference; exact. No PTX paths.
#include "kernels.cuh"

__global__ void rows_gather_kernel(float* dst, const float* src, const int* idx, int n, int width) {
    const int i = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= n || c >= width) return;
    dst[(long long)i * width + c] = src[(long long)idx[i] * width + c];
}

__global__ void rows_scatter_kernel(float* dst, const float* src, const int* idx, int n, int width, int accumulate) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= width) return;
    for (int i = 0; i < n; i++) {
        float* d = dst + (long long)idx[i] * width + c;
        const float v = src[(long long)i * width + c];
        *d = accumulate ? *d + v : v;
    }
}

__global__ void move_rows_kernel(float* buf, const int* src, const int* dst, int n, int width) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= width) return;
    for (int i = 0; i < n; i++)
        if (src[i] != dst[i]) buf[(long long)dst[i] * width + c] = buf[(long long)src[i] * width + c];
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
void launch_gather_rows(float* dst, const float* src, const int* idx, int n, int width, KernelRunner& kr) {
    if (n > 0 && width > 0) KRUN(kr, dim3(n, cdiv(width, 256)), 256, 0, rows_gather_kernel, dst, src, idx, n, width);
}

void launch_scatter_rows(float* dst, const float* src, const int* idx, int n, int width, bool accumulate,
                         KernelRunner& kr) {
    if (n > 0 && width > 0)
        KRUN(kr, cdiv(width, 256), 256, 0, rows_scatter_kernel, dst, src, idx, n, width, accumulate ? 1 : 0);
}

void launch_move_rows(float* buf, const int* src, const int* dst, int n, int width, KernelRunner& kr) {
    if (n > 0 && width > 0) KRUN(kr, cdiv(width, 256), 256, 0, move_rows_kernel, buf, src, dst, n, width);
}
