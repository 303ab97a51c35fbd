// cuda_backend_ops.cpp -> build/test/test_cuda_backend_ops: every method of the op interface
// (src/backend/ops.h) on the CUDA backend (src/backend/gpu/, kernels in the CPU emulator) against the
// CPU backend on the same inputs: memory, matmul for every stored weight type, the fused ops of the
// target's forward (matmul_n in one launch, rope_qk, add_rmsnorm: the same bits as unfused), embed, rmsnorm, rope,
// attention with each AttnMask kind, swiglu, add, move_rows/scatter_rows, and every training op
// (dense products and transposes, rmsnorm fwd/bwd, rope inverse, xattn fwd/bwd with PREFIX and BLOCK
// masks, swiglu bwd, chunked cross-entropy, SmoothL1, sumsq, AdamW), plus topk_rows (drafting, greedy
// acceptance; ids left on the backend for embed, the greedy chain), warp_rows (the sampled chain) and the runtime counters (caching allocator, asynchronous uploads, staging once, one
// sync per download). This checks the host code (argument mapping, host-array staging, masks) that
// the kernel tests do not.
// Tolerances: exact where both backends do the same float operations (copies, embed, elementwise
// add); fp32 ops atol 1e-5 rtol 1e-4 (different but fixed summation orders); matmul is checked against
// the exact product instead (see test_matmul).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/gpu/cuda_ops.h"
#include "core/dtype.h"
#include "testlib.h"

using namespace beagle;

static uint64_t g_rng = 88172645463325252ull;
static float frand(float lo = -1, float hi = 1) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return lo + (hi - lo) * (float)((g_rng >> 40) / 16777216.0);
}
static std::vector<float> rvec(size_t n, float lo = -1, float hi = 1) {
    std::vector<float> v(n);
    for (auto& x : v) x = frand(lo, hi);
    return v;
}

static CpuOps* g_cpu;
static CudaOps* g_gpu;

// One buffer on each backend with the same contents.
struct Buf {
    float* c = nullptr;
    float* g = nullptr;
    size_t n = 0;
};
static Buf mk(const std::vector<float>& h) {
    Buf b;
    b.n = h.size();
    b.c = g_cpu->alloc(b.n);
    b.g = g_gpu->alloc(b.n);
    g_cpu->upload(b.c, h.data(), b.n);
    g_gpu->upload(b.g, h.data(), b.n);
    return b;
}
static Buf mk(size_t n) { return mk(std::vector<float>(n, 0.0f)); }
static void rel(Buf& b) {
    g_cpu->release(b.c);
    g_gpu->release(b.g);
}
static std::vector<float> get(Ops& o, const float* p, size_t n) {
    std::vector<float> h(n);
    o.download(h.data(), p, n);
    return h;
}
// Compare the two backends' contents of b: |gpu - cpu| <= atol + rtol |cpu|.
static void cmp(const char* what, const Buf& b, double atol, double rtol) {
    std::vector<float> c = get(*g_cpu, b.c, b.n), g = get(*g_gpu, b.g, b.n);
    size_t bad = 0, first = 0;
    double worst = 0;
    for (size_t i = 0; i < b.n; i++) {
        double err = std::fabs((double)g[i] - c[i]);
        if (std::isinf(c[i]) && g[i] == c[i]) err = 0;
        if (std::isnan(c[i]) != std::isnan(g[i])) err = INFINITY;
        worst = std::max(worst, err);
        if (!(err <= atol + rtol * std::fabs(c[i]))) {
            if (!bad) first = i;
            bad++;
        }
    }
    CHECK(bad == 0, "%s: %zu of %zu differ, first at %zu: cuda %.9g cpu %.9g (atol %g rtol %g)", what, bad, b.n, first,
          bad ? g[first] : 0.0f, bad ? c[first] : 0.0f, atol, rtol);
    printf("  %-44s n %7zu  max |cuda - cpu| %.3e\n", what, b.n, worst);
}

// ---- weights of each stored type ------------------------------------------------------------------
struct HostTensor {
    Tensor t;
    std::vector<uint8_t> bytes;
};
static HostTensor make_tensor(DType dt, int rows, int cols, const char* name) {
    HostTensor h;
    h.t.name = name;
    h.t.dtype = dt;
    h.t.ndim = 2;
    h.t.shape[0] = rows;
    h.t.shape[1] = cols;
    uint64_t rb = dtype_row_bytes(dt, cols);
    h.bytes.resize(rows * rb);
    for (int r = 0; r < rows; r++) {
        uint8_t* row = h.bytes.data() + r * rb;
        for (int i = 0; i < cols; i++) {
            float v = frand(-0.5f, 0.5f);
            if (dt == DType::F32) memcpy(row + 4 * i, &v, 4);
            if (dt == DType::F16) { uint16_t x = f32_to_f16(v); memcpy(row + 2 * i, &x, 2); }
            if (dt == DType::BF16) { uint16_t x = f32_to_bf16(v); memcpy(row + 2 * i, &x, 2); }
        }
        if (dt == DType::Q5_0 || dt == DType::Q5_1 || dt == DType::Q4_K || dt == DType::Q5_K || dt == DType::Q6_K) {
            // the 5-bit and k-quant types: random bytes, finite half scales
            const int bs = (int)dtype_block_bytes(dt);
            for (int j = 0; j < (int)rb; j++) row[j] = (uint8_t)(frand(0, 255.99f));
            for (int b = 0; b < (int)(rb / bs); b++)
                for (int off : dt == DType::Q6_K ? std::vector<int>{208} : dt == DType::Q5_0 ? std::vector<int>{0}
                                                                                            : std::vector<int>{0, 2}) {
                    uint16_t h = f32_to_f16(frand(0.001f, 0.01f));
                    memcpy(row + b * bs + off, &h, 2);
                }
        } else if (dtype_is_quantized(dt)) {
            int bs = dt == DType::Q8_0 ? 34 : dt == DType::Q4_0 ? 18 : 20;
            for (int b = 0; b < cols / 32; b++) {
                uint8_t* blk = row + b * bs;
                uint16_t d = f32_to_f16(frand(0.002f, 0.02f)), m = f32_to_f16(frand(-0.1f, 0.1f));
                memcpy(blk, &d, 2);
                if (dt == DType::Q4_1) memcpy(blk + 2, &m, 2);
                for (int j = (dt == DType::Q4_1 ? 4 : 2); j < bs; j++) blk[j] = (uint8_t)(frand(0, 255.99f));
            }
        }
    }
    h.t.data = h.bytes.data();
    h.t.nbytes = h.bytes.size();
    return h;
}

