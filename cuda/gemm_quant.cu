// gemm_quant.cu: y = x W^T for weights stored as GGUF blocks (Q8_0, Q4_0, Q4_1): the target's
// quantized linear layers (forward only: the target is frozen). Launched (launch_* at the end) by the CUDA backend's
// matmul (src/backend/gpu/ops_cuda.cu); tested by test/kernels/cuda_emu_kernels_gemm_quant.cpp.
//
// quantize_q8_kernel: each 32-value block of an activation row becomes int8 q, d = max|x| / 127 and
//   s = d * sum q (one thread per block: the max is exact and the sum an integer, so any order gives
//   the same bits), rounding as the CPU backend's 8-bit mode (src/backend/cpu/quantize.h):
//   q = round-half-even(x * (1 / d)), a NaN makes d NaN.
// gemm_q{8_0,4_0,4_1}_kernel: a block of 4 warps covers 4 weight rows (one per warp) x 4 tokens. A
//   warp walks its row 8 blocks at a time, 4 lanes per 32-block, each lane 8 values: two dp4a
//   (int8 x int8 -> int32, exact) give the lane's integer dot I, and the lane accumulates
//   d_w * d_x * I for each of its 4 tokens (the weight bytes are loaded once for all 4). Q4_0 adds
//   -8 d_w s_x and Q4_1 adds m_w s_x per block (lane part 0). The 32 lane partials of a token go
//   through shared memory and one lane adds them in lane order (one warp barrier).
//   Batch invariance: the lane -> block mapping and the final lane-order sum do not depend on T or on
//   the token's slot in its group of 4, and tokens never mix, so y[t, o] has the same bits for any T.
//   Blocks of 34 (Q8_0) and 18 (Q4_0) bytes are only 2-byte aligned: weights are read as 16-bit halves.
// dp4a: the hardware instruction under nvcc (sm_61+, common.cuh dot4_i8, compile-tested only); the
// portable byte loop is what the emulator runs and the tests check (against a double reference of the
// dequantized weights times the dequantized int8 activations, and against the plain f32 product).
#include "kernels.cuh"

__global__ void quantize_q8_kernel(const float* x, int8_t* xq, float* xd, float* xs, int T, int cols) {
    const int nb = cols / 32;
    const long long blk = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // one thread per 32-block
    if (blk >= (long long)T * nb) return;
    const long long t = blk / nb, b = blk % nb;
    const float* xb = x + t * cols + b * 32;
    float amax = 0.0f;
    bool nan = false;
    for (int j = 0; j < 32; j++) {
        amax = fmaxf(amax, fabsf(xb[j]));
        nan |= xb[j] != xb[j];
    }
    const float d = nan ? __int_as_float(0x7fc00000) : amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int qsum = 0;
    int8_t* qb = xq + t * cols + b * 32;
    for (int j = 0; j < 32; j++) {
        const int q = __float2int_rn(xb[j] * id);
        qsum += q;
        qb[j] = (int8_t)q;
    }
    xd[t * nb + b] = d;
    xs[t * nb + b] = d * (float)qsum;
}

// 32-bit word from a 2-byte aligned address (little-endian).
__device__ __forceinline__ int load_i32_a2(const uint8_t* p) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

