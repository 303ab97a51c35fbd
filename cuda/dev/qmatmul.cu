// qmatmul.cu: the quantized matmul y = x W^T with W stored as GGUF Q4_1 blocks (the shipped SmolLM2
// target's format), from one thread per output to the shipped kernel (cuda/gemm_quant.cu
// gemm_q4_1_kernel and gemm_q4_1_mma_kernel). Read after matmul.cu. Build and run: `make cuda-dev`, or on a GPU
// `nvcc -O2 -arch=sm_80 cuda/dev/qmatmul.cu -o qmatmul`.
//
// The arithmetic (the same in every version; only where it runs changes): x is first quantized per
// 32-value block to int8 q, d = max|x| / 127, s = d sum q (the shipped quantize_q8_kernel, checked
// bit for bit against the CPU here). A Q4_1 weight block holds d_w, m_w (fp16) and 32 nibbles q_w, the
// weights d_w q_w + m_w. So one block contributes d_w d_x sum_j q_w[j] q_x[j] + m_w s_x: an EXACT
// integer dot product scaled by two floats. Only that scaling and the float sum over blocks round.
//
// A MODEL (derived, not measured) for a 16-node tree-verify pass through the SmolLM2-135M MLP up-projection:
// T = 16 tokens, rows = 1536, cols = 576 (18 blocks per row). W is 1536 x 18 x 20 B = 0.55 MB (the
// f32 matrix would be 3.5 MB), the int8 activations 9 KB, 14 M integer MACs: ~26 MACs per weight
// byte if W is read once. With dp4a an H100 does ~130 T int8 MACs/s against ~3.35 TB/s of HBM, ~40
// per byte: even read once the product sits below the ridge, and every re-read of W makes it more
// memory bound. So the versions below are mostly about reading W fewer times, in fewer, wider,
// coalesced loads.
//
// version 1: one thread per output (t, o), byte loops over the row. Every token re-reads W: 16 x 0.55
//   = 8.8 MB requested. Neighbouring threads own neighbouring rows, 360 bytes apart, so one warp-wide
//   byte load touches 32 sectors (1 KB moved for 32 useful bytes); per 32 MACs a thread issues ~50
//   one-byte loads. Bound by load instructions and sector traffic.
// version 2: one warp per (t, o). Lane = (sub, part): 8 blocks per pass, 4 lanes per block, each lane
//   8 of its 32 values, so a warp-wide load covers 8 consecutive blocks (160 contiguous bytes:
//   coalesced). The 32 lane partials meet in a shuffle butterfly (common.cuh warp_sum). Still byte
//   loads and one multiply-add per value; W still read once per token.
// version 3: packed loads and dp4a. The lane's 8 nibbles are one 32-bit load (low nibbles: elements
//   4 part.., high: 16 + 4 part..), its 8 activations two 32-bit loads, and two dp4a (4 int8 MACs per
//   instruction, common.cuh dot4_i8; the emulator runs its portable byte loop) replace 8 byte loads
//   and 8 multiply-adds: ~5 instructions per 8 MACs instead of ~28.
// version 4 (the core of the shipped kernel for T <= QGEMM_DP4A_MAX_T = 16, cuda/gemm_quant.cu
//   gemm_q4_1_kernel, which also keeps each chunk's weights in registers for 4 such token groups, 16 tokens
//   a block, so that W is read once per verify of up to 16 tokens): 4 tokens and 32 rows per block, cdiv(T, 4)
//   token blocks. A thread owns whole (row, 32-block) pairs (a warp reads consecutive blocks, 640 contiguous
//   bytes), their 16 weight bytes serve the 4 tokens from registers, so W is read T/4 times (2.2 MB instead of
//   8.8 MB at T = 16) and its unpacking is paid once per 4 tokens. The exact integer dot I_b of each
//   (token, block) and its scale d_w d_x go through shared memory and one lane per token runs the fma
//   chain over the blocks in order: a fixed order per output that v5 reproduces exactly, so y[t] has
//   the same bits whatever T is and whichever kernel ran (batch invariance). It reads the f32 x and
//   quantizes its tokens' blocks into shared memory itself (the rule of the quantize kernel,
//   the same bits), so a decode matmul is one launch, not two.
// version 5 (shipped for T > QGEMM_DP4A_MAX_T, gemm_q4_1_mma_kernel): int8 tensor cores. A block covers 16 rows x 64
//   tokens: W is read ONCE for a verify of up to 64 tokens (0.55 MB at T = 16, 4x less than v4).
//   Per step of 4 32-blocks the rows' nibbles (unpacked to int8) and the tokens' int8 activations are
//   staged in shared memory (loaded a step ahead into registers), warp w multiplies block w of the
//   step for every 16-token group with wmma m16n16k16 s8 -> s32 (exact), and each thread applies the
//   scales of its outputs in block order: v4's chain.
//   On an H100 the int8 mma rate (~1,000 T ops/s dense) is far above dp4a's, so the kernel is bound by
//   reading W once, at about 0.2 us for this matrix.
// At T = 1 (plain decode) v3 and v4 read the same bytes; the ideal there is W read once, 0.55 MB, about
// 0.2 us of HBM time on an H100, so a decode step of this small model is launch-latency bound.
//
// Tolerance: the integer dots are exact; each output is a float sum of at most 2 nb scaled terms
// (nb = cols / 32) (v2/v3: plus a 32-lane reduction), every term with one more rounding (d_w d_x), so with u = 2^-24
// the error is at most (2 nb + 34) u sum_b (d_w d_x sum_j |q_w q_x| + |m_w s_x|) (element magnitudes,
// which bound any grouping of the dot into partial sums), against a double reference of the same
// quantized arithmetic. The quantization itself must match the CPU bit for bit.
#include "dev.cuh"
#include "../gemm_quant.cu"