static void test_memory() {
    std::vector<float> h = rvec(1000);
    Buf b = mk(h);
    CHECK(get(*g_gpu, b.g, b.n) == h, "upload/download round trip");
    // copy with overlap (memmove semantics)
    g_cpu->copy(b.c + 10, b.c, 500);
    g_gpu->copy(b.g + 10, b.g, 500);
    cmp("copy (overlapping)", b, 0, 0);
    g_cpu->zero(b.c + 3, 7);
    g_gpu->zero(b.g + 3, 7);
    cmp("zero", b, 0, 0);
    float* z = g_gpu->alloc(77);
    std::vector<float> zz = get(*g_gpu, z, 77);
    CHECK(std::all_of(zz.begin(), zz.end(), [](float v) { return v == 0.0f; }), "alloc is zero-initialised");
    g_gpu->release(z);
    rel(b);
}

// matmul against the exact product (double, dequantized weights) rather than the CPU backend: the two
// backends round activations differently (CPU: f32 with half weights, int16 blocks with quantized
// weights; GPU: bf16/fp16 for the tensor cores, int8 blocks for dp4a). Tolerance per output:
// F32 1e-5 sum|w x|; F16 2^-11 sum|w x| and BF16 2^-8 sum|w x| (one rounding of each x); quantized:
// the int8 bound sum_i |w_i| d_x(i) / 2 with d_x = max|x| / 127 of x's 32-block, plus 1e-5 sum|w x|.
static void test_matmul() {
    struct Case { DType dt; int rows, cols, T; };
    Case cases[] = {{DType::F32, 37, 70, 5},  {DType::F16, 33, 64, 3},  {DType::BF16, 65, 96, 4},
                    {DType::Q8_0, 37, 96, 5}, {DType::Q4_0, 20, 64, 2}, {DType::Q4_1, 9, 288, 7},
                    // a tall matrix (2072 rows: a partial last block of every row tiling): the dp4a kernel at
                    // T = 6 by default (T <= QGEMM_DP4A_MAX_T), 16-row tensor-core blocks under
                    // BEAGLE_CUDA_DP4A_MAX_T < 6
                    {DType::Q4_1, 2072, 64, 6},
                    // the 5-bit and k-quant types (gemm_kquant_kernel)
                    {DType::Q5_0, 9, 96, 5}, {DType::Q5_1, 20, 64, 3}, {DType::Q4_K, 37, 256, 5},
                    {DType::Q5_K, 9, 512, 7}, {DType::Q6_K, 33, 256, 3}};
    for (auto& cs : cases) {
        HostTensor W = make_tensor(cs.dt, cs.rows, cs.cols, "w");
        Weight wg = g_gpu->weight(W.t);
        std::vector<float> xh = rvec((size_t)cs.T * cs.cols, -2, 2);
        Buf x = mk(xh), y = mk((size_t)cs.T * cs.rows);
        g_gpu->matmul(y.g, x.g, wg, cs.T);
        std::vector<float> got = get(*g_gpu, y.g, y.n), wrow(cs.cols);
        int bad = 0;
        double worst = 0;
        for (int o = 0; o < cs.rows; o++) {
            dequantize_row(cs.dt, W.t.row(o), wrow.data(), cs.cols);
            for (int t = 0; t < cs.T; t++) {
                const float* xr = &xh[(size_t)t * cs.cols];
                double exact = 0, mag = 0;
                for (int i = 0; i < cs.cols; i++) {
                    exact += (double)wrow[i] * xr[i];
                    mag += std::fabs((double)wrow[i] * xr[i]);
                }
                double tol = 1e-5 * mag;
                if (cs.dt == DType::F16) tol = std::ldexp(mag, -11);
                if (cs.dt == DType::BF16) tol = std::ldexp(mag, -8);
                if (dtype_is_quantized(cs.dt)) {
                    double b = 0;
                    for (int i = 0; i < cs.cols; i++) {
                        double amax = 0;
                        for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++) amax = std::max(amax, (double)std::fabs(xr[j]));
                        b += std::fabs((double)wrow[i]) * amax / 127 / 2;
                    }
                    tol = b * 1.01 + 1e-5 * mag;
                }
                double err = std::fabs(got[(size_t)t * cs.rows + o] - exact);
                worst = std::max(worst, err / tol);
                bad += !(err <= tol);
            }
        }
        CHECK(bad == 0, "matmul %s: %d outputs outside the tolerance (worst err/tol %.3f)", dtype_name(cs.dt), bad, worst);
        printf("  %-44s n %7zu  max err/tol %.3f\n", strfmt("matmul %s %dx%d T%d vs exact", dtype_name(cs.dt), cs.rows, cs.cols, cs.T).c_str(),
               y.n, worst);
        rel(x);
        rel(y);
    }
}

