// gemm_quant.cu: y = x W^T for weights stored as GGUF blocks (Q8_0, Q4_0, Q4_1; the 5-bit and k-quant
// types in gemm_kquant_kernel at the end): the target's quantized linear layers (forward only: the target
// is frozen). Launched (launch_* at the end) by the CUDA backend's
// matmul (src/backend/gpu/ops_cuda.cu); tested by test/kernels/cuda_emu_kernels_gemm_quant.cpp.
//
// quantize_q8_kernel (one warp per block) and quantize_chunk_part (the dp4a kernels, four threads per
//   block): each 32-value block of an activation row becomes int8 q, d = max|x| / 127 and s = d * sum q
//   (the max is exact and the sum an integer, so any order and any thread split give the same bits),
//   rounding as the CPU backend's 8-bit mode
//   (src/backend/cpu/quantize.h): q = round-half-even(x * (1 / d)), a NaN makes d NaN.
// The product, ONE order for every kernel below (batch invariance): per 32-block b the integer dot
//   I_b = sum_j w_j q_j is exact (w_j = q for Q8_0, q - 8 for Q4_0, the nibble q for Q4_1), and
//   y[t, o] is the fma chain, b = 0, 1, ..., nb - 1 in order from 0:
//     acc = fmaf(d_w d_x, (float) I_b, acc)        (+ acc = fmaf(m_w, s_x, acc) for Q4_1: x = d q + m).
//   Nothing in it depends on T, the token's slot or the kernel, so a token's row has the same bits in
//   decode (T = 1), a prefill chunk or a verify pass of any size, whichever kernel ran it.
// gemm_q{8_0,4_0,4_1}{,_r16,_r8,_r4}{,_t16}_kernel (T <= QGEMM_DP4A_MAX_T = 16, or BEAGLE_CUDA_DP4A_MAX_T: decode,
//   short verify): a block of 4 warps covers R = 32 (16, 8, 4) weight rows x 4 tokens (T <= 4) or x 16 tokens in
//   4 groups of 4 (_t16, T > 4) of matrix blockIdx.z (Q/K/V or gate/up in one launch: the grid's x extent is
//   the tallest matrix's, blocks past a shorter one exit at once), so a verify of up to 16 tokens reads every
//   weight byte ONCE. Per 32 blocks of the row (1024 columns) and group of 4 tokens, the block's 128 threads
//   first quantize the group's blocks c0 .. c0 + 31 into shared memory (4 threads per 32-block, coalesced
//   loads; int8 q, d, s), so the activations need no launch of their own; the price, every block reading the
//   f32 x (L2-resident), is paid once per R rows. Then the rows x blocks (row, 32-block) pairs are spread over
//   all 128 threads (pair k: row k / nbc, block k % nbc; a warp reads consecutive blocks, for nb <= 32 one
//   contiguous range of rows), each thread loading its pairs into registers before computing any
//   (QGEMM_PAIRS at a time for one group; _t16: the chunk's R / 4, loaded for the first group and kept for the
//   others), and each pair's I_b for the group's tokens with dp4a goes to shared memory with d_w (and m_w).
//   Last, warp i runs the chain of the group's token i, lane r < R for row r, over the chunk's blocks in order,
//   into its own accumulator per group. Why fast: the weights cross the memory bus once per pass, every lane
//   busy (the old warp-per-row mapping left 14 of 32 idle at nb = 18), one memory latency per round of pairs,
//   the quantization amortized over R rows instead of 4. Why two kinds: holding a chunk's pairs for 4 groups
//   takes registers (the 32-row _t16 kernel about twice the 4-token one's), which a decode step, one group,
//   would pay in occupancy for nothing. R (qgemm_dp4a_rows): the largest of 32, 16, 8, 4 whose grid has
//   QGEMM_FILL_BLOCKS = 264 blocks (2 per H100 SM), else 4: SmolLM2's decode GEMMs are 18-54 blocks of 32
//   rows, too few for an H100's 132 SMs; 4-row blocks give 8x the blocks (its 576-row matrices: 144, one full
//   wave) for 8x the x re-reads (L2) and fewer busy threads per pair round (scripts/gpu_knobs.sh times the
//   rule against fixed R).
//   BEAGLE_CUDA_QGEMM_ROWS=4|8|16|32 forces R, BEAGLE_CUDA_QGEMM_TOKENS=4 the 4-token kernels at every T
//   (the same bits: the chain of each output is the same).
// gemm_q{8_0,4_0,4_1}_mma_kernel (T > QGEMM_DP4A_MAX_T = 16: prefill and verify): tensor cores, after one
//   quantize_q8_kernel launch (every row block would otherwise requantize 64 tokens). A block of 4
//   warps covers 16 weight rows x 64 tokens of matrix blockIdx.z (a verify of up to 64 tokens reads
//   every weight byte ONCE; the 4-token kernel would read it cdiv(T, 4) times) and walks the row in
//   steps of QMMA_KB = 4 32-blocks, one per warp. Per step the weights (unpacked to int8: Q4 nibbles,
//   Q4_0 minus 8), the int8 activations (int4 loads) and the scales are stored from registers to
//   shared memory; after a barrier every thread already loads the NEXT step's data into those
//   registers (in flight during this step's products and chain); warp w computes the 16 x 16 integer
//   tiles I[t, o] of block b0 + w for every 16-token group with wmma m16n16k16 s8 x s8 -> s32 (exact,
//   two k-halves); after a second barrier thread (t, o) = (tid / 16 + 8 i, tid % 16) applies the
//   scales of the step's blocks in block order: the same chain as above. Only ceil(T / 16) token
//   groups are multiplied and staged. Why fast: 16-row blocks give 4x the blocks of 64-row ones (a
//   576-row matrix: 36, not 9), two barriers per 4 blocks instead of three per block, and the global
//   loads overlap the tensor-core work instead of preceding it. The cost: each 16-row block reads the
//   tokens' int8 x (L2), 4x the activation re-reads of 64-row blocks (docs/gpu-kernels.md).
// No kernel indexes QGemmArgs' arrays by blockIdx.z (qgemm_pick): no local-memory copy.
// Blocks of 34 (Q8_0) and 18 (Q4_0) bytes are only 2-byte aligned: weights are read as 16-bit halves; Q4_1's
// 20-byte blocks on a 4-byte aligned matrix as 32-bit words in the dp4a kernels (load_block_words).
// dp4a: the hardware instruction under nvcc (sm_61+, common.cuh dot4_i8, compile-tested only); the
// portable byte loop is what the emulator runs and the tests check. wmma s8: the emulator's
// (cuda/emu/emu_wmma.h, exact integer products) runs here; nvcc compiles the same code for sm_80+.
// Tested against a double reference of the dequantized weights times the dequantized int8 activations,
// against the plain f32 product, and for bit-identity of all the kernels for every token at every T.
#include <cstdlib>