constexpr int Q41_BYTES = 20;  // fp16 d, fp16 m, 16 bytes of nibbles

// ---- CPU reference ------------------------------------------------------------------------------
static float half_bits_to_float(const uint8_t* p) {
    __half h;
    memcpy(&h, p, 2);
    return __half2float(h);
}
static int q41_nibble(const uint8_t* blk, int j) { return j < 16 ? (blk[4 + j] & 0x0F) : (blk[4 + j - 16] >> 4); }

// x -> int8 blocks exactly as quantize_q8_kernel (and the CPU backend) rounds: d = amax / 127,
// q = round-half-even(x * (1 / d)), s = d * sum q.
static void quantize_cpu(const std::vector<float>& x, int T, int cols, std::vector<int8_t>& xq, std::vector<float>& xd,
                         std::vector<float>& xs) {
    const int nb = cols / 32;
    xq.resize((size_t)T * cols);
    xd.resize((size_t)T * nb);
    xs.resize((size_t)T * nb);
    for (int t = 0; t < T; t++)
        for (int b = 0; b < nb; b++) {
            const float* xb = &x[(size_t)t * cols + b * 32];
            float amax = 0.0f;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            int qsum = 0;
            for (int j = 0; j < 32; j++) {
                const int q = (int)nearbyintf(xb[j] * id);
                xq[(size_t)t * cols + b * 32 + j] = (int8_t)q;
                qsum += q;
            }
            xd[(size_t)t * nb + b] = d;
            xs[(size_t)t * nb + b] = d * (float)qsum;
        }
}

static void qmatmul_cpu(const std::vector<uint8_t>& w, int rows, int cols, const std::vector<int8_t>& xq,
                        const std::vector<float>& xd, const std::vector<float>& xs, int T, std::vector<double>& ref,
                        std::vector<double>& tol) {
    const int nb = cols / 32;
    const double bound = (2.0 * nb + 34) * DEV_U32;
    ref.assign((size_t)T * rows, 0.0);
    tol.assign((size_t)T * rows, 0.0);
    for (int t = 0; t < T; t++)
        for (int o = 0; o < rows; o++) {
            double s = 0, sa = 0;
            for (int b = 0; b < nb; b++) {
                const uint8_t* blk = &w[((size_t)o * nb + b) * Q41_BYTES];
                const double dw = half_bits_to_float(blk), mw = half_bits_to_float(blk + 2);
                long long I = 0, Iabs = 0;
                for (int j = 0; j < 32; j++) {
                    const int p = q41_nibble(blk, j) * xq[(size_t)t * cols + b * 32 + j];
                    I += p;
                    Iabs += p < 0 ? -p : p;
                }
                const double dd = dw * xd[(size_t)t * nb + b], off = mw * xs[(size_t)t * nb + b];
                s += dd * (double)I + off;
                sa += fabs(dd) * (double)Iabs + fabs(off);
            }
            ref[(size_t)t * rows + o] = s;
            tol[(size_t)t * rows + o] = bound * sa + 1e-30;
        }
}

