// kernels.cuh: the declarations of every kernel in cuda/*.cu, their argument structs and their host
// launchers: the one interface between the kernel files and their callers (the CUDA backend's host
// code in src/backend/gpu/ calls the launchers; the kernel tests test/kernels/cuda_emu_kernels_*.cpp and the
// cuda/dev/ progressions include the .cu files and launch kernels directly).
// Kernels are plain (non-template) __global__ functions so a launch from another translation unit
// needs only this declaration, under nvcc (no -rdc) and under the emulator alike.
//
// A launcher (launch_<op>, at the end of its kernel's .cu file) checks its arguments, picks grid,
// block and shared memory, and launches on the caller's stream through KRUN. It never allocates:
// device memory and staged host arrays are the caller's (pointers here are device pointers). The
// caller passes a KernelRunner, which checks, counts or times each launch and turns a failed
// argument check into the caller's error. Argument structs list their pointer members in
// pointers(f) (host-only): the emulator rejects a launch whose pointer arguments are not device memory.
#pragma once
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <string>

#include "attn_split.h"
#include "common.cuh"

struct KernelRunner {
    cudaStream_t stream = 0;
    // Set while the CUDA backend replays a captured step (ops_cuda.cu): launches are worked out and passed
    // to the hooks but not made (the step's CUDA graph makes them).
    bool skip = false;
    virtual ~KernelRunner() = default;
    virtual void before(const char* kernel, const dim3& grid) {}  // just before each launch, with its grid
    virtual void after(const char* kernel) = 0;                  // just after: check cudaGetLastError()
    [[noreturn]] virtual void fail(const std::string& msg) = 0;  // an argument the kernels cannot take
};
// KRUN(kr, grid, block, smem, kernel, args...): launch kernel on kr.stream between kr's hooks.
#define KRUN(kr, grid, block, smem, kernel, ...)                            \
    do {                                                                    \
        (kr).before(#kernel, dim3(grid));                                   \
        if (!(kr).skip)                                                     \
            KLAUNCH((grid), (block), (smem), (kr).stream, kernel)(__VA_ARGS__); \
        (kr).after(#kernel);                                                \
    } while (0)
// kr.fail(printf-style message) unless cond.
inline void kcheck(KernelRunner& kr, bool cond, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
inline void kcheck(KernelRunner& kr, bool cond, const char* fmt, ...) {
    if (cond) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    kr.fail(buf);
}
// Blocks of 256 threads for a grid-stride element-wise kernel over n elements (at most 4096 blocks).
inline int elementwise_grid(long long n) { return (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096); }

// ---- gemm.cu: C[m, n] = (accumulate ? C[m, n] : 0) + sum_k A[m, k] * B[k, n] -----------------
// Strided operands, so one kernel does all three products of a linear layer y = x W^T:
//   forward  y  = x W^T : A = x (a_m = K, a_k = 1),   B[k, n] = W[n, k] (b_k = 1, b_n = K)
//   backward dx = dy W  : A = dy,                     B[k, n] = W[k, n] (b_k = N, b_n = 1)
//   backward dW += dy^T x: A[m, k] = dy[k, m] (a_m = 1, a_k = M), B = x (b_k = N, b_n = 1), accumulate
struct GemmArgs {
    int M, N, K;
    const float* A;
    long long a_m, a_k;  // A[m, k] = A[m * a_m + k * a_k]
    long long b_k, b_n;  // B[k, n] = B[k * b_k + n * b_n]
    float* C;
    long long c_m;       // C[m, n] = C[m * c_m + n]
    int accumulate;
    template <class F> void pointers(F f) const { f(A); f(C); }  // the launch checks them (emulator)
};
constexpr int GEMM_BM = 64, GEMM_BN = 64, GEMM_BK = 16, GEMM_THREADS = 256;  // 4 x 4 outputs per thread
__global__ void gemm_f32_kernel(GemmArgs g, const float* B);
// Few rows (M <= GEMV_MAX_M): one thread per column n, bit-identical to gemm_f32_kernel.
constexpr int GEMV_MAX_M = 8;
__global__ void gemv_f32_kernel(GemmArgs g, const float* B);
// Tensor cores (wmma 16x16x16, fp32 accumulate): A rounded to bf16 / fp16 on its way to shared memory,
// B stored in that type (the weights as stored).
constexpr int WMMA_BM = 64, WMMA_BN = 64, WMMA_BK = 32, WMMA_THREADS = 128;  // 4 warps, 32 x 32 each
__global__ void gemm_wmma_bf16_kernel(GemmArgs g, const __nv_bfloat16* B);
__global__ void gemm_wmma_f16_kernel(GemmArgs g, const __half* B);
// C (+)= A B: gemv_f32_kernel for M <= GEMV_MAX_M, else gemm_f32_kernel.
void launch_gemm_f32(const GemmArgs& g, const float* B, KernelRunner& kr);
// The three products of a linear layer with a dense f32 W (n_out x n_in): y = x W^T, dx (+)= dy W,
// dW += dy^T x (ops.h matmul_f32, matmul_f32_bwd_x, matmul_f32_bwd_w).
void launch_matmul_f32(float* y, const float* x, const float* W, int T, int n_in, int n_out, KernelRunner& kr);
void launch_matmul_f32_bwd_x(float* dx, const float* dy, const float* W, int T, int n_in, int n_out, bool accumulate,
                             KernelRunner& kr);
void launch_matmul_f32_bwd_w(float* dW, const float* dy, const float* x, int T, int n_in, int n_out, KernelRunner& kr);
// y = x W^T with W stored BF16 or F16 (dtype KD_BF16 / KD_F16): tensor cores.
void launch_matmul_wmma(float* y, const float* x, const void* W, int dtype, int T, int n_in, int n_out,
                        KernelRunner& kr);

// ---- gemm_quant.cu: y[t, o] = sum_i W[o, i] x[t, i] with W stored as Q8_0 / Q4_0 / Q4_1 blocks ----
// x is quantized to int8 blocks of 32 (q, d = max|x| / 127, s = d * sum q), then every
// 32-block is an exact integer dot product (dp4a) scaled by d_w * d_x. One launch multiplies the same x
// by up to QGEMM_MATS matrices of the same dtype and cols (Q/K/V, gate/up): blockIdx.z picks the matrix.
constexpr int QGEMM_MATS = 3;
struct QGemmArgs {
    const uint8_t* w[QGEMM_MATS];  // matrix m < n: rows[m] x cols weights, row_bytes per row (GGUF blocks)
    float* y[QGEMM_MATS];          // matrix m: T x rows[m] outputs
    int rows[QGEMM_MATS];
    int n;                         // matrices in the launch (gridDim.z)
    long long row_bytes;
    int cols;                      // cols % 32 == 0
    const float* x;                // T x cols f32: the dp4a kernels quantize it themselves (shared memory)
    const int8_t* xq;              // T x cols: the tensor-core kernels read quantize_q8_kernel's output
    const float* xd;               // T x cols/32 block scales
    const float* xs;               // T x cols/32: d * sum(q) of each block
    int T;
    template <class F> void pointers(F f) const {
        for (int m = 0; m < QGEMM_MATS; m++) { f(w[m]); f(y[m]); }
        f(x); f(xq); f(xd); f(xs);
    }
};
constexpr int QGEMM_WARPS = 4, QGEMM_ROWS = 32, QGEMM_TOKENS = 4;  // dp4a: a block of 4 warps, 32 weight rows x 4 tokens
// ... at T > 4 (the _t16 kernels): QGEMM_BLOCK_TOKENS tokens a block, 4 at a time, for one load of its weights
constexpr int QGEMM_BLOCK_TOKENS = 16;
// ... or 16, 8 or 4 rows (down to QGEMM_ROWS_MIN): the most rows whose grid still has QGEMM_FILL_BLOCKS blocks (2
// per H100 SM), else QGEMM_ROWS_MIN (qgemm_dp4a_rows)
constexpr int QGEMM_ROWS_MIN = 4, QGEMM_FILL_BLOCKS = 264;
// the dp4a kernels for T <= QGEMM_DP4A_MAX_T (one token block up to 16 tokens), tensor cores above: the crossover where
// scripts/gpu_knobs.sh found dp4a faster up to 16 tokens on an H100, on SmolLM2-shaped and 7B-shaped models (the
// same bits either way)
constexpr int QGEMM_DP4A_MAX_T = 16;
constexpr int QMMA_KB = 4;  // tensor cores: 32-blocks per step (one per warp)
constexpr int QMMA_WARPS = 4, QMMA_ROWS = 16, QMMA_TOKENS = 64;  // tensor cores: 16 rows x 64 tokens per block
// a warp per 32-block, a thread per value: grid cdiv(T * cols, blockDim), blockDim % 32 == 0 (launch_matmul_q: 256)
__global__ void quantize_q8_kernel(const float* x, int8_t* xq, float* xd, float* xs, int T, int cols);
// T <= 4: grid (cdiv(max rows, R), cdiv(T, 4), n), 128 threads (dp4a); reads x (f32); R = 32 rows per
// block, _r16: 16, _r8: 8, _r4: 4 (the same bits)
__global__ void gemm_q8_0_kernel(QGemmArgs a);
__global__ void gemm_q4_0_kernel(QGemmArgs a);
__global__ void gemm_q4_1_kernel(QGemmArgs a);
__global__ void gemm_q8_0_r16_kernel(QGemmArgs a);
__global__ void gemm_q4_0_r16_kernel(QGemmArgs a);
__global__ void gemm_q4_1_r16_kernel(QGemmArgs a);
__global__ void gemm_q8_0_r8_kernel(QGemmArgs a);
__global__ void gemm_q4_0_r8_kernel(QGemmArgs a);
__global__ void gemm_q4_1_r8_kernel(QGemmArgs a);
__global__ void gemm_q8_0_r4_kernel(QGemmArgs a);
__global__ void gemm_q4_0_r4_kernel(QGemmArgs a);
__global__ void gemm_q4_1_r4_kernel(QGemmArgs a);
// T > 4: grid (cdiv(max rows, R), cdiv(T, 16), n), the same with 16 tokens a block (4 groups of 4, the weights
// loaded once for all of them); the same bits
__global__ void gemm_q8_0_t16_kernel(QGemmArgs a);
__global__ void gemm_q4_0_t16_kernel(QGemmArgs a);
__global__ void gemm_q4_1_t16_kernel(QGemmArgs a);
__global__ void gemm_q8_0_r16_t16_kernel(QGemmArgs a);
__global__ void gemm_q4_0_r16_t16_kernel(QGemmArgs a);
__global__ void gemm_q4_1_r16_t16_kernel(QGemmArgs a);
__global__ void gemm_q8_0_r8_t16_kernel(QGemmArgs a);
__global__ void gemm_q4_0_r8_t16_kernel(QGemmArgs a);
__global__ void gemm_q4_1_r8_t16_kernel(QGemmArgs a);
__global__ void gemm_q8_0_r4_t16_kernel(QGemmArgs a);
__global__ void gemm_q4_0_r4_t16_kernel(QGemmArgs a);
__global__ void gemm_q4_1_r4_t16_kernel(QGemmArgs a);
// T > QGEMM_DP4A_MAX_T: grid (cdiv(max rows, 16), cdiv(T, 64), n), 128 threads
// (int8 wmma); reads xq, xd, xs; the same bits per token
__global__ void gemm_q8_0_mma_kernel(QGemmArgs a);
__global__ void gemm_q4_0_mma_kernel(QGemmArgs a);
__global__ void gemm_q4_1_mma_kernel(QGemmArgs a);
// ys[m] = x Ws[m]^T for m < n (1 <= n <= QGEMM_MATS), every Ws[m] (rows[m] x cols, row_bytes per row)
// stored as the same KD_Q8_0 / KD_Q4_0 / KD_Q4_1; one launch for T <= QGEMM_DP4A_MAX_T (choice->dp4a_max_t), two
// (quantize, GEMM) above. scratch: device memory of matmul_q_scratch_bytes(T, cols) for the quantized
// activations (the tensor-core path only; may be null below). No ys[m] may overlap x (the dp4a kernels read
// x while other blocks write y).
// choice: launch_matmul_q's kernel choices (every one gives the same bits); nullptr: the defaults, or what the
// environment sets (qgemm_choice_env, read once per process), so that a device run can time the variants.
struct QGemmChoice {
    int dp4a_max_t = QGEMM_DP4A_MAX_T;       // BEAGLE_CUDA_DP4A_MAX_T: dp4a for T <= this (cdiv(T, 16) token blocks)
    int dp4a_rows = 0;                       // BEAGLE_CUDA_QGEMM_ROWS: 4, 8, 16 or 32 rows per block; 0: qgemm_dp4a_rows
    int dp4a_tokens = 0;                     // BEAGLE_CUDA_QGEMM_TOKENS: 4 or 16 tokens per dp4a block at T > 4; 0: 16
};
// A launch knob: the positive integer in the environment variable `name`, or `otherwise`.
inline int env_positive(const char* name, int otherwise) {
    const char* s = getenv(name);
    return s && atoi(s) > 0 ? atoi(s) : otherwise;
}
QGemmChoice qgemm_choice_env();  // the defaults with the environment's overrides, read on every call
// rows per dp4a block by the grid rule (QGEMM_FILL_BLOCKS), for blocks of block_tokens tokens
int qgemm_dp4a_rows(int max_rows, int n, int T, int block_tokens);
size_t matmul_q_scratch_bytes(int T, int cols);
// The 5-bit and k-quant types (KD_Q5_0, KD_Q5_1, KD_Q4_K, KD_Q5_K, KD_Q6_K): grid (cdiv(rows, 4), cdiv(T, 4)),
// 128 threads, after quantize_q8_kernel; reads xq, xd, xs.
__global__ void gemm_kquant_kernel(float* y, const uint8_t* W, int dtype, long long row_bytes, int rows, int cols,
                                   const int8_t* xq, const float* xd, const float* xs, int T);
// y = x W^T, W (rows x cols, row_bytes per row) of one of those types; scratch: matmul_q_scratch_bytes(T, cols).
void launch_matmul_kquant(float* y, const float* x, const uint8_t* W, int rows, int dtype, long long row_bytes, int cols,
                          int T, void* scratch, KernelRunner& kr);
void launch_matmul_q(int n, float* const* ys, const float* x, const uint8_t* const* Ws, const int* rows, int dtype,
                     long long row_bytes, int cols, int T, void* scratch, KernelRunner& kr,
                     const QGemmChoice* choice = nullptr);

// ---- rmsnorm.cu -------------------------------------------------------------------------------
// y[t] = x[t] * rstd[t] * w, rstd = 1/sqrt(mean(x^2) + eps); one block per row (rstd may be null).
__global__ void rmsnorm_fwd_kernel(float* y, float* rstd, const float* x, const float* w, int dim, float eps);
// dx[t] += rstd * (dy * w) - rstd^3 * (sum_i dy_i w_i x_i) / dim * x; one block per row.
__global__ void rmsnorm_bwd_dx_kernel(float* dx, const float* dy, const float* x, const float* w, const float* rstd,
                                      int dim);
// dw[i] += sum_t dy[t, i] x[t, i] rstd[t]; one thread per column, t in order.
__global__ void rmsnorm_bwd_dw_kernel(float* dw, const float* dy, const float* x, const float* rstd, int T, int dim);
// x[t] += dx[t], then y[t] = rmsnorm(x[t]) * w: add_kernel then rmsnorm_fwd_kernel in one pass, the same bits.
__global__ void add_rmsnorm_kernel(float* y, float* x, const float* dx, const float* w, int dim, float eps);
// ops.h rmsnorm / rmsnorm_f32 (rstd null: not saved) and rmsnorm_f32_bwd (dx or dw null: skipped).
void launch_rmsnorm(float* y, float* rstd, const float* x, const float* w, int T, int dim, float eps, KernelRunner& kr);
void launch_add_rmsnorm(float* y, float* x, const float* dx, const float* w, int T, int dim, float eps, KernelRunner& kr);
void launch_rmsnorm_bwd(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd, int T,
                        int dim, KernelRunner& kr);

// ---- rope.cu: rotate the adjacent pairs (2i, 2i+1) of every head by pos[t] * freq[i] (inverse: by
// minus that angle, which is RoPE's backward). One thread per (buffer, row, head, pair): x (n_heads heads
// per row) and x2 (n_heads2; may be null with 0) at the same positions in one launch (q and k).
__global__ void rope_kernel(float* x, int n_heads, float* x2, int n_heads2, const int* pos, const float* freq, int T,
                            int head_dim, int inverse);
// pos: T positions, freq: head_dim / 2 inverse frequencies (device).
void launch_rope(float* x, int n_heads, float* x2, int n_heads2, const int* pos, const float* freq, int T, int head_dim,
                 bool inverse, KernelRunner& kr);

// ---- swiglu.cu ----------------------------------------------------------------------------------
__global__ void swiglu_fwd_kernel(float* out, const float* gate, const float* up, long long n);
__global__ void swiglu_bwd_kernel(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                  long long n);
void launch_swiglu(float* out, const float* gate, const float* up, long long n, KernelRunner& kr);
void launch_swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long long n,
                       KernelRunner& kr);

// ---- add.cu: residual y += x, or y[i] += x[i % period] (a bias row; period 0: none) ------------
__global__ void add_kernel(float* y, const float* x, long long n, long long period);
void launch_add(float* y, const float* x, long long n, long long period, KernelRunner& kr);

// ---- embed.cu: x[t, :] = dequantized row tokens[t] (map: map[tokens[t]]) of the stored table E (grid: T rows)
// Its backward, the scatter-add of rows into dE, is rows_scatter_kernel (rows.cu) with accumulate.
__global__ void embed_kernel(float* x, const uint8_t* E, int dtype, long long row_bytes, const int* tokens,
                             const int* map, int dim);
// tokens, map (may be null): device
void launch_embed(float* x, const uint8_t* E, int dtype, long long row_bytes, const int* tokens, const int* map, int T,
                  int dim, KernelRunner& kr);

// ---- rows.cu: row gather / scatter(-add) / in-place move (KV-cache compaction) ------------------
__global__ void rows_gather_kernel(float* dst, const float* src, const int* idx, int n, int width);
// dst[idx[i]] (+)= src[i] for i = 0..n-1 IN ORDER: one thread per column walks i (duplicates ok).
__global__ void rows_scatter_kernel(float* dst, const float* src, const int* idx, int n, int width, int accumulate);
// buf[dst[i]] = buf[src[i]] for i = 0..n-1 in order (src[i] >= dst[i]): one thread per column.
__global__ void move_rows_kernel(float* buf, const int* src, const int* dst, int n, int width);
// ops.h gather_rows, scatter_rows, move_rows (index arrays on the device).
void launch_gather_rows(float* dst, const float* src, const int* idx, int n, int width, KernelRunner& kr);
void launch_scatter_rows(float* dst, const float* src, const int* idx, int n, int width, bool accumulate,
                         KernelRunner& kr);
void launch_move_rows(float* buf, const int* src, const int* dst, int n, int width, KernelRunner& kr);

// ---- attention.cu: the target's causal / tree / per-sequence self-attention over a KV cache -----
struct AttnArgs {
    float* out;                 // T x n_heads*head_dim
    const float* q;             // T x n_heads*head_dim (roped)
    const float* k;             // cache rows x n_kv_heads*head_dim (roped)
    const float* v;
    int T, n_heads, n_kv_heads, head_dim;
    float scale;
    // mask (ops.h AttnMask), device arrays
    int n_past;                 // cached rows before the new ones; with n_past_dev: the most it can be (grid size)
    const int* n_past_dev;      // non-null: the kernels read n_past here (a captured decode step, docs/gpu.md)
    const uint64_t* tree;       // null: causal
    int mask_words;
    const int* kv_start;        // non-null: query t sees cache rows [kv_start[t], kv_start[t] + kv_len[t])
    const int* kv_len;
    float* partial;             // split-KV scratch of attn_split_scratch_bytes(), or null (never split)
    int split;                  // keys per slice, attn_split() (launch_attention sets it)
    template <class F> void pointers(F f) const {
        f(out); f(q); f(k); f(v); f(n_past_dev); f(tree); f(kv_start); f(kv_len); f(partial);
    }
};
constexpr int ATTN_BK = 32;     // keys per shared-memory tile (one per lane while scoring)
constexpr int ATTN_MAX_HD = 128;
// ATTN_SPLIT, ATTN_SPLIT_MAX_T: attn_split.h (the slice length attn_split() defaults to, the split-KV range)
int attn_split();
void attn_set_split(int keys);  // TESTS ONLY: before any attention launch of the case
constexpr int ATTN_QT_WARPS = 8, ATTN_QT_TPW = 4;  // query-tiled kernel: up to 8 warps x 4 (query, head) tasks
// xattn.cu: grid (T, n_kv_heads); blockDim.x = 32 * warps (each warp one query head of the kv head's group)
__host__ __device__ inline int attn_smem_floats(int head_dim, int warps) {
    return 2 * ATTN_BK * (head_dim + 1) + warps * (2 * head_dim + ATTN_BK);
}
// Query-tiled flash attention: grid (cdiv(T, nq), n_kv_heads, n_slices), blockDim.x = 32 * warps, smem from
// attn_tiling. n_slices = 1: out; more (split-KV, flash-decoding): block z reduces slice z of ATTN_SPLIT
// visible keys of its tasks into a.partial (m, l, n, o), then attn_combine_kernel, grid (T, n_heads), 32 threads.
__global__ void attn_fwd_tiled_kernel(AttnArgs a, int nq, int tpw, int n_slices);
__global__ void attn_combine_kernel(AttnArgs a, int n_slices);
struct AttnTiling {
    int nq, warps, tpw;  // queries per block, warps per block, tasks per warp
    size_t smem;         // dynamic shared memory bytes (<= 48 KiB)
};
// The query tiling for nq queries per block of a GQA group: warps, tasks per warp, shared memory
// (K/V tile, the tasks' query rows, a score row per warp).
inline AttnTiling attn_tiling_nq(int nq, int group, int head_dim) {
    AttnTiling L;
    L.nq = nq;
    L.warps = nq * group < ATTN_QT_WARPS ? nq * group : ATTN_QT_WARPS;
    L.tpw = cdiv(nq * group, L.warps);
    L.smem = (size_t)(2 * ATTN_BK * (head_dim + 1) + nq * group * head_dim + L.warps * ATTN_BK) * sizeof(float);
    return L;
}
// The shipped tiling (attention.cu, xattn.cu): the largest query tile (<= 32 tasks, <= T queries)
// whose shared memory fits 48 KiB.
inline AttnTiling attn_tiling(int T, int n_heads, int n_kv_heads, int head_dim) {
    const int group = n_heads / n_kv_heads, max_tasks = ATTN_QT_WARPS * ATTN_QT_TPW;
    int nq = max_tasks / group < T ? max_tasks / group : T;
    for (nq = nq < 1 ? 1 : nq;; nq--) {
        const AttnTiling L = attn_tiling_nq(nq, group, head_dim);
        if (L.smem <= 48 * 1024 || nq == 1) return L;
    }
}
// Slices of the longest visible key list of a causal / tree pass (n_past + T keys).
inline int attn_slices(int n_past, int T) { return (n_past + T + attn_split() - 1) / attn_split(); }
size_t attn_split_scratch_bytes(int T, int n_heads, int head_dim, int n_past);
// Split-KV when a.partial is set, the mask is causal or tree, T <= attn_split_max_t() and the keys span
// more than one slice; one unsplit launch otherwise. Both give the same bits (attention.cu).
// attn_split_max_t(): ATTN_SPLIT_MAX_T unless BEAGLE_CUDA_ATTN_SPLIT_MAX_T sets another (read once; a launch
// choice with the same bits, for timing split-KV on long verify passes; the memory plan assumes the default).
int attn_split_max_t();
void launch_attention(const AttnArgs& a, KernelRunner& kr);

// ---- xattn.cu: the draft's cross-attention over two key sets with the parametric mask ------------
struct XAttnArgs {
    const float* q;             // n_q x n_heads*head_dim
    const int* qrow;            // sequence row of each query (BLOCK masks), device
    int n_q;
    const float *k0, *v0;       // set 0 (true states): n0 x kv_dim
    int n0;
    // forward, PREFIX: when set, set 0 is rows [n0_dev[0], n0_dev[0] + n0_dev[1]) of k0 / v0, read on the device
    // (a captured step: the launch's arguments stay fixed while the true keys grow and their window slides)
    const int* n0_dev = nullptr;
    const float *k1, *v1;       // set 1 (predicted states): n1 x kv_dim
    int n1;
    int n_heads, n_kv_heads, head_dim;
    float scale;
    int kind;                   // 0 PREFIX, 1 BLOCK (ops.h XAttnMask)
    int set0_qrow;              // PREFIX: set 0 only rows j < qrow[t] (EAGLE's training-time test)
    const uint64_t* set1_bits;  // PREFIX: n_q x set1_words, device (null: no set-1 row)
    int set1_words;
    int w, offset, n_pred;      // BLOCK
    float* out;                 // forward: n_q x n_heads*head_dim
    float* lse;                 // forward out, backward in: n_q x n_heads
    const float* dout;          // backward
    const float* o;             // backward: the forward's out
    float* dq;                  // backward, assigned
    float* D;                   // backward scratch: n_q x n_heads (dout . out), written by the dq kernel
    float *dk0, *dv0, *dk1, *dv1;  // backward, accumulated (a null pair: that set is skipped)
    int tiles0;                 // dk/dv kernel: blocks of set 0 (cdiv(n0, XATTN_BKEYS), or 0 to skip set 0)
    template <class F> void pointers(F f) const {
        f(q); f(qrow); f(k0); f(v0); f(n0_dev); f(k1); f(v1); f(set1_bits); f(out); f(lse); f(dout); f(o); f(dq); f(D);
        f(dk0); f(dv0); f(dk1); f(dv1);
    }
};
constexpr int XATTN_BKEYS = 32, XATTN_SLICES = 8;  // dk/dv kernel: 32 keys per block x 8 dim slices per key
__global__ void xattn_fwd_kernel(XAttnArgs a, int nq, int tpw);  // grid (cdiv(n_q, nq), n_kv_heads), attn_tiling
__global__ void xattn_bwd_dq_kernel(XAttnArgs a);   // grid (n_q, n_kv_heads), a warp per query head
// grid (tiles0 + set-1 tiles, n_kv_heads), xattn_dkdv_launch() threads and shared memory; bq queries per tile
__global__ void xattn_bwd_dkdv_kernel(XAttnArgs a, int bq);
struct XAttnDkdvLaunch {
    int threads, bq;
    size_t smem;
};
inline XAttnDkdvLaunch xattn_dkdv_launch(int head_dim, int group) {
    const int per_query = group * (2 * head_dim + 2);  // floats staged per query
    int bq = 16 * 1024 / 4 / per_query;
    bq = bq < 1 ? 1 : bq > 16 ? 16 : bq;
    return {XATTN_BKEYS * XATTN_SLICES, bq, (size_t)bq * per_query * sizeof(float)};
}
// ops.h xattn (a.out, a.lse) and xattn_bwd (a.dq, a.dk*, a.dv*; a.D: caller's scratch of n_q x n_heads floats).
void launch_xattn(const XAttnArgs& a, KernelRunner& kr);
void launch_xattn_bwd(const XAttnArgs& a, KernelRunner& kr);

// ---- cross_entropy.cu: vocabulary-chunked softmax cross-entropy, one block per row -------------
__global__ void lse_update_kernel(float* m, float* s, const float* z, int C);
__global__ void ce_soft_kernel(float* dz, float* loss, const float* zt, const float* zd, const float* m_t,
                               const float* s_t, const float* m_d, const float* s_d, int C, float scale);
__global__ void ce_hard_kernel(float* dz, float* loss, const float* zd, const float* m_d, const float* s_d,
                               const int* labels, int v0, int C, float scale);
void launch_lse_update(float* m, float* s, const float* z, int n, int C, KernelRunner& kr);
void launch_ce_soft(float* dz, float* loss, const float* zt, const float* zd, const float* m_t, const float* s_t,
                    const float* m_d, const float* s_d, int n, int C, float scale, KernelRunner& kr);
void launch_ce_hard(float* dz, float* loss, const float* zd, const float* m_d, const float* s_d, const int* labels, int v0,
                    int n, int C, float scale, KernelRunner& kr);

// ---- smoothl1.cu: loss[r] += scale * mean_d l(x - target); dx += scale * l'(d) / dim; block per row
__global__ void smoothl1_kernel(float* dx, float* loss, const float* x, const float* target, int dim, float beta,
                                float scale);
void launch_smoothl1(float* dx, float* loss, const float* x, const float* target, int n, int dim, float beta,
                     float scale, KernelRunner& kr);

// ---- adamw.cu: sum of squares (global grad norm, double, fixed chunks) and the AdamW update ------
constexpr int SUMSQ_CHUNK = 16384;  // elements per block: partial[b] = sum over chunk b, fixed order
__global__ void sumsq_kernel(const float* x, long long n, double* partial);
struct AdamWArgs {
    float* w; float* m; float* v; const float* g;
    long long n;
    float beta1, beta2, lr, eps, decay, grad_scale, bc1, bc2;  // decay = 1 - lr * wd; bc = 1 - beta^step
    template <class F> void pointers(F f) const { f(w); f(m); f(v); f(g); }
};
__global__ void adamw_kernel(AdamWArgs a);
// partial: sumsq_blocks(n) doubles (device), one per chunk; the caller adds them in chunk order.
int sumsq_blocks(long long n);
void launch_sumsq(const float* x, long long n, double* partial, KernelRunner& kr);
void launch_adamw(const AdamWArgs& a, KernelRunner& kr);

// ---- topk.cu: the k largest entries of each row (descending; ties: lower index first); k = 1 is argmax
// (a row without a number: id 0, as the CPU's argmax())
__global__ void topk_kernel(const float* x, int n_cols, int k, int* idx, float* val);
// idx, val: rows x k (device)
void launch_topk(const float* x, int rows, int n_cols, int k, int* idx, float* val, KernelRunner& kr);
// lse[r] = log sum_c exp(x[r, c]) (-inf for a row without a number); one block per row
__global__ void row_lse_kernel(const float* x, int n_cols, float* lse);
void launch_row_lse(const float* x, int rows, int n_cols, float* lse, KernelRunner& kr);

// ---- tree.cu: one depth of the drafter's dynamic tree (src/backend/ops.h tree_expand, TreeExpandArgs) ----
struct TreeExpandKArgs {
    const int* idx;             // n x k top-k ids of the depth's logits (topk_kernel)
    const float* val;           // n x k their values
    const float* lse;           // n: each row's logsumexp (row_lse_kernel)
    int* nodes;                 // n_max x 4 ints: tok, parent, score (float bits), live (ops.h TreeNode)
    const int* rows;            // n: node of each query row (null at depth 0: the root)
    const uint64_t* mask;  // n x words: the query rows' predicted-key bits (null: none)
    int* rows_next;             // n_next: the next queries' nodes
    uint64_t* mask_next;   // n_next x words
    int* ids_next;              // n_next: their ids (-1 as 0)
    int words, n, k, n_nodes, depth, n_next, base;
    float min_score;
    const float* min_score_dev = nullptr;  // min_score read on the device when set (a captured step)
    template <class F> void pointers(F f) const {
        f(idx); f(val); f(lse); f(nodes); f(rows); f(mask); f(rows_next); f(mask_next); f(ids_next);
        f(min_score_dev);
    }
};
__global__ void tree_expand_kernel(TreeExpandKArgs a);  // one block
void launch_tree_expand(const TreeExpandKArgs& a, KernelRunner& kr);

// ---- sample.cu: rows of logits -> sampling distributions (temperature, top-k, top-p) and draws from them
// p[r] = softmax(x[r] / temperature) cut to the top_k largest (0: off; ties at the cut all kept), then to the
// smallest top set whose mass exceeds top_p of that (0 or >= 1: off), renormalised; with coins,
// ids[r] = the first column whose running sum of p[r] exceeds coins[r] in [0, 1) (header of sample.cu).
// One block per row.
__global__ void warp_rows_kernel(float* p, int* ids, const float* coins, const float* x, int n_cols, float temperature,
                                 int top_k, float top_p);
// p, x: rows x n_cols (device; p is written and must not alias x); coins, ids: rows each, both null or both
// set; temperature > 0.
void launch_warp_rows(float* p, int* ids, const float* coins, const float* x, int rows, int n_cols, float temperature,
                      int top_k, float top_p, KernelRunner& kr);
