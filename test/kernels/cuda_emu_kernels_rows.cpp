// cuda_emu_kernels_rows.cpp -> build/test/test_emu_kernels_rows: the row-wise and element-wise kernels
// in the CPU emulator against plain double references written here from the math: RMSNorm forward
// and backward and the fused residual add + RMSNorm (cuda/rmsnorm.cu; bit-identical to add then norm), RoPE
// forward and inverse (rope.cu; adjacent pairs, Llama-3 scaled frequencies, q and k in one launch), SwiGLU forward and backward (swiglu.cu), residual add (add.cu), the dequantizing
// embedding gather for every stored type (embed.cu, bit-exact; ids read through a d2t map too), row gather / ordered scatter-add /
// in-place KV-cache row moves (rows.cu, exact), and the emulator's sample kernel (sample_reduce.cu).
// Ragged sizes (odd dims, partial warps), block sizes 32/256/1024, poisoned shared memory and
// reverse/random thread orders. Tolerances are stated at each comparison.
#include "cuda_kernel_test.h"
#include "core/dtype.h"
#include "rmsnorm.cu"
#include "rope.cu"
#include "swiglu.cu"
#include "add.cu"
#include "embed.cu"
#include "rows.cu"
#include "sample_reduce.cu"

// ---- RMSNorm -------------------------------------------------------------------------------------
static void test_rmsnorm(int T, int dim, int block, const std::string& tag) {
    const float eps = 1e-5f;
    std::vector<float> x = kt_vec((size_t)T * dim, -2, 2), w = kt_vec(dim, 0.5f, 1.5f), dy = kt_vec((size_t)T * dim);
    std::vector<float> y((size_t)T * dim), rstd(T, -1), dx0 = kt_vec((size_t)T * dim), dw0 = kt_vec(dim);
    TLAUNCH(T, block, 0, rmsnorm_fwd_kernel)(y.data(), rstd.data(), x.data(), w.data(), dim, eps);
    std::vector<float> dx = dx0, dw = dw0;
    TLAUNCH(T, block, 0, rmsnorm_bwd_dx_kernel)(dx.data(), dy.data(), x.data(), w.data(), rstd.data(), dim);
    TLAUNCH(cdiv(dim, block), block, 0, rmsnorm_bwd_dw_kernel)(dw.data(), dy.data(), x.data(), rstd.data(), T, dim);
    // reference: r = (mean x^2 + eps)^-1/2, y = w x r; dx_i = r w_i dy_i - r^3 x_i sum_j(dy_j w_j x_j) / dim;
    // dw_i = sum_t dy_ti x_ti r_t
    std::vector<double> ry((size_t)T * dim), rr(T), rdx((size_t)T * dim), rdw(dim);
    for (int i = 0; i < dim; i++) rdw[i] = dw0[i];
    for (int t = 0; t < T; t++) {
        double ss = 0, g = 0;
        for (int i = 0; i < dim; i++) ss += (double)x[(size_t)t * dim + i] * x[(size_t)t * dim + i];
        double r = 1.0 / std::sqrt(ss / dim + eps);
        rr[t] = r;
        for (int i = 0; i < dim; i++) g += (double)dy[(size_t)t * dim + i] * w[i] * x[(size_t)t * dim + i];
        for (int i = 0; i < dim; i++) {
            size_t k = (size_t)t * dim + i;
            ry[k] = w[i] * x[k] * r;
            rdx[k] = dx0[k] + r * w[i] * dy[k] - r * r * r * x[k] * g / dim;
            rdw[i] += dy[k] * x[k] * r;
        }
    }
    std::string what = kt_fmt("T%d dim%d block%d %s", T, dim, block, tag.c_str());
    // fp32 sums of dim terms: relative error ~dim 2^-24; 1e-5 relative with atol 1e-6 covers dim <= 4096
    kt_compare("rmsnorm_fwd_kernel", y, ry, 1e-6, 1e-5, what + " y");
    kt_compare("rmsnorm_fwd_kernel", rstd, rr, 1e-6, 1e-5, what + " rstd");
    kt_compare("rmsnorm_bwd_dx_kernel", dx, rdx, 1e-5, 1e-5, what);
    kt_compare("rmsnorm_bwd_dw_kernel", dw, rdw, 1e-6 * T, 1e-5, what);
    // rstd may be null (inference)
    std::vector<float> y2((size_t)T * dim);
    TLAUNCH(T, block, 0, rmsnorm_fwd_kernel)(y2.data(), nullptr, x.data(), w.data(), dim, eps);
    CHECK(!memcmp(y2.data(), y.data(), y.size() * 4), "rmsnorm_fwd_kernel without rstd differs");
}