// ---- version 1: one thread per output, byte loops -------------------------------------------------
__global__ void qmatmul_v1_kernel(QGemmArgs a) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (o >= a.rows[0]) return;
    const int nb = a.cols / 32;
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        const uint8_t* blk = a.w[0] + (long long)o * a.row_bytes + (long long)b * Q41_BYTES;
        const int8_t* xb = a.xq + (long long)t * a.cols + b * 32;
        int I = 0;
        for (int j = 0; j < 16; j++) I += (blk[4 + j] & 0x0F) * xb[j] + (blk[4 + j] >> 4) * xb[16 + j];
        acc = fmaf(f16_bits_to_float(load_u16(blk)) * a.xd[t * nb + b], (float)I, acc);
        acc = fmaf(f16_bits_to_float(load_u16(blk + 2)), a.xs[t * nb + b], acc);
    }
    a.y[0][(long long)t * a.rows[0] + o] = acc;
}

// ---- versions 2 and 3: one warp per (t, o), lanes split the blocks ---------------------------------
// Lane (sub, part) = (lane / 4, lane % 4) takes blocks sub, sub + 8, ... and in each the 8 values
// 4 part .. 4 part + 3 (low nibbles of bytes 4 part..) and 16 + 4 part .. (their high nibbles).
template <bool PACKED>
__global__ void qmatmul_warp_kernel(QGemmArgs a) {
    const int lane = threadIdx.x % 32, o = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, t = blockIdx.y;
    if (o >= a.rows[0]) return;  // whole warps
    const int nb = a.cols / 32, sub = lane / 4, part = lane % 4;
    float acc = 0.0f;
    for (int b = sub; b < nb; b += 8) {
        const uint8_t* blk = a.w[0] + (long long)o * a.row_bytes + (long long)b * Q41_BYTES;
        const int8_t* xb = a.xq + (long long)t * a.cols + b * 32;
        int I = 0;
        if (PACKED) {  // v3: one 32-bit load of 8 nibbles, two of 4 activations each, two dp4a
            const int v = load_i32_a2(blk + 4 + 4 * part);
            const int x0 = *reinterpret_cast<const int*>(xb + 4 * part);
            const int x1 = *reinterpret_cast<const int*>(xb + 16 + 4 * part);
            I = dot4_i8((v >> 4) & 0x0F0F0F0F, x1, dot4_i8(v & 0x0F0F0F0F, x0, 0));
        } else {       // v2: byte by byte
            for (int i = 0; i < 4; i++) {
                const int byte = blk[4 + 4 * part + i];
                I += (byte & 0x0F) * xb[4 * part + i] + (byte >> 4) * xb[16 + 4 * part + i];
            }
        }
        acc = fmaf(f16_bits_to_float(load_u16(blk)) * a.xd[t * nb + b], (float)I, acc);
        if (part == 0) acc = fmaf(f16_bits_to_float(load_u16(blk + 2)), a.xs[t * nb + b], acc);
    }
    acc = warp_sum(acc);
    if (lane == 0) a.y[0][(long long)t * a.rows[0] + o] = acc;
}

