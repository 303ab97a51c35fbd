// gemm.cu: dense matrix products C (+)= A B with strided operands (kernels.cuh GemmArgs), i.e. the
// forward y = x W^T and both backward products dx = dy W, dW += dy^T x of every linear layer.
// Launched (launch_* at the end) by the CUDA backend (src/backend/gpu/ops_cuda.cu: matmul with F32/F16/BF16 weights,
// matmul_f32 / matmul_f32_bwd_x / matmul_f32_bwd_w); tested by test/kernels/cuda_emu_kernels_gemm.cpp.
//
// gemm_f32_kernel: shared-memory tiled fp32 GEMM. A 64 x 64 tile of C per block of 256 threads, each
//   thread 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j: coalesced stores, broadcast reads).
//   k advances in slices of 16: A and B slices are staged in shared memory (zero-filled past the
//   edges), then every thread runs the fma chain of its 16 outputs over the slice.
//   Batch invariance: every C element is ONE fma chain over k = 0, 1, ..., K-1 in order, starting from
//   0 (or from C when accumulating); the M tiling never changes it, there is no split-K. So row m of
//   y = x W^T has the same bits whatever the number of rows T computed with it.
// gemv_f32_kernel: the same products for a few rows (M <= GEMV_MAX_M: decode, draft queries): one
//   thread per output column n walks k = 0..K-1 and keeps the M accumulators in registers (B is read
//   once). Every C element is the same fma chain from 0 as in gemm_f32_kernel, and fmaf rounds
//   exactly, so the two kernels give identical bits (zero padding only adds fma(0, 0, acc) = acc, and
//   a chain starting at +0 never yields -0): the backend may pick either by M and stay batch
//   invariant. No shared memory, no barriers; B columns are read with stride b_n by neighbouring
//   threads, which is fine for the F32 weights of tiny models (real models go to the quantized /
//   tensor-core kernels).
// gemm_wmma_bf16_kernel / gemm_wmma_f16_kernel: tensor cores through nvcuda::wmma 16x16x16 with fp32
//   accumulators. A 64 x 64 tile per block of 4 warps (each warp a 32 x 32 quarter = 2 x 2 fragments),
//   k in slices of 32. A (fp32 activations) is rounded to bf16/fp16 on its way to shared memory; B is
//   read in its stored type (the weights as stored). The accumulators go through shared memory to C
//   (bounds, accumulate). Batch invariant the same way: per element, the k slices run in order.
// Run-tested under the emulator (test/kernels/cuda_emu_kernels_gemm.cpp: ragged M/N/K, all three transposes,
// accumulate, against a double reference; wmma against a reference on bf16/fp16-rounded inputs).
// No PTX-only paths here; nvcc compiles the same code (test/cli/test_cuda_nvcc.sh).
#include "kernels.cuh"