// DT: KD_Q8_0, KD_Q4_0 or KD_Q4_1.
template <int DT>
__device__ void gemm_q_body(const QGemmArgs& a) {
    constexpr int BS = DT == KD_Q8_0 ? 34 : DT == KD_Q4_0 ? 18 : 20;  // block bytes
    constexpr int QOFF = DT == KD_Q4_1 ? 4 : 2;                          // offset of qs in the block
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int o = blockIdx.x * QGEMM_WARPS + warp;
    const int t0 = blockIdx.y * QGEMM_TOKENS;
    if (o >= a.rows) return;  // whole warps
    const int nt = min(QGEMM_TOKENS, a.T - t0);
    const int nb = a.cols / 32;
    const int sub = lane / 4, part = lane % 4;  // block sub of each group of 8, quarter `part` of it
    const uint8_t* wrow = a.w + (long long)o * a.row_bytes;
    float acc[QGEMM_TOKENS];
    for (int i = 0; i < QGEMM_TOKENS; i++) acc[i] = 0.0f;
    for (int b = sub; b < nb; b += 8) {
        const uint8_t* blk = wrow + (long long)b * BS;
        const float dw = f16_bits_to_float(load_u16(blk));
        int w0, w1;  // 8 int8 weights of this lane, as the activation ints x0, x1 below pair with them
        int xoff0, xoff1;
        if (DT == KD_Q8_0) {
            w0 = load_i32_a2(blk + QOFF + 8 * part);
            w1 = load_i32_a2(blk + QOFF + 8 * part + 4);
            xoff0 = 8 * part;
            xoff1 = 8 * part + 4;
        } else {  // bytes 4 part .. 4 part + 3 hold elements 4 part.. (low nibbles) and 16 + 4 part.. (high)
            const int v = load_i32_a2(blk + QOFF + 4 * part);
            w0 = v & 0x0F0F0F0F;
            w1 = (v >> 4) & 0x0F0F0F0F;
            xoff0 = 4 * part;
            xoff1 = 16 + 4 * part;
        }
        float mw = 0.0f;  // per-block offset term coefficient: x = d (q - 8) or d q + m
        if (DT == KD_Q4_0) mw = -8.0f * dw;
        if (DT == KD_Q4_1) mw = f16_bits_to_float(load_u16(blk + 2));
        for (int i = 0; i < QGEMM_TOKENS; i++) {
            if (i >= nt) break;
            const long long t = t0 + i;
            const int8_t* xq = a.xq + t * a.cols + b * 32;
            const int x0 = *reinterpret_cast<const int*>(xq + xoff0);
            const int x1 = *reinterpret_cast<const int*>(xq + xoff1);
            const int I = dot4_i8(w1, x1, dot4_i8(w0, x0, 0));
            acc[i] = fmaf(dw * a.xd[t * nb + b], (float)I, acc[i]);
            if (DT != KD_Q8_0 && part == 0) acc[i] = fmaf(mw, a.xs[t * nb + b], acc[i]);
        }
    }
    // Lane partials -> one sum per token: through shared memory, then lane i adds the 32 partials of
    // token i in lane order (one warp barrier instead of shuffle trees; the same order for every token
    // slot, so a token's bits do not depend on its place in the group).
    __shared__ float red[QGEMM_WARPS][QGEMM_TOKENS][33];
    for (int i = 0; i < QGEMM_TOKENS; i++) red[warp][i][lane] = acc[i];
    __syncwarp();
    if (lane < nt) {
        float s = 0.0f;
        for (int j = 0; j < 32; j++) s += red[warp][lane][j];
        a.y[(long long)(t0 + lane) * a.rows + o] = s;
    }
}

__global__ void gemm_q8_0_kernel(QGemmArgs a) { gemm_q_body<KD_Q8_0>(a); }
__global__ void gemm_q4_0_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_0>(a); }
__global__ void gemm_q4_1_kernel(QGemmArgs a) { gemm_q_body<KD_Q4_1>(a); }

// ---- launchers (kernels.cuh) ------------------------------------------------------------------
// Scratch layout: int8 activations T x cols (padded to 16 bytes), then T x cols/32 scales d, then sums s.
static size_t matmul_q_act_bytes(int T, int cols) { return ((size_t)T * cols + 15) / 16 * 16; }

size_t matmul_q_scratch_bytes(int T, int cols) {
    return matmul_q_act_bytes(T, cols) + 2 * (size_t)T * (cols / 32) * sizeof(float);
}

void launch_matmul_q(float* y, const float* x, const uint8_t* W, int dtype, long long row_bytes, int rows, int cols,
                     int T, void* scratch, KernelRunner& kr) {
    kcheck(kr, dtype == KD_Q8_0 || dtype == KD_Q4_0 || dtype == KD_Q4_1,
           "quantized matmul: weight dtype %d is not Q8_0, Q4_0 or Q4_1", dtype);
    kcheck(kr, cols % 32 == 0, "quantized matmul: %d columns, not a multiple of 32", cols);
    if (T <= 0) return;
    const int nb = cols / 32;
    uint8_t* base = (uint8_t*)scratch;
    int8_t* xq = (int8_t*)base;
    float* xd = (float*)(base + matmul_q_act_bytes(T, cols));
    float* xs = xd + (size_t)T * nb;
    KRUN(kr, cdiv(T * nb, 256), 256, 0, quantize_q8_kernel, x, xq, xd, xs, T, cols);
    QGemmArgs a;
    a.w = W;
    a.row_bytes = row_bytes;
    a.rows = rows;
    a.cols = cols;
    a.xq = xq;
    a.xd = xd;
    a.xs = xs;
    a.y = y;
    a.T = T;
    dim3 grid(cdiv(rows, QGEMM_WARPS), cdiv(T, QGEMM_TOKENS));
    if (dtype == KD_Q8_0) KRUN(kr, grid, 32 * QGEMM_WARPS, 0, gemm_q8_0_kernel, a);
    if (dtype == KD_Q4_0) KRUN(kr, grid, 32 * QGEMM_WARPS, 0, gemm_q4_0_kernel, a);
    if (dtype == KD_Q4_1) KRUN(kr, grid, 32 * QGEMM_WARPS, 0, gemm_q4_1_kernel, a);
}
