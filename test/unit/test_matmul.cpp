// test_matmul.cpp: cpu_matmul (src/backend/cpu/matmul.cpp, matmul_avx512.cpp) and the activation
// quantizer (quantize.cpp) against double-precision references, for every weight dtype, ragged shapes,
// T in {1,2,3,4,5,8,17}, both ISAs, 16-bit (default) and 8-bit activations; plus the batch-invariance
// contract (bitwise) and error messages.
//
// Tolerances (u = 2^-24, the float unit roundoff), all derived, none tuned:
//  * float weights: y = sum_i w_i x_i summed in 8 or 16 lanes of at most ceil(cols/8) FMAs each, then a
//    4-level tree: |y - exact| <= (ceil(cols/8) + 5) * u * sum_i |w_i x_i|.
//  * quantized weights, model check: the test re-derives the activations (q, d, s; QMAX = 127 or 32767)
//    with its own scalar code and requires them bit-equal to the library's (every layout). The kernel
//    must then equal y_model = sum_b d_w[b] d_x[b] sum_i qw_i qx_i + m[b] s[b] (exact, in double) up to
//    float rounding. Integer block sums are exact (|lane sum| < 2^24, see matmul.cpp), so the terms the
//    kernel adds are fl(d_w d_x) I_lane (one rounding of its own) and m s (none: the model uses the same
//    float s). One accumulator lane receives at most nb block terms + ceil(nb/8) m terms (AVX2; fewer on
//    AVX-512), each then rounded once per later addition, and the 3- or 4-level lane tree adds one
//    rounding per level: |y - y_model| <= (nb + ceil(nb/8) + 5) * u * S, where
//    S = sum_b |d_w d_x| sum_i |qw_i qx_i| + |m[b] s[b]|.
//  * quantized weights, against the exact y = sum_i w_i x_i (w from the reference dequantize_row):
//    x_i is represented by d_x q_i with |x_i - d_x q_i| <= d_x / 2 + 3u|x_i| (round half even of
//    x * fl(1/d), d = fl(amax / QMAX)), so |y_model - y| <= sum_i |w_i| (d_x/2 + 3u|x_i|); add the
//    rounding of the reference's float w (u sum |w_i x_i|) and the kernel's rounding bound above. With
//    16-bit activations d_x/2 is 258x smaller than with 8-bit ones, so this check is that much tighter.
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/matmul.h"
#include "backend/ops.h"
#include "backend/cpu/quantize.h"
#include "core/common.h"
#include "core/tensor.h"
#include "testlib.h"
#include "matmul_ref.h"

using namespace beagle;

struct Rng {
    std::mt19937_64 g;
    explicit Rng(uint64_t seed) : g(seed) {}
    double uniform(double a, double b) { return std::uniform_real_distribution<double>(a, b)(g); }
    double normal() { return std::normal_distribution<double>(0.0, 1.0)(g); }
    int integer(int a, int b) { return std::uniform_int_distribution<int>(a, b)(g); }
};

// Random weight bytes of a rows x cols matrix in dtype t (quantized blocks filled field by field,
// including the extreme codes -128 / 0 / 15 and negative mins).
static std::vector<uint8_t> make_weight(DType t, int64_t rows, int64_t cols, Rng& rng) {
    std::vector<uint8_t> w(dtype_row_bytes(t, cols) * rows + (t == DType::F32 ? 0 : 0));
    uint8_t* p = w.data();
    int64_t n = rows * cols;
    auto put16 = [](uint8_t* q, uint16_t v) { memcpy(q, &v, 2); };
    switch (t) {
        case DType::F32:
            for (int64_t i = 0; i < n; i++) {
                float v = (float)rng.normal();
                memcpy(p + 4 * i, &v, 4);
            }
            break;
        case DType::F16:
            for (int64_t i = 0; i < n; i++) put16(p + 2 * i, f32_to_f16((float)rng.normal()));
            break;
        case DType::BF16:
            for (int64_t i = 0; i < n; i++) put16(p + 2 * i, f32_to_bf16((float)rng.normal()));
            break;
        case DType::Q8_0:
            for (int64_t b = 0; b < n / 32; b++) {
                uint8_t* blk = p + b * 34;
                put16(blk, f32_to_f16((float)rng.uniform(0.001, 0.05)));
                for (int i = 0; i < 32; i++) blk[2 + i] = (uint8_t)(int8_t)rng.integer(-128, 127);
            }
            break;
        case DType::Q4_0:
            for (int64_t b = 0; b < n / 32; b++) {
                uint8_t* blk = p + b * 18;
                put16(blk, f32_to_f16((float)rng.uniform(0.001, 0.05)));
                for (int i = 0; i < 16; i++) blk[2 + i] = (uint8_t)rng.integer(0, 255);
            }
            break;
        case DType::Q4_1:
            for (int64_t b = 0; b < n / 32; b++) {
                uint8_t* blk = p + b * 20;
                put16(blk, f32_to_f16((float)rng.uniform(0.001, 0.05)));
                put16(blk + 2, f32_to_f16((float)rng.uniform(-0.4, 0.1)));
                for (int i = 0; i < 16; i++) blk[4 + i] = (uint8_t)rng.integer(0, 255);
            }
            break;
        default: break;
    }
    return w;
}