// The fused ops of the target's forward (Llama::run): each gives the same bits as the unfused calls on
// the same backend (memcmp) in fewer launches, and matches the CPU backend (rope_qk, add_rmsnorm: fp32
// tolerances as rope and rmsnorm below); CpuOps's own add_rmsnorm (a row's add and norm in one pass) and
// its rope_qk (the ops.h default) are checked bit-identical to the unfused calls too.
static long long launches() { return g_gpu->device_counters()->launches; }
static void test_fused_ops() {
    // matmul_n: Q/K/V-like weights of different heights in one launch (T <= 16, QGEMM_DP4A_MAX_T: the GEMM
    // quantizes x itself) or two (T > 16: quantize + tensor-core GEMM), the same bits as one matmul each
    for (int T : {1, 3, 6, 17}) {
        HostTensor W0 = make_tensor(DType::Q4_1, 37, 96, "wq"), W1 = make_tensor(DType::Q4_1, 9, 96, "wk"),
                   W2 = make_tensor(DType::Q4_1, 20, 96, "wv");
        Weight w[3] = {g_gpu->weight(W0.t), g_gpu->weight(W1.t), g_gpu->weight(W2.t)};
        const Weight* ws[3] = {&w[0], &w[1], &w[2]};
        Buf x = mk(rvec((size_t)T * 96, -2, 2));
        float* ys[3];
        float* ones[3];
        for (int m = 0; m < 3; m++) {
            ys[m] = g_gpu->alloc((size_t)T * w[m].rows);
            ones[m] = g_gpu->alloc((size_t)T * w[m].rows);
            g_gpu->matmul(ones[m], x.g, w[m], T);
        }
        const long long l0 = launches();
        g_gpu->matmul_n(3, ys, x.g, ws, T);
        const long long n = launches() - l0;
        CHECK(n == (T <= 16 ? 1 : 2), "matmul_n of 3 Q4_1 weights at T = %d: %lld launches", T, n);  // QGEMM_DP4A_MAX_T
        int bad = 0;
        for (int m = 0; m < 3; m++) {
            bad += get(*g_gpu, ys[m], (size_t)T * w[m].rows) != get(*g_gpu, ones[m], (size_t)T * w[m].rows);
            g_gpu->release(ys[m]);
            g_gpu->release(ones[m]);
        }
        CHECK(bad == 0, "matmul_n T = %d: %d of 3 outputs differ from one matmul each", T, bad);
        printf("  %-44s %lld launch(es), same bits as 3 matmuls\n", strfmt("matmul_n 3 x Q4_1 T%d", T).c_str(), n);
        // mixed dtypes: one matmul per weight (still correct)
        HostTensor W3 = make_tensor(DType::Q8_0, 9, 96, "wk8");
        Weight w3 = g_gpu->weight(W3.t);
        const Weight* mixed[2] = {&w[0], &w3};
        float* ym[2] = {g_gpu->alloc((size_t)T * 37), g_gpu->alloc((size_t)T * 9)};
        float* y1 = g_gpu->alloc((size_t)T * 9);
        g_gpu->matmul_n(2, ym, x.g, mixed, T);
        g_gpu->matmul(y1, x.g, w3, T);
        CHECK(get(*g_gpu, ym[1], (size_t)T * 9) == get(*g_gpu, y1, (size_t)T * 9), "matmul_n Q4_1 + Q8_0 T = %d", T);
        g_gpu->release(ym[0]);
        g_gpu->release(ym[1]);
        g_gpu->release(y1);
        // the dp4a GEMM reads x while other blocks write y: an output over the input is refused
        if (T == 1) CHECK_THROWS(g_gpu->matmul(x.g, x.g, w[0], T), "overlaps the input");
        rel(x);
    }
    // rope_qk: q (6 heads) and k (2 heads) in one launch
    {
        RopeParams rp;
        rp.head_dim = 64;
        std::vector<int> pos = {0, 5, 1000, 4099};
        std::vector<float> qh = rvec(4 * 6 * 64), kh = rvec(4 * 2 * 64);
        Buf q = mk(qh), k = mk(kh), q1 = mk(qh), k1 = mk(kh);
        g_cpu->rope_qk(q.c, k.c, pos.data(), 4, 6, 2, rp);
        const long long l0 = launches();
        g_gpu->rope_qk(q.g, k.g, pos.data(), 4, 6, 2, rp);
        CHECK(launches() - l0 == 1, "rope_qk: %lld launches", launches() - l0);
        cmp("rope_qk q", q, 1e-6, 1e-5);
        cmp("rope_qk k", k, 1e-6, 1e-5);
        for (Ops* o : {(Ops*)g_cpu, (Ops*)g_gpu}) {
            float* qp = o == g_cpu ? q1.c : q1.g;
            float* kp = o == g_cpu ? k1.c : k1.g;
            o->rope(qp, pos.data(), 4, 6, rp, false);
            o->rope(kp, pos.data(), 4, 2, rp, false);
            CHECK(get(*o, qp, q.n) == get(*o, o == g_cpu ? q.c : q.g, q.n) &&
                      get(*o, kp, k.n) == get(*o, o == g_cpu ? k.c : k.g, k.n),
                  "%s rope_qk differs from two rope calls", o->name());
        }
        rel(q);
        rel(k);
        rel(q1);
        rel(k1);
    }
    // add_rmsnorm: x += dx; y = rmsnorm(x) w, at SmolLM2's width
    {
        const int T = 3, dim = 576;
        HostTensor w = make_tensor(DType::F32, 1, dim, "norm");
        w.t.ndim = 1;
        w.t.shape[0] = dim;
        Weight wc = g_cpu->weight(w.t), wg = g_gpu->weight(w.t);
        std::vector<float> xh = rvec((size_t)T * dim, -3, 3), dxh = rvec((size_t)T * dim);
        Buf x = mk(xh), dx = mk(dxh), y = mk((size_t)T * dim), x1 = mk(xh), y1 = mk((size_t)T * dim);
        g_cpu->add_rmsnorm(y.c, x.c, dx.c, wc, T, dim, 1e-5f);
        const long long l0 = launches();
        g_gpu->add_rmsnorm(y.g, x.g, dx.g, wg, T, dim, 1e-5f);
        CHECK(launches() - l0 == 1, "add_rmsnorm: %lld launches", launches() - l0);
        cmp("add_rmsnorm x", x, 0, 0);  // one fp32 add each: exact
        cmp("add_rmsnorm y", y, 1e-6, 1e-5);
        for (Ops* o : {(Ops*)g_cpu, (Ops*)g_gpu}) {
            const bool c = o == g_cpu;
            o->add(c ? x1.c : x1.g, c ? dx.c : dx.g, (size_t)T * dim);
            o->rmsnorm(c ? y1.c : y1.g, c ? x1.c : x1.g, c ? wc : wg, T, dim, 1e-5f);
            CHECK(get(*o, c ? x1.c : x1.g, x.n) == get(*o, c ? x.c : x.g, x.n) &&
                      !memcmp(get(*o, c ? y1.c : y1.g, y.n).data(), get(*o, c ? y.c : y.g, y.n).data(), y.n * 4),
                  "%s add_rmsnorm differs from add then rmsnorm", o->name());
        }
        for (Buf* b : {&x, &dx, &y, &x1, &y1}) rel(*b);
    }
    // CpuOps's add_rmsnorm at a width with a tail past its 8-wide add, and at a verify's T
    for (int dim : {100, 576}) {
        const int T = 8;
        HostTensor w = make_tensor(DType::F32, 1, dim, "norm");
        w.t.ndim = 1;
        w.t.shape[0] = dim;
        Weight wc = g_cpu->weight(w.t);
        std::vector<float> x = rvec((size_t)T * dim, -3, 3), dx = rvec((size_t)T * dim), y((size_t)T * dim);
        std::vector<float> x1 = x, y1 = y;
        g_cpu->add_rmsnorm(y.data(), x.data(), dx.data(), wc, T, dim, 1e-5f);
        g_cpu->add(x1.data(), dx.data(), (size_t)T * dim);
        g_cpu->rmsnorm(y1.data(), x1.data(), wc, T, dim, 1e-5f);
        CHECK(x == x1 && !memcmp(y.data(), y1.data(), y.size() * 4), "cpu add_rmsnorm (dim %d) differs from add then rmsnorm",
              dim);
    }
}