// The fused residual add + norm: the same bits as add_kernel then rmsnorm_fwd_kernel (memcmp of x and
// y), and y against the double reference of rmsnorm(x + dx) (tolerance as rmsnorm_fwd_kernel's).
static void test_add_rmsnorm(int T, int dim, int block, const std::string& tag) {
    const float eps = 1e-5f;
    std::vector<float> x0 = kt_vec((size_t)T * dim, -2, 2), dx = kt_vec((size_t)T * dim), w = kt_vec(dim, 0.5f, 1.5f);
    std::vector<float> x = x0, y((size_t)T * dim, -3), x2 = x0, y2((size_t)T * dim, -4);
    TLAUNCH(T, block, 0, add_rmsnorm_kernel)(y.data(), x.data(), dx.data(), w.data(), dim, eps);
    TLAUNCH(cdiv(T * dim, block), block, 0, add_kernel)(x2.data(), dx.data(), (long long)T * dim, 0LL);
    TLAUNCH(T, block, 0, rmsnorm_fwd_kernel)(y2.data(), nullptr, x2.data(), w.data(), dim, eps);
    std::string what = kt_fmt("T%d dim%d block%d %s", T, dim, block, tag.c_str());
    CHECK(!memcmp(x.data(), x2.data(), x.size() * 4), "add_rmsnorm_kernel %s: x differs from add_kernel's", what.c_str());
    CHECK(!memcmp(y.data(), y2.data(), y.size() * 4), "add_rmsnorm_kernel %s: y differs from rmsnorm_fwd_kernel's",
          what.c_str());
    std::vector<double> ry((size_t)T * dim);
    for (int t = 0; t < T; t++) {
        double ss = 0;
        for (int i = 0; i < dim; i++) {
            double v = (float)(x0[(size_t)t * dim + i] + dx[(size_t)t * dim + i]);
            ss += v * v;
        }
        double r = 1.0 / std::sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++)
            ry[(size_t)t * dim + i] = w[i] * (double)(float)(x0[(size_t)t * dim + i] + dx[(size_t)t * dim + i]) * r;
    }
    kt_compare("add_rmsnorm_kernel", y, ry, 1e-6, 1e-5, what);  // as rmsnorm_fwd_kernel: fp32 sum of dim squares
}

// ---- RoPE ----------------------------------------------------------------------------------------
static std::vector<float> rope_freqs(int hd, float theta, bool llama3) {  // as CpuOps::rope_freqs
    std::vector<float> f(hd / 2);
    for (int i = 0; i < hd / 2; i++) {
        float v = 1.0f / powf(theta, (2 * i) / (float)hd);
        if (llama3) {  // factor 8, low 1, high 4, original context 8192 (Llama 3.1)
            float wavelen = 2.0f * (float)M_PI / v, low = 8192.0f / 1.0f, high = 8192.0f / 4.0f;
            if (wavelen > low) v = v / 8.0f;
            else if (wavelen >= high) {
                float smooth = (8192.0f / wavelen - 1.0f) / (4.0f - 1.0f);
                v = (1.0f - smooth) * v / 8.0f + smooth * v;
            }
        }
        f[i] = v;
    }
    return f;
}