#include "kernels.cuh"

// quantize_q8_kernel: x (T x cols f32, cols % 32 == 0) -> xq (T x cols int8), xd and xs (T x cols / 32: d
// and s of each 32-block), by the rule of the header: d = max|x| / 127 (NaN if the block holds a NaN),
// q = round-half-even(x * (1 / d)) (0 if d = 0), s = d * sum q. Grid: one WARP per 32-block, lane j = value
// j: warp w of thread block i takes 32-block k = i * blockDim / 32 + w of the T * cols / 32, token-major
// (x[k * 32 + j] is value j of block k, since cols = 32 * nb); launched with 256 threads = 8 32-blocks per
// thread block. max|x| and the NaN flag by __shfl_xor max / or, sum q by a __shfl_xor sum: the max is
// exact and the sum an integer in any order, so d, s and q have the bits of a serial loop (the test
// checks them against the CPU rule). Why fast: a warp loads its block's 128 bytes in one coalesced
// request and every thread has one load in flight; the thread-per-block kernel before it issued 32
// dependent-address loads per thread over 2-5 thread blocks.
__global__ void quantize_q8_kernel(const float* x, int8_t* xq, float* xd, float* xs, int T, int cols) {
    const long long k = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;  // the same for a whole warp
    const int j = threadIdx.x % 32;
    if (k >= (long long)T * (cols / 32)) return;  // whole warps (blockDim % 32 == 0): the shuffles see 32 lanes
    const float v = x[k * 32 + j];
    float amax = fabsf(v);
    int nan = v != v;
    for (int o = 16; o > 0; o >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        nan |= __shfl_xor_sync(0xffffffffu, nan, o);
    }
    const float d = nan ? __int_as_float(0x7fc00000) : amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const int q = __float2int_rn(v * id);
    xq[k * 32 + j] = (int8_t)q;
    int qsum = q;
    for (int o = 16; o > 0; o >>= 1) qsum += __shfl_xor_sync(0xffffffffu, qsum, o);
    if (j == 0) {
        xd[k] = d;
        xs[k] = d * (float)qsum;
    }
}

