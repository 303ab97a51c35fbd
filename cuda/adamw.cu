// adamw.cu: the optimizer step of draft training: the global gradient norm for clipping (sum of
// squares in double) and the AdamW update (PyTorch semantics, ops.h AdamWParams). Launched (launch_* at the end) by the
// CUDA backend (src/backend/gpu/: sumsq, adamw), called by src/train/adamw.cpp; tested by
// test/kernels/cuda_emu_kernels_loss.cpp.
//
// sumsq_kernel: block b sums x_i^2 in double over its fixed chunk [b * 16384, (b + 1) * 16384) (thread
//   strides, then block_sum_d); the host adds the per-chunk partials in chunk order. The chunking
//   depends only on n: one order, like the CPU backend's fixed blocks.
// adamw_kernel: element-wise, grid-stride: g' = g * grad_scale; m = b1 m + (1 - b1) g';
//   v = b2 v + (1 - b2) g'^2; w *= 1 - lr wd; w -= lr (m / bc1) / (sqrt(v / bc2) + eps), the CPU formula
//   term by term. Run-tested under the emulator (odd n, several steps, clipping scale) against a double
//   reference. No PTX paths.
#include "kernels.cuh"

__global__ void sumsq_kernel(const float* x, long long n, double* partial) {
    __shared__ double red[33];
    const long long b0 = (long long)blockIdx.x * SUMSQ_CHUNK;
    const long long b1 = min(n, b0 + SUMSQ_CHUNK);
    double s = 0.0;
    for (long long i = b0 + threadIdx.x; i < b1; i += blockDim.x) s += (double)x[i] * (double)x[i];
    s = block_sum_d(s, red);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void adamw_kernel(AdamWArgs a) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (long long)gridDim.x * blockDim.x) {
        const float g = a.g[i] * a.grad_scale;
        const float m = a.beta1 * a.m[i] + (1.0f - a.beta1) * g;
        const float v = a.beta2 * a.v[i] + (1.0f - a.beta2) * g * g;
        a.m[i] = m;
        a.v[i] = v;
        float w = a.w[i] * a.decay;
        w -= a.lr * (m / a.bc1) / (sqrtf(v / a.bc2) + a.eps);
        a.w[i] = w;
    }
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
int sumsq_blocks(long long n) { return (int)((n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK); }

void launch_sumsq(const float* x, long long n, double* partial, KernelRunner& kr) {
    if (n > 0) KRUN(kr, sumsq_blocks(n), 256, 0, sumsq_kernel, x, n, partial);
}

void launch_adamw(const AdamWArgs& a, KernelRunner& kr) {
    if (a.n > 0) KRUN(kr, elementwise_grid(a.n), 256, 0, adamw_kernel, a);
}
