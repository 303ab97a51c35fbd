// cuda_emu_kernels_gemm_quant.cpp -> build/test/test_emu_kernels_gemm_quant: the quantized matmul of
// cuda/gemm_quant.cu in the CPU emulator. quantize_q8_kernel against the CPU backend's rule
// (src/backend/cpu/quantize.h: d = max|x| / 127, q = round-half-even(x / d), s = d sum q; a NaN makes d
// NaN) - q exact, d and s exact; the dp4a kernels gemm_q8_0/q4_0/q4_1{,_r16,_r8,_r4}{,_t16}_kernel (32, 16,
// 8, 4 rows per block, 4 or 16 tokens, quantizing x in shared memory), gemm_q*_mma_kernel (int8 tensor cores,
// reading quantize_q8_kernel's output), all nine bit-identical to
// each other (memcmp on every case, every T, the dp4a kernels up to T = 70) and each against a double
// reference that dequantizes the GGUF blocks with the formulas of src/core/dtype.cpp and uses the int8
// activations the kernel saw (tolerance atol 1e-6 K, rtol 1e-5: only fp32 accumulation error remains),
// and against the plain f32 product within the int8 rounding bound sum_k |w_k| d_x(k) / 2. Ragged shapes
// (T = 1..70, rows not a multiple of 4 or 64, 32-blocks per row not a multiple of 8 or 32), debug
// schedules, batch invariance (a token alone == in a batch of 7, 16 or 70 tokens, bit for bit), three
// matrices of different heights in one launch (grid z) == one launch each, bit for bit, and
// launch_matmul_q's choice of kernel (QGemmChoice: its defaults, the BEAGLE_CUDA_* overrides).
#include "cuda_kernel_test.h"
#include "core/dtype.h"
#include "gemm_quant.cu"

using beagle::f16_to_f32;
using beagle::f32_to_f16;

struct QWeights {
    int dt, rows, cols;
    long long row_bytes;
    std::vector<uint8_t> bytes;  // the matrix starts at bytes.data() + shift
    int shift = 0;
    std::vector<double> deq;  // rows x cols, reference dequantization
};

static QWeights make_weights(int dt, int rows, int cols) {
    QWeights w{dt, rows, cols, 0, {}, {}};
    const int bs = dt == KD_Q8_0 ? 34 : dt == KD_Q4_0 ? 18 : 20;
    w.row_bytes = (long long)cols / 32 * bs;
    w.bytes.resize((size_t)rows * w.row_bytes);
    w.deq.resize((size_t)rows * cols);
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < cols / 32; b++) {
            uint8_t* blk = w.bytes.data() + (size_t)r * w.row_bytes + (size_t)b * bs;
            uint16_t dh = f32_to_f16(kt_uniform(0.001f, 0.02f) * (kt_rand() < 0.5 ? -1 : 1));
            memcpy(blk, &dh, 2);
            const double d = f16_to_f32(dh);
            double m = 0;
            if (dt == KD_Q4_1) {
                uint16_t mh = f32_to_f16(kt_uniform(-0.2f, 0.2f));
                memcpy(blk + 2, &mh, 2);
                m = f16_to_f32(mh);
            }
            double* out = w.deq.data() + (size_t)r * cols + b * 32;
            if (dt == KD_Q8_0) {
                for (int j = 0; j < 32; j++) {
                    int8_t q = (int8_t)(int)(kt_rand() * 255 - 127);
                    blk[2 + j] = (uint8_t)q;
                    out[j] = d * q;
                }
            } else {
                uint8_t* qs = blk + (dt == KD_Q4_1 ? 4 : 2);
                for (int j = 0; j < 16; j++) {
                    int lo = (int)(kt_rand() * 16) & 15, hi = (int)(kt_rand() * 16) & 15;
                    qs[j] = (uint8_t)(lo | (hi << 4));
                    out[j] = dt == KD_Q4_0 ? d * (lo - 8) : d * lo + m;
                    out[j + 16] = dt == KD_Q4_0 ? d * (hi - 8) : d * hi + m;
                }
            }
        }
    return w;
}

struct QActs {
    std::vector<int8_t> q;
    std::vector<float> d, s;
};