static void test_rope(int T, int n_heads, int hd, bool llama3, int block, const std::string& tag) {
    std::vector<float> freq = rope_freqs(hd, llama3 ? 500000.0f : 10000.0f, llama3);
    std::vector<int> pos(T);
    for (int t = 0; t < T; t++) pos[t] = (int)(kt_rand() * 3000);
    std::vector<float> x0 = kt_vec((size_t)T * n_heads * hd), x = x0;
    const long long n = (long long)T * n_heads * hd / 2;
    TLAUNCH(cdiv((int)n, block), block, 0, rope_kernel)(x.data(), n_heads, nullptr, 0, pos.data(), freq.data(), T, hd, 0);
    std::vector<double> ref(x.size());
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_heads; h++)
            for (int i = 0; i < hd / 2; i++) {
                double a = (double)(float)((float)pos[t] * freq[i]);  // the float angle both backends use
                size_t k = ((size_t)t * n_heads + h) * hd + 2 * i;
                ref[k] = x0[k] * std::cos(a) - x0[k + 1] * std::sin(a);
                ref[k + 1] = x0[k] * std::sin(a) + x0[k + 1] * std::cos(a);
            }
    std::string what = kt_fmt("T%d heads%d hd%d%s block%d %s", T, n_heads, hd, llama3 ? " llama3" : "", block, tag.c_str());
    kt_compare("rope_kernel", x, ref, 1e-6, 1e-5, what);  // cosf/sinf of the float angle: a few ulp
    std::vector<float> back = x;
    TLAUNCH(cdiv((int)n, block), block, 0, rope_kernel)(back.data(), n_heads, nullptr, 0, pos.data(), freq.data(), T, hd,
                                                        1);
    std::vector<double> orig(x0.begin(), x0.end());
    kt_compare("rope_kernel", back, orig, 1e-6, 1e-5, what + " inverse(forward(x)) = x");
    // two buffers in one launch (q with n_heads heads, k with n_kv heads: ops.h rope_qk) == one launch each,
    // bit for bit, and k against the reference
    const int n_kv = n_heads > 1 ? n_heads / 2 : 1;
    std::vector<float> k0 = kt_vec((size_t)T * n_kv * hd), q2 = x0, k2 = k0, k1 = k0;
    const long long n2 = (long long)T * (n_heads + n_kv) * hd / 2, nk = (long long)T * n_kv * hd / 2;
    TLAUNCH(cdiv((int)n2, block), block, 0, rope_kernel)(q2.data(), n_heads, k2.data(), n_kv, pos.data(), freq.data(), T,
                                                         hd, 0);
    TLAUNCH(cdiv((int)nk, block), block, 0, rope_kernel)(k1.data(), n_kv, nullptr, 0, pos.data(), freq.data(), T, hd, 0);
    CHECK(!memcmp(q2.data(), x.data(), x.size() * 4) && !memcmp(k2.data(), k1.data(), k1.size() * 4),
          "rope_kernel %s: q and k in one launch differ from one launch each", what.c_str());
    std::vector<double> refk(k0.size());
    for (int t = 0; t < T; t++)
        for (int h = 0; h < n_kv; h++)
            for (int i = 0; i < hd / 2; i++) {
                double a = (double)(float)((float)pos[t] * freq[i]);
                size_t k = ((size_t)t * n_kv + h) * hd + 2 * i;
                refk[k] = k0[k] * std::cos(a) - k0[k + 1] * std::sin(a);
                refk[k + 1] = k0[k] * std::sin(a) + k0[k + 1] * std::cos(a);
            }
    kt_compare("rope_kernel", k2, refk, 1e-6, 1e-5, what + " second buffer");
}