// 16-bit word from a 2-byte aligned address: one load (common.cuh's load_u16 reads two bytes).
__device__ __forceinline__ uint16_t load_u16_a2(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

// 32-bit word from a 2-byte aligned address (little-endian).
__device__ __forceinline__ int load_i32_a2(const uint8_t* p) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

template <int DT>
struct QBlock {
    static constexpr int bytes = DT == KD_Q8_0 ? 34 : DT == KD_Q4_0 ? 18 : 20;
    static constexpr int qoff = DT == KD_Q4_1 ? 4 : 2;  // offset of the quants in the block
};

// The 32 weights of one block as 8 words of int8 values, word p = elements 4p .. 4p + 3 (Q8_0: q;
// Q4_0 and Q4_1: the nibble q, 0..15; Q4_0's -8 is applied to the dot product), and its fp16 d (and m for
// Q4_1). a4: the block is 4-byte aligned (only Q4_1's 20-byte blocks can be, on a 4-byte aligned matrix):
// 5 word loads (d and m in one) instead of 10 half-word loads; the same bytes, so the same bits.
template <int DT>
__device__ __forceinline__ void load_block_words(const uint8_t* blk, bool a4, int* w, uint16_t* d, uint16_t* m) {
    if (DT == KD_Q4_1 && a4) {
        const uint32_t dm = VLOAD(uint32_t, blk);  // little-endian: d in bytes 0-1, m in bytes 2-3
        *d = (uint16_t)(dm & 0xFFFF);
        *m = (uint16_t)(dm >> 16);
        for (int p = 0; p < 4; p++) {
            const int v = VLOAD(int, blk + 4 + 4 * p);
            w[p] = v & 0x0F0F0F0F;
            w[4 + p] = (v >> 4) & 0x0F0F0F0F;
        }
        return;
    }
    *d = load_u16_a2(blk);
    *m = DT == KD_Q4_1 ? load_u16_a2(blk + 2) : 0;
    if (DT == KD_Q8_0) {
        for (int p = 0; p < 8; p++) w[p] = load_i32_a2(blk + 2 + 4 * p);
    } else {  // byte j holds element j (low nibble) and element 16 + j (high nibble)
        for (int p = 0; p < 4; p++) {
            const int v = load_i32_a2(blk + QBlock<DT>::qoff + 4 * p);
            w[p] = v & 0x0F0F0F0F;
            w[4 + p] = (v >> 4) & 0x0F0F0F0F;
        }
    }
}

// Matrix m's pointer or row count, selected without indexing the parameter arrays by a runtime value
// (a dynamic index copies QGemmArgs to local memory: a stack frame and a round trip through it).
template <class P>
__device__ __forceinline__ P qgemm_pick(const P (&v)[QGEMM_MATS], int m) {
    static_assert(QGEMM_MATS == 3, "qgemm_pick selects among 3 matrices");
    return m == 0 ? v[0] : m == 1 ? v[1] : v[2];
}

// ---- few tokens: dp4a, 32 weight rows x 4 tokens per block (16 for the _t16 kernels) -------------
// (row, 32-block) pairs a thread loads at once (4 tokens): R rows x 32 blocks / 128 threads = R / 4 at most
constexpr int QGEMM_PAIRS = 4;
constexpr int QX_LD = 36;  // bytes per staged int8 block: 32 + 4 pad, so lanes reading word p of
                           // consecutive blocks hit distinct banks (a stride of 8 words is 8-way)

// Token t's 32-blocks c0 .. c0 + 31 into shared memory (q[j], d[j], s[j] for block c0 + j), by all 128
// threads of the block: thread = (block j = tid / 4, quarter p = tid % 4) loads the 8 values 8 p .. 8 p + 7
// (a warp reads 1 KB contiguous) and the 4 threads of a block combine max|x|, the NaN flag and sum q with
// shuffles. quantize_q8_kernel's rule on the same values: the max is exact and the sum an integer in any
// order, so d, s and every q have its bits (the tests check it against quantize_q8_kernel).
__device__ __forceinline__ void quantize_chunk_part(const QGemmArgs& a, int t, int c0, int nb, int8_t (*q)[QX_LD],
                                                    float* d, float* s) {
    static_assert(QGEMM_WARPS == 4, "128 threads: 4 per 32-block, 32 blocks per chunk");
    const int j = threadIdx.x / 4, p = threadIdx.x % 4, b = c0 + j;
    float v[8];
    for (int k = 0; k < 8; k++) v[k] = 0.0f;
    if (b < nb) {
        const float* xb = a.x + (long long)t * a.cols + (long long)b * 32 + 8 * p;
        for (int k = 0; k < 8; k++) v[k] = xb[k];
    }
    float amax = 0.0f;
    int nan = 0;
    for (int k = 0; k < 8; k++) {
        amax = fmaxf(amax, fabsf(v[k]));
        nan |= v[k] != v[k];
    }
    for (int o = 1; o <= 2; o <<= 1) {  // the 4 threads of the block (whole warps take part)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        nan |= __shfl_xor_sync(0xffffffffu, nan, o);
    }
    const float dv = nan ? __int_as_float(0x7fc00000) : amax / 127.0f;
    const float id = dv != 0.0f ? 1.0f / dv : 0.0f;
    int qsum = 0;
    for (int k = 0; k < 8; k++) {
        const int qv = __float2int_rn(v[k] * id);
        qsum += qv;
        q[j][8 * p + k] = (int8_t)qv;
    }
    for (int o = 1; o <= 2; o <<= 1) qsum += __shfl_xor_sync(0xffffffffu, qsum, o);
    if (p == 0 && b < nb) {
        d[j] = dv;
        s[j] = dv * (float)qsum;
    }
}

template <int DT, int R, int NG>
__device__ void gemm_q_body(const QGemmArgs& a) {
    static_assert(R >= 1 && R <= QGEMM_ROWS && QGEMM_ROWS == 32, "the chain: lane r < R of a warp per token");
    constexpr int BS = QBlock<DT>::bytes, NTH = 32 * QGEMM_WARPS, LDR = R + 1;  // odd LDR: conflict-free
    constexpr int NP = R * 32 / NTH;  // (row, 32-block) pairs per thread in a chunk of 32 blocks
    // pairs a thread holds at once: one group, QGEMM_PAIRS per round; more groups, the whole chunk's
    constexpr int PR = NG == 1 ? (NP < QGEMM_PAIRS ? NP : QGEMM_PAIRS) : NP;
    static_assert(NP >= 1 && NP * NTH == R * 32 && (NG == 1 || NG * QGEMM_TOKENS == QGEMM_BLOCK_TOKENS), "the split");
    const int tid = threadIdx.x, m = blockIdx.z, rows = qgemm_pick(a.rows, m);
    const int o0 = blockIdx.x * R, tb = blockIdx.y * NG * QGEMM_TOKENS;  // the block's first row and token
    if (o0 >= rows || tb >= a.T) return;  // the whole block: past a shorter matrix (or the tokens)
    const int ng = min(NG, (a.T - tb + QGEMM_TOKENS - 1) / QGEMM_TOKENS);
    const int nb = a.cols / 32;
    const uint8_t* w0 = qgemm_pick(a.w, m) + (long long)o0 * a.row_bytes;
    // every block 4-byte aligned (the same for the whole thread block: no divergence)
    const bool a4 = DT == KD_Q4_1 && a.row_bytes % 4 == 0 && (uintptr_t)qgemm_pick(a.w, m) % 4 == 0;
    __shared__ __align__(16) int8_t xq[QGEMM_TOKENS][32][QX_LD];  // token i's int8 block c0 + j
    __shared__ float xd[QGEMM_TOKENS][32], xs[QGEMM_TOKENS][32];
    __shared__ int dot[QGEMM_TOKENS][32][LDR];  // I_b of (token i, block c0 + j, row o0 + r)
    __shared__ float dws[32][LDR], mws[32][LDR];  // d_w, m_w (Q4_1) of (block, row)
    // the chain: warp i = token i of each group, lane r < R = row o0 + r (coalesced y, conflict-free shared
    // reads); acc[g]: group g's token
    const int ci = tid / 32, cr = tid % 32;
    const bool lane = cr < R && o0 + cr < rows;
    float acc[NG];
    UNROLL for (int g = 0; g < NG; g++) acc[g] = 0.0f;
    for (int c0 = 0; c0 < nb; c0 += 32) {
        const int nbc = min(32, nb - c0);
        int w[PR][8];  // the pairs' weights (NG > 1: the whole chunk's, kept for every group)
        uint16_t dw[PR] = {}, mw[PR] = {};  // (zero: a pair past the matrix is never read; the compiler cannot tell)
        UNROLL for (int g = 0; g < NG; g++) {  // acc[g] stays in registers
            if (g >= ng) break;
            const int t0 = tb + g * QGEMM_TOKENS, nt = min(QGEMM_TOKENS, a.T - t0);
            if (g > 0) __syncthreads();  // the last group's chain has read xq, xd, xs, dot
            for (int i = 0; i < nt; i++) quantize_chunk_part(a, t0 + i, c0, nb, xq[i], xd[i], xs[i]);
            __syncthreads();
            // the integer dots: pair k = (row r = k / nbc, block j = k % nbc), the pairs spread over all
            // threads; consecutive threads read consecutive blocks of a row (for nb <= 32 the block's rows
            // are one contiguous range), each loaded once for all tokens. A thread loads its PR pairs before
            // it uses any (one memory latency per round, not per pair); with NG > 1 one round holds the
            // chunk's pairs, loaded for the first group and used from the registers by the others.
            for (int k0 = 0; k0 < R * nbc; k0 += PR * NTH) {
                if (NG == 1 || g == 0) {
                    UNROLL for (int u = 0; u < PR; u++) {
                        const int k = k0 + tid + u * NTH, r = k / nbc, j = k - r * nbc;
                        if (k < R * nbc && o0 + r < rows) {
                            const uint8_t* blk = w0 + (long long)r * a.row_bytes + (long long)(c0 + j) * BS;
                            load_block_words<DT>(blk, a4, w[u], &dw[u], &mw[u]);
                        }
                    }
                }
                UNROLL for (int u = 0; u < PR; u++) {
                    const int k = k0 + tid + u * NTH, r = k / nbc, j = k - r * nbc;
                    if (k >= R * nbc || o0 + r >= rows) break;  // k grows with u
                    if (NG == 1 || g == 0) {
                        dws[j][r] = f16_bits_to_float(dw[u]);
                        if (DT == KD_Q4_1) mws[j][r] = f16_bits_to_float(mw[u]);
                    }
                    for (int i = 0; i < nt; i++) {
                        const int* x = reinterpret_cast<const int*>(xq[i][j]);
                        int I = 0;
                        for (int p = 0; p < 8; p++) I = dot4_i8(w[u][p], x[p], I);
                        if (DT == KD_Q4_0) {  // sum (q - 8) x = sum q x - 8 sum x, exact
                            int sx = 0;
                            for (int p = 0; p < 8; p++) sx = dot4_i8(0x01010101, x[p], sx);
                            I -= 8 * sx;
                        }
                        dot[i][j][r] = I;
                    }
                }
            }
            __syncthreads();
            if (lane && ci < nt) {
                for (int j = 0; j < nbc; j++) {
                    acc[g] = fmaf(dws[j][cr] * xd[ci][j], (float)dot[ci][j][cr], acc[g]);
                    if (DT == KD_Q4_1) acc[g] = fmaf(mws[j][cr], xs[ci][j], acc[g]);
                }
            }
        }
        if (c0 + 32 < nb) __syncthreads();  // the next 32 blocks overwrite xq, xd, xs, dot, dws, mws
    }
    UNROLL for (int g = 0; g < NG; g++) {
        const int t = tb + g * QGEMM_TOKENS + ci;
        if (g < ng && lane && t < a.T) qgemm_pick(a.y, m)[(long long)t * rows + o0 + cr] = acc[g];
    }
}

constexpr int QG16 = QGEMM_BLOCK_TOKENS / QGEMM_TOKENS;  // token groups of the _t16 kernels
__global__ void gemm_q8_0_kernel(QGemmArgs a) { gemm_q_body<KD_Q8_0, 32, 1>(a); }
__global__ void gemm_q4_0_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_0, 32, 1>(a); }
__global__ void gemm_q4_1_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_1, 32, 1>(a); }
__global__ void gemm_q8_0_r16_kernel(QGemmArgs a) { gemm_q_body<KD_Q8_0, 16, 1>(a); }
__global__ void gemm_q4_0_r16_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_0, 16, 1>(a); }
__global__ void gemm_q4_1_r16_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_1, 16, 1>(a); }
__global__ void gemm_q8_0_r8_kernel(QGemmArgs a) { gemm_q_body<KD_Q8_0, 8, 1>(a); }
__global__ void gemm_q4_0_r8_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_0, 8, 1>(a); }
__global__ void gemm_q4_1_r8_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_1, 8, 1>(a); }
__global__ void gemm_q8_0_r4_kernel(QGemmArgs a) { gemm_q_body<KD_Q8_0, 4, 1>(a); }
__global__ void gemm_q4_0_r4_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_0, 4, 1>(a); }
__global__ void gemm_q4_1_r4_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_1, 4, 1>(a); }
__global__ void gemm_q8_0_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q8_0, 32, QG16>(a); }
__global__ void gemm_q4_0_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_0, 32, QG16>(a); }
__global__ void gemm_q4_1_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_1, 32, QG16>(a); }
__global__ void gemm_q8_0_r16_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q8_0, 16, QG16>(a); }
__global__ void gemm_q4_0_r16_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_0, 16, QG16>(a); }
__global__ void gemm_q4_1_r16_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_1, 16, QG16>(a); }
__global__ void gemm_q8_0_r8_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q8_0, 8, QG16>(a); }
__global__ void gemm_q4_0_r8_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_0, 8, QG16>(a); }
__global__ void gemm_q4_1_r8_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_1, 8, QG16>(a); }
__global__ void gemm_q8_0_r4_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q8_0, 4, QG16>(a); }
__global__ void gemm_q4_0_r4_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_0, 4, QG16>(a); }
__global__ void gemm_q4_1_r4_t16_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_1, 4, QG16>(a); }

