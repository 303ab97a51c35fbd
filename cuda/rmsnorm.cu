// rmsnorm.cu: RMSNorm forward and backward. Launched (launch_* at the end) by the CUDA backend (src/backend/gpu/:
// rmsnorm, add_rmsnorm, rmsnorm_f32, rmsnorm_f32_bwd); tested by test/kernels/cuda_emu_kernels_rows.cpp.
//
// rmsnorm_fwd_kernel: one block per row. Each thread sums x_i^2 over i = tid, tid + blockDim, ...;
//   common.cuh block_sum (warp butterflies, then warp 0) gives the row total; rstd = 1 / sqrt(ss / dim
//   + eps) (IEEE sqrt and division, as the CPU backend) and y_i = w_i * (rstd * x_i). rstd is saved for
//   the backward when the pointer is not null. The backend picks the block size from dim alone (32,
//   128 or 256 threads), so a row's reduction order never depends on the number of rows (batch
//   invariance).
// add_rmsnorm_kernel: the residual add and the next norm (x += dx; y = rmsnorm(x) w), one block per
//   row: each thread adds its own columns i = tid, tid + blockDim, ... (x_i + dx_i, as add_kernel),
//   stores them and sums their squares in rmsnorm_fwd_kernel's order, then the same block_sum, rstd and
//   y. Same block size rule, so the same bits as the two kernels; one launch and one read of x instead
//   of two launches (add: read x, dx, write x; rmsnorm: read x again). Used twice per target layer.
// rmsnorm_bwd_dx_kernel: one block per row: g.x = sum_i dy_i w_i x_i (block_sum), then
//   dx_i += rstd (dy_i w_i) - rstd^3 (g.x) / dim * x_i (accumulates, the op's convention).
// rmsnorm_bwd_dw_kernel: one thread per column i walks the rows t = 0..T-1 in order:
//   dw_i += dy[t, i] x[t, i] rstd[t] (one fma chain from dw_i: deterministic, no atomics).
// All four run-tested under the emulator with block sizes 32/256/1024 on ragged rows against a
// double reference (forward/backward formulas derived independently in the test). No PTX paths.
#include "kernels.cuh"

// A row of up to RMS_PER_THREAD x blockDim values (dim <= 4096: SmolLM2 576 with 128 threads, a 7B 4096
// with 256; rmsnorm_block) is read ONCE into registers with all of a thread's loads in flight, the weights too,
// before the reduction; longer rows take the plain strided loops. Same operations in the same order
// either way (the sum of squares over i = tid, tid + blockDim, ... in increasing i). The strided loops
// alone are latency-bound: a store to x may alias the next load, so each of a thread's columns costs a
// memory round trip, twice, and a decode step launches this kernel about twice per layer.
constexpr int RMS_PER_THREAD = 16;

__global__ void rmsnorm_fwd_kernel(float* y, float* rstd, const float* x, const float* w, int dim, float eps) {
    __shared__ float red[33];
    const long long row = blockIdx.x;
    const int tid = threadIdx.x, bd = blockDim.x;
    const float* xr = x + row * dim;
    float* yr = y + row * dim;
    float r;
    if (dim <= RMS_PER_THREAD * bd) {
        float v[RMS_PER_THREAD], wv[RMS_PER_THREAD];
        UNROLL for (int j = 0; j < RMS_PER_THREAD; j++) {
            const int i = tid + j * bd;
            v[j] = i < dim ? xr[i] : 0.0f;
            wv[j] = i < dim ? w[i] : 0.0f;
        }
        float ss = 0.0f;
        UNROLL for (int j = 0; j < RMS_PER_THREAD; j++)
            if (tid + j * bd < dim) ss = fmaf(v[j], v[j], ss);
        ss = block_sum(ss, red);
        r = 1.0f / sqrtf(ss / (float)dim + eps);
        UNROLL for (int j = 0; j < RMS_PER_THREAD; j++)
            if (tid + j * bd < dim) yr[tid + j * bd] = wv[j] * (r * v[j]);
    } else {
        float ss = 0.0f;
        for (int i = tid; i < dim; i += bd) ss = fmaf(xr[i], xr[i], ss);
        ss = block_sum(ss, red);
        r = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int i = tid; i < dim; i += bd) yr[i] = w[i] * (r * xr[i]);
    }
    if (rstd && tid == 0) rstd[row] = r;
}