// ---- SwiGLU, add -----------------------------------------------------------------------------------
static void test_swiglu(long long n, int block, int grid, const std::string& tag) {
    std::vector<float> g = kt_vec(n, -12, 12), u = kt_vec(n, -2, 2), dout = kt_vec(n), out(n), dg(n), du(n);
    TLAUNCH(grid, block, 0, swiglu_fwd_kernel)(out.data(), g.data(), u.data(), n);
    TLAUNCH(grid, block, 0, swiglu_bwd_kernel)(dg.data(), du.data(), dout.data(), g.data(), u.data(), n);
    std::vector<double> ro(n), rdg(n), rdu(n);
    for (long long i = 0; i < n; i++) {
        double gi = g[i], s = 1 / (1 + std::exp(-gi));
        ro[i] = gi * s * u[i];
        rdu[i] = dout[i] * gi * s;
        rdg[i] = dout[i] * u[i] * (s + gi * s * (1 - s));  // d/dg (g s(g)) = s + g s (1 - s)
    }
    std::string what = kt_fmt("n%lld block%d grid%d %s", n, block, grid, tag.c_str());
    kt_compare("swiglu_fwd_kernel", out, ro, 1e-6, 1e-5, what);  // expf and 3 roundings
    kt_compare("swiglu_bwd_kernel", dg, rdg, 1e-6, 1e-5, what + " dgate");
    kt_compare("swiglu_bwd_kernel", du, rdu, 1e-6, 1e-5, what + " dup");
}

// period 0: y += x; period p > 0: x is one row of p floats added to each of the n / p rows of y (a bias)
static void test_add(long long n, int block, int grid, long long period = 0) {
    std::vector<float> y = kt_vec(n), x = kt_vec(period ? period : n), y0 = y;
    TLAUNCH(grid, block, 0, add_kernel)(y.data(), x.data(), n, period);
    std::vector<double> ref(n);
    for (long long i = 0; i < n; i++) ref[i] = (double)(float)(y0[i] + x[period ? i % period : i]);  // one fp32 add: exact
    kt_compare("add_kernel", y, ref, 0, 0, kt_fmt("n%lld block%d grid%d period%lld", n, block, grid, period));
}