// Activations: normal values, one all-zero block and one block with a large outlier (when cols allow).
static std::vector<float> make_x(int T, int64_t cols, Rng& rng) {
    std::vector<float> x((size_t)T * cols);
    for (auto& v : x) v = (float)(rng.normal() * 2.0);
    for (int t = 0; t < T; t++) {
        float* r = x.data() + (size_t)t * cols;
        if (cols >= 64 && t % 3 == 1)
            for (int i = 32; i < 64; i++) r[i] = 0.0f;
        if (cols >= 32 && t % 2 == 0) r[(t * 7) % 32] = 300.0f;
    }
    return x;
}

// With g_pack set, quantized weights also carry their row-group copy for the current ISA
// (cpu_pack_weight(W, cpu_pack_rows())), which cpu_matmul uses with 16-bit activations (kept alive in g_packs).
static bool g_pack = false;
static std::vector<std::vector<uint8_t>> g_packs;

static Weight make_W(DType dt, const std::vector<uint8_t>& wb, int64_t rows, int64_t cols, int64_t row0 = 0) {
    Weight W;
    W.data = wb.data() + row0 * dtype_row_bytes(dt, cols);
    W.dtype = dt;
    W.rows = rows;
    W.cols = cols;
    if (g_pack && cpu_can_pack(dt)) {
        g_packs.push_back(cpu_pack_weight(W, cpu_pack_rows()));
        W.packed = g_packs.back().data();
        W.packed_rows = cpu_pack_rows();
    }
    return W;
}

// The kernel under test, for messages and tolerances: "avx2", "avx512", "avx2-packed" or "avx512-packed".
static const char* kernel_name(const char* isa, int bits) {
    if (!g_pack || bits != 16) return isa;
    return strcmp(isa, "avx512") == 0 ? "avx512-packed" : "avx2-packed";
}

// The library's quantizer equals the scalar model bit for bit (q, d, s, padding, the int16 nibble
// order, the int8 interleaved pair order and the Q8_0 correction of the AVX-512 int8 layout).
static void test_quantizer() {
    Rng rng(7);
    struct Layout { int bits; bool inter; };
    for (int64_t cols : {32, 64, 96, 576, 1536})
        for (Layout L : {Layout{8, false}, Layout{8, true}, Layout{16, false}, Layout{16, true}}) {
            const bool inter = L.inter;
            std::vector<float> x = make_x(3, cols, rng);
            QuantActs a;
            quant_acts_layout(a, cols, L.bits, inter, inter && L.bits == 8);
            std::vector<uint8_t> buf(a.stride * 3 + 64, 0xAB);
            a.base = (uint8_t*)(((uintptr_t)buf.data() + 63) / 64 * 64);
            for (int t = 0; t < 3; t++) quantize_act_row(a, x.data() + t * cols, t);
            bool ok = a.stride % 64 == 0;
            for (int t = 0; t < 3 && ok; t++) {
                QRow m = quantize_model(x.data() + t * cols, cols, L.bits);
                if (L.bits == 16) {
                    // position 8k + j of a block holds element 2j + {0, 16, 1, 17}[k] (nibble order);
                    // interleaved: the pair's 32 dwords (2 values each) are, for half h and 128-bit lane l,
                    // [A 4l + 2h, B 4l + 2h, A 4l + 2h + 1, B 4l + 2h + 1] (A, B = blocks 2k, 2k + 1)
                    const int group_base[4] = {0, 16, 1, 17};
                    const int16_t* q = qa_q16(a, t);
                    const int64_t nb = cols / 32;
                    ok &= a.qbytes == (size_t)(nb + 1) / 2 * 128;
                    for (int64_t i = 0; i < (int64_t)a.qbytes / 2; i++) {
                        int64_t b = i / 32, p = i % 32;  // plain layout: block b, position p
                        if (inter) {
                            int64_t k = i / 64, dw = (i % 64) / 2, h = dw / 16, l = (dw % 16) / 4, v = dw % 4;
                            b = 2 * k + (v & 1);
                            p = 2 * (4 * l + 2 * h + v / 2) + i % 2;
                        }
                        int want = b < nb ? m.q[b * 32 + 2 * (p % 8) + group_base[p / 8]] : 0;
                        ok &= q[i] == want;
                    }
                    for (int64_t i = 0; i < cols; i++) ok &= m.q[i] >= -32767 && m.q[i] <= 32767;
                }
                const int8_t* q = qa_q(a, t);
                for (int64_t i = 0; L.bits == 8 && i < (int64_t)a.qbytes; i++) {
                    int64_t e = i;  // element stored at byte i
                    if (inter) {    // pair k: group g of the 64 bytes is group g/2 of block 2k + (g & 1)
                        int64_t k = i / 64, g = (i % 64) / 4;
                        e = (2 * k + (g & 1)) * 32 + (g / 2) * 4 + i % 4;
                    }
                    ok &= q[i] == (e < cols ? m.q[e] : 0);
                }
                for (int64_t b = 0; b < a.nb_pad; b++) {
                    float d = b < a.nb ? m.d[b] : 0.0f, s = b < a.nb ? m.s[b] : 0.0f;
                    ok &= memcmp(&qa_d(a, t)[b], &d, 4) == 0 && memcmp(&qa_s(a, t)[b], &s, 4) == 0;
                }
                if (inter && L.bits == 8)
                    for (int64_t g = 0; g < (int64_t)a.qbytes / 4; g++) {
                        int sum = 0;
                        for (int k = 0; k < 4; k++) sum += q[4 * g + k];
                        ok &= qa_corr(a, t)[g] == -128 * sum;
                    }
            }
            CHECK(ok, "quantizer differs from the scalar model at cols %lld bits %d interleaved %d", (long long)cols,
                  L.bits, inter);
        }
}

