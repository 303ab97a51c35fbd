// topk.cu: the k largest entries of each row of logits, for drafting (expand the top-k children of a
// tree node; k = 1 is the greedy argmax), so only k (index, value) pairs per row leave the GPU.
// Launched (launch_* at the end) by the CUDA backend (src/backend/gpu/ops_cuda.cu: CudaOps::topk); tested by
// test/kernels/cuda_emu_kernels_loss.cpp.
//
// topk_kernel: one block per row, k rounds. The order is total - larger value first, equal values by
//   lower index - so round r needs no list of earlier picks: each thread scans its strided columns for
//   the best entry strictly below the previous pick (8 loads in flight before its compares), and a
//   block argmax (warp butterflies on (value, index) pairs, then warp 0) picks the next. O(k * n /
//   threads) work, no sorting, no atomics; NaN entries are never picked. Rows of 8192 columns or more
//   get 1024 threads, shorter ones 256. k = 1 (argmax) of a row without a number writes id 0, the
//   CPU's argmax(), so an id left on the device for the next draft step's embedding is always a row
//   (k > 1 pads with -1). Run-tested under the emulator (ties, k = 1..20, rows shorter
//   than k, block sizes 32/256/1024) against a sort-based reference. No PTX paths.
// row_lse_kernel: lse[r] = log sum_c exp(x[r, c]) for the drafter's scores (log-softmax of its top-k
//   children), so the row itself never leaves the GPU. One block per row: a block max (NaN ignored, as
//   fmaxf), then each thread sums exp(x - max) over its strided columns and a block sum adds them;
//   a row without a number (max = -inf) gets -inf. Two passes over the row, reads coalesced. Tested
//   against a double reference in test/kernels/cuda_emu_kernels_loss.cpp.
#include "kernels.cuh"

__global__ void row_lse_kernel(const float* x, int n_cols, float* lse) {
    __shared__ float red[33];
    const float* xr = x + (long long)blockIdx.x * n_cols;
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < n_cols; c += blockDim.x) mx = fmaxf(mx, xr[c]);
    mx = block_max(mx, red);
    float s = 0.0f;
    if (mx != -INFINITY)
        for (int c = threadIdx.x; c < n_cols; c += blockDim.x) s += expf(xr[c] - mx);
    s = block_sum(s, red);
    if (threadIdx.x == 0) lse[blockIdx.x] = mx == -INFINITY ? -INFINITY : mx + logf(s);
}

// (v, i) precedes (w, j) in the pick order
__device__ __forceinline__ bool topk_before(float v, int i, float w, int j) { return v > w || (v == w && i < j); }

constexpr int TOPK_UNROLL = 8;

__global__ void topk_kernel(const float* x, int n_cols, int k, int* idx, float* val) {
    __shared__ float rv[33];
    __shared__ int ri[33];
    const long long row = blockIdx.x;
    const float* xr = x + row * n_cols;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    float pv = INFINITY;  // previous pick (starts above everything)
    int pi = -1;
    for (int r = 0; r < k; r++) {
        float bv = -INFINITY;
        int bi = -1;
        // TOPK_UNROLL loads in flight per thread before any compare: the scan is a chain of dependent
        // branches, and one load per iteration leaves it latency-bound (a vocabulary-wide argmax then reads
        // at a tiny fraction of DRAM bandwidth). The pick does not depend on the visiting order.
        for (int c0 = threadIdx.x; c0 < n_cols; c0 += TOPK_UNROLL * blockDim.x) {
            float v[TOPK_UNROLL];
            UNROLL for (int u = 0; u < TOPK_UNROLL; u++) {
                const int c = c0 + u * blockDim.x;
                v[u] = c < n_cols ? xr[c] : NAN;
            }
            UNROLL for (int u = 0; u < TOPK_UNROLL; u++) {
                const int c = c0 + u * blockDim.x;
                if (v[u] != v[u]) continue;  // NaN, or past the row
                if (r > 0 && !topk_before(pv, pi, v[u], c)) continue;  // not strictly below the previous pick
                if (bi < 0 || topk_before(v[u], c, bv, bi)) {
                    bv = v[u];
                    bi = c;
                }
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi >= 0 && (bi < 0 || topk_before(ov, oi, bv, bi))) {
                bv = ov;
                bi = oi;
            }
        }
        __syncthreads();  // rv/ri of the previous round have been read
        if (lane == 0) {
            rv[warp] = bv;
            ri[warp] = bi;
        }
        __syncthreads();
        if (warp == 0) {
            float wv = lane < nw ? rv[lane] : -INFINITY;
            int wi = lane < nw ? ri[lane] : -1;
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, wv, o);
                const int oi = __shfl_xor_sync(0xffffffffu, wi, o);
                if (oi >= 0 && (wi < 0 || topk_before(ov, oi, wv, wi))) {
                    wv = ov;
                    wi = oi;
                }
            }
            if (lane == 0) {
                rv[32] = wv;
                ri[32] = wi;
            }
        }
        __syncthreads();
        pv = rv[32];
        pi = ri[32];
        if (threadIdx.x == 0) {
            idx[row * k + r] = pi;
            val[row * k + r] = pi >= 0 ? pv : -INFINITY;
        }
        if (pi < 0) {  // fewer than k candidates: pad the rest (argmax of a row without a number: 0)
            if (k == 1 && threadIdx.x == 0) idx[row] = 0;
            for (int q = r + 1 + threadIdx.x; q < k; q += blockDim.x) {
                idx[row * k + q] = -1;
                val[row * k + q] = -INFINITY;
            }
            break;
        }
    }
}

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
void launch_topk(const float* x, int rows, int n_cols, int k, int* idx, float* val, KernelRunner& kr) {
    // a vocabulary-wide row (the target's argmax, a draft's logits) gets 1024 threads: 48 columns each
    // for SmolLM2's 49,152, 6 rounds of 8 loads in flight
    if (rows > 0 && k > 0) KRUN(kr, rows, n_cols >= 8192 ? 1024 : 256, 0, topk_kernel, x, n_cols, k, idx, val);
}

void launch_row_lse(const float* x, int rows, int n_cols, float* lse, KernelRunner& kr) {
    if (rows > 0) KRUN(kr, rows, 256, 0, row_lse_kernel, x, n_cols, lse);
}