// ---- many tokens: int8 tensor cores, 16 (or 64) rows x 64 tokens per block, 4 32-blocks per step -----
// Half `half` of a block's 32 weights as 4 words of int8 (elements 16 half .. 16 half + 15; Q4_0 minus 8).
template <int DT>
__device__ __forceinline__ void load_half_words(const uint8_t* blk, int half, int* w) {
    for (int p = 0; p < 4; p++) {
        int v;
        if (DT == KD_Q8_0) {
            v = load_i32_a2(blk + 2 + 16 * half + 4 * p);
        } else {  // byte j holds element j (low nibble) and element 16 + j (high nibble)
            v = (load_i32_a2(blk + QBlock<DT>::qoff + 4 * p) >> (4 * half)) & 0x0F0F0F0F;
            // Q4_0: nibble q -> int8 q - 8 in every byte: q + 120 stays below 256 (no carry
            // between bytes), and flipping bit 7 subtracts 128 modulo 256
            if (DT == KD_Q4_0) v = (int)(((unsigned)v + 0x78787878u) ^ 0x80808080u);
        }
        w[p] = v;
    }
}

// One step's global data in registers (loaded a step ahead, stored to shared memory after the barrier),
// for a block of R = 16 or 64 weight rows: entry e = tid + 128 u of each kind, u = 0, 1, ...
template <int R>
struct QMmaStage {
    int w[R / 16][4];             // weights: (row r = e / 8, block kb = e / 2 % 4), half e % 2
    float dw[R / 16], mw[R / 16];  // that pair's scales (stored by half 0)
    int4 x[4];                    // activations: chunk e -> token e / 8, block e / 2 % 4, half e % 2
    float dx[2], sx[2];           // scales: entry e -> token e / 4, block e % 4
};