static void test_accuracy(const char* isa, int bits, ThreadPool& pool) {
    cpu_matmul_set_isa(isa);
    cpu_matmul_set_act_bits(bits);
    CHECK(strcmp(cpu_matmul_isa(), isa) == 0, "isa %s vs %s", cpu_matmul_isa(), isa);
    Rng rng(42);
    const int Ts[] = {1, 2, 3, 4, 5, 8, 17};
    for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
        if (!dtype_is_quantized(dt) && bits != 16) continue;  // float weights do not use the activation bits
        std::vector<int64_t> colset = dtype_is_quantized(dt) ? std::vector<int64_t>{32, 64, 96, 576, 1536}
                                                             : std::vector<int64_t>{1, 5, 17, 63, 64, 576};
        bool ok = true;
        for (int64_t rows : {1, 7, 33, 100})
            for (int64_t cols : colset) {
                std::vector<uint8_t> wb = make_weight(dt, rows, cols, rng);
                Weight W = make_W(dt, wb, rows, cols);
                for (int T : Ts) {
                    if (!ok) break;
                    std::vector<float> x = make_x(T, cols, rng);
                    std::vector<float> y((size_t)T * rows, NAN);
                    cpu_matmul(y.data(), x.data(), W, T, pool);
                    ok = check_result(dt, wb.data(), x, y.data(), rows, cols, T, kernel_name(isa, bits), bits);
                }
            }
        CHECK(ok, "%s int%d %s accuracy", kernel_name(isa, bits), bits, dtype_name(dt));
    }
}