static void test_inference_ops() {
    // embed (Q8_0 and F32 tables): the same dequantization formulas -> exact
    for (DType dt : {DType::Q8_0, DType::F32, DType::Q4_1}) {
        HostTensor E = make_tensor(dt, 50, 64, "embd");
        Weight ec = g_cpu->weight(E.t), eg = g_gpu->weight(E.t);
        std::vector<int> tok = {3, 49, 0, 3, 17};
        Buf x = mk(5 * 64);
        g_cpu->embed(x.c, ec, tok.data(), 5);
        g_gpu->embed(x.g, eg, tok.data(), 5);
        cmp(strfmt("embed %s", dtype_name(dt)).c_str(), x, 0, 0);
        rel(x);
        int bad = 99;
        CHECK_THROWS(g_gpu->embed(x.g, eg, &bad, 1), "out of range");
    }
    // rmsnorm
    {
        HostTensor w = make_tensor(DType::F32, 1, 100, "norm");
        w.t.ndim = 1;
        w.t.shape[0] = 100;
        Weight wc = g_cpu->weight(w.t), wg = g_gpu->weight(w.t);
        Buf x = mk(rvec(3 * 100, -3, 3)), y = mk(3 * 100);
        g_cpu->rmsnorm(y.c, x.c, wc, 3, 100, 1e-5f);
        g_gpu->rmsnorm(y.g, x.g, wg, 3, 100, 1e-5f);
        cmp("rmsnorm", y, 1e-6, 1e-5);
        rel(x);
        rel(y);
    }
    // rope, with and without Llama-3 scaling
    for (bool l3 : {false, true}) {
        RopeParams rp;
        rp.head_dim = 64;
        rp.theta = l3 ? 500000.0f : 10000.0f;
        rp.llama3_scaling = l3;
        rp.factor = 8;
        std::vector<int> pos = {0, 5, 1000, 4099};
        Buf x = mk(rvec(4 * 3 * 64));
        g_cpu->rope(x.c, pos.data(), 4, 3, rp, false);
        g_gpu->rope(x.g, pos.data(), 4, 3, rp, false);
        cmp(l3 ? "rope (llama3 scaling)" : "rope", x, 1e-6, 1e-5);
        g_cpu->rope(x.c, pos.data(), 4, 3, rp, true);
        g_gpu->rope(x.g, pos.data(), 4, 3, rp, true);
        cmp("rope inverse", x, 1e-6, 1e-5);
        rel(x);
    }
    // attention: causal, tree, per-query ranges
    {
        const int T = 6, nh = 6, nkv = 2, hd = 32, past = 9, rows = past + T, qd = nh * hd, kvd = nkv * hd;
        Buf q = mk(rvec(T * qd, -2, 2)), k = mk(rvec(rows * kvd, -2, 2)), v = mk(rvec(rows * kvd)), o = mk(T * qd);
        AttnMask m;
        m.n_past = past;
        g_cpu->attention(o.c, q.c, k.c, v.c, T, nh, nkv, hd, m);
        g_gpu->attention(o.g, q.g, k.g, v.g, T, nh, nkv, hd, m);
        cmp("attention causal", o, 1e-5, 1e-4);
        std::vector<uint64_t> tree = {1, 3, 5, 11, 17, 39};
        m.tree_mask = tree.data();
        m.mask_words = 1;
        g_cpu->attention(o.c, q.c, k.c, v.c, T, nh, nkv, hd, m);
        g_gpu->attention(o.g, q.g, k.g, v.g, T, nh, nkv, hd, m);
        cmp("attention tree", o, 1e-5, 1e-4);
        std::vector<int> start = {0, 0, 5, 5, 5, 10}, len = {1, 2, 1, 2, 3, 5};
        AttnMask r;
        r.kv_start = start.data();
        r.kv_len = len.data();
        g_cpu->attention(o.c, q.c, k.c, v.c, T, nh, nkv, hd, r);
        g_gpu->attention(o.g, q.g, k.g, v.g, T, nh, nkv, hd, r);
        cmp("attention per-sequence ranges", o, 1e-5, 1e-4);
        rel(q); rel(k); rel(v); rel(o);
    }
    // swiglu, add, move_rows (in-place compaction), scatter_rows (KV append)
    {
        Buf g = mk(rvec(1001, -8, 8)), u = mk(rvec(1001)), out = mk(1001);
        g_cpu->swiglu(out.c, g.c, u.c, 1001);
        g_gpu->swiglu(out.g, g.g, u.g, 1001);
        cmp("swiglu", out, 1e-6, 1e-5);
        g_cpu->add(out.c, u.c, 1001);
        g_gpu->add(out.g, u.g, 1001);
        cmp("add", out, 1e-6, 1e-5);
        rel(g); rel(u); rel(out);
        Buf cache = mk(rvec(20 * 12));
        std::vector<int> src = {5, 7, 8, 12}, dst = {5, 6, 7, 8};
        g_cpu->move_rows(cache.c, src.data(), dst.data(), 4, 12);
        g_gpu->move_rows(cache.g, src.data(), dst.data(), 4, 12);
        cmp("move_rows (KV compaction)", cache, 0, 0);
        Buf rows = mk(rvec(3 * 12));
        std::vector<int> at = {19, 0, 4};
        g_cpu->scatter_rows(cache.c, rows.c, at.data(), 3, 12, false);
        g_gpu->scatter_rows(cache.g, rows.g, at.data(), 3, 12, false);
        cmp("scatter_rows (KV append)", cache, 0, 0);
        rel(cache); rel(rows);
    }
}