template <int DT, int R>
__device__ __forceinline__ void qmma_load(const QGemmArgs& a, const uint8_t* w0, int rows_left, int nt, int t0,
                                          int nb, int b0, QMmaStage<R>& st) {
    const int tid = threadIdx.x;
    for (int u = 0; u < R / 16; u++) {
        const int e = tid + 128 * u, r = e / 8, kb = e / 2 % QMMA_KB, half = e % 2, b = b0 + kb;
        for (int p = 0; p < 4; p++) st.w[u][p] = 0;
        st.dw[u] = st.mw[u] = 0.0f;
        if (r < rows_left && b < nb) {
            const uint8_t* blk = w0 + (long long)r * a.row_bytes + (long long)b * QBlock<DT>::bytes;
            load_half_words<DT>(blk, half, st.w[u]);
            st.dw[u] = f16_bits_to_float(load_u16_a2(blk));
            if (DT == KD_Q4_1) st.mw[u] = f16_bits_to_float(load_u16_a2(blk + 2));
        }
    }
    for (int u = 0; u < 4; u++) {
        const int e = tid + 128 * u, t = e / 8, kb = e / 2 % QMMA_KB, half = e % 2, b = b0 + kb;
        st.x[u] = make_int4(0, 0, 0, 0);
        if (t < nt && b < nb) st.x[u] = VLOAD(int4, a.xq + (long long)(t0 + t) * a.cols + (long long)b * 32 + 16 * half);
    }
    for (int u = 0; u < 2; u++) {
        const int e = tid + 128 * u, t = e / 4, b = b0 + e % 4;
        st.dx[u] = st.sx[u] = 0.0f;
        if (t < nt && b < nb) {
            st.dx[u] = a.xd[(long long)(t0 + t) * nb + b];
            st.sx[u] = a.xs[(long long)(t0 + t) * nb + b];
        }
    }
}

// The registers to shared memory (rows, tokens and blocks past the end are zeros): Ws[kb][o * 48 + k],
// Xs[kb][t * 48 + k] (only the 16 * groups tokens the tiles read), the scales dw[kb * R + o], dx[kb * 64 + t].
template <int R>
__device__ __forceinline__ void qmma_store(const QMmaStage<R>& st, signed char* Ws, signed char* Xs, float* dw,
                                           float* mw, float* dx, float* sx, int groups) {
    constexpr int LDX = 48;
    const int tid = threadIdx.x;
    for (int u = 0; u < R / 16; u++) {
        const int e = tid + 128 * u, r = e / 8, kb = e / 2 % QMMA_KB, half = e % 2;
        memcpy(&Ws[kb * R * LDX + r * LDX + 16 * half], st.w[u], 16);
        if (half == 0) {
            dw[kb * R + r] = st.dw[u];
            mw[kb * R + r] = st.mw[u];
        }
    }
    for (int u = 0; u < 4; u++) {
        const int e = tid + 128 * u, t = e / 8;
        if (t < 16 * groups) VSTORE(int4, &Xs[e / 2 % QMMA_KB * QMMA_TOKENS * LDX + t * LDX + 16 * (e % 2)], st.x[u]);
    }
    for (int u = 0; u < 2; u++) {
        const int e = tid + 128 * u;
        dx[e % 4 * QMMA_TOKENS + e / 4] = st.dx[u];
        sx[e % 4 * QMMA_TOKENS + e / 4] = st.sx[u];
    }
}

// I[t, o] of one 32-block for 16 rows (the staged block's rows o, k-major: col_major B) and every 16-token
// group g < groups (Xs: row_major A) -> Is[t * 16 + o]: exact int8 x int8 -> int32 (two k-halves of 16).
__device__ __forceinline__ void qmma_tiles(const signed char* Wb, const signed char* Xb, int* Is, int groups) {
    using namespace nvcuda;
    constexpr int LDX = 48, LDI = 16;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> wf[2];
    for (int kh = 0; kh < 2; kh++) wmma::load_matrix_sync(wf[kh], Wb + 16 * kh, LDX);
    for (int g = 0; g < groups; g++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, int> it;
        wmma::fill_fragment(it, 0);
        for (int kh = 0; kh < 2; kh++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> xf;
            wmma::load_matrix_sync(xf, Xb + 16 * g * LDX + 16 * kh, LDX);
            wmma::mma_sync(it, xf, wf[kh], it);
        }
        wmma::store_matrix_sync(Is + 16 * g * LDI, it, LDI, wmma::mem_row_major);
    }
}