__global__ void add_rmsnorm_kernel(float* y, float* x, const float* dx, const float* w, int dim, float eps) {
    __shared__ float red[33];
    const long long row = blockIdx.x;
    const int tid = threadIdx.x, bd = blockDim.x;
    float* xr = x + row * dim;
    const float* dxr = dx + row * dim;
    float* yr = y + row * dim;
    if (dim <= RMS_PER_THREAD * bd) {
        float v[RMS_PER_THREAD], wv[RMS_PER_THREAD];
        UNROLL for (int j = 0; j < RMS_PER_THREAD; j++) {
            const int i = tid + j * bd;
            v[j] = i < dim ? xr[i] + dxr[i] : 0.0f;
            wv[j] = i < dim ? w[i] : 0.0f;
        }
        float ss = 0.0f;
        UNROLL for (int j = 0; j < RMS_PER_THREAD; j++) {
            const int i = tid + j * bd;
            if (i < dim) {
                xr[i] = v[j];
                ss = fmaf(v[j], v[j], ss);
            }
        }
        ss = block_sum(ss, red);
        const float r = 1.0f / sqrtf(ss / (float)dim + eps);
        UNROLL for (int j = 0; j < RMS_PER_THREAD; j++)
            if (tid + j * bd < dim) yr[tid + j * bd] = wv[j] * (r * v[j]);
        return;
    }
    float ss = 0.0f;
    for (int i = tid; i < dim; i += bd) {
        const float v = xr[i] + dxr[i];
        xr[i] = v;
        ss = fmaf(v, v, ss);
    }
    ss = block_sum(ss, red);
    const float r = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = tid; i < dim; i += bd) yr[i] = w[i] * (r * xr[i]);
}

__global__ void rmsnorm_bwd_dx_kernel(float* dx, const float* dy, const float* x, const float* w, const float* rstd,
                                      int dim) {
    __shared__ float red[33];
    const long long row = blockIdx.x;
    const float *xr = x + row * dim, *dyr = dy + row * dim;
    float gx = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) gx = fmaf(dyr[i] * w[i], xr[i], gx);
    gx = block_sum(gx, red);
    const float r = rstd[row];
    const float c = r * r * r * gx / (float)dim;
    float* dxr = dx + row * dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) dxr[i] += r * (dyr[i] * w[i]) - c * xr[i];
}

__global__ void rmsnorm_bwd_dw_kernel(float* dw, const float* dy, const float* x, const float* rstd, int T, int dim) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= dim) return;
    float acc = dw[i];
    for (int t = 0; t < T; t++) acc = fmaf(dy[(long long)t * dim + i] * x[(long long)t * dim + i], rstd[t], acc);
    dw[i] = acc;
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
// Threads per row: a function of the row length only (never of the number of rows), so a row's
// reduction order is the same in every batch.
static int rmsnorm_block(int dim) { return dim <= 256 ? 32 : dim <= 1024 ? 128 : 256; }

void launch_rmsnorm(float* y, float* rstd, const float* x, const float* w, int T, int dim, float eps, KernelRunner& kr) {
    if (T > 0) KRUN(kr, T, rmsnorm_block(dim), 0, rmsnorm_fwd_kernel, y, rstd, x, w, dim, eps);
}

void launch_add_rmsnorm(float* y, float* x, const float* dx, const float* w, int T, int dim, float eps, KernelRunner& kr) {
    if (T > 0) KRUN(kr, T, rmsnorm_block(dim), 0, add_rmsnorm_kernel, y, x, dx, w, dim, eps);
}

void launch_rmsnorm_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd, int T,
                        int dim, KernelRunner& kr) {
    if (T <= 0) return;
    if (dx) KRUN(kr, T, rmsnorm_block(dim), 0, rmsnorm_bwd_dx_kernel, dx, dy, x, w, rstd, dim);
    if (dw) KRUN(kr, cdiv(dim, 256), 256, 0, rmsnorm_bwd_dw_kernel, dw, dy, x, rstd, T, dim);
}