static void test_training_ops() {
    const int T = 7, n_in = 40, n_out = 33;
    {
        Buf x = mk(rvec(T * n_in)), W = mk(rvec(n_out * n_in)), y = mk(T * n_out), dy = mk(rvec(T * n_out));
        Buf dx = mk(rvec(T * n_in)), dW = mk(rvec(n_out * n_in));
        g_cpu->matmul_f32(y.c, x.c, W.c, T, n_in, n_out);
        g_gpu->matmul_f32(y.g, x.g, W.g, T, n_in, n_out);
        cmp("matmul_f32", y, 1e-5, 1e-5);
        for (bool acc : {true, false}) {
            g_cpu->matmul_f32_bwd_x(dx.c, dy.c, W.c, T, n_in, n_out, acc);
            g_gpu->matmul_f32_bwd_x(dx.g, dy.g, W.g, T, n_in, n_out, acc);
            cmp(acc ? "matmul_f32_bwd_x (accumulate)" : "matmul_f32_bwd_x", dx, 1e-5, 1e-5);
        }
        g_cpu->matmul_f32_bwd_w(dW.c, dy.c, x.c, T, n_in, n_out);
        g_gpu->matmul_f32_bwd_w(dW.g, dy.g, x.g, T, n_in, n_out);
        cmp("matmul_f32_bwd_w (accumulates)", dW, 1e-5, 1e-5);
        rel(x); rel(W); rel(y); rel(dy); rel(dx); rel(dW);
    }
    {
        const int dim = 77;
        Buf x = mk(rvec(T * dim, -2, 2)), w = mk(rvec(dim, 0.5f, 1.5f)), y = mk(T * dim), r = mk(T);
        Buf dy = mk(rvec(T * dim)), dx = mk(rvec(T * dim)), dw = mk(rvec(dim));
        g_cpu->rmsnorm_f32(y.c, r.c, x.c, w.c, T, dim, 1e-6f);
        g_gpu->rmsnorm_f32(y.g, r.g, x.g, w.g, T, dim, 1e-6f);
        cmp("rmsnorm_f32 y", y, 1e-6, 1e-5);
        cmp("rmsnorm_f32 rstd", r, 1e-6, 1e-5);
        g_cpu->rmsnorm_f32_bwd(dx.c, dw.c, dy.c, x.c, w.c, r.c, T, dim);
        g_gpu->rmsnorm_f32_bwd(dx.g, dw.g, dy.g, x.g, w.g, r.g, T, dim);
        cmp("rmsnorm_f32_bwd dx (accumulates)", dx, 1e-5, 1e-5);
        cmp("rmsnorm_f32_bwd dw (accumulates)", dw, 1e-5, 1e-5);
        g_cpu->rmsnorm_f32_bwd(nullptr, dw.c, dy.c, x.c, w.c, r.c, T, dim);
        g_gpu->rmsnorm_f32_bwd(nullptr, dw.g, dy.g, x.g, w.g, r.g, T, dim);
        cmp("rmsnorm_f32_bwd dw only", dw, 1e-5, 1e-5);
        rel(x); rel(w); rel(y); rel(r); rel(dy); rel(dx); rel(dw);
    }
    {
        const size_t n = 999;
        Buf d = mk(rvec(n)), g = mk(rvec(n, -9, 9)), u = mk(rvec(n)), dg = mk(n), du = mk(n);
        g_cpu->swiglu_bwd(dg.c, du.c, d.c, g.c, u.c, n);
        g_gpu->swiglu_bwd(dg.g, du.g, d.g, g.g, u.g, n);
        cmp("swiglu_bwd dgate", dg, 1e-6, 1e-5);
        cmp("swiglu_bwd dup", du, 1e-6, 1e-5);
        rel(d); rel(g); rel(u); rel(dg); rel(du);
    }
    {
        Buf src = mk(rvec(10 * 9)), dst = mk(rvec(6 * 9));
        std::vector<int> idx = {3, 3, 9, 0, 1, 3};
        g_cpu->gather_rows(dst.c, src.c, idx.data(), 6, 9);
        g_gpu->gather_rows(dst.g, src.g, idx.data(), 6, 9);
        cmp("gather_rows", dst, 0, 0);
        for (bool acc : {true, false}) {
            g_cpu->scatter_rows(src.c, dst.c, idx.data(), 6, 9, acc);
            g_gpu->scatter_rows(src.g, dst.g, idx.data(), 6, 9, acc);
            cmp(acc ? "scatter_rows (accumulate, duplicates)" : "scatter_rows", src, 0, 0);
        }
        rel(src); rel(dst);
    }
    // cross-entropy chunks, SmoothL1, sumsq, AdamW
    {
        const int n = 4, V = 300, C = 128;
        Buf zt = mk(rvec(n * V, -5, 5)), zd = mk(rvec(n * V, -5, 5));
        std::vector<float> ninf(n, -INFINITY);
        Buf mt = mk(ninf), st = mk(n), md = mk(ninf), sd = mk(n), loss = mk(n), loss2 = mk(n), dz = mk(n * C);
        std::vector<int> labels = {0, 299, 128, 5};
        for (int v0 = 0; v0 < V; v0 += C) {  // chunk k of rows r: at zt + v0, row stride V (as a n x Cc view)
            int Cc = std::min(C, V - v0);
            std::vector<float> a(n * Cc), b(n * Cc), hz(n * V);
            g_cpu->download(hz.data(), zt.c, n * V);
            for (int r = 0; r < n; r++) memcpy(&a[r * Cc], &hz[r * V + v0], Cc * 4);
            g_cpu->download(hz.data(), zd.c, n * V);
            for (int r = 0; r < n; r++) memcpy(&b[r * Cc], &hz[r * V + v0], Cc * 4);
            Buf ca = mk(a), cb = mk(b);
            g_cpu->lse_update(mt.c, st.c, ca.c, n, Cc);
            g_gpu->lse_update(mt.g, st.g, ca.g, n, Cc);
            g_cpu->lse_update(md.c, sd.c, cb.c, n, Cc);
            g_gpu->lse_update(md.g, sd.g, cb.g, n, Cc);
            rel(ca); rel(cb);
        }
        cmp("lse_update m", md, 1e-6, 1e-6);
        cmp("lse_update s", sd, 1e-6, 1e-5);
        std::vector<float> a(n * C), b(n * C), hz(n * V);
        g_cpu->download(hz.data(), zt.c, n * V);
        for (int r = 0; r < n; r++) memcpy(&a[r * C], &hz[r * V + 128], C * 4);
        g_cpu->download(hz.data(), zd.c, n * V);
        for (int r = 0; r < n; r++) memcpy(&b[r * C], &hz[r * V + 128], C * 4);
        Buf ca = mk(a), cb = mk(b);
        g_cpu->ce_soft_chunk(dz.c, loss.c, ca.c, cb.c, mt.c, st.c, md.c, sd.c, n, C, 0.7f);
        g_gpu->ce_soft_chunk(dz.g, loss.g, ca.g, cb.g, mt.g, st.g, md.g, sd.g, n, C, 0.7f);
        cmp("ce_soft_chunk dz", dz, 1e-6, 1e-4);
        cmp("ce_soft_chunk loss", loss, 1e-5, 1e-4);
        g_cpu->ce_hard_chunk(dz.c, loss2.c, cb.c, md.c, sd.c, labels.data(), 128, n, C, 0.7f);
        g_gpu->ce_hard_chunk(dz.g, loss2.g, cb.g, md.g, sd.g, labels.data(), 128, n, C, 0.7f);
        cmp("ce_hard_chunk dz", dz, 1e-6, 1e-4);
        cmp("ce_hard_chunk loss", loss2, 1e-5, 1e-4);
        rel(zt); rel(zd); rel(mt); rel(st); rel(md); rel(sd); rel(loss); rel(loss2); rel(dz); rel(ca); rel(cb);
    }
    {
        Buf x = mk(rvec(5 * 33, -2, 2)), t = mk(rvec(5 * 33, -2, 2)), dx = mk(rvec(5 * 33)), l = mk(5);
        g_cpu->smoothl1(dx.c, l.c, x.c, t.c, 5, 33, 1.0f, 10.0f);
        g_gpu->smoothl1(dx.g, l.g, x.g, t.g, 5, 33, 1.0f, 10.0f);
        cmp("smoothl1 dx", dx, 1e-6, 1e-5);
        cmp("smoothl1 loss", l, 1e-5, 1e-5);
        rel(x); rel(t); rel(dx); rel(l);
    }
    {
        const size_t n = 40000;
        Buf w = mk(rvec(n)), m = mk(n), v = mk(n), g = mk(rvec(n, -2, 2));
        double sc = g_cpu->sumsq(g.c, n), sg = g_gpu->sumsq(g.g, n);
        CHECK(std::fabs(sc - sg) <= 1e-9 * sc, "sumsq: cuda %.17g cpu %.17g", sg, sc);
        AdamWParams p;
        p.lr = 1e-3f;
        p.weight_decay = 0.1f;
        p.grad_scale = (float)(0.5 / std::sqrt(sc));
        for (int step = 1; step <= 3; step++) {
            p.step = step;
            g_cpu->adamw(w.c, m.c, v.c, g.c, n, p);
            g_gpu->adamw(w.g, m.g, v.g, g.g, n, p);
        }
        cmp("adamw w", w, 1e-7, 1e-6);
        cmp("adamw m", m, 1e-9, 1e-5);
        cmp("adamw v", v, 1e-12, 1e-5);
        rel(w); rel(m); rel(v); rel(g);
    }
}

