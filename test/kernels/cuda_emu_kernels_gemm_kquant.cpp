// cuda_emu_kernels_gemm_kquant.cpp -> build/test/test_emu_kernels_gemm_kquant: the CUDA backend's 5-bit and
// k-quant weights (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) in the CPU emulator: gemm_kquant_kernel (cuda/gemm_quant.cu)
// and embed_kernel's dequantization of them (common.cuh qblock_decode). Weights are random block bytes with
// finite half scales (every bit pattern of the integer parts); the reference dequantization is the host
// library's dequantize_row (src/core/dtype.cpp), itself checked against the `gguf` package by test_kquants.py.
//  - embed_kernel == dequantize_row bit for bit, every type (the one rounding of a * w + m, a and m exact).
//  - gemm_kquant_kernel against a double product of the dequantized weights and the int8 activations the
//    kernel saw (quantize_q8_kernel's), within R u S: S = sum_j |w_j| |x~_j| + sum_b |m_b| |s_b|, R = 4
//    ceil(nb / 32) + 10 roundings (per block of a lane's chain the scale product and one or two FMAs, Q6_K
//    four; the 5-level tree; the float32 weights and activations), and against the plain f32 product within
//    the int8 rounding bound sum_j |w_j| d_x / 2 on top.
//  - batch invariance: every token alone (T = 1) gives the bits of the batch, and launch_matmul_kquant gives
//    the bits of the kernel launched directly.
#include "cuda_kernel_test.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "embed.cu"
#include "gemm_quant.cu"

using beagle::DType;

static const int kTypes[] = {KD_Q5_0, KD_Q5_1, KD_Q4_K, KD_Q5_K, KD_Q6_K};
static const char* kd_name(int dt) { return beagle::dtype_name((DType)dt); }

struct KWeights {
    int dt, rows, cols;
    long long row_bytes;
    std::vector<uint8_t> bytes;
    std::vector<float> deq;  // dequantize_row, rows x cols
};

// Random bytes, then each block's half fields (d, m / dmin) set to finite values of either sign.
static KWeights make_weights(int dt, int rows, int cols) {
    const DType t = (DType)dt;
    KWeights w{dt, rows, cols, (long long)beagle::dtype_row_bytes(t, (uint64_t)cols), {}, {}};
    w.bytes.resize((size_t)rows * w.row_bytes);
    for (auto& b : w.bytes) b = (uint8_t)(kt_rand() * 256);
    const int bb = (int)beagle::dtype_block_bytes(t);
    std::vector<int> halves = dt == KD_Q6_K ? std::vector<int>{208} : dt == KD_Q5_0 ? std::vector<int>{0} : std::vector<int>{0, 2};
    for (size_t off = 0; off < w.bytes.size(); off += bb)
        for (int h : halves) {
            const uint16_t v = beagle::f32_to_f16(kt_uniform(0.001f, 0.03f) * (kt_rand() < 0.5 ? -1 : 1));
            memcpy(w.bytes.data() + off + h, &v, 2);
        }
    w.deq.resize((size_t)rows * cols);
    for (int r = 0; r < rows; r++)
        beagle::dequantize_row(t, w.bytes.data() + (size_t)r * w.row_bytes, w.deq.data() + (size_t)r * cols, cols);
    return w;
}