// ---------------------------------------------------------------------------------------------
__global__ void gemm_f32_kernel(GemmArgs g, const float* B) {
    __shared__ float As[GEMM_BK][GEMM_BM + 4];  // As[k][m]
    __shared__ float Bs[GEMM_BK][GEMM_BN + 4];  // Bs[k][n]
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * GEMM_BM, n0 = blockIdx.x * GEMM_BN;
    const bool a_k_fast = g.a_k == 1;  // A rows contiguous in k (x, dy): read along k
    const bool b_n_fast = g.b_n == 1;  // B rows contiguous in n (W in dx = dy W, x in dW): read along n
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < g.K; k0 += GEMM_BK) {
        // stage the A slice (64 x 16) and the B slice (16 x 64): 4 elements per thread each
        for (int r = 0; r < GEMM_BM * GEMM_BK / GEMM_THREADS; r++) {
            const int idx = tid + r * GEMM_THREADS;
            const int mm = a_k_fast ? idx / GEMM_BK : idx % GEMM_BM;
            const int kk = a_k_fast ? idx % GEMM_BK : idx / GEMM_BM;
            const int m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < g.M && k < g.K) ? g.A[m * g.a_m + k * g.a_k] : 0.0f;
        }
        for (int r = 0; r < GEMM_BK * GEMM_BN / GEMM_THREADS; r++) {
            const int idx = tid + r * GEMM_THREADS;
            const int nn = b_n_fast ? idx % GEMM_BN : idx / GEMM_BK;
            const int kk = b_n_fast ? idx / GEMM_BN : idx % GEMM_BK;
            const int n = n0 + nn, k = k0 + kk;
            Bs[kk][nn] = (n < g.N && k < g.K) ? B[k * g.b_k + n * g.b_n] : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < GEMM_BK; kk++) {
            float a[4], b[4];
            for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
            for (int j = 0; j < 4; j++) b[j] = Bs[kk][tx + 16 * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    // Zero-filled slices past K add fma(0, 0, acc) = acc, so the chain equals the unpadded one.
    for (int i = 0; i < 4; i++) {
        const int m = m0 + ty + 16 * i;
        if (m >= g.M) continue;
        for (int j = 0; j < 4; j++) {
            const int n = n0 + tx + 16 * j;
            if (n >= g.N) continue;
            float* c = g.C + m * g.c_m + n;
            *c = g.accumulate ? *c + acc[i][j] : acc[i][j];
        }
    }
}

// ---------------------------------------------------------------------------------------------
__global__ void gemv_f32_kernel(GemmArgs g, const float* B) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= g.N) return;
    float acc[GEMV_MAX_M];
    for (int m = 0; m < GEMV_MAX_M; m++) acc[m] = 0.0f;
    for (int k = 0; k < g.K; k++) {
        const float b = B[k * g.b_k + n * g.b_n];
        for (int m = 0; m < GEMV_MAX_M; m++)
            if (m < g.M) acc[m] = fmaf(g.A[m * g.a_m + k * g.a_k], b, acc[m]);
    }
    for (int m = 0; m < g.M && m < GEMV_MAX_M; m++) {
        float* c = g.C + m * g.c_m + n;
        *c = g.accumulate ? *c + acc[m] : acc[m];
    }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core GEMM, one body for both 16-bit input types.
__device__ __forceinline__ __nv_bfloat16 to_mma_type(float v, __nv_bfloat16*) { return __float2bfloat16(v); }
__device__ __forceinline__ __half to_mma_type(float v, __half*) { return __float2half(v); }