static void test_xattn() {
    const int nh = 4, nkv = 2, hd = 16, qd = nh * hd, kvd = nkv * hd, T = 20;
    for (int kind = 0; kind < 3; kind++) {  // PREFIX (no set 1), PREFIX with bits, BLOCK stage 2
        XAttnMask m;
        std::vector<uint64_t> bits;
        std::vector<int> qrow;
        int n_q = kind == 2 ? T : 5, n1 = kind == 0 ? 0 : T;
        if (kind == 1) {
            bits.resize(n_q);
            for (auto& b : bits) b = ((uint64_t)(frand(0, 1) * 1048575));
            m.set1_bits = bits.data();
            m.set1_words = 1;
        }
        if (kind == 2) {
            m.kind = XAttnMask::BLOCK;
            m.w = 3;
            m.offset = 1;
            m.n_pred = 2;
            for (int t = 0; t < n_q; t++) qrow.push_back(t);
        }
        Buf q = mk(rvec(n_q * qd, -2, 2)), k0 = mk(rvec(T * kvd, -2, 2)), v0 = mk(rvec(T * kvd));
        Buf k1 = mk(rvec(T * kvd, -2, 2)), v1 = mk(rvec(T * kvd)), out = mk(n_q * qd), lse = mk(n_q * nh);
        Buf dout = mk(rvec(n_q * qd)), dq = mk(n_q * qd), dk0 = mk(rvec(T * kvd)), dv0 = mk(rvec(T * kvd));
        Buf dk1 = mk(rvec(T * kvd)), dv1 = mk(rvec(T * kvd));
        XAttnKeys kc{k0.c, v0.c, T, n1 ? k1.c : nullptr, n1 ? v1.c : nullptr, n1};
        XAttnKeys kg{k0.g, v0.g, T, n1 ? k1.g : nullptr, n1 ? v1.g : nullptr, n1};
        const int* qr = qrow.empty() ? nullptr : qrow.data();
        g_cpu->xattn(out.c, lse.c, q.c, qr, n_q, kc, nh, nkv, hd, m);
        g_gpu->xattn(out.g, lse.g, q.g, qr, n_q, kg, nh, nkv, hd, m);
        const char* names[] = {"PREFIX", "PREFIX+bits", "BLOCK"};
        cmp(strfmt("xattn %s out", names[kind]).c_str(), out, 1e-5, 1e-4);
        cmp(strfmt("xattn %s lse", names[kind]).c_str(), lse, 1e-5, 1e-4);
        XAttnGrads gc{dk0.c, dv0.c, n1 ? dk1.c : nullptr, n1 ? dv1.c : nullptr};
        XAttnGrads gg{dk0.g, dv0.g, n1 ? dk1.g : nullptr, n1 ? dv1.g : nullptr};
        g_cpu->xattn_bwd(dq.c, gc, dout.c, out.c, lse.c, q.c, qr, n_q, kc, nh, nkv, hd, m);
        g_gpu->xattn_bwd(dq.g, gg, dout.g, out.g, lse.g, q.g, qr, n_q, kg, nh, nkv, hd, m);
        cmp(strfmt("xattn_bwd %s dq", names[kind]).c_str(), dq, 3e-5, 1e-4);
        cmp(strfmt("xattn_bwd %s dk0", names[kind]).c_str(), dk0, 3e-5, 1e-4);
        cmp(strfmt("xattn_bwd %s dv0", names[kind]).c_str(), dv0, 3e-5, 1e-4);
        cmp(strfmt("xattn_bwd %s dk1", names[kind]).c_str(), dk1, 3e-5, 1e-4);
        cmp(strfmt("xattn_bwd %s dv1", names[kind]).c_str(), dv1, 3e-5, 1e-4);
        for (Buf* b : {&q, &k0, &v0, &k1, &v1, &out, &lse, &dout, &dq, &dk0, &dv0, &dk1, &dv1}) rel(*b);
    }
}

// topk_rows on both backends: the same ids and values (both pick from the same floats), argmax for
// k = 1, the logsumexp within 1e-5 relative (float exp/log per term, different summation orders).
static void test_topk_rows() {
    const int rows = 3, n = 1000;
    std::vector<float> h = rvec(rows * n, -8, 8);
    h[5] = h[7] = 9.0f;  // a tie at the top: lower index first
    Buf x = mk(h);
    for (int k : {1, 10}) {
        std::vector<int> ic(rows * k), ig(rows * k, -9);
        std::vector<float> vc(rows * k), vg(rows * k), lc(rows), lg(rows);
        g_cpu->topk_rows(ic.data(), vc.data(), lc.data(), x.c, rows, n, k);
        g_gpu->topk_rows(ig.data(), vg.data(), lg.data(), x.g, rows, n, k);
        int bad = 0;
        for (int r = 0; r < rows; r++) {
            std::vector<int> ord(n);
            for (int i = 0; i < n; i++) ord[i] = i;
            std::stable_sort(ord.begin(), ord.end(), [&](int a, int b) { return h[r * n + a] > h[r * n + b]; });
            for (int i = 0; i < k; i++)
                bad += ig[r * k + i] != ord[i] || ic[r * k + i] != ord[i] || vg[r * k + i] != h[r * n + ord[i]] ||
                       vc[r * k + i] != vg[r * k + i];
            CHECK(std::fabs(lg[r] - lc[r]) <= 1e-5 * std::fabs(lc[r]), "topk_rows k %d row %d lse: cuda %.9g cpu %.9g", k,
                  r, lg[r], lc[r]);
        }
        CHECK(bad == 0 && ig[0] == 5, "topk_rows k %d: %d entries differ from a sort", k, bad);
        std::vector<int> only(rows * k, -9);  // ids alone (no values, no lse): the greedy path
        g_gpu->topk_rows(only.data(), nullptr, nullptr, x.g, rows, n, k);
        for (int r = 0; r < rows; r++) CHECK(only[r * k] == ig[r * k], "topk_rows k %d ids alone: row %d", k, r);
    }
    rel(x);
}