// y[t, o] of a T = 17 call equals, bit for bit: the T = 1 call on token t alone, the calls on its first
// 2..16 tokens, the call on a sub-range of rows, and the same call with 1 or 2 threads.
static void test_invariance(const char* isa, int bits, ThreadPool& pool1, ThreadPool& pool2) {
    cpu_matmul_set_isa(isa);
    cpu_matmul_set_act_bits(bits);
    Rng rng(99);
    const int T = 17;
    for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
        if (!dtype_is_quantized(dt) && bits != 16) continue;
        for (int64_t cols : {dtype_is_quantized(dt) ? (int64_t)96 : (int64_t)63, (int64_t)576}) {
            const int64_t rows = 33;
            std::vector<uint8_t> wb = make_weight(dt, rows, cols, rng);
            Weight W = make_W(dt, wb, rows, cols);
            std::vector<float> x = make_x(T, cols, rng);
            std::vector<float> y1((size_t)T * rows), y2((size_t)T * rows), yt(rows), ys((size_t)T * 10);
            cpu_matmul(y1.data(), x.data(), W, T, pool1);
            cpu_matmul(y2.data(), x.data(), W, T, pool2);
            CHECK(memcmp(y1.data(), y2.data(), y1.size() * 4) == 0, "%s int%d %s cols %lld: 1 vs 2 threads differ", kernel_name(isa, bits),
                  bits, dtype_name(dt), (long long)cols);
            bool same = true;
            for (ThreadPool* p : {&pool1, &pool2})
                for (int t = 0; t < T; t++) {
                    cpu_matmul(yt.data(), x.data() + (size_t)t * cols, W, 1, *p);
                    same &= memcmp(yt.data(), y1.data() + (size_t)t * rows, rows * 4) == 0;
                }
            CHECK(same, "%s int%d %s cols %lld: T=1 rows differ from the T=17 call", kernel_name(isa, bits), bits, dtype_name(dt),
                  (long long)cols);
            // the first Tp tokens alone, Tp = 2..16: every token tiling (tiles of 4 or 8 and each remainder)
            bool prefix = true;
            for (int Tp = 2; Tp < T; Tp++) {
                std::vector<float> yp((size_t)Tp * rows);
                cpu_matmul(yp.data(), x.data(), W, Tp, pool2);
                prefix &= memcmp(yp.data(), y1.data(), yp.size() * 4) == 0;
            }
            CHECK(prefix, "%s int%d %s cols %lld: a call on the first 2..16 tokens differs from the T=17 call",
                  kernel_name(isa, bits), bits, dtype_name(dt), (long long)cols);
            // rows 5..14 alone (shifts the row tiling by one) with tokens 3..16
            Weight Ws = make_W(dt, wb, 10, cols, 5);
            cpu_matmul(ys.data(), x.data() + 3 * cols, Ws, T - 3, pool2);
            bool sub = true;
            for (int t = 3; t < T; t++)
                sub &= memcmp(ys.data() + (size_t)(t - 3) * 10, y1.data() + (size_t)t * rows + 5, 10 * 4) == 0;
            CHECK(sub, "%s int%d %s cols %lld: sub-range of rows/tokens differs", kernel_name(isa, bits), bits, dtype_name(dt),
                  (long long)cols);
        }
    }
}

// A NaN anywhere in a token's x makes every output of that token NaN (and only that token's), for
// every dtype: quantization must not turn it into finite garbage.
static void test_nan(const char* isa, int bits, ThreadPool& pool) {
    cpu_matmul_set_isa(isa);
    cpu_matmul_set_act_bits(bits);
    Rng rng(3);
    for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
        if (!dtype_is_quantized(dt) && bits != 16) continue;
        const int64_t rows = 9, cols = 96;
        std::vector<uint8_t> wb = make_weight(dt, rows, cols, rng);
        Weight W = make_W(dt, wb, rows, cols);
        std::vector<float> x = make_x(3, cols, rng), y(3 * rows);
        x[cols + 70] = NAN;  // token 1, block 2
        cpu_matmul(y.data(), x.data(), W, 3, pool);
        bool ok = true;
        for (int t = 0; t < 3; t++)
            for (int64_t o = 0; o < rows; o++) ok &= std::isnan(y[t * rows + o]) == (t == 1);
        CHECK(ok, "%s int%d %s: NaN in token 1 must give NaN outputs for token 1 only", kernel_name(isa, bits), bits, dtype_name(dt));
    }
}

static void test_errors(ThreadPool& pool) {
    std::vector<uint8_t> wb(1024);
    float x[64] = {0}, y[8];
    Weight W;
    W.data = wb.data();
    W.dtype = DType::Q4_1;
    W.rows = 2;
    W.cols = 40;
    CHECK_THROWS(cpu_matmul(y, x, W, 1, pool), "multiple of 32");
    W.dtype = DType::I32;
    W.cols = 8;
    CHECK_THROWS(cpu_matmul(y, x, W, 1, pool), "not supported");
    W.dtype = DType::F32;
    CHECK_THROWS(cpu_matmul(y, x, W, -1, pool), "T must be");
    CHECK_THROWS(cpu_matmul_set_isa("sse2"), "expected 'auto'");
    CHECK_THROWS(cpu_matmul_set_act_bits(12), "expected 8 or 16");
    QuantActs qa;
    CHECK_THROWS(quant_acts_layout(qa, 64, 16, true, true), "8-bit activations only");
    CHECK_THROWS(quant_acts_layout(qa, 64, 4, false, false), "must be 8 or 16");
    // T = 0 and rows = 0 are no-ops; cols = 0 gives zeros
    cpu_matmul(y, x, W, 0, pool);
    W.cols = 0;
    y[0] = y[1] = 5;
    cpu_matmul(y, x, W, 1, pool);
    CHECK(y[0] == 0 && y[1] == 0, "cols = 0 must give 0");
}

