// matmul.cu: the fp32 matmul y = x W^T of a linear layer, from one thread per output to the shipped
// kernel (cuda/gemm.cu gemm_f32_kernel). Start here (cuda/dev/README.md has the reading order).
// Build and run: `make cuda-dev` (emulator), or on a GPU `nvcc -O2 -arch=sm_80 cuda/dev/matmul.cu -o matmul`.
//
// Every version computes C[m, n] = sum_k A[m, k] B[k, n] through kernels.cuh GemmArgs (strided
// operands) with the forward layout of a linear layer, as src/backend/gpu/ops_cuda.cu linear_fwd_args:
// A = x (M = T rows, K = n_in), B[k, n] = W[n, k] (W: n_out x n_in, so N = n_out). Every version runs
// each output's fma chain over k = 0..K-1 in order from 0, so all three give the same bits (the
// property that makes the shipped kernel batch invariant); they differ only in where the operands
// come from.
//
// The numbers below are a MODEL (derived, not measured), for the SmolLM2-135M MLP up-projection over a 512-token
// prefill: M = 512, N = 1536, K = 576. FLOPs 2MNK = 0.91 GFLOP; the compulsory traffic (read x and W
// once, write y once) is 1.2 + 3.5 + 3.1 = 7.9 MB, an arithmetic intensity of 115 FLOP/byte, well
// above an H100's ridge point (~67 TFLOP/s fp32 / ~3.35 TB/s HBM = ~20 FLOP/byte): the product can be
// compute bound, if the kernel re-reads little.
//
// version 1: one thread per output, 16 x 16 threads per block, operands straight from global memory.
//   2 loads (8 bytes) per FMA: 3.6 GB requested for 0.45 G FMAs, 0.25 FLOP/byte. Worse, the accesses
//   are strided: threadIdx.x runs along n, and W is stored [n][k], so one warp-wide load of W touches
//   16 rows, 16 separate 32-byte sectors for 64 useful bytes. The caches absorb part of it; the kernel
//   is still bound by load traffic, at a few percent of fp32 peak.
// version 2: shared-memory tiles. A 16 x 16 block stages a 16 x 16 slice of A and of B in shared
//   memory (thread (ty, tx) loads element k0 + tx of row ty: consecutive lanes read consecutive
//   addresses, coalesced), then each thread runs 16 FMAs out of shared memory. Every global element is
//   now loaded once per block instead of once per thread: 0.5 byte per FMA (226 MB in all, 4 FLOP/byte).
//   The +1 padding of the tiles keeps the lane-strided reads of Bs on 32 different banks. The new
//   limit is shared memory: 2 loads per FMA, and an SM serves 32 four-byte loads per clock against 128
//   FMAs, so at most ~1/8 of fp32 peak.
// version 3 (shipped, cuda/gemm.cu gemm_f32_kernel): register tiling. A 64 x 64 tile of C per block of
//   256 threads, each thread 4 x 4 outputs in registers (rows ty + 16 i, columns tx + 16 j), k in
//   slices of 16. Per slice step a thread loads 4 values of A and 4 of B from shared memory and runs
//   16 FMAs: 0.5 shared loads per FMA (4x fewer than v2, ceiling ~1/2 of peak), and global traffic is
//   0.125 byte per FMA (57 MB, 16 FLOP/byte; x is re-read N/64 = 24 times, W M/64 = 8 times, mostly
//   from L2). The staging loop reads along k or along n, whichever is contiguous (a_k_fast /
//   b_n_fast), so the backward layouts (dx = dy W, dW += dy^T x) are coalesced too.
// Further steps (not shipped, the fp32 matmul only serves the small draft): 8 x 8 outputs per thread,
// float4 loads, double-buffered slices (cp.async), and tensor cores (cuda/gemm.cu gemm_wmma_*_kernel
// for 16-bit weights).
//
// Tolerance: each output is a K-term fp32 fma chain; with u = 2^-24 its error is at most
// gamma_K sum_k |A B| (gamma_K = K u / (1 - K u)), computed per element against a double reference.
#include "dev.cuh"
#include "../gemm.cu"

// ---- CPU reference: double accumulation, and sum |a b| for the tolerance ------------------------------
static void matmul_cpu(const GemmArgs& g, const float* B, std::vector<double>& ref, std::vector<double>& tol) {
    ref.assign((size_t)g.M * g.N, 0.0);
    tol.assign((size_t)g.M * g.N, 0.0);
    const double gamma = dev_gamma(g.K);
    for (int m = 0; m < g.M; m++)
        for (int n = 0; n < g.N; n++) {
            double s = 0, sa = 0;
            for (int k = 0; k < g.K; k++) {
                const double p = (double)g.A[m * g.a_m + k * g.a_k] * B[k * g.b_k + n * g.b_n];
                s += p;
                sa += fabs(p);
            }
            ref[(size_t)m * g.N + n] = s;
            tol[(size_t)m * g.N + n] = gamma * sa + 1e-30;
        }
}