// ---- launchers ------------------------------------------------------------------------------------
static void qmatmul_run(int version, const QGemmArgs& a) {
    const dim3 warp_grid(cdiv(a.rows[0], 4), a.T);  // v2, v3: 4 warps per block, one (t, o) each
    switch (version) {
        case 1: KLAUNCH(dim3(cdiv(a.rows[0], 128), a.T), 128, 0, 0, qmatmul_v1_kernel)(a); break;
        case 2: KLAUNCH(warp_grid, 128, 0, 0, qmatmul_warp_kernel<false>)(a); break;
        case 3: KLAUNCH(warp_grid, 128, 0, 0, qmatmul_warp_kernel<true>)(a); break;
        case 4:  // the shipped launch for T <= QGEMM_DP4A_MAX_T (cuda/gemm_quant.cu launch_matmul_q)
            KLAUNCH(dim3(cdiv(a.rows[0], QGEMM_ROWS), cdiv(a.T, QGEMM_TOKENS)), 32 * QGEMM_WARPS, 0, 0,  // R = 32
                    gemm_q4_1_kernel)(a);
            break;
        case 5:  // the shipped launch for T > QGEMM_DP4A_MAX_T
            KLAUNCH(dim3(cdiv(a.rows[0], QMMA_ROWS), cdiv(a.T, QMMA_TOKENS)), 32 * QMMA_WARPS, 0, 0,
                    gemm_q4_1_mma_kernel)(a);
            break;
    }
    dev_launched("qmatmul");
}

int main(int argc, char** argv) {
    // Ragged: T not a multiple of QGEMM_TOKENS, rows not of QGEMM_WARPS, nb = 10 blocks (lanes with
    // sub < 2 take two blocks).
    const int T = 7, rows = 37, cols = 320, nb = cols / 32, versions = 5;
    DevRng rng(2);
    std::vector<float> x = dev_rand(rng, (size_t)T * cols);
    for (int j = 0; j < 32; j++) x[32 + j] = 0.0f;  // an all-zero block: d = 0, q = 0
    std::vector<uint8_t> w((size_t)rows * nb * Q41_BYTES);
    for (size_t blk = 0; blk < (size_t)rows * nb; blk++) {
        uint8_t* p = &w[blk * Q41_BYTES];
        const __half d = __float2half(0.002f + 0.01f * fabsf(rng.uniform())), m = __float2half(0.05f * rng.uniform());
        memcpy(p, &d, 2);
        memcpy(p + 2, &m, 2);
        for (int j = 0; j < 16; j++) p[4 + j] = (uint8_t)rng.next();
    }

    // Quantize x on the device as the backend does (the launch of CudaOps::matmul), check it bit for bit.
    std::vector<int8_t> xq;
    std::vector<float> xd, xs;
    quantize_cpu(x, T, cols, xq, xd, xs);
    const float* d_x = dev_upload(x);
    QGemmArgs a{};
    a.n = 1;
    a.w[0] = dev_upload(w);
    a.row_bytes = (long long)nb * Q41_BYTES;
    a.rows[0] = rows;
    a.cols = cols;
    a.T = T;
    int8_t* d_xq = dev_zeros<int8_t>((size_t)T * cols);
    float* d_xd = dev_zeros<float>((size_t)T * nb);
    float* d_xs = dev_zeros<float>((size_t)T * nb);
    KLAUNCH(cdiv(T * nb, 8), 256, 0, 0, quantize_q8_kernel)(d_x, d_xq, d_xd, d_xs, T, cols);
    dev_launched("quantize_q8_kernel");
    if (dev_download(d_xq, xq.size()) != xq || memcmp(dev_download(d_xd, xd.size()).data(), xd.data(), xd.size() * 4) ||
        memcmp(dev_download(d_xs, xs.size()).data(), xs.data(), xs.size() * 4)) {
        printf("qmatmul FAIL: quantize_q8_kernel differs from the CPU quantization\n");
        return 1;
    }
    a.x = d_x;  // v4 (the shipped dp4a kernel) quantizes x itself, the others read xq, xd, xs
    a.xq = d_xq;
    a.xd = d_xd;
    a.xs = d_xs;

    std::vector<double> ref, tol;
    qmatmul_cpu(w, rows, cols, xq, xd, xs, T, ref, tol);
    for (int v = 1; v <= versions; v++) {
        if (!dev_want(argc, argv, v)) continue;
        a.y[0] = dev_zeros<float>((size_t)T * rows);
        qmatmul_run(v, a);
        dev_compare("qmatmul", v, dev_download(a.y[0], (size_t)T * rows), ref, tol, v == versions && dev_planted("qmatmul"));
        DEV_CHECK(cudaFree(a.y[0]));
    }
    return g_dev_failures ? 1 : 0;
}