// The greedy chain's ids on the backend: topk_rows k = 1 with on_backend writes each row's argmax to a
// backend int buffer, embed with on_backend reads them (through a d2t-style map, or as rows directly).
// Both backends: the same ids as the host argmax, the same rows as embed of host tokens (exact), and
// on the CUDA backend no sync and no byte in either direction for the pair.
static void test_ids_on_backend() {
    const int rows = 3, n = 40, vocab = 50;
    std::vector<float> h = rvec(rows * n, -8, 8);
    h[n + 7] = h[n + 9] = 9.0f;  // a tie at the top of row 1: lower index
    Buf x = mk(h);
    std::vector<int> want(rows);
    g_cpu->topk_rows(want.data(), nullptr, nullptr, x.c, rows, n, 1);
    CHECK(want[1] == 7, "host argmax of the tie: %d", want[1]);
    std::vector<int> map(n);  // d2t: draft id i -> target row vocab - 1 - i (any table of rows)
    for (int i = 0; i < n; i++) map[i] = vocab - 1 - i;
    HostTensor E = make_tensor(DType::Q8_0, vocab, 64, "embd_ids");
    Weight ec = g_cpu->weight(E.t), eg = g_gpu->weight(E.t);
    Buf ids = mk(rows), d2t = mk(n), u = mk(rows * 64), ref = mk(rows * 64);
    const DeviceCounters& cnt = *g_gpu->device_counters();
    for (Ops* o : {(Ops*)g_cpu, (Ops*)g_gpu}) {
        const bool c = o == g_cpu;
        o->upload(c ? d2t.c : d2t.g, (const float*)map.data(), n);
        const DeviceCounters c0 = cnt;
        o->topk_rows((int*)(c ? ids.c : ids.g), nullptr, nullptr, c ? x.c : x.g, rows, n, 1, true);
        o->embed(c ? u.c : u.g, c ? ec : eg, (const int*)(c ? ids.c : ids.g), rows, true, (const int*)(c ? d2t.c : d2t.g));
        const DeviceCounters d = cnt - c0;
        if (!c)
            CHECK(d.syncs == 0 && d.d2h_bytes == 0 && d.h2d_bytes == 0 && d.launches == 2,
                  "argmax + embed on the backend: %lld syncs, %lld / %lld bytes down / up, %lld launches", d.syncs,
                  d.d2h_bytes, d.h2d_bytes, d.launches);
        std::vector<float> got = get(*o, c ? ids.c : ids.g, rows);
        const int* gi = (const int*)got.data();
        for (int r = 0; r < rows; r++) CHECK(gi[r] == want[r], "%s argmax on the backend row %d: %d, host %d", o->name(), r, gi[r], want[r]);
        std::vector<int> tok(rows);
        for (int r = 0; r < rows; r++) tok[r] = map[want[r]];
        o->embed(c ? ref.c : ref.g, c ? ec : eg, tok.data(), rows);
        CHECK(get(*o, c ? u.c : u.g, u.n) == get(*o, c ? ref.c : ref.g, ref.n), "%s embed of mapped backend ids != embed of host tokens",
              o->name());
        // without a map the ids are rows themselves
        o->embed(c ? u.c : u.g, c ? ec : eg, (const int*)(c ? ids.c : ids.g), rows, true);
        o->embed(c ? ref.c : ref.g, c ? ec : eg, want.data(), rows);
        CHECK(get(*o, c ? u.c : u.g, u.n) == get(*o, c ? ref.c : ref.g, ref.n), "%s embed of backend ids != host ids", o->name());
    }
    cmp("embed of backend ids", u, 0, 0);
    CHECK_THROWS(g_gpu->embed(u.g, eg, want.data(), rows, false, (const int*)d2t.g), "map is for ids on the backend");
    CHECK_THROWS(g_gpu->topk_rows((int*)ids.g, h.data(), nullptr, x.g, rows, n, 1, true), "only the ids");
    for (Buf* b : {&x, &ids, &d2t, &u, &ref}) rel(*b);
}

// warp_rows on both backends (the sampled chain's draft steps and its acceptance): the CPU backend is the
// host's warp_dense, the CUDA backend the kernel of cuda/sample.cu, on the same logits. On tie-free rows they
// keep the same entries; each kept probability within 2e-4 relative (expf per entry and different summation
// orders in the softmax's and the cut's normalisers: test_emu_kernels_sample measures up to 1.03e-4); the
// drawn ids equal where the coin is more than 1e-4 from a running sum (else a neighbour in the kept set).
// The coins go up with the launch: no sync, nothing down, rows x 4 bytes up.
static void test_warp_rows() {
    const int rows = 3, n = 1000;
    std::vector<float> h = rvec(rows * n, -6, 6);
    Buf x = mk(h), pc = mk(rows * n), ids = mk(rows);
    std::vector<float> coins = {0.04f, 0.49f, 0.92f};
    const DeviceCounters& cnt = *g_gpu->device_counters();
    WarpParams cases[4];
    cases[0].temperature = 1.0f, cases[0].top_p = 1.0f;
    cases[1].temperature = 0.8f, cases[1].top_p = 0.9f;
    cases[2].temperature = 0.5f, cases[2].top_k = 20, cases[2].top_p = 0.9f;
    cases[3].temperature = 1.3f, cases[3].top_k = 1;
    for (const WarpParams& wp : cases) {
        for (float& u : coins) u += 0.01f;  // new coins each call (the same ones would not go up again: staging)
        g_cpu->warp_rows(pc.c, (int*)ids.c, coins.data(), x.c, rows, n, wp);
        const DeviceCounters c0 = cnt;
        g_gpu->warp_rows(pc.g, (int*)ids.g, coins.data(), x.g, rows, n, wp);
        const DeviceCounters d = cnt - c0;
        CHECK(d.syncs == 0 && d.d2h_bytes == 0 && d.h2d_bytes == rows * 4 && d.launches == 1,
              "warp_rows: %lld syncs, %lld / %lld bytes down / up, %lld launches", d.syncs, d.d2h_bytes, d.h2d_bytes,
              d.launches);
        const std::vector<float> c = get(*g_cpu, pc.c, pc.n), g = get(*g_gpu, pc.g, pc.n);
        const std::vector<float> ic = get(*g_cpu, ids.c, rows), ig = get(*g_gpu, ids.g, rows);
        int kept = 0, bad = 0;
        for (size_t i = 0; i < c.size(); i++) {
            kept += c[i] > 0;
            bad += (c[i] > 0) != (g[i] > 0) || std::fabs(g[i] - c[i]) > 2e-4 * c[i];
        }
        CHECK(bad == 0 && kept >= rows, "warp_rows t %.1f top_k %d top_p %.1f: %d of %d kept entries differ", wp.temperature,
              wp.top_k, wp.top_p, bad, kept);
        for (int r = 0; r < rows; r++) {
            const int a = ((const int*)ic.data())[r], b = ((const int*)ig.data())[r];
            double cdf = 0, gap = 1;  // the coin's distance from the nearest running sum (CPU floats)
            for (int i = 0; i < n; i++) {
                cdf += c[(size_t)r * n + i];
                gap = std::min(gap, std::fabs(cdf - coins[r]));
            }
            CHECK(a == b || gap <= 1e-4, "warp_rows row %d coin %.2f: cuda drew %d, cpu %d", r, coins[r], b, a);
            CHECK(c[(size_t)r * n + a] > 0, "warp_rows row %d: cpu drew %d outside the kept entries", r, a);
        }
        if (wp.top_k == 1)
            for (int r = 0; r < rows; r++)
                CHECK(((const int*)ig.data())[r] == (int)(std::max_element(h.begin() + (size_t)r * n, h.begin() + (size_t)(r + 1) * n) -
                                                           (h.begin() + (size_t)r * n)),
                      "warp_rows top_k 1 row %d: not the argmax", r);
    }
    // without coins: only the rows
    g_gpu->warp_rows(pc.g, nullptr, nullptr, x.g, rows, n, cases[1]);
    CHECK_THROWS(g_gpu->warp_rows(pc.g, nullptr, nullptr, x.g, rows, n, WarpParams{0.0f, 0, 1.0f}), "temperature");
    for (Buf* b : {&x, &pc, &ids}) rel(*b);
}