// cpu_pack_weight refuses what it cannot pack; a Q4_0 scale whose 8 d overflows f16 is an error, not inf.
static void test_pack_errors() {
    std::vector<uint8_t> wb(34 * 4, 0);
    Weight W;
    W.data = wb.data();
    W.dtype = DType::F16;
    W.rows = 2;
    W.cols = 32;
    CHECK_THROWS(cpu_pack_weight(W, 8), "cannot be packed");
    W.dtype = DType::Q4_1;
    W.cols = 40;
    CHECK_THROWS(cpu_pack_weight(W, 16), "multiple of 32");
    W.cols = 32;
    CHECK_THROWS(cpu_pack_weight(W, 4), "must be 8 or 16, found 4");
    W.dtype = DType::Q4_0;
    const uint16_t big = f32_to_f16(60000.0f);
    memcpy(wb.data() + 18, &big, 2);  // row 1, block 0
    CHECK_THROWS(cpu_pack_weight(W, 8), "row 1 block 0");
}

// The two row-group kernels do the same float steps on exact integer block sums (matmul.h), so the
// AVX2 one (groups of 8) and the AVX-512 one (groups of 16) give the same bits, every dtype, T and
// a row count that leaves partial groups on both.
static void test_packed_isas_agree(ThreadPool& pool) {
    cpu_matmul_set_act_bits(16);
    Rng rng(7);
    for (DType dt : {DType::Q8_0, DType::Q4_0, DType::Q4_1})
        for (int64_t cols : {(int64_t)96, (int64_t)576}) {
            const int64_t rows = 37;
            const int T = 7;
            std::vector<uint8_t> wb = make_weight(dt, rows, cols, rng);
            std::vector<float> x = make_x(T, cols, rng);
            std::vector<float> y2((size_t)T * rows, NAN), y5((size_t)T * rows, NAN);
            cpu_matmul_set_isa("avx2");
            Weight W2 = make_W(dt, wb, rows, cols);
            cpu_matmul(y2.data(), x.data(), W2, T, pool);
            cpu_matmul_set_isa("avx512");
            Weight W5 = make_W(dt, wb, rows, cols);
            cpu_matmul(y5.data(), x.data(), W5, T, pool);
            CHECK(W2.packed_rows == 8 && W5.packed_rows == 16, "packed groups %d and %d", W2.packed_rows, W5.packed_rows);
            CHECK(memcmp(y2.data(), y5.data(), y2.size() * 4) == 0,
                  "%s cols %lld: the AVX2 and AVX-512 row-group kernels differ", dtype_name(dt), (long long)cols);
        }
}

// Ops::matmul_weight's packed copies belong to the matrix's bytes and live while a Weight holds them:
// one Tensor object pointed first at matrix A, its Weight dropped, then at matrix B (as a draft freed
// and another allocated at the same addresses): B's product must be B's, not A's (a cache keyed by the
// Tensor's address returned A's copy). A second Weight of B shares the first's copy.
static void test_pack_lifetime() {
    std::unique_ptr<Ops> ops = make_cpu_ops(2);
    const int rows = 64, cols = 64, nb = cols / 32;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    auto quantized = [&](std::vector<uint8_t>* out) {  // Q8_0 rows: f16 scale + 32 int8 per block
        out->assign((size_t)rows * nb * 34, 0);
        for (int r = 0; r < rows; r++)
            for (int b = 0; b < nb; b++) {
                uint8_t* blk = out->data() + ((size_t)r * nb + b) * 34;
                const uint16_t d = f32_to_f16(0.01f + 0.001f * (float)(rng() % 10));
                memcpy(blk, &d, 2);
                for (int i = 0; i < 32; i++) blk[2 + i] = (uint8_t)(int8_t)(rng() % 255 - 127);
            }
    };
    std::vector<uint8_t> A, B;
    quantized(&A);
    quantized(&B);
    const int T = 4;
    std::vector<float> x((size_t)T * cols), y((size_t)T * rows), yref((size_t)T * rows);
    for (float& v : x) v = nd(rng);
    Tensor t;
    t.name = "w";
    t.dtype = DType::Q8_0;
    t.ndim = 2;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.nbytes = A.size();
    t.data = A.data();
    {
        Weight wa = ops->matmul_weight(t);
        ops->matmul(y.data(), x.data(), wa, T);
    }
    t.data = B.data();
    Weight wb = ops->matmul_weight(t), wb2 = ops->matmul_weight(t);
    ops->matmul(y.data(), x.data(), wb, T);
    ops->matmul(yref.data(), x.data(), ops->weight(t), T);  // the unpacked path over B's bytes
    double err = 0, scale = 0;
    for (size_t i = 0; i < y.size(); i++) {
        err = std::max(err, (double)std::abs(y[i] - yref[i]));
        scale = std::max(scale, (double)std::abs(yref[i]));
    }
    CHECK(err <= 1e-4 * scale + 1e-6, "matrix B through matmul_weight: max |diff| %.3g vs its own product (scale %.3g): a stale packed copy?",
          err, scale);
    CHECK(wb.packed && wb.packed == wb2.packed, "two Weights of one matrix share one packed copy");
}

