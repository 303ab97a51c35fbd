// sample_reduce.cu: centre the rows of a matrix, one block per row: row_sum[r] = sum_i x[r][i] and
// y[r][i] = x[r][i] - row_sum[r] / n, through a shared-memory tree reduction that works for any
// block size (32, 100, 256, 1024, ...). It is the emulator's planted-bug sample: the test
// test/kernels/cuda_emu_debug.cpp removes the barrier that publishes the row total (kPublishBarrier=false)
// or the bound check of the tree (kBoundCheck=false) and shows that the emulator's debug schedules
// (reverse/random thread order) and NaN-poisoned shared memory catch each bug.
#include "compat.cuh"

__host__ __device__ inline int pow2_ceil(int v) {
    int p = 1;
    while (p < v) p *= 2;
    return p;
}

// blockDim.x threads per row; dynamic shared memory: pow2_ceil(blockDim.x) floats.
template <bool kPublishBarrier = true, bool kBoundCheck = true>
__global__ void center_rows_kernel(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ row_sum,
                                   int n) {
    DYN_SMEM(float, partial);
    __shared__ float total;
    const int tid = threadIdx.x;
    const float* xr = x + (size_t)blockIdx.x * n;
    float s = 0.0f;
    for (int i = tid; i < n; i += blockDim.x) s += xr[i];
    partial[tid] = s;
    // Tree: at each level the lower half adds the upper half; the barrier orders the levels.
    for (int stride = pow2_ceil(blockDim.x) / 2; stride > 0; stride /= 2) {
        __syncthreads();
        if (tid < stride && (!kBoundCheck || tid + stride < (int)blockDim.x)) partial[tid] += partial[tid + stride];
    }
    if (tid == 0) total = partial[0];
    if (kPublishBarrier) __syncthreads();  // every thread reads `total` next
    const float mean = total / n;
    float* yr = y + (size_t)blockIdx.x * n;
    for (int i = tid; i < n; i += blockDim.x) yr[i] = xr[i] - mean;
    if (tid == 0) row_sum[blockIdx.x] = total;
}

// Host launcher: rows blocks of `block` threads.
template <bool kPublishBarrier = true, bool kBoundCheck = true>
void center_rows(const float* x, float* y, float* row_sum, int rows, int n, int block, cudaStream_t stream) {
    const size_t smem = (size_t)pow2_ceil(block) * sizeof(float);
    KLAUNCH(rows, block, smem, stream, center_rows_kernel<kPublishBarrier, kBoundCheck>)(x, y, row_sum, n);
}

template void center_rows<true, true>(const float*, float*, float*, int, int, int, cudaStream_t);