// Quantize through the kernel (a warp per 32-block, `block` threads per thread block) and check it against
// the host rule.
static QActs quantize(const std::vector<float>& x, int T, int cols, int block, const std::string& tag) {
    const int nb = cols / 32;
    QActs a;
    a.q.assign((size_t)T * cols, 0);
    a.d.assign((size_t)T * nb, 0);
    a.s.assign((size_t)T * nb, 0);
    TLAUNCH(cdiv(T * cols, block), block, 0, quantize_q8_kernel)(x.data(), a.q.data(), a.d.data(), a.s.data(), T, cols);
    std::vector<float> got_q(a.q.size()), got_ds(2 * a.d.size());
    std::vector<double> ref_q(a.q.size()), ref_ds(2 * a.d.size());
    for (int t = 0; t < T; t++)
        for (int b = 0; b < nb; b++) {
            const float* xb = x.data() + (size_t)t * cols + b * 32;
            float amax = 0;
            bool nan = false;
            for (int j = 0; j < 32; j++) {
                amax = std::max(amax, std::fabs(xb[j]));
                nan |= std::isnan(xb[j]);
            }
            float d = nan ? NAN : amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            int qsum = 0;
            for (int j = 0; j < 32; j++) {
                size_t k = (size_t)t * cols + b * 32 + j;
                int q = nan ? a.q[k] : (int)std::nearbyint(xb[j] * id);  // NaN block: q unspecified
                qsum += q;
                got_q[k] = a.q[k];
                ref_q[k] = q;
            }
            size_t k = (size_t)t * nb + b;
            got_ds[2 * k] = a.d[k];
            ref_ds[2 * k] = d;
            got_ds[2 * k + 1] = a.s[k];
            ref_ds[2 * k + 1] = nan ? NAN : d * (float)qsum;
        }
    kt_compare("quantize_q8_kernel", got_q.data(), ref_q.data(), got_q.size(), 0, 0, "q " + tag);
    kt_compare("quantize_q8_kernel", got_ds.data(), ref_ds.data(), got_ds.size(), 0, 0, "d, s " + tag);
    return a;
}