// The VmFlags of the mapping that holds address p (/proc/self/smaps), or "" if none does.
static std::string vm_flags_of(const void* p) {
    FILE* f = fopen("/proc/self/smaps", "r");
    if (!f) return "";
    char line[512];
    bool inside = false;
    std::string flags;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            flags = line + 8;
            break;
        }
    }
    fclose(f);
    return flags;
}

// Ops::matmul_weight's copies are cpu_pack_weight's bytes, laid end to end (64-byte steps) in one chunk of
// alloc_large memory, which is advised for 2 MiB pages (VmFlags "hg") unless BEAGLE_HUGEPAGES=0; and
// alloc_large's own alignment: 2 MiB from 2 MiB up, 64 bytes below.
static void test_pack_arena() {
    std::unique_ptr<Ops> ops = make_cpu_ops(2);
    Rng rng(11);
    const int64_t rows = 37, cols = 96;
    std::vector<uint8_t> a = make_weight(DType::Q4_1, rows, cols, rng), b = make_weight(DType::Q4_1, rows, cols, rng);
    Tensor ta, tb;
    for (Tensor* t : {&ta, &tb}) {
        t->name = "w";
        t->dtype = DType::Q4_1;
        t->ndim = 2;
        t->shape[0] = rows;
        t->shape[1] = cols;
        t->nbytes = a.size();
    }
    ta.data = a.data();
    tb.data = b.data();
    Weight wa = ops->matmul_weight(ta), wb = ops->matmul_weight(tb);
    const int G = cpu_pack_rows();
    const uint64_t n = cpu_packed_bytes(wa, G);
    CHECK(wa.packed && wb.packed && wa.packed_rows == G, "both matrices packed in groups of %d", G);
    std::vector<uint8_t> ref_a = cpu_pack_weight(ops->weight(ta), G), ref_b = cpu_pack_weight(ops->weight(tb), G);
    CHECK(ref_a.size() == n && memcmp(wa.packed, ref_a.data(), n) == 0 && memcmp(wb.packed, ref_b.data(), n) == 0,
          "the arena copies equal cpu_pack_weight's bytes (%llu)", (unsigned long long)n);
    CHECK(wb.packed == wa.packed + (n + 63) / 64 * 64, "the second copy follows the first at a 64-byte step: offset %lld, expected %llu",
          (long long)(wb.packed - wa.packed), (unsigned long long)((n + 63) / 64 * 64));
    const bool hg = vm_flags_of(wa.packed).find(" hg") != std::string::npos;
    CHECK(hg == huge_pages_enabled(), "packed weights: advised for huge pages %d, expected %d (flags:%s)", (int)hg,
          (int)huge_pages_enabled(), vm_flags_of(wa.packed).c_str());
    void* big = alloc_large((size_t)3 << 20);
    void* small = alloc_large(1000);
    CHECK(((uintptr_t)small & 63) == 0, "alloc_large(1000) is 64-byte aligned: %p", small);
    if (huge_pages_enabled())
        CHECK(((uintptr_t)big & (((uintptr_t)2 << 20) - 1)) == 0 && vm_flags_of(big).find(" hg") != std::string::npos,
              "alloc_large(3 MiB) is 2 MiB aligned (%p) and advised (flags:%s)", big, vm_flags_of(big).c_str());
    free(big);
    free(small);
}

// cpu_matmul_n over a set (Q/K/V-like: three row counts, partial groups) gives the bits of one
// cpu_matmul per matrix, packed or not, with 1, 2 and 3 threads; a set with one unpacked matrix too.
// Shapes: a small set (the caller alone) and SmolLM2's Q/K/V (the parallel region: blocks of x split
// over the threads, a barrier, then the row groups; 18 blocks over 3 threads, 60 or 120 groups).
static void test_matmul_n(const char* isa, ThreadPool& pool1, ThreadPool& pool2, ThreadPool& pool3) {
    cpu_matmul_set_isa(isa);
    cpu_matmul_set_act_bits(16);
    Rng rng(31);
    const int64_t shapes[2][4] = {{96, 37, 13, 8}, {576, 576, 192, 192}};  // cols, rows of the three
    for (const auto& sh : shapes)
    for (DType dt : {DType::Q4_1, DType::Q8_0})
        for (bool pack : {true, false})
            for (int T : {1, 5}) {
                const int64_t cols = sh[0], rows[3] = {sh[1], sh[2], sh[3]};
                g_pack = pack;
                std::vector<uint8_t> wb[3];
                Weight W[3];
                for (int i = 0; i < 3; i++) {
                    wb[i] = make_weight(dt, rows[i], cols, rng);
                    W[i] = make_W(dt, wb[i], rows[i], cols);
                }
                if (!pack) W[1] = make_W(DType::Q4_1, wb[1], rows[1], cols);  // (unpacked either way)
                std::vector<float> x = make_x(T, cols, rng);
                for (ThreadPool* p : {&pool1, &pool2, &pool3}) {
                    std::vector<float> ref[3], got[3];
                    float* ys[3];
                    const Weight* ws[3];
                    for (int i = 0; i < 3; i++) {
                        ref[i].assign((size_t)T * rows[i], NAN);
                        got[i].assign((size_t)T * rows[i], NAN);
                        cpu_matmul(ref[i].data(), x.data(), W[i], T, *p);
                        ys[i] = got[i].data();
                        ws[i] = &W[i];
                    }
                    cpu_matmul_n(3, ys, x.data(), ws, T, *p);
                    bool same = true;
                    for (int i = 0; i < 3; i++) same &= memcmp(ref[i].data(), got[i].data(), ref[i].size() * 4) == 0;
                    CHECK(same, "%s %s packed %d T %d threads %d: cpu_matmul_n differs from cpu_matmul per matrix", isa,
                          dtype_name(dt), pack, T, p->size());
                }
            }
    g_pack = false;
}

