// smoothl1.cu: the SmoothL1 (PyTorch, beta) feature loss of the draft's predicted states against the
// true states, forward and backward fused: loss[r] += scale * mean_d l(x - target) and
// dx += scale * l'(d) / dim, with l(d) = 0.5 d^2 / beta if |d| < beta else |d| - 0.5 beta.
// Launched (launch_* at the end) by the CUDA backend (src/backend/gpu/: smoothl1); tested by
// test/kernels/cuda_emu_kernels_loss.cpp.
//
// smoothl1_kernel: one block per row, threads over the dims; the row's loss through block_sum (block
// size fixed by the backend: one order). Run-tested under the emulator (both branches, |d| == beta,
// ragged dims, block sizes 32/256/1024) against a double reference. No PTX paths.
#include "kernels.cuh"

__global__ void smoothl1_kernel(float* dx, float* loss, const float* x, const float* target, int dim, float beta,
                                float scale) {
    __shared__ float red[33];
    const long long r = blockIdx.x;
    const float k = scale / (float)dim;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const long long idx = r * dim + i;
        const float d = x[idx] - target[idx], ad = fabsf(d);
        if (ad < beta) {
            acc += 0.5f * d * d / beta;
            dx[idx] += k * d / beta;
        } else {
            acc += ad - 0.5f * beta;
            dx[idx] += k * (d > 0.0f ? 1.0f : -1.0f);
        }
    }
    acc = block_sum(acc, red);
    if (threadIdx.x == 0) loss[r] += scale * acc / (float)dim;
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
void launch_smoothl1(float* dx, float* loss, const float* x, const float* target, int n, int dim, float beta,
                     float scale, KernelRunner& kr) {
    if (n > 0) KRUN(kr, n, 256, 0, smoothl1_kernel, dx, loss, x, target, dim, beta, scale);  // fixed block: one order
}