// ---- embedding ---------------------------------------------------------------------------------------
// mapped: the ids index a d2t-style table (increasing target ids, a reduced draft vocabulary) that the
// kernel reads them through, as the greedy chain's ids on the device.
static void test_embed(int dt, int vocab, int dim, int T, int block, bool mapped = false) {
    using namespace beagle;
    const int bs = dt == KD_Q8_0 ? 34 : dt == KD_Q4_0 ? 18 : dt == KD_Q4_1 ? 20 : 0;
    const long long rb = dt == KD_F32 ? 4LL * dim : (dt == KD_F16 || dt == KD_BF16) ? 2LL * dim : (long long)dim / 32 * bs;
    std::vector<uint8_t> E((size_t)vocab * rb);
    std::vector<double> deq((size_t)vocab * dim);
    for (int v = 0; v < vocab; v++) {
        uint8_t* row = E.data() + (size_t)v * rb;
        double* out = deq.data() + (size_t)v * dim;
        if (dt == KD_F32 || dt == KD_F16 || dt == KD_BF16) {
            for (int i = 0; i < dim; i++) {
                float f = kt_uniform(-1, 1);
                if (dt == KD_F32) { memcpy(row + 4 * i, &f, 4); out[i] = f; }
                if (dt == KD_F16) { uint16_t h = f32_to_f16(f); memcpy(row + 2 * i, &h, 2); out[i] = f16_to_f32(h); }
                if (dt == KD_BF16) { uint16_t h = f32_to_bf16(f); memcpy(row + 2 * i, &h, 2); out[i] = bf16_to_f32(h); }
            }
            continue;
        }
        for (int b = 0; b < dim / 32; b++) {
            uint8_t* blk = row + (size_t)b * bs;
            uint16_t dh = f32_to_f16(kt_uniform(-0.05f, 0.05f)), mh = f32_to_f16(kt_uniform(-0.3f, 0.3f));
            memcpy(blk, &dh, 2);
            float d = f16_to_f32(dh), m = f16_to_f32(mh);
            if (dt == KD_Q4_1) memcpy(blk + 2, &mh, 2);
            for (int j = 0; j < 32; j++) {
                int q;
                if (dt == KD_Q8_0) {
                    q = (int)(kt_rand() * 255) - 127;
                    blk[2 + j] = (uint8_t)(int8_t)q;
                    out[b * 32 + j] = (float)(d * (float)q);
                } else {
                    q = (int)(kt_rand() * 16) & 15;
                    uint8_t* qs = blk + (dt == KD_Q4_1 ? 4 : 2);
                    if (j < 16) qs[j] = (uint8_t)((qs[j] & 0xF0) | q);
                    else qs[j - 16] = (uint8_t)((qs[j - 16] & 0x0F) | (q << 4));
                    out[b * 32 + j] = dt == KD_Q4_0 ? (float)(d * (float)(q - 8)) : fmaf(d, (float)q, m);
                }
            }
        }
    }
    std::vector<int> map;  // mapped: every third target id, the last one included
    for (int v = vocab - 1; mapped && v >= 0; v -= 3) map.insert(map.begin(), v);
    const int n_ids = mapped ? (int)map.size() : vocab;
    std::vector<int> tok(T);
    for (int t = 0; t < T; t++) tok[t] = (int)(kt_rand() * n_ids);
    tok[0] = n_ids - 1;
    std::vector<float> x((size_t)T * dim, -9);
    TLAUNCH(T, block, 0, embed_kernel)(x.data(), E.data(), dt, rb, tok.data(), mapped ? map.data() : nullptr, dim);
    std::vector<double> ref((size_t)T * dim);
    for (int t = 0; t < T; t++) {
        const int row = mapped ? map[tok[t]] : tok[t];
        for (int i = 0; i < dim; i++) ref[(size_t)t * dim + i] = deq[(size_t)row * dim + i];
    }
    static const char* names[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"};
    kt_compare("embed_kernel", x, ref, 0, 0,
               kt_fmt("%s vocab%d dim%d T%d block%d%s", names[dt], vocab, dim, T, block, mapped ? " mapped" : ""));
}

// ---- rows ----------------------------------------------------------------------------------------------
static void test_rows(int n_src, int n, int width, int block) {
    std::vector<float> src = kt_vec((size_t)n_src * width);
    std::vector<int> idx(n);
    for (int i = 0; i < n; i++) idx[i] = (int)(kt_rand() * n_src);
    if (n >= 3) idx[2] = idx[0];  // a duplicate
    std::string what = kt_fmt("rows%d n%d width%d block%d", n_src, n, width, block);
    // gather
    std::vector<float> g((size_t)n * width, -1);
    dim3 grid(n, cdiv(width, block));
    TLAUNCH(grid, block, 0, rows_gather_kernel)(g.data(), src.data(), idx.data(), n, width);
    std::vector<double> rg((size_t)n * width);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < width; c++) rg[(size_t)i * width + c] = src[(size_t)idx[i] * width + c];
    kt_compare("rows_gather_kernel", g, rg, 0, 0, what);
    // scatter-add (gather's backward): duplicates summed in order; and plain scatter (last wins)
    for (int acc : {1, 0}) {
        std::vector<float> dst = kt_vec((size_t)n_src * width), d0 = dst, rows = kt_vec((size_t)n * width);
        TLAUNCH(cdiv(width, block), block, 0, rows_scatter_kernel)(dst.data(), rows.data(), idx.data(), n, width, acc);
        for (int i = 0; i < n; i++)  // sequential reference, same fp32 order
            for (int c = 0; c < width; c++) {
                float& d = d0[(size_t)idx[i] * width + c];
                d = acc ? d + rows[(size_t)i * width + c] : rows[(size_t)i * width + c];
            }
        std::vector<double> rs(d0.begin(), d0.end());
        kt_compare("rows_scatter_kernel", dst, rs, 0, 0, what + (acc ? " accumulate" : " copy"));
    }
    // KV-cache compaction: keep rows src[i] (increasing, src[i] >= dst[i]) at dst[i] = base + i
    {
        std::vector<float> buf = kt_vec((size_t)n_src * width), b0 = buf;
        std::vector<int> s, d;
        int base = n_src / 4;
        for (int r = base; r < n_src && (int)s.size() < n; r++)
            if (kt_rand() < 0.5 || r == base) {
                s.push_back(r);
                d.push_back(base + (int)d.size());
            }
        int m = (int)s.size();
        TLAUNCH(cdiv(width, block), block, 0, move_rows_kernel)(buf.data(), s.data(), d.data(), m, width);
        for (int i = 0; i < m; i++)
            if (s[i] != d[i]) memmove(&b0[(size_t)d[i] * width], &b0[(size_t)s[i] * width], width * sizeof(float));
        std::vector<double> rb(b0.begin(), b0.end());
        kt_compare("move_rows_kernel", buf, rb, 0, 0, what + kt_fmt(" moves%d", m));
    }
}