// cpu_swiglu_matmul(y, h, gate, up, W) = cpu_swiglu then cpu_matmul, bit for bit (y and h; h apart from
// gate or in place over it), packed or not, with 1, 2 and 3 threads and a 2-thread pool limited to one;
// and independently: h within 1e-6 relative of silu(g) u in double, y within the float64 model's bound
// of h W^T (check_result). cols 32 (one block for 2 or 3 threads: some threads quantize nothing), 96, 1536.
static void test_swiglu_matmul(const char* isa, ThreadPool& pool1, ThreadPool& pool2, ThreadPool& pool3) {
    cpu_matmul_set_isa(isa);
    cpu_matmul_set_act_bits(16);
    Rng rng(57);
    int bad_bits = 0, bad_h = 0, bad_y = 0, n = 0;
    for (DType dt : {DType::Q4_1, DType::Q8_0})
        for (bool pack : {true, false})
            for (int64_t cols : {32, 96, 1536})
                for (int64_t rows : {33, 576})
                    for (int T : {1, 4, 5}) {
                        g_pack = pack;
                        std::vector<uint8_t> wb = make_weight(dt, rows, cols, rng);
                        Weight W = make_W(dt, wb, rows, cols);
                        std::vector<float> gate = make_x(T, cols, rng), up = make_x(T, cols, rng);
                        for (float& v : gate) v *= 0.25f;  // silu's interesting range
                        std::vector<float> h_ref(gate.size()), y_ref((size_t)T * rows);
                        cpu_swiglu(h_ref.data(), gate.data(), up.data(), gate.size());
                        cpu_matmul(y_ref.data(), h_ref.data(), W, T, pool1);
                        for (int i = 0; i < (int)gate.size(); i++) {
                            const double g = gate[i], want = g / (1.0 + std::exp(-g)) * up[i];
                            bad_h += !(std::fabs(h_ref[i] - want) <= 1e-6 * std::fabs(want) + 1e-30);
                        }
                        bad_y += !check_result(dt, wb.data(), h_ref, y_ref.data(), rows, cols, T,
                                               kernel_name(isa, 16), 16);
                        for (int k = 0; k < 4; k++) {
                            ThreadPool& p = k == 0 ? pool1 : k == 1 || k == 3 ? pool2 : pool3;
                            if (k == 3) p.set_limit(1);
                            for (bool in_place : {false, true}) {
                                std::vector<float> g2 = gate, h((size_t)T * cols, NAN), y((size_t)T * rows, NAN);
                                float* hp = in_place ? g2.data() : h.data();
                                cpu_swiglu_matmul(y.data(), hp, g2.data(), up.data(), W, T, p);
                                const bool same = memcmp(y.data(), y_ref.data(), y.size() * 4) == 0 &&
                                                  memcmp(hp, h_ref.data(), h_ref.size() * 4) == 0;
                                bad_bits += !same;
                                if (!same)
                                    printf("  %s %s packed %d cols %lld rows %lld T %d threads %d%s%s: differs from "
                                           "swiglu then matmul\n", isa, dtype_name(dt), pack, (long long)cols,
                                           (long long)rows, T, p.limit(), k == 3 ? " (limited)" : "",
                                           in_place ? " in place" : "");
                                n++;
                            }
                            p.set_limit(0);
                        }
                    }
    g_pack = false;
    CHECK(bad_bits == 0, "%s: %d of %d swiglu_matmul calls differ from swiglu then matmul", isa, bad_bits, n);
    CHECK(bad_h == 0, "%s: %d swiglu values off silu(g) u by more than 1e-6 relative", isa, bad_h);
    CHECK(bad_y == 0, "%s: %d shapes of swiglu then matmul outside the float64 model's bound", isa, bad_y);
}