struct Acts {
    std::vector<int8_t> q;
    std::vector<float> d, s;
};
static Acts quantize(const std::vector<float>& x, int T, int cols) {
    Acts a;
    a.q.assign((size_t)T * cols, 0);
    a.d.assign((size_t)T * cols / 32, 0);
    a.s.assign(a.d.size(), 0);
    TLAUNCH(cdiv(T * cols / 32, 8), 256, 0, quantize_q8_kernel)(x.data(), a.q.data(), a.d.data(), a.s.data(), T, cols);
    // the host rule (test_emu_kernels_gemm_quant checks the kernel in full, NaN blocks included)
    std::vector<float> got(a.q.size() + a.d.size());
    std::vector<double> ref(got.size());
    for (size_t k = 0; k < a.d.size(); k++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[32 * k + j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        got[a.q.size() + k] = a.d[k];
        ref[a.q.size() + k] = d;
        for (int j = 0; j < 32; j++) {
            got[32 * k + j] = a.q[32 * k + j];
            ref[32 * k + j] = std::nearbyint(x[32 * k + j] * id);
        }
    }
    kt_compare("quantize_q8_kernel", got, ref, 0, 0, kt_fmt("q and d, T=%d", T));
    return a;
}

static std::vector<float> run_kernel(const KWeights& w, const Acts& a, int T) {
    std::vector<float> y((size_t)T * w.rows, -7.0f);
    TLAUNCH(dim3(cdiv(w.rows, KQ_WARPS), cdiv(T, KQ_TOKENS)), 32 * KQ_WARPS, 0, gemm_kquant_kernel)(
        y.data(), w.bytes.data(), w.dt, w.row_bytes, w.rows, w.cols, a.q.data(), a.d.data(), a.s.data(), T);
    return y;
}

struct FailRunner : KernelRunner {
    void after(const char*) override {}
    [[noreturn]] void fail(const std::string& msg) override {
        fprintf(stderr, "launch_matmul_kquant refused: %s\n", msg.c_str());
        exit(1);
    }
};

// The additive term m of block b of row r (qblock_decode's), for the bound.
static double block_m(const KWeights& w, int r, int b) {
    const uint8_t* row = w.bytes.data() + (size_t)r * w.row_bytes;
    if (w.dt == KD_Q5_1) return beagle::f16_to_f32((uint16_t)(row[b * 24 + 2] | row[b * 24 + 3] << 8));
    if (w.dt == KD_Q4_K || w.dt == KD_Q5_K) {
        const uint8_t* blk = row + (size_t)(b / 8) * beagle::dtype_block_bytes((DType)w.dt);
        int sc, mn;
        beagle::kquant_scale_min(blk + 4, b % 8, &sc, &mn);
        return beagle::f16_to_f32((uint16_t)(blk[2] | blk[3] << 8)) * mn;
    }
    return 0;
}

static void check_case(int dt, int rows, int cols, int T) {
    const std::string tag = kt_fmt("%s %dx%d T=%d", kd_name(dt), rows, cols, T);
    KWeights w = make_weights(dt, rows, cols);
    std::vector<float> x = kt_vec((size_t)T * cols, -2.0f, 2.0f);
    if (T > 1) x[cols + 5] = 120.0f;  // an outlier block in token 1
    const Acts a = quantize(x, T, cols);
    const std::vector<float> y = run_kernel(w, a, T);
    const int nb = cols / 32;
    const double u = std::ldexp(1.0, -24), R = 4.0 * cdiv(nb, 32) + 10;
    // per output, |got - ref| / bound for the two references (compared with 0 at atol 1: within the bound)
    std::vector<float> ratio_q((size_t)T * rows), ratio_f((size_t)T * rows);
    for (int t = 0; t < T; t++)
        for (int r = 0; r < rows; r++) {
            double s = 0, S = 0, f = 0, half_dx = 0;
            for (int b = 0; b < nb; b++) {
                const size_t k = (size_t)t * nb + b;
                for (int j = 0; j < 32; j++) {
                    const double wj = w.deq[(size_t)r * cols + 32 * b + j];
                    const double xq = (double)a.q[(size_t)t * cols + 32 * b + j] * a.d[k];
                    s += wj * xq;
                    S += std::fabs(wj * xq);
                    f += wj * x[(size_t)t * cols + 32 * b + j];
                    half_dx += std::fabs(wj) * a.d[k] / 2;
                }
                S += std::fabs(block_m(w, r, b) * a.s[k]);
            }
            const size_t i = (size_t)t * rows + r;
            const double tol = R * u * S + 1e-30;
            ratio_q[i] = (float)(std::fabs((double)y[i] - s) / tol);
            ratio_f[i] = (float)(std::fabs((double)y[i] - f) / (tol + half_dx));
        }
    const std::vector<double> zeros((size_t)T * rows, 0.0);
    kt_compare("gemm_kquant_kernel", ratio_q, zeros, 1.0, 0.0, "err / bound vs the int8-activation product, " + tag);
    kt_compare("gemm_kquant_kernel", ratio_f, zeros, 1.0, 0.0, "err / bound vs the f32 product, " + tag);
    // batch invariance: each token alone
    for (int t = 0; t < T; t++) {
        std::vector<float> xt(x.begin() + (size_t)t * cols, x.begin() + (size_t)(t + 1) * cols);
        const Acts at = quantize(xt, 1, cols);
        const std::vector<float> yt = run_kernel(w, at, 1);
        CHECK(!memcmp(yt.data(), y.data() + (size_t)t * rows, (size_t)rows * 4), "%s: token %d alone differs from the batch",
              tag.c_str(), t);
    }
    // the launcher: quantize + the kernel, the same bits
    std::vector<float> yl((size_t)T * rows, -7.0f);
    std::vector<uint8_t> scratch(matmul_q_scratch_bytes(T, cols));
    FailRunner kr;
    launch_matmul_kquant(yl.data(), x.data(), w.bytes.data(), rows, dt, w.row_bytes, cols, T, scratch.data(), kr);
    CHECK(!memcmp(yl.data(), y.data(), y.size() * 4), "%s: launch_matmul_kquant differs from the kernel", tag.c_str());
}

// embed_kernel on a table of the type: bit for bit dequantize_row.
static void check_embed(int dt) {
    const int rows = 11, cols = 512;
    KWeights w = make_weights(dt, rows, cols);
    const std::vector<int> tokens = {3, 0, 10, 3, 7};
    const int T = (int)tokens.size();
    std::vector<float> got((size_t)T * cols, -7.0f);
    std::vector<double> ref((size_t)T * cols);
    TLAUNCH(T, 256, 0, embed_kernel)(got.data(), w.bytes.data(), dt, w.row_bytes, tokens.data(), nullptr, cols);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < cols; i++) ref[(size_t)t * cols + i] = w.deq[(size_t)tokens[t] * cols + i];
    kt_compare("embed_kernel", got, ref, 0, 0, kt_fmt("%s table, bit for bit", kd_name(dt)));
}

int main() {
    for (int dt : kTypes) {
        check_embed(dt);
        const bool k = dt >= KD_Q4_K;
        // ragged rows (not a multiple of 4), T not a multiple of 4, a row of more than 32 blocks (a lane's
        // chain of two blocks and more)
        const int shapes[][3] = {{1, 256, 1}, {5, 512, 3}, {37, 256, 5}, {6, k ? 1280 : 1056, 9}, {130, 256, 4}};
        for (auto& s : shapes) check_case(dt, s[0], s[1], s[2]);
    }
    return kt_finish("test_emu_kernels_gemm_kquant");
}