// ---- the emulator's sample kernel (sample_reduce.cu), so every kernel file in cuda/ is covered ------
static void test_center_rows(int rows, int n, int block) {
    std::vector<float> x = kt_vec((size_t)rows * n), y((size_t)rows * n), sum(rows);
    const size_t smem = (size_t)pow2_ceil(block) * sizeof(float);
    TLAUNCH(rows, block, smem, center_rows_kernel<true, true>)(x.data(), y.data(), sum.data(), n);
    std::vector<double> ry((size_t)rows * n), rs(rows);
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += x[(size_t)r * n + i];
        rs[r] = s;
        for (int i = 0; i < n; i++) ry[(size_t)r * n + i] = x[(size_t)r * n + i] - s / n;
    }
    std::string what = kt_fmt("rows%d n%d block%d", rows, n, block);
    kt_compare("center_rows_kernel", sum, rs, 1e-6 * n, 1e-5, what + " sum");
    kt_compare("center_rows_kernel", y, ry, 1e-6 * n, 1e-5, what);
}

int main() {
    for (int block : {32, 256, 1024}) {
        test_rmsnorm(5, 64, block, "");
        test_rmsnorm(3, 1000, block, "");
        test_rmsnorm(2, 7, block, "");
        test_add_rmsnorm(3, 1000, block, "");
        test_add_rmsnorm(2, 7, block, "");
        test_rope(3, 5, 8, false, block, "");
        test_rope(2, 3, 128, true, block, "");
        test_swiglu(1000, block, 3, "");
        test_add(777, block, 2);
        test_add(7 * 111, block, 3, 111);  // 7 rows of a 111-float bias, rows split across threads
        test_rows(40, 13, 70, block);
        test_center_rows(3, 100, block);
    }
    test_rmsnorm(4, 576, 256, "");
    test_add_rmsnorm(4, 576, 128, "");
    test_rope(7, 9, 64, false, 128, "");
    test_swiglu(1, 32, 1, "");
    test_swiglu(5000, 256, 40, "");
    for (int dt = 0; dt <= 5; dt++) test_embed(dt, 50, dt >= 3 ? 96 : 70, 6, dt == 0 ? 32 : 256);
    test_embed(KD_Q8_0, 17, 1024, 3, 1024);
    test_embed(KD_Q8_0, 50, 96, 5, 64, true);
    test_embed(KD_Q4_1, 50, 96, 5, 256, true);
    test_rows(9, 1, 1, 32);
    kt_debug_modes([](const char* mode) {
        test_rmsnorm(3, 300, 256, mode);
        test_rmsnorm(2, 33, 64, mode);
        test_add_rmsnorm(2, 300, 128, mode);
        test_rope(2, 3, 16, false, 64, mode);
        test_swiglu(300, 64, 2, mode);
        test_rows(20, 7, 45, 32);
    });
    return kt_finish("test_emu_kernels_rows");
}