template <int DT>
__device__ void gemm_q_mma_body(const QGemmArgs& a) {
    static_assert(QMMA_WARPS == 4 && QMMA_KB == 4 && QMMA_ROWS == 16 && QMMA_TOKENS == 64,
                  "the staging maps 128 threads onto 16 rows x 4 blocks and 64 tokens x 4 blocks");
    constexpr int R = QMMA_ROWS;
    constexpr int LDX = 48;  // bytes per staged block row: 32 + 16 pad (wmma: a multiple of 16)
    constexpr int LDI = 16;  // ints per token of an integer tile: lanes 0-15 and 16-31 of the chain
                             // read tokens t, t + 1 at banks 16 apart (conflict-free)
    constexpr int PER = R * QMMA_TOKENS / (32 * QMMA_WARPS);  // outputs per thread: 8
    __shared__ __align__(32) signed char Ws[QMMA_KB][R * LDX];            // Ws[kb][o][k]
    __shared__ __align__(32) signed char Xs[QMMA_KB][QMMA_TOKENS * LDX];  // Xs[kb][t][k]
    __shared__ __align__(32) int Is[QMMA_KB][QMMA_TOKENS * LDI];          // Is[kb][t][o] = I_b
    // the scales by step parity: the next step's store runs while slower threads still chain this one
    __shared__ float dws[2][QMMA_KB][R], mws[2][QMMA_KB][R];
    __shared__ float dxs[2][QMMA_KB][QMMA_TOKENS], sxs[2][QMMA_KB][QMMA_TOKENS];
    const int tid = threadIdx.x, warp = tid / 32;
    const int m = blockIdx.z, rows = qgemm_pick(a.rows, m);
    const int o0 = blockIdx.x * R, t0 = blockIdx.y * QMMA_TOKENS;
    if (o0 >= rows) return;  // the whole block: past a shorter matrix of the launch
    const int nt = min(QMMA_TOKENS, a.T - t0), groups = cdiv(nt, 16);
    const int nb = a.cols / 32;
    const uint8_t* w0 = qgemm_pick(a.w, m) + (long long)o0 * a.row_bytes;
    float acc[PER];
    for (int i = 0; i < PER; i++) acc[i] = 0.0f;
    QMmaStage<R> st;
    qmma_load<DT, R>(a, w0, rows - o0, nt, t0, nb, 0, st);
    for (int b0 = 0, par = 0; b0 < nb; b0 += QMMA_KB, par ^= 1) {
        qmma_store<R>(st, &Ws[0][0], &Xs[0][0], &dws[par][0][0], &mws[par][0][0], &dxs[par][0][0], &sxs[par][0][0],
                      groups);
        __syncthreads();
        // the next step's loads fly during this step's products and chain
        if (b0 + QMMA_KB < nb) qmma_load<DT, R>(a, w0, rows - o0, nt, t0, nb, b0 + QMMA_KB, st);
        // warp w: block b0 + w, 16 rows x every 16-token group, exact integer tiles
        if (b0 + warp < nb) qmma_tiles(Ws[warp], Xs[warp], Is[warp], groups);
        __syncthreads();
        // the chain: output (t, o) = (tid / 16 + 8 i, tid % 16), blocks b0, b0 + 1, ... in order
        const int nk = min(QMMA_KB, nb - b0);
        for (int kb = 0; kb < nk; kb++) {
            for (int i = 0; i < PER; i++) {
                const int t = tid / 16 + 8 * i, o = tid % 16;
                if (t < nt) {
                    acc[i] = fmaf(dws[par][kb][o] * dxs[par][kb][t], (float)Is[kb][t * LDI + o], acc[i]);
                    if (DT == KD_Q4_1) acc[i] = fmaf(mws[par][kb][o], sxs[par][kb][t], acc[i]);
                }
            }
        }
        // no barrier: the next store writes Ws, Xs (read before the barrier above) and the other
        // parity's scales; Is is rewritten only after the next step's first barrier
    }
    float* y = qgemm_pick(a.y, m);
    for (int i = 0; i < PER; i++) {
        const int t = tid / 16 + 8 * i, o = tid % 16;
        if (t < nt && o0 + o < rows) y[(long long)(t0 + t) * rows + o0 + o] = acc[i];
    }
}

__global__ void gemm_q8_0_mma_kernel(QGemmArgs a) { gemm_q_mma_body<KD_Q8_0>(a); }
__global__ void gemm_q4_0_mma_kernel(QGemmArgs a) { gemm_q_mma_body<KD_Q4_0>(a); }
__global__ void gemm_q4_1_mma_kernel(QGemmArgs a) { gemm_q_mma_body<KD_Q4_1>(a); }

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
// Scratch layout: int8 activations T x cols (padded to 16 bytes), then T x cols/32 scales d, then sums s.
static size_t matmul_q_act_bytes(int T, int cols) { return ((size_t)T * cols + 15) / 16 * 16; }

size_t matmul_q_scratch_bytes(int T, int cols) {
    return matmul_q_act_bytes(T, cols) + 2 * (size_t)T * (cols / 32) * sizeof(float);
}

// x quantized into the scratch (xq, then xd and xs): one quantize_q8_kernel launch, a warp per 32-block.
static void quantize_acts(const float* x, int T, int cols, void* scratch, KernelRunner& kr, const int8_t** xq_out,
                          const float** xd_out, const float** xs_out) {
    const int nb = cols / 32;
    uint8_t* base = (uint8_t*)scratch;
    int8_t* xq = (int8_t*)base;
    float* xd = (float*)(base + matmul_q_act_bytes(T, cols));
    float* xs = xd + (size_t)T * nb;
    KRUN(kr, cdiv(T * nb, 8), 256, 0, quantize_q8_kernel, x, xq, xd, xs, T, cols);
    *xq_out = xq;
    *xd_out = xd;
    *xs_out = xs;
}

QGemmChoice qgemm_choice_env() {
    QGemmChoice c;
    c.dp4a_max_t = env_positive("BEAGLE_CUDA_DP4A_MAX_T", c.dp4a_max_t);
    c.dp4a_rows = env_positive("BEAGLE_CUDA_QGEMM_ROWS", c.dp4a_rows);
    c.dp4a_tokens = env_positive("BEAGLE_CUDA_QGEMM_TOKENS", c.dp4a_tokens);
    return c;
}