// The kernels, launched directly (whatever launch_matmul_q would pick) at any T: the dp4a kernels (32, 16
// or 8 rows x 4 tokens per block, quantizing x themselves), the tensor-core kernels (16 rows x 64 tokens,
// reading the quantized a).
enum Kind { DP4A, DP4A_R16, DP4A_R8, DP4A_R4, DP4A_T16, DP4A_R16_T16, DP4A_R8_T16, DP4A_R4_T16, MMA };
static const Kind kinds[] = {DP4A, DP4A_R16, DP4A_R8, DP4A_R4, DP4A_T16, DP4A_R16_T16, DP4A_R8_T16, DP4A_R4_T16, MMA};
static const int kind_rows[] = {32, 16, 8, 4, 32, 16, 8, 4, QMMA_ROWS};  // weight rows per block
static bool kind_t16(Kind k) { return k >= DP4A_T16 && k <= DP4A_R4_T16; }
// n > 1: matrices ws[0..n-1] (same cols) in one launch (grid z).
static std::vector<std::vector<float>> run_gemm_n(int n, const QWeights* const* ws, const std::vector<float>& x,
                                                  const QActs& a, int T, Kind kind) {
    std::vector<std::vector<float>> y(n);
    QGemmArgs g = {};
    g.n = n;
    int max_rows = 0;
    for (int m = 0; m < n; m++) {
        y[m].assign((size_t)T * ws[m]->rows, -7.0f);
        g.w[m] = ws[m]->bytes.data() + ws[m]->shift;
        g.y[m] = y[m].data();
        g.rows[m] = ws[m]->rows;
        max_rows = std::max(max_rows, ws[m]->rows);
    }
    g.row_bytes = ws[0]->row_bytes;
    g.cols = ws[0]->cols;
    g.x = x.data();
    g.xq = a.q.data();
    g.xd = a.d.data();
    g.xs = a.s.data();
    g.T = T;
    const int dt = ws[0]->dt;
    if (kind == MMA) {
        dim3 grid(cdiv(max_rows, QMMA_ROWS), cdiv(T, QMMA_TOKENS), n);
        if (dt == KD_Q8_0) TLAUNCH(grid, 32 * QMMA_WARPS, 0, gemm_q8_0_mma_kernel)(g);
        if (dt == KD_Q4_0) TLAUNCH(grid, 32 * QMMA_WARPS, 0, gemm_q4_0_mma_kernel)(g);
        if (dt == KD_Q4_1) TLAUNCH(grid, 32 * QMMA_WARPS, 0, gemm_q4_1_mma_kernel)(g);
        return y;
    }
    const int R = kind_rows[kind];
    dim3 grid(cdiv(max_rows, R), cdiv(T, kind_t16(kind) ? QGEMM_BLOCK_TOKENS : QGEMM_TOKENS), n);
    const int nth = 32 * QGEMM_WARPS;
#define TLAUNCH_DTYPES(NAME)                                                                 \
    do {                                                                                     \
        if (dt == KD_Q8_0) TLAUNCH(grid, nth, 0, gemm_q8_0##NAME##_kernel)(g);                \
        if (dt == KD_Q4_0) TLAUNCH(grid, nth, 0, gemm_q4_0##NAME##_kernel)(g);                \
        if (dt == KD_Q4_1) TLAUNCH(grid, nth, 0, gemm_q4_1##NAME##_kernel)(g);                \
    } while (0)
    switch (kind) {
        case DP4A: TLAUNCH_DTYPES(); break;
        case DP4A_R16: TLAUNCH_DTYPES(_r16); break;
        case DP4A_R8: TLAUNCH_DTYPES(_r8); break;
        case DP4A_R4: TLAUNCH_DTYPES(_r4); break;
        case DP4A_T16: TLAUNCH_DTYPES(_t16); break;
        case DP4A_R16_T16: TLAUNCH_DTYPES(_r16_t16); break;
        case DP4A_R8_T16: TLAUNCH_DTYPES(_r8_t16); break;
        case DP4A_R4_T16: TLAUNCH_DTYPES(_r4_t16); break;
        case MMA: break;
    }
#undef TLAUNCH_DTYPES
    return y;
}

static std::vector<float> run_gemm(const QWeights& w, const std::vector<float>& x, const QActs& a, int T, Kind kind) {
    const QWeights* ws[1] = {&w};
    return run_gemm_n(1, ws, x, a, T, kind)[0];
}

static std::string qname(int dt, Kind kind) {
    static const char* suffix[] = {"_kernel",         "_r16_kernel",     "_r8_kernel",     "_r4_kernel",    "_t16_kernel",
                                   "_r16_t16_kernel", "_r8_t16_kernel", "_r4_t16_kernel", "_mma_kernel"};
    return std::string(dt == KD_Q8_0 ? "gemm_q8_0" : dt == KD_Q4_0 ? "gemm_q4_0" : "gemm_q4_1") + suffix[kind];
}

// The nine kernels against the references, and against each other bit for bit (one order per output):
// each against the 32-row dp4a kernel (every shape at every T,
// so the dp4a kernels run at T = 5 .. 70 too: BEAGLE_CUDA_DP4A_MAX_T's path).
static void check_case(int dt, int rows, int cols, int T, const std::string& tag) {
    QWeights w = make_weights(dt, rows, cols);
    std::vector<float> x = kt_vec((size_t)T * cols, -2.0f, 2.0f);
    QActs a = quantize(x, T, cols, 256, tag);
    std::vector<double> ref((size_t)T * rows), exact((size_t)T * rows), bound((size_t)T * rows);
    int nb = cols / 32;
    for (int t = 0; t < T; t++)
        for (int o = 0; o < rows; o++) {
            double s = 0, e = 0, bd = 0;
            for (int i = 0; i < cols; i++) {
                double wv = w.deq[(size_t)o * cols + i];
                double xd = a.d[(size_t)t * nb + i / 32];
                s += wv * xd * a.q[(size_t)t * cols + i];
                e += wv * x[(size_t)t * cols + i];
                bd += std::fabs(wv) * xd / 2;
            }
            ref[(size_t)t * rows + o] = s;
            exact[(size_t)t * rows + o] = e;
            bound[(size_t)t * rows + o] = bd;
        }
    std::vector<float> first;
    for (Kind kind : kinds) {
        std::vector<float> y = run_gemm(w, x, a, T, kind);
        const std::string name = qname(dt, kind);
        int outside = 0;
        for (size_t i = 0; i < y.size(); i++) outside += std::fabs(y[i] - exact[i]) > bound[i] * 1.001 + 1e-5;
        kt_compare(name.c_str(), y, ref, 1e-6 * cols, 1e-5, kt_fmt("T%d rows%d cols%d %s", T, rows, cols, tag.c_str()));
        CHECK(outside == 0, "%s T%d rows%d cols%d: %d outputs outside the int8 rounding bound of the f32 product",
              name.c_str(), T, rows, cols, outside);
        if (first.empty())
            first = y;
        else
            CHECK(!memcmp(first.data(), y.data(), y.size() * 4), "%s T%d rows%d cols%d: not bit-identical to the dp4a kernel",
                  name.c_str(), T, rows, cols);
    }
}

// Q/K/V-like: three matrices of different heights (not multiples of 4 or 64) in one launch, each output
// bit-identical to its own launch, for both kernels (matrices shorter than the grid's x extent exit).
static void check_group(int dt, int T) {
    const int cols = 160;
    QWeights w0 = make_weights(dt, 37, cols), w1 = make_weights(dt, 9, cols), w2 = make_weights(dt, 70, cols);
    const QWeights* ws[3] = {&w0, &w1, &w2};
    std::vector<float> x = kt_vec((size_t)T * cols);
    QActs a = quantize(x, T, cols, 256, "group");
    for (Kind kind : kinds) {
        std::vector<std::vector<float>> y = run_gemm_n(3, ws, x, a, T, kind);
        int bad = 0;
        for (int m = 0; m < 3; m++) {
            std::vector<float> one = run_gemm(*ws[m], x, a, T, kind);
            bad += memcmp(one.data(), y[m].data(), one.size() * 4) != 0;
        }
        CHECK(bad == 0, "%s T%d: %d of 3 matrices in one launch differ from their own launch", qname(dt, kind).c_str(), T,
              bad);
    }
}

// The dp4a kernels' own quantization on an all-zero block (d = 0, q = 0) and a NaN block (d NaN: that
// token's outputs NaN, as the tensor-core kernels' after quantize_q8_kernel); the other token bit-identical
// in every kernel.
static void check_zero_nan(int dt) {
    const int T = 2, rows = 9, cols = 96;
    QWeights w = make_weights(dt, rows, cols);
    std::vector<float> x = kt_vec((size_t)T * cols, -2.0f, 2.0f);
    for (int j = 0; j < 32; j++) x[32 + j] = 0.0f;  // token 0, block 1
    x[cols + 64 + 27] = NAN;                        // token 1, block 2, its last quarter
    QActs a = quantize(x, T, cols, 256, "zero and NaN blocks");
    std::vector<float> y = run_gemm(w, x, a, T, DP4A);
    for (Kind kind : kinds) {
        std::vector<float> yk = run_gemm(w, x, a, T, kind);
        int nan_ok = 0;
        for (int o = 0; o < rows; o++) nan_ok += std::isnan(yk[rows + o]);
        CHECK(!memcmp(y.data(), yk.data(), rows * 4) && nan_ok == rows,
              "%s: zero block not bit-identical to the 32-row dp4a kernel, or %d of %d NaN outputs",
              qname(dt, kind).c_str(), nan_ok, rows);
    }
}

// The dp4a kernels read Q4_1 blocks with 4-byte loads when the matrix is 4-byte aligned, with 2-byte ones
// otherwise: the same matrix 2 bytes past an aligned address (the emulator fails a misaligned 4-byte VLOAD)
// gives the same bits in every kernel.
static void check_misaligned(int dt) {
    const int T = 5, rows = 37, cols = 1344;  // 42 blocks per row: two chunks
    QWeights w = make_weights(dt, rows, cols), w2 = w;
    w2.bytes.insert(w2.bytes.begin(), {0, 0});
    w2.shift = 2;
    std::vector<float> x = kt_vec((size_t)T * cols, -2.0f, 2.0f);
    QActs a = quantize(x, T, cols, 256, "misaligned");
    for (Kind kind : kinds) {
        const std::vector<float> y = run_gemm(w, x, a, T, kind), y2 = run_gemm(w2, x, a, T, kind);
        CHECK(!memcmp(y.data(), y2.data(), y.size() * 4), "%s: weights at a 2-byte aligned address change the bits",
              qname(dt, kind).c_str());
    }
}

// launch_matmul_q's choice (a runner recording the kernels it launches), `want` written out per case: the
// dp4a kernels for T <= choice.dp4a_max_t (default QGEMM_TOKENS) with R rows per block (choice.dp4a_rows, or
// the grid rule: the most of 32, 16, 8 whose grid has QGEMM_FILL_BLOCKS = 264 blocks, else 8), else the
// 16-row tensor-core kernel; its output is the chosen kernel's, bit for bit. choice null: launch_matmul_q's own (the defaults:
// main checks that no BEAGLE_CUDA_* variable is set).
struct NameRunner : KernelRunner {
    std::vector<std::string> names;
    void before(const char* kernel, const dim3&) override { names.push_back(kernel); }
    void after(const char* kernel) override {}
    [[noreturn]] void fail(const std::string& msg) override {
        fprintf(stderr, "launch_matmul_q refused: %s\n", msg.c_str());
        exit(1);
    }
};

// Quick (BEAGLE_KERNEL_TEST_QUICK=1, test_cuda_kernels_valgrind.sh: a bounds check under memcheck, one emulator
// thread): about a third of the native run went to the four costliest shapes of main() and half to the launcher's
// cases of 4,096 rows and more (each runs its kernel twice). Which kernel the launcher picks is a host rule, checked
// by the native run of make test; under memcheck its cases up to 2,048 rows still run. 9.0 s -> 4.2 s natively.
static const bool g_quick = kt_quick();

static void check_launcher(int dt, int rows, int T, const QGemmChoice* choice, Kind want) {
    if (g_quick && rows > 2048) return;
    const int cols = 32;
    QWeights w = make_weights(dt, rows, cols);
    std::vector<float> x = kt_vec((size_t)T * cols, -2.0f, 2.0f), y((size_t)T * rows, -7.0f);
    QActs a = quantize(x, T, cols, 256, "launcher");
    std::vector<uint8_t> scratch(matmul_q_scratch_bytes(T, cols));
    const uint8_t* wp = w.bytes.data();
    float* yp = y.data();
    NameRunner kr;
    launch_matmul_q(1, &yp, x.data(), &wp, &rows, dt, w.row_bytes, cols, T, scratch.data(), kr, choice);
    const std::vector<float> direct = run_gemm(w, x, a, T, want);
    CHECK(!kr.names.empty() && kr.names.back() == qname(dt, want), "launch_matmul_q rows %d T %d: launched %s, expected %s",
          rows, T, kr.names.empty() ? "nothing" : kr.names.back().c_str(), qname(dt, want).c_str());
    CHECK(!memcmp(direct.data(), y.data(), y.size() * 4), "launch_matmul_q rows %d T %d: not the bits of %s", rows, T,
          qname(dt, want).c_str());
}

int main() {
    const int shapes[][3] = {{1, 32, 1}, {5, 64, 3}, {37, 288, 4}, {130, 96, 5}, {8, 1024, 9}, {3, 544, 2},
                             {70, 160, 17}, {64, 96, 64}, {21, 64, 70},
                             // nb > 32: the dp4a kernels' second 32-block chunk (18 and 10 blocks), a last
                             // tensor-core step of 2 blocks; 33 and 40 rows: a partly filled last row block
                             {33, 1600, 5}, {40, 1344, 3}, {33, 1600, 19},
                             // a last 16-row block of 8 rows (200 = 12 * 16 + 8) and 152 rows (9.5 blocks)
                             {200, 64, 5}, {200, 64, 17}, {200, 96, 64}, {152, 64, 70}};
    // Quick: the four costliest shapes (over 300k multiply-adds) for Q4_1 only; Q8_0 and Q4_0 and their block
    // layouts still run every other shape, with the same ragged row, column and token blocks.
    for (int dt : {KD_Q8_0, KD_Q4_0, KD_Q4_1})
        for (auto& s : shapes) {
            if (g_quick && dt != KD_Q4_1 && (long)s[0] * s[1] * s[2] > 300000) continue;
            check_case(dt, s[0], s[1], s[2], "");
        }
    // the launcher's rules, by default: 16-row tensor-core blocks (also for 4096 rows);
    // at T <= 16 the dp4a kernel with the most rows per block whose grid has 264 blocks, else 8 rows
    for (const char* v : {"BEAGLE_CUDA_DP4A_MAX_T", "BEAGLE_CUDA_QGEMM_ROWS", "BEAGLE_CUDA_QGEMM_TOKENS"})
        CHECK(!getenv(v), "%s is set: the launcher checks below assume the defaults", v);
    check_launcher(KD_Q4_1, 4096, QGEMM_DP4A_MAX_T + 1, nullptr, MMA);
    check_launcher(KD_Q4_1, 8448, QGEMM_DP4A_MAX_T, nullptr, DP4A_T16);  // 264 blocks of 32 rows x 16 tokens
    check_launcher(KD_Q4_1, 4224, QGEMM_DP4A_MAX_T, nullptr, DP4A_R16_T16);  // 132 of 32 rows: one token block
    check_launcher(KD_Q8_0, 100, 5, nullptr, DP4A_R4_T16);
    check_launcher(KD_Q4_1, 8448, 1, nullptr, DP4A);      // 264 blocks of 32 rows
    check_launcher(KD_Q4_0, 8416, 1, nullptr, DP4A_R16);  // 263 of 32, 526 of 16
    check_launcher(KD_Q8_0, 4224, 4, nullptr, DP4A_R16);  // 132 of 32, 264 of 16
    check_launcher(KD_Q4_1, 4208, 4, nullptr, DP4A_R8);   // 263 of 16
    check_launcher(KD_Q4_1, 100, 2, nullptr, DP4A_R4);    // 25 of 4: none fills the GPU, the smallest
    check_launcher(KD_Q4_1, 576, 1, nullptr, DP4A_R4);    // SmolLM2's o / down: 144 of 4, one full wave
    CHECK(qgemm_dp4a_rows(2816, 3, 1, 4) == 32 && qgemm_dp4a_rows(2784, 3, 1, 4) == 16 &&
              qgemm_dp4a_rows(4224, 1, 16, 16) == 16 && qgemm_dp4a_rows(4224, 1, 17, 16) == 32 &&
              qgemm_dp4a_rows(4224, 1, 5, 4) == 32,
          "qgemm_dp4a_rows counts blocks over matrices and token blocks: %d %d %d %d %d", qgemm_dp4a_rows(2816, 3, 1, 4),
          qgemm_dp4a_rows(2784, 3, 1, 4), qgemm_dp4a_rows(4224, 1, 16, 16), qgemm_dp4a_rows(4224, 1, 17, 16),
          qgemm_dp4a_rows(4224, 1, 5, 4));
    // dp4a up to T = 4 only (BEAGLE_CUDA_DP4A_MAX_T=4), and up to 32 (two token blocks count in the rule)
    QGemmChoice narrow;
    narrow.dp4a_max_t = 4;
    check_launcher(KD_Q4_1, 4224, 4, &narrow, DP4A_R16);  // 132 blocks of 32 rows, 264 of 16
    check_launcher(KD_Q8_0, 37, 4, &narrow, DP4A_R4);
    check_launcher(KD_Q4_1, 4224, 5, &narrow, MMA);
    check_launcher(KD_Q4_1, 4224, 5, nullptr, DP4A_R16_T16);  // the default: one token block, 132 blocks of 32 rows
    QGemmChoice wide;
    wide.dp4a_max_t = 32;
    check_launcher(KD_Q4_1, 4224, 20, &wide, DP4A_T16);  // 132 x 2 token blocks of 32 rows
    QGemmChoice four;  // BEAGLE_CUDA_QGEMM_TOKENS=4: the 4-token kernels at every T
    four.dp4a_tokens = 4;
    check_launcher(KD_Q4_1, 4224, 5, &four, DP4A);    // 132 x 2 token blocks of 32 rows
    check_launcher(KD_Q8_0, 4224, 16, &four, DP4A);   // 132 x 4
    check_launcher(KD_Q4_0, 100, 7, &four, DP4A_R4);
    // R forced (BEAGLE_CUDA_QGEMM_ROWS)
    for (auto [R, kind] : {std::pair<int, Kind>{32, DP4A}, {16, DP4A_R16}, {8, DP4A_R8}, {4, DP4A_R4}}) {
        QGemmChoice forced;
        forced.dp4a_rows = R;
        check_launcher(KD_Q4_1, 100, 3, &forced, kind);
        check_launcher(KD_Q4_0, 8448, 1, &forced, kind);
    }
    // the variables parsed into the choice
    QGemmChoice def = qgemm_choice_env();
    CHECK(def.dp4a_max_t == QGEMM_DP4A_MAX_T && def.dp4a_rows == 0 && def.dp4a_tokens == 0,
          "qgemm_choice_env without the variables: %d %d %d", def.dp4a_max_t, def.dp4a_rows, def.dp4a_tokens);
    setenv("BEAGLE_CUDA_DP4A_MAX_T", "8", 1);
    setenv("BEAGLE_CUDA_QGEMM_ROWS", "8", 1);
    setenv("BEAGLE_CUDA_QGEMM_TOKENS", "4", 1);
    QGemmChoice env = qgemm_choice_env();
    CHECK(env.dp4a_max_t == 8 && env.dp4a_rows == 8 && env.dp4a_tokens == 4,
          "BEAGLE_CUDA_DP4A_MAX_T=8 QGEMM_ROWS=8 QGEMM_TOKENS=4 read as %d %d %d", env.dp4a_max_t, env.dp4a_rows,
          env.dp4a_tokens);
    for (const char* v : {"BEAGLE_CUDA_DP4A_MAX_T", "BEAGLE_CUDA_QGEMM_ROWS", "BEAGLE_CUDA_QGEMM_TOKENS"}) unsetenv(v);
    for (int dt : {KD_Q8_0, KD_Q4_0, KD_Q4_1})
        for (int T : {1, 3, 6}) check_group(dt, T);
    for (int dt : {KD_Q8_0, KD_Q4_0, KD_Q4_1}) check_zero_nan(dt);
    for (int dt : {KD_Q8_0, KD_Q4_0, KD_Q4_1}) check_misaligned(dt);
    // quantizer with thread blocks of 32 and 1024 threads (1 and 32 32-blocks; 9 32-blocks: a partly idle
    // last thread block of 256 and of 1024 threads), zero blocks and a NaN block
    for (int block : {32, 256, 1024}) {
        int T = 3, cols = 96;
        std::vector<float> x = kt_vec((size_t)T * cols, -3.0f, 3.0f);
        for (int j = 0; j < 32; j++) x[32 + j] = 0.0f;  // an all-zero block: d = 0, q = 0
        x[2 * cols + 70] = NAN;                         // a NaN block: d NaN
        quantize(x, T, cols, block, kt_fmt("block %d, zero and NaN blocks", block));
    }
    kt_debug_modes([](const char* mode) {
        for (int dt : {KD_Q8_0, KD_Q4_0, KD_Q4_1}) check_case(dt, 9, 320, 6, mode);
    });
    // batch invariance: each token's outputs computed alone (T = 1, dp4a kernel) are bit-identical to
    // its row in a batch of 7 (dp4a: two token blocks; _t16: two groups of one block), of 16 (the 16- and
    // 8-row dp4a kernels: four token blocks; _t16: four groups), of 37 (_t16: three token blocks, the last
    // of one group and a token) and of 70 (tensor cores: two 64-token tiles)
    const std::pair<int, Kind> batches[] = {{7, DP4A},           {7, DP4A_T16},     {7, DP4A_R4},  {16, DP4A_R16},
                                            {16, DP4A_R8},       {16, DP4A_R16_T16}, {16, DP4A_R8_T16},
                                            {16, DP4A_R4_T16},   {37, DP4A_T16},    {70, MMA}};
    for (int dt : {KD_Q8_0, KD_Q4_0, KD_Q4_1})
        for (auto [T, kind] : batches) {
            int rows = 21, cols = 160;
            QWeights w = make_weights(dt, rows, cols);
            std::vector<float> x = kt_vec((size_t)T * cols);
            QActs a = quantize(x, T, cols, 256, "batch");
            std::vector<float> y = run_gemm(w, x, a, T, kind);
            int bad = 0;
            for (int t = 0; t < T; t += T / 7) {
                std::vector<float> xt(x.begin() + (size_t)t * cols, x.begin() + (size_t)(t + 1) * cols);
                QActs at = quantize(xt, 1, cols, 256, "batch row");
                std::vector<float> yt = run_gemm(w, xt, at, 1, DP4A);
                bad += memcmp(yt.data(), y.data() + (size_t)t * rows, rows * sizeof(float)) != 0;
            }
            CHECK(bad == 0, "%s: %d tokens differ between a batch of %d and single-token products",
                  qname(dt, kind).c_str(), bad, T);
        }
    return kt_finish("test_emu_kernels_gemm_quant");
}