// The runtime counters (cuda_rt.h): what each kind of call costs, exactly.
static void test_counters() {
    const DeviceCounters& n = *g_gpu->device_counters();
    CHECK(g_cpu->device_counters() == nullptr, "the CPU backend has no device counters");
    // the caching allocator: a released block of the same size class comes back without cudaMalloc
    float* a = g_gpu->alloc(3000);
    DeviceCounters c0 = n;
    g_gpu->release(a);
    float* b = g_gpu->alloc(2990);
    DeviceCounters d = n - c0;
    CHECK(d.allocs == 0 && d.frees == 0 && d.syncs == 0, "alloc after release: %lld allocs, %lld frees, %lld syncs", d.allocs,
          d.frees, d.syncs);
    std::vector<float> z(2990, 1.0f);
    g_gpu->download(z.data(), b, 2990);
    bool zero = true;
    for (float v : z) zero = zero && v == 0.0f;
    CHECK(zero, "a reused block is zeroed (Ops::alloc)");
    // uploads are asynchronous (pinned arena), downloads one sync each, bytes counted
    c0 = n;
    std::vector<float> h = rvec(2990);
    g_gpu->upload(b, h.data(), 2990);
    g_gpu->download(z.data(), b, 2990);
    d = n - c0;
    CHECK(d.syncs == 1 && d.h2d_bytes == 2990 * 4 && d.d2h_bytes == 2990 * 4 && z == h,
          "upload + download: %lld syncs, %lld / %lld bytes", d.syncs, d.h2d_bytes, d.d2h_bytes);
    // one row from inside a buffer comes down alone, one sync and its bytes: how sampled speculative decoding
    // reads the verify's logits (SpecDecoder::step: only the rows of the accepted path, one copy each)
    std::vector<float> row(299);
    c0 = n;
    g_gpu->download(row.data(), b + 3 * 299, 299);
    d = n - c0;
    CHECK(d.syncs == 1 && d.d2h_bytes == 299 * 4 && std::equal(row.begin(), row.end(), h.begin() + 3 * 299),
          "row 3 of a 299-wide buffer: %lld syncs, %lld bytes down, %s", d.syncs, d.d2h_bytes,
          std::equal(row.begin(), row.end(), h.begin() + 3 * 299) ? "same floats" : "WRONG floats");
    // a host array staged twice with the same bytes goes up once (rope's positions at every layer)
    RopeParams rp;
    rp.head_dim = 10;
    std::vector<int> pos = {3, 4, 5, 6, 7};
    c0 = n;
    for (int l = 0; l < 4; l++) g_gpu->rope(b, pos.data(), 5, 3, rp, false);
    d = n - c0;
    CHECK(d.h2d_bytes == 5 * 4 + 5 * 4 && d.launches == 4 && d.syncs == 0,
          "4 ropes at the same positions: %lld bytes up (positions once + frequencies), %lld launches, %lld syncs",
          d.h2d_bytes, d.launches, d.syncs);
    pos[4] = 8;  // changed positions go up again
    c0 = n;
    g_gpu->rope(b, pos.data(), 5, 3, rp, false);
    d = n - c0;
    CHECK(d.h2d_bytes == 5 * 4, "changed positions: %lld bytes up", d.h2d_bytes);
    // topk_rows: one sync, ids (and values, lse when asked) only
    c0 = n;
    int id[3];
    g_gpu->topk_rows(id, nullptr, nullptr, b, 3, 990, 1);
    d = n - c0;
    CHECK(d.syncs == 1 && d.d2h_bytes == 3 * 4, "argmax of 3 rows: %lld syncs, %lld bytes down", d.syncs, d.d2h_bytes);
    // sumsq_all: one sync for every buffer, the same double as the loop of sumsq
    const float* xs[2] = {b, b + 100};
    size_t ns[2] = {2990, 1000};
    c0 = n;
    double all = g_gpu->sumsq_all(xs, ns, 2);
    d = n - c0;
    double loop = g_gpu->sumsq(b, 2990) + g_gpu->sumsq(b + 100, 1000);
    CHECK(d.syncs == 1 && all == loop, "sumsq_all: %lld syncs, %.17g vs %.17g", d.syncs, all, loop);
    g_gpu->release(b);
    // Ops::reserve sizes the quantized-activation scratch for the widest input even when that width is not
    // a multiple of 32 (stories260K: ffn 172, its 64-wide inputs quantized): a later 20-token quantized
    // matmul (quantize + tensor cores: above QGEMM_DP4A_MAX_T = 16) allocates nothing (a skipped reservation would
    // make the matmul grow the slot)
    {
        std::unique_ptr<Ops> o = make_ops("cuda", 1);
        HostTensor W = make_tensor(DType::Q8_0, 9, 64, "w64");
        const Weight w = o->weight(W.t);
        float* xq = o->alloc(20 * 64);
        float* yq = o->alloc(20 * 9);
        ScratchSizes sz;
        sz.rows = 20;
        sz.cols = 172;
        o->reserve(sz);
        const DeviceCounters r0 = *o->device_counters();
        o->matmul(yq, xq, w, 20);
        const DeviceCounters dr = *o->device_counters() - r0;
        CHECK(dr.allocs == 0 && dr.launches == 2, "20-token Q8_0 matmul after reserve(rows 20, cols 172): %lld allocs, "
              "%lld launches (want 0 and 2: quantize + GEMM)", dr.allocs, dr.launches);
        o->release(xq);
        o->release(yq);
    }
}

int main() {
    std::unique_ptr<Ops> gpu = make_ops("cuda", 1);  // the emulator is a device: must succeed
    CHECK(std::string(gpu->name()) == "cuda", "make_ops(\"cuda\") gave %s", gpu->name());
    CHECK(has_cuda_backend() && std::string(default_backend()) == "cuda", "a CUDA build defaults to the cuda backend");
    CHECK_THROWS(make_ops("tpu", 1), "unknown backend");
    CpuOps cpu(2);
    g_cpu = &cpu;
    g_gpu = static_cast<CudaOps*>(gpu.get());
    test_memory();
    test_matmul();
    test_fused_ops();
    test_inference_ops();
    test_training_ops();
    test_xattn();
    test_topk_rows();
    test_ids_on_backend();
    test_warp_rows();
    test_counters();
    printf("kernels launched by the CUDA backend:\n");
    for (auto& kv : g_gpu->launch_counts()) printf("  %-26s %ld\n", kv.first.c_str(), kv.second);
    return test_summary("test_cuda_backend_ops");
}