int qgemm_dp4a_rows(int max_rows, int n, int T, int block_tokens) {
    for (int R = QGEMM_ROWS; R > QGEMM_ROWS_MIN; R /= 2)
        if ((long long)cdiv(max_rows, R) * n * cdiv(T, block_tokens) >= QGEMM_FILL_BLOCKS) return R;
    return QGEMM_ROWS_MIN;
}

void launch_matmul_q(int n, float* const* ys, const float* x, const uint8_t* const* Ws, const int* rows, int dtype,
                     long long row_bytes, int cols, int T, void* scratch, KernelRunner& kr, const QGemmChoice* choice) {
    static const QGemmChoice env = qgemm_choice_env();
    const QGemmChoice& c = choice ? *choice : env;
    kcheck(kr, dtype == KD_Q8_0 || dtype == KD_Q4_0 || dtype == KD_Q4_1,
           "quantized matmul: weight dtype %d is not Q8_0, Q4_0 or Q4_1", dtype);
    kcheck(kr, cols % 32 == 0, "quantized matmul: %d columns, not a multiple of 32", cols);
    kcheck(kr, n >= 1 && n <= QGEMM_MATS, "quantized matmul: %d matrices in one launch, expected 1..%d", n, QGEMM_MATS);
    if (T <= 0) return;
    QGemmArgs a = {};
    a.n = n;
    int max_rows = 0;
    for (int m = 0; m < n; m++) {
        a.w[m] = Ws[m];
        a.y[m] = ys[m];
        a.rows[m] = rows[m];
        max_rows = rows[m] > max_rows ? rows[m] : max_rows;
        const bool overlap = ys[m] < x + (long long)T * cols && x < ys[m] + (long long)T * rows[m];
        kcheck(kr, !overlap, "quantized matmul: output %d overlaps the input", m);
    }
    a.row_bytes = row_bytes;
    a.cols = cols;
    a.x = x;
    a.T = T;
    kcheck(kr, c.dp4a_rows == 0 || c.dp4a_rows == 4 || c.dp4a_rows == 8 || c.dp4a_rows == 16 || c.dp4a_rows == 32,
           "quantized matmul: %d rows per dp4a block (BEAGLE_CUDA_QGEMM_ROWS), expected 4, 8, 16 or 32", c.dp4a_rows);
    kcheck(kr, c.dp4a_tokens == 0 || c.dp4a_tokens == QGEMM_TOKENS || c.dp4a_tokens == QGEMM_BLOCK_TOKENS,
           "quantized matmul: %d tokens per dp4a block (BEAGLE_CUDA_QGEMM_TOKENS), expected 4 or 16", c.dp4a_tokens);
    if (T <= c.dp4a_max_t) {  // the kernel quantizes x itself; same bits as the tensor-core path
        // tokens per block: 16 above 4 tokens (the _t16 kernels: weights read once), else 4
        const int bt = T > QGEMM_TOKENS && c.dp4a_tokens != QGEMM_TOKENS ? QGEMM_BLOCK_TOKENS : QGEMM_TOKENS;
        const int R = c.dp4a_rows ? c.dp4a_rows : qgemm_dp4a_rows(max_rows, n, T, bt);
        dim3 grid(cdiv(max_rows, R), cdiv(T, bt), n);
        const int nth = 32 * QGEMM_WARPS;
        // the kernel of R rows and this dtype among the twelve of one token width (SUFFIX: empty or _t16)
#define KRUN_DP4A(SUFFIX)                                                                          \
    do {                                                                                           \
        if (R == 32 && dtype == KD_Q8_0) KRUN(kr, grid, nth, 0, gemm_q8_0##SUFFIX##_kernel, a);     \
        if (R == 32 && dtype == KD_Q4_0) KRUN(kr, grid, nth, 0, gemm_q4_0##SUFFIX##_kernel, a);     \
        if (R == 32 && dtype == KD_Q4_1) KRUN(kr, grid, nth, 0, gemm_q4_1##SUFFIX##_kernel, a);     \
        if (R == 16 && dtype == KD_Q8_0) KRUN(kr, grid, nth, 0, gemm_q8_0_r16##SUFFIX##_kernel, a); \
        if (R == 16 && dtype == KD_Q4_0) KRUN(kr, grid, nth, 0, gemm_q4_0_r16##SUFFIX##_kernel, a); \
        if (R == 16 && dtype == KD_Q4_1) KRUN(kr, grid, nth, 0, gemm_q4_1_r16##SUFFIX##_kernel, a); \
        if (R == 8 && dtype == KD_Q8_0) KRUN(kr, grid, nth, 0, gemm_q8_0_r8##SUFFIX##_kernel, a);   \
        if (R == 8 && dtype == KD_Q4_0) KRUN(kr, grid, nth, 0, gemm_q4_0_r8##SUFFIX##_kernel, a);   \
        if (R == 8 && dtype == KD_Q4_1) KRUN(kr, grid, nth, 0, gemm_q4_1_r8##SUFFIX##_kernel, a);   \
        if (R == 4 && dtype == KD_Q8_0) KRUN(kr, grid, nth, 0, gemm_q8_0_r4##SUFFIX##_kernel, a);   \
        if (R == 4 && dtype == KD_Q4_0) KRUN(kr, grid, nth, 0, gemm_q4_0_r4##SUFFIX##_kernel, a);   \
        if (R == 4 && dtype == KD_Q4_1) KRUN(kr, grid, nth, 0, gemm_q4_1_r4##SUFFIX##_kernel, a);   \
    } while (0)
        if (bt == QGEMM_TOKENS) KRUN_DP4A();  // one group of tokens a block: a round of pairs at a time
        else KRUN_DP4A(_t16);
#undef KRUN_DP4A
        return;
    }
    kcheck(kr, scratch != nullptr, "quantized matmul: T = %d takes the tensor-core path, which needs scratch", T);
    quantize_acts(x, T, cols, scratch, kr, &a.xq, &a.xd, &a.xs);
    dim3 grid(cdiv(max_rows, QMMA_ROWS), cdiv(T, QMMA_TOKENS), n);
    if (dtype == KD_Q8_0) KRUN(kr, grid, 32 * QMMA_WARPS, 0, gemm_q8_0_mma_kernel, a);
    if (dtype == KD_Q4_0) KRUN(kr, grid, 32 * QMMA_WARPS, 0, gemm_q4_0_mma_kernel, a);
    if (dtype == KD_Q4_1) KRUN(kr, grid, 32 * QMMA_WARPS, 0, gemm_q4_1_mma_kernel, a);
}

// ---- the 5-bit and k-quant types (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) -----------------------------------
// gemm_kquant_kernel: y = x W^T after quantize_q8_kernel, for weights that qblock_decode (common.cuh)
//   reads. Grid (cdiv(rows, KQ_WARPS), cdiv(T, KQ_TOKENS)), KQ_WARPS warps: warp w computes row
//   KQ_WARPS blockIdx.x + w for the block's KQ_TOKENS tokens. Lane l takes the row's 32-blocks b = l,
//   l + 32, ... in order and keeps, per token, its own chain
//     acc = fmaf(a d_x[b], (float) I, acc)   (+ acc = fmaf(m, s_x[b], acc) for Q5_1, Q4_K, Q5_K)
//   with I = sum_j w_j q_j exact (|I| <= 32 * 32 * 127); Q6_K has one I and one a per half block, the
//   first half first. y = the warp's xor-tree sum of the 32 chains (every lane holds the same bits).
//   The order depends on nothing but the row's length: batch invariant (a token's row has the same bits
//   at every T). Why this shape: the weights of a block are decoded once for KQ_TOKENS tokens, and a warp
//   reads a row's blocks side by side; it is the plain form of the mapping above (no shared-memory
//   staging, no tensor cores), there so that every tensor of a llama.cpp Q4_K_M / Q5_K_M / Q6_K file runs.
constexpr int KQ_WARPS = 4, KQ_TOKENS = 4;

__global__ void gemm_kquant_kernel(float* y, const uint8_t* W, int dtype, long long row_bytes, int rows, int cols,
                                   const int8_t* xq, const float* xd, const float* xs, int T) {
    const int lane = threadIdx.x % 32, r = blockIdx.x * KQ_WARPS + threadIdx.x / 32;
    const int t0 = blockIdx.y * KQ_TOKENS;
    if (r >= rows) return;  // a whole warp
    const int nb = cols / 32, nt = T - t0 < KQ_TOKENS ? T - t0 : KQ_TOKENS;
    const bool has_m = dtype == KD_Q5_1 || dtype == KD_Q4_K || dtype == KD_Q5_K;
    const uint8_t* row = W + (long long)r * row_bytes;
    float acc[KQ_TOKENS] = {};
    for (int b = lane; b < nb; b += 32) {
        int w[32];
        float a[2], m;
        qblock_decode(dtype, row, b, w, a, &m);
        for (int c = 0; c < KQ_TOKENS; c++) {  // (constant bounds: acc stays in registers)
            if (c >= nt) break;
            const long long k = (long long)(t0 + c) * nb + b;  // the token's 32-block
            const int8_t* q = xq + k * 32;
            if (dtype == KD_Q6_K) {
                int I0 = 0, I1 = 0;
                UNROLL for (int j = 0; j < 16; j++) I0 += w[j] * (int)q[j];
                UNROLL for (int j = 16; j < 32; j++) I1 += w[j] * (int)q[j];
                acc[c] = fmaf(a[0] * xd[k], (float)I0, acc[c]);
                acc[c] = fmaf(a[1] * xd[k], (float)I1, acc[c]);
            } else {
                int I = 0;
                UNROLL for (int j = 0; j < 32; j++) I += w[j] * (int)q[j];
                acc[c] = fmaf(a[0] * xd[k], (float)I, acc[c]);
                if (has_m) acc[c] = fmaf(m, xs[k], acc[c]);
            }
        }
    }
    for (int c = 0; c < KQ_TOKENS; c++) {  // every lane reduces (the shuffles need the whole warp)
        const float v = warp_sum(acc[c]);
        if (lane == 0 && c < nt) y[(long long)(t0 + c) * rows + r] = v;
    }
}

void launch_matmul_kquant(float* y, const float* x, const uint8_t* W, int rows, int dtype, long long row_bytes, int cols,
                          int T, void* scratch, KernelRunner& kr) {
    kcheck(kr, dtype == KD_Q5_0 || dtype == KD_Q5_1 || dtype == KD_Q4_K || dtype == KD_Q5_K || dtype == KD_Q6_K,
           "k-quant matmul: weight dtype %d is not Q5_0, Q5_1, Q4_K, Q5_K or Q6_K", dtype);
    const int be = dtype >= KD_Q4_K ? 256 : 32;
    kcheck(kr, cols > 0 && cols % be == 0, "k-quant matmul: %d columns, not a positive multiple of %d", cols, be);
    kcheck(kr, !(y < x + (long long)T * cols && x < y + (long long)T * rows), "k-quant matmul: the output overlaps the input");
    if (T <= 0 || rows <= 0) return;
    kcheck(kr, scratch != nullptr, "k-quant matmul: no scratch for the quantized activations");
    const int8_t* xq;
    const float *xd, *xs;
    quantize_acts(x, T, cols, scratch, kr, &xq, &xd, &xs);
    dim3 grid(cdiv(rows, KQ_WARPS), cdiv(T, KQ_TOKENS));
    KRUN(kr, grid, 32 * KQ_WARPS, 0, gemm_kquant_kernel, y, W, dtype, row_bytes, rows, cols, xq, xd, xs, T);
}
