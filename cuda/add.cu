// add.cu: the residual connection y += x (element-wise, grid-stride), and the same add of one row x of
// `period` floats to every row of y (a bias: Qwen2's q, k, v projections). Its backward is the identity
// (the gradient flows to both branches unchanged), so there is no backward kernel. Launched (launch_* at the end) by the
// CUDA backend (src/backend/gpu/: add); tested by test/kernels/cuda_emu_kernels_rows.cpp (exact: one add).
// No PTX paths.
#include "kernels.cuh"

__global__ void add_kernel(float* y, const float* x, long long n, long long period) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] += x[period ? i % period : i];
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
void launch_add(float* y, const float* x, long long n, long long period, KernelRunner& kr) {
    if (n > 0) KRUN(kr, elementwise_grid(n), 256, 0, add_kernel, y, x, n, period);
}