// ---- version 1: one thread per output ------------------------------------------------------------
__global__ void matmul_v1_kernel(GemmArgs g, const float* B) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y * blockDim.y + threadIdx.y;
    if (m >= g.M || n >= g.N) return;
    float acc = 0.0f;
    for (int k = 0; k < g.K; k++) acc = fmaf(g.A[m * g.a_m + k * g.a_k], B[k * g.b_k + n * g.b_n], acc);
    g.C[m * g.c_m + n] = acc;
}

// ---- version 2: 16 x 16 shared-memory tiles, one output per thread ---------------------------------
constexpr int V2_TILE = 16;
__global__ void matmul_v2_kernel(GemmArgs g, const float* B) {
    __shared__ float As[V2_TILE][V2_TILE + 1];  // As[m][k]
    __shared__ float Bs[V2_TILE][V2_TILE + 1];  // Bs[n][k]: W's own layout for y = x W^T
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int m0 = blockIdx.y * V2_TILE, n0 = blockIdx.x * V2_TILE;
    float acc = 0.0f;
    for (int k0 = 0; k0 < g.K; k0 += V2_TILE) {
        // lane tx loads column k0 + tx: contiguous when A and W rows run along k (a_k = b_k = 1)
        const int k = k0 + tx, ma = m0 + ty, nb = n0 + ty;
        As[ty][tx] = (ma < g.M && k < g.K) ? g.A[ma * g.a_m + k * g.a_k] : 0.0f;
        Bs[ty][tx] = (nb < g.N && k < g.K) ? B[k * g.b_k + nb * g.b_n] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < V2_TILE; kk++) acc = fmaf(As[ty][kk], Bs[tx][kk], acc);  // As: broadcast
        __syncthreads();  // the tiles are overwritten by the next slice
    }
    const int m = m0 + ty, n = n0 + tx;
    if (m < g.M && n < g.N) g.C[m * g.c_m + n] = acc;
}

// ---- launchers -------------------------------------------------------------------------------------
static void matmul_run(int version, const GemmArgs& g, const float* B) {
    switch (version) {
        case 1:
            KLAUNCH(dim3(cdiv(g.N, 16), cdiv(g.M, 16)), dim3(16, 16), 0, 0, matmul_v1_kernel)(g, B);
            break;
        case 2:
            KLAUNCH(dim3(cdiv(g.N, V2_TILE), cdiv(g.M, V2_TILE)), dim3(V2_TILE, V2_TILE), 0, 0, matmul_v2_kernel)(g, B);
            break;
        case 3:  // the shipped launch: src/backend/gpu/ops_cuda.cu CudaOps::gemm for M > GEMV_MAX_M
            KLAUNCH(dim3(cdiv(g.N, GEMM_BN), cdiv(g.M, GEMM_BM)), GEMM_THREADS, 0, 0, gemm_f32_kernel)(g, B);
            break;
    }
    dev_launched("matmul");
}

int main(int argc, char** argv) {
    // Ragged on purpose: no dimension is a multiple of a tile (16 or 64), M > GEMV_MAX_M.
    const int T = 70, n_in = 75, n_out = 100, versions = 3;
    DevRng rng(1);
    std::vector<float> x = dev_rand(rng, (size_t)T * n_in), W = dev_rand(rng, (size_t)n_out * n_in);
    GemmArgs h{};  // host view for the reference: y = x W^T
    h.M = T;
    h.N = n_out;
    h.K = n_in;
    h.A = x.data();
    h.a_m = n_in;
    h.a_k = 1;
    h.b_k = 1;
    h.b_n = n_in;
    h.c_m = n_out;
    std::vector<double> ref, tol;
    matmul_cpu(h, W.data(), ref, tol);

    GemmArgs g = h;
    g.A = dev_upload(x);
    const float* d_W = dev_upload(W);
    for (int v = 1; v <= versions; v++) {
        if (!dev_want(argc, argv, v)) continue;
        g.C = dev_zeros<float>((size_t)T * n_out);
        matmul_run(v, g, d_W);
        dev_compare("matmul", v, dev_download(g.C, (size_t)T * n_out), ref, tol, v == versions && dev_planted("matmul"));
        DEV_CHECK(cudaFree(g.C));
    }
    return g_dev_failures ? 1 : 0;
}