template <class TB>
__device__ void gemm_wmma_body(const GemmArgs& g, const TB* B) {
    using namespace nvcuda;
    constexpr int LDA = WMMA_BK + 8, LDB = WMMA_BN + 8, LDC = WMMA_BN + 4;  // multiples of 8 (16 B) / 4
    __shared__ __align__(32) TB As[WMMA_BM * LDA];  // As[m][k], row-major
    __shared__ __align__(32) TB Bs[WMMA_BK * LDB];  // Bs[k][n], row-major
    __shared__ __align__(32) float Cs[WMMA_BM * LDC];
    const int tid = threadIdx.x, warp = tid / 32;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's 32 x 32 quarter of the tile
    const int m0 = blockIdx.y * WMMA_BM, n0 = blockIdx.x * WMMA_BN;
    const bool a_k_fast = g.a_k == 1, b_n_fast = g.b_n == 1;
    const TB zero = to_mma_type(0.0f, (TB*)nullptr);

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < g.K; k0 += WMMA_BK) {
        for (int idx = tid; idx < WMMA_BM * WMMA_BK; idx += WMMA_THREADS) {
            const int mm = a_k_fast ? idx / WMMA_BK : idx % WMMA_BM;
            const int kk = a_k_fast ? idx % WMMA_BK : idx / WMMA_BM;
            const int m = m0 + mm, k = k0 + kk;
            As[mm * LDA + kk] = (m < g.M && k < g.K) ? to_mma_type(g.A[m * g.a_m + k * g.a_k], (TB*)nullptr) : zero;
        }
        for (int idx = tid; idx < WMMA_BK * WMMA_BN; idx += WMMA_THREADS) {
            const int nn = b_n_fast ? idx % WMMA_BN : idx / WMMA_BK;
            const int kk = b_n_fast ? idx / WMMA_BN : idx % WMMA_BK;
            const int n = n0 + nn, k = k0 + kk;
            Bs[kk * LDB + nn] = (n < g.N && k < g.K) ? B[k * g.b_k + n * g.b_n] : zero;
        }
        __syncthreads();
        for (int kk = 0; kk < WMMA_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, TB, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, TB, wmma::row_major> b[2];
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(a[i], As + (wm + 16 * i) * LDA + kk, LDA);
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(b[j], Bs + kk * LDB + wn + 16 * j, LDB);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(Cs + (wm + 16 * i) * LDC + wn + 16 * j, acc[i][j], LDC, wmma::mem_row_major);
    __syncthreads();
    for (int idx = tid; idx < WMMA_BM * WMMA_BN; idx += WMMA_THREADS) {
        const int mm = idx / WMMA_BN, nn = idx % WMMA_BN;
        const int m = m0 + mm, n = n0 + nn;
        if (m >= g.M || n >= g.N) continue;
        float* c = g.C + m * g.c_m + n;
        *c = g.accumulate ? *c + Cs[mm * LDC + nn] : Cs[mm * LDC + nn];
    }
}

__global__ void gemm_wmma_bf16_kernel(GemmArgs g, const __nv_bfloat16* B) { gemm_wmma_body(g, B); }
__global__ void gemm_wmma_f16_kernel(GemmArgs g, const __half* B) { gemm_wmma_body(g, B); }

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
void launch_gemm_f32(const GemmArgs& g, const float* B, KernelRunner& kr) {
    if (g.M <= 0 || g.N <= 0) return;
    if (g.M <= GEMV_MAX_M) {  // same bits as the tiled kernel: batch invariant either way
        KRUN(kr, cdiv(g.N, 128), 128, 0, gemv_f32_kernel, g, B);
        return;
    }
    dim3 grid(cdiv(g.N, GEMM_BN), cdiv(g.M, GEMM_BM));
    KRUN(kr, grid, GEMM_THREADS, 0, gemm_f32_kernel, g, B);
}

// y (T x n_out) = x (T x n_in) W^T, W: n_out x n_in: A = x, B[k, n] = W[n, k].
static GemmArgs linear_args(float* y, const float* x, int T, int n_in, int n_out) {
    GemmArgs g;
    g.M = T; g.N = n_out; g.K = n_in;
    g.A = x; g.a_m = n_in; g.a_k = 1;
    g.b_k = 1; g.b_n = n_in;
    g.C = y; g.c_m = n_out;
    g.accumulate = 0;
    return g;
}

void launch_matmul_f32(float* y, const float* x, const float* W, int T, int n_in, int n_out, KernelRunner& kr) {
    launch_gemm_f32(linear_args(y, x, T, n_in, n_out), W, kr);
}

void launch_matmul_f32_bwd_x(float* dx, const float* dy, const float* W, int T, int n_in, int n_out, bool accumulate,
                             KernelRunner& kr) {
    GemmArgs g;
    g.M = T; g.N = n_in; g.K = n_out;
    g.A = dy; g.a_m = n_out; g.a_k = 1;  // dy: T x n_out
    g.b_k = n_in; g.b_n = 1;             // B[k, n] = W[k, n]
    g.C = dx; g.c_m = n_in;
    g.accumulate = accumulate ? 1 : 0;
    launch_gemm_f32(g, W, kr);
}

void launch_matmul_f32_bwd_w(float* dW, const float* dy, const float* x, int T, int n_in, int n_out, KernelRunner& kr) {
    GemmArgs g;
    g.M = n_out; g.N = n_in; g.K = T;
    g.A = dy; g.a_m = 1; g.a_k = n_out;  // A[o, t] = dy[t, o]
    g.b_k = n_in; g.b_n = 1;             // B[t, i] = x[t, i]
    g.C = dW; g.c_m = n_in;
    g.accumulate = 1;
    launch_gemm_f32(g, x, kr);
}

void launch_matmul_wmma(float* y, const float* x, const void* W, int dtype, int T, int n_in, int n_out,
                        KernelRunner& kr) {
    kcheck(kr, dtype == KD_BF16 || dtype == KD_F16, "tensor-core matmul: weight dtype %d is neither BF16 nor F16", dtype);
    if (T <= 0) return;
    const GemmArgs g = linear_args(y, x, T, n_in, n_out);
    dim3 grid(cdiv(n_out, WMMA_BN), cdiv(T, WMMA_BM));
    if (dtype == KD_BF16)
        KRUN(kr, grid, WMMA_THREADS, 0, gemm_wmma_bf16_kernel, g, (const __nv_bfloat16*)W);
    else
        KRUN(kr, grid, WMMA_THREADS, 0, gemm_wmma_f16_kernel, g, (const __half*)W);
}