// Default activation bits: 16, or env BEAGLE_ACT_BITS (checked before anything fixes the choice).
static void test_act_bits_env() {
    setenv("BEAGLE_ACT_BITS", "4", 1);
    CHECK_THROWS(cpu_matmul_act_bits(), "expected 8 or 16");
    setenv("BEAGLE_ACT_BITS", "8", 1);
    CHECK(cpu_matmul_act_bits() == 8, "BEAGLE_ACT_BITS=8 gives %d", cpu_matmul_act_bits());
    unsetenv("BEAGLE_ACT_BITS");
    cpu_matmul_set_act_bits(16);
    CHECK(cpu_matmul_act_bits() == 16, "set_act_bits(16) gives %d", cpu_matmul_act_bits());
}

// ThreadPool::set_limit (the drafter's one-thread forwards on the target's pool): limit 1 runs every
// chunk on the caller and wakes no worker; 0 gives all threads back; a limited pool's matmul is the
// same bits as a one-thread pool's (the kernels' static split changes who computes a row, not how).
static void test_pool_limit(ThreadPool& pool1, ThreadPool& pool2) {
    auto threads_used = [&](ThreadPool& p) {
        std::vector<std::atomic<int>> seen(p.size());
        for (auto& a : seen) a = 0;
        p.parallel_for(1000, [&](int64_t, int64_t, int t) { seen[t]++; }, 1 << 20);
        int n = 0;
        for (auto& a : seen) n += a.load() > 0;
        return n;
    };
    CHECK(threads_used(pool2) == 2, "a 2-thread pool ran a large job on %d threads", threads_used(pool2));
    pool2.set_limit(1);
    CHECK(pool2.limit() == 1 && threads_used(pool2) == 1, "limit 1: %d threads ran", threads_used(pool2));
    Rng rng(7);
    for (DType dt : {DType::F32, DType::Q8_0, DType::Q4_1}) {
        const int64_t rows = 200, cols = 576;
        const int T = 5;
        std::vector<uint8_t> wb = make_weight(dt, rows, cols, rng);
        Weight W = make_W(dt, wb, rows, cols);
        std::vector<float> x = make_x(T, cols, rng), y1((size_t)T * rows), y2((size_t)T * rows);
        cpu_matmul(y1.data(), x.data(), W, T, pool1);
        cpu_matmul(y2.data(), x.data(), W, T, pool2);
        CHECK(memcmp(y1.data(), y2.data(), y1.size() * 4) == 0, "%s: a pool limited to 1 thread differs from a 1-thread pool",
              dtype_name(dt));
    }
    pool2.set_limit(0);
    CHECK(pool2.limit() == 2 && threads_used(pool2) == 2, "limit 0: %d threads ran, expected all 2", threads_used(pool2));
    pool2.set_limit(5);
    CHECK(pool2.limit() == 2, "limit 5 on a 2-thread pool: %d", pool2.limit());
    pool2.set_limit(0);
}

int main() {
    ThreadPool pool1(1), pool2(2), pool3(3);
    test_act_bits_env();
    test_pool_limit(pool1, pool2);
    test_quantizer();
    test_errors(pool2);
    std::vector<const char*> isas = {"avx2"};
    if (cpu_has_avx512_vnni())
        isas.push_back("avx512");
    else
        printf("note: CPU lacks AVX-512 VNNI, only the AVX2 path is tested\n");
    for (const char* isa : isas)
        for (int bits : {16, 8}) {
            test_accuracy(isa, bits, pool2);
            test_invariance(isa, bits, pool1, pool2);
            test_nan(isa, bits, pool2);
        }
    // the row-group kernels (and, with 8-bit activations, the fallback to the original bytes)
    g_pack = true;
    for (const char* isa : isas)
        for (int bits : {16, 8}) {
            test_accuracy(isa, bits, pool2);
            test_invariance(isa, bits, pool1, pool2);
            test_nan(isa, bits, pool2);
        }
    if (cpu_has_avx512_vnni()) test_packed_isas_agree(pool2);
    for (const char* isa : isas) test_matmul_n(isa, pool1, pool2, pool3);
    for (const char* isa : isas) test_swiglu_matmul(isa, pool1, pool2, pool3);
    g_pack = true;
    test_pack_errors();
    cpu_matmul_set_act_bits(16);  // the packed kernels' setting
    for (const char* isa : isas) {
        cpu_matmul_set_isa(isa);
        test_pack_lifetime();
        test_pack_arena();
    }
    g_pack = false;
    g_packs.clear();
    cpu_matmul_set_isa("auto");
    cpu_matmul_set_act_bits(16);
    printf("checked %d output values\n", g_cases);
    return test_summary("test_matmul");
}
